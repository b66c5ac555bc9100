//! How a call ended, read from its result: every result is classified, so
//! this looks only at the top-level `error` and `status` fields and skips the
//! rest of the document without building it (a terminal result carries up to
//! 100,000 characters of output beside them).

use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;

use super::CallStatus;

/// `ok` unless the result is a JSON object with a truthy `error`; `status:
/// "blocked"` or `"pending_approval"` name those outcomes.
pub fn status_of(result: &str) -> CallStatus {
    if !result.trim_start().starts_with('{') {
        return CallStatus::Ok;
    }
    // Most results say `"error":null` or have no error at all: settle those
    // without parsing the whole (possibly large) document.
    if !result.contains("\"error\"") && !result.contains("\"status\"") {
        return CallStatus::Ok;
    }
    let Ok(fields) = serde_json::from_str::<TopFields>(result) else {
        return CallStatus::Ok;
    };
    let named = match fields.status.as_ref().and_then(Value::as_str) {
        Some("blocked") => Some(CallStatus::Blocked),
        Some("pending_approval") => Some(CallStatus::PendingApproval),
        _ => None,
    };
    match fields.error {
        None | Some(Value::Null | Value::Bool(false)) => named.unwrap_or(CallStatus::Ok),
        Some(Value::String(s)) if s.is_empty() => CallStatus::Ok,
        Some(_) => named.unwrap_or(CallStatus::Error),
    }
}

/// The two top-level fields of a result object; a repeated key keeps its
/// last value, as a parsed JSON object would.
struct TopFields {
    error: Option<Value>,
    status: Option<Value>,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Key {
    Error,
    Status,
    #[serde(other)]
    Other,
}

impl<'de> Deserialize<'de> for TopFields {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;

        impl<'de> Visitor<'de> for Fields {
            type Value = TopFields;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<TopFields, A::Error> {
                let mut fields = TopFields {
                    error: None,
                    status: None,
                };
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Error => fields.error = Some(map.next_value()?),
                        Key::Status => fields.status = Some(map.next_value()?),
                        Key::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(fields)
            }
        }

        deserializer.deserialize_map(Fields)
    }
}
