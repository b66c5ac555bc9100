//! The JSON documents every tool returns, serialized the way hermes'
//! `json.dumps(…, ensure_ascii=False)` writes them, so the model sees the
//! same bytes: `", "` and `": "` separators, non-ASCII kept as is, Python's
//! float spelling (`1e-05`, `1e+16`, `2.0`), keys in insertion order for
//! structs and for the extras of [`tool_error_with`].

use std::io;

use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::ser::Formatter;
use serde_json::{Map, Value};

/// How a call ended. Decided where it is known (the tool, the gate, the
/// scheduler), carried as a value to where it is used (hooks, events, the
/// wire), never read back out of the result text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    Ok,
    Error,
    Blocked,
    PendingApproval,
    Cancelled,
    Timeout,
}

impl CallStatus {
    /// The snake_case name (`"pending_approval"`), as events and hooks show it.
    pub fn as_str(self) -> &'static str {
        match self {
            CallStatus::Ok => "ok",
            CallStatus::Error => "error",
            CallStatus::Blocked => "blocked",
            CallStatus::PendingApproval => "pending_approval",
            CallStatus::Cancelled => "cancelled",
            CallStatus::Timeout => "timeout",
        }
    }
}

/// A tool's answer: how the call ended and the document the model reads
/// (a JSON object in hermes' spelling, or a persisted-output preview).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolReply {
    pub status: CallStatus,
    pub body: String,
}

impl ToolReply {
    pub fn new(status: CallStatus, body: impl Into<String>) -> Self {
        ToolReply {
            status,
            body: body.into(),
        }
    }

    /// A successful call whose document is already written.
    pub fn ok(body: impl Into<String>) -> Self {
        Self::new(CallStatus::Ok, body)
    }

    /// A successful call: `value` in hermes' spelling.
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Self {
        Self::ok(to_json(value))
    }

    /// A failed call: `value` (a document with an `error` field) in hermes'
    /// spelling.
    pub fn failed_json<T: Serialize + ?Sized>(value: &T) -> Self {
        Self::new(CallStatus::Error, to_json(value))
    }

    /// A document in hermes' `success` convention (memory, skills): an
    /// error when it says `"success": false`, a success otherwise.
    pub fn success_document(value: &Value) -> Self {
        let status = if value.get("success").and_then(Value::as_bool) == Some(false) {
            CallStatus::Error
        } else {
            CallStatus::Ok
        };
        Self::new(status, to_json(value))
    }

    /// A failed call: `{"error": message}`.
    pub fn error(message: impl Into<String>) -> Self {
        Self::new(CallStatus::Error, tool_error(message))
    }

    /// True for a document that fields can be added to (a JSON object).
    pub fn is_object(&self) -> bool {
        let body = self.body.trim();
        body.starts_with('{') && body.ends_with('}')
    }
}

/// `{"error": msg}` — the shape of every failure a model reads.
///
/// ```
/// use caduceus_common::result::tool_error;
/// assert_eq!(tool_error("File not found: é.txt"), r#"{"error": "File not found: é.txt"}"#);
/// ```
pub fn tool_error(message: impl Into<String>) -> String {
    tool_error_with(message, Map::new())
}

/// `{"error": msg, ...extra}`: `error` first, then the extras in the map's
/// order. An `error` entry in `extra` replaces `msg` (Python's
/// `dict.update`).
///
/// ```
/// use caduceus_common::result::tool_error_with;
/// use serde_json::{json, Map};
/// let mut extra = Map::new();
/// extra.insert("success".into(), json!(false));
/// assert_eq!(tool_error_with("bad input", extra), r#"{"error": "bad input", "success": false}"#);
/// ```
pub fn tool_error_with(message: impl Into<String>, extra: Map<String, Value>) -> String {
    let mut error = Value::String(message.into());
    let mut others = Vec::with_capacity(extra.len());
    for (key, value) in extra {
        if key == "error" {
            error = value;
        } else {
            others.push((key, value));
        }
    }
    to_json(&ErrorDoc { error, others })
}

/// Python's type name of a JSON value as `json.loads` would build it, for
/// hermes' type errors (`"got list"`, `'str' and 'int'`).
///
/// ```
/// use caduceus_common::result::python_type;
/// assert_eq!(python_type(&serde_json::json!(1.5)), "float");
/// assert_eq!(python_type(&serde_json::json!(null)), "NoneType");
/// ```
pub fn python_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Serializes `value` in hermes' JSON spelling (see the module docs).
pub fn to_json<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::with_capacity(128);
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, PythonFormatter);
    match value.serialize(&mut serializer) {
        Ok(()) => String::from_utf8(out)
            .unwrap_or_else(|err| String::from_utf8_lossy(err.as_bytes()).into_owned()),
        Err(err) => tool_error(format!("Tool result could not be serialized: {err}")),
    }
}

struct ErrorDoc {
    error: Value,
    others: Vec<(String, Value)>,
}

impl Serialize for ErrorDoc {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1 + self.others.len()))?;
        map.serialize_entry("error", &self.error)?;
        for (key, value) in &self.others {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// Python `json.dumps` defaults: `", "` between items, `": "` after keys,
/// floats as `repr(float)`.
struct PythonFormatter;

impl Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        writer.write_all(b": ")
    }

    fn write_f64<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f64) -> io::Result<()> {
        writer.write_all(python_float_repr(value).as_bytes())
    }

    fn write_f32<W: ?Sized + io::Write>(&mut self, writer: &mut W, value: f32) -> io::Result<()> {
        writer.write_all(python_float_repr(f64::from(value)).as_bytes())
    }
}

/// Python's `repr(float)`: the shortest round-trip digits, positional when
/// the decimal exponent is in -4..16, else `d.ddde±XX`.
fn python_float_repr(value: f64) -> String {
    if !value.is_finite() {
        // JSON has no spelling for these; serde_json writes null for them
        // too, so this is only reached through a custom serializer.
        return "null".to_owned();
    }
    if value == 0.0 {
        return if value.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        }
        .to_owned();
    }
    let scientific = format!("{:e}", value.abs());
    let (mantissa, exponent) = scientific
        .split_once('e')
        .unwrap_or((scientific.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if value < 0.0 { "-" } else { "" };
    let point = exponent + 1;
    let digit_count = digits.len() as i32;
    let body = if point > -4 && point <= 16 {
        if point <= 0 {
            format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
        } else if point >= digit_count {
            format!("{digits}{}.0", "0".repeat((point - digit_count) as usize))
        } else {
            let (int, frac) = digits.split_at(point as usize);
            format!("{int}.{frac}")
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        format!("{first}{fraction}e{exp_sign}{:02}", exponent.unsigned_abs())
    };
    format!("{sign}{body}")
}

#[cfg(test)]
#[path = "result_tests.rs"]
mod tests;
