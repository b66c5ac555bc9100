//! Coercion of a model's arguments to the tool's JSON schema.
//!
//! hermes' rules (`model_tools.coerce_tool_args`), kept:
//! - only keys in `parameters.properties` are touched;
//! - strings become integers/numbers (`"3"` → 3, `"2.5"` → 2.5; `"3.5"` stays a
//!   string for an integer, `inf`/`nan` stay strings), booleans (`"true"`/`"false"`,
//!   trimmed, any case), arrays/objects (JSON text of the right kind), or null
//!   (`"null"` where the schema is nullable); union types try each type in order;
//! - a bare non-list value where an array is expected is wrapped: `"a"` → `["a"]`;
//! - strings inside native arrays/objects that the schema expects to be
//!   arrays/objects are parsed (anyOf/oneOf/allOf honoured).
//!
//! Where we do better:
//! - hermes does not recurse after parsing a JSON string into an array on the
//!   array path, so `tasks: "[{\"goal\": \"x\", \"max\": \"3\"}]"` keeps `"3"`
//!   (and JSON-string items) unrepaired. We normalize every level: parsed
//!   containers, their items and their fields, scalars included.
//! - optional arguments that a model fills with `null`, or with `""` where a
//!   string makes no sense (numbers, booleans, arrays, objects, enums without
//!   `""`), are treated as omitted.

use serde_json::{Map, Number, Value};

/// Coerces `args` in place to the schema's `parameters`.
pub fn coerce_arguments(args: &mut Map<String, Value>, parameters: &Value) {
    let Some(properties) = parameters.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();

    let keys: Vec<String> = args.keys().cloned().collect();
    for key in keys {
        let Some(schema) = properties.get(&key) else {
            continue;
        };
        let is_required = required.contains(&key.as_str());
        let Some(value) = args.get_mut(&key) else {
            continue;
        };
        if !is_required && treat_as_omitted(value, schema) {
            args.remove(&key);
            continue;
        }
        coerce_value(value, schema);
    }
}

/// Is this optional value a model's way of saying "not given"?
fn treat_as_omitted(value: &Value, schema: &Value) -> bool {
    match value {
        Value::Null => !allows_null(schema),
        Value::String(s) if s.is_empty() => !empty_string_is_meaningful(schema),
        _ => false,
    }
}

/// An empty string is a real value only where the schema takes free text.
fn empty_string_is_meaningful(schema: &Value) -> bool {
    if let Some(choices) = schema.get("enum").and_then(Value::as_array) {
        return choices.iter().any(|c| c.as_str() == Some(""));
    }
    accepts_type(schema, "string") || declared_types(schema).is_empty()
}

/// Coerces one value (and everything inside it) to `schema`.
pub fn coerce_value(value: &mut Value, schema: &Value) {
    if !schema.is_object() {
        return;
    }
    let types = declared_types(schema);
    match value {
        Value::String(text) => {
            if let Some(replacement) = coerce_string(text, schema, &types) {
                *value = replacement;
                // A string that became a container is normalized all the way down
                // (the case hermes misses).
                normalize_container(value, schema);
            } else if types.iter().any(|t| t == "array") && !accepts_type(schema, "string") {
                // hermes wraps a bare string where an array is expected.
                let item = std::mem::take(text);
                let mut wrapped = Value::Array(vec![Value::String(item)]);
                normalize_container(&mut wrapped, schema);
                *value = wrapped;
            }
        }
        Value::Array(_) | Value::Object(_) => normalize_container(value, schema),
        Value::Null => {}
        Value::Bool(_) | Value::Number(_) => {
            // A bare scalar where only an array fits: wrap it.
            if types.iter().any(|t| t == "array") && !types.iter().any(|t| scalar_fits(value, t)) {
                let item = std::mem::take(value);
                *value = Value::Array(vec![item]);
            }
        }
    }
}

/// Recurses into arrays (`items`) and objects (`properties`).
fn normalize_container(value: &mut Value, schema: &Value) {
    match value {
        Value::Array(items) => {
            if let Some(item_schema) = branch_with(schema, "items") {
                for item in items.iter_mut() {
                    coerce_value(item, item_schema);
                }
            }
        }
        Value::Object(fields) => {
            if let Some(props) = branch_with(schema, "properties")
                .and_then(|s| s.get("properties"))
                .and_then(Value::as_object)
            {
                for (key, prop_schema) in props {
                    if let Some(field) = fields.get_mut(key) {
                        coerce_value(field, prop_schema);
                    }
                }
            }
        }
        _ => {}
    }
}

/// The schema itself, or the first anyOf/oneOf/allOf branch, that has `key`.
fn branch_with<'a>(schema: &'a Value, key: &str) -> Option<&'a Value> {
    if key == "items" {
        if let Some(items) = schema.get("items") {
            return Some(items);
        }
    } else if schema.get(key).is_some() {
        return Some(schema);
    }
    for union in ["anyOf", "oneOf", "allOf"] {
        if let Some(branches) = schema.get(union).and_then(Value::as_array) {
            for branch in branches {
                if let Some(found) = branch_with(branch, key) {
                    return Some(found);
                }
            }
        }
    }
    None
}

/// Tries to turn a string into the value the schema expects.
fn coerce_string(text: &str, schema: &Value, types: &[String]) -> Option<Value> {
    if allows_null(schema) && text.trim().eq_ignore_ascii_case("null") {
        return Some(Value::Null);
    }
    if types.is_empty() {
        // No declared type: only container JSON the schema's branches expect.
        return parse_container(text, schema);
    }
    for ty in types {
        let coerced = match ty.as_str() {
            "integer" => coerce_number(text, true),
            "number" => coerce_number(text, false),
            "boolean" => match text.trim().to_ascii_lowercase().as_str() {
                "true" => Some(Value::Bool(true)),
                "false" => Some(Value::Bool(false)),
                _ => None,
            },
            "array" => serde_json::from_str::<Value>(text)
                .ok()
                .filter(Value::is_array),
            "object" => serde_json::from_str::<Value>(text)
                .ok()
                .filter(Value::is_object),
            "null" if text.trim().eq_ignore_ascii_case("null") => Some(Value::Null),
            // A string is already a string: the union stops here.
            "string" => return None,
            _ => None,
        };
        if coerced.is_some() {
            return coerced;
        }
    }
    None
}

/// JSON text parsed into the container kind an untyped (union) schema expects.
fn parse_container(text: &str, schema: &Value) -> Option<Value> {
    let trimmed = text.trim();
    let wants_array = accepts_type(schema, "array") && trimmed.starts_with('[');
    let wants_object = accepts_type(schema, "object") && trimmed.starts_with('{');
    if !(wants_array || wants_object) {
        return None;
    }
    let parsed: Value = serde_json::from_str(trimmed).ok()?;
    ((parsed.is_array() && wants_array) || (parsed.is_object() && wants_object)).then_some(parsed)
}

/// hermes' `_coerce_number`: `float()` semantics, integral values become ints,
/// a fractional value stays a string where an integer is required.
fn coerce_number(text: &str, integer_only: bool) -> Option<Value> {
    let trimmed = text.trim();
    // Exact integers stay exact (large ids do not round through f64).
    if let Ok(int) = trimmed.parse::<i64>() {
        return Some(Value::Number(int.into()));
    }
    let parsed: f64 = trimmed.parse().ok()?;
    if !parsed.is_finite() {
        return None;
    }
    if parsed.fract() == 0.0 && parsed.abs() < 9.2e18 {
        #[allow(clippy::cast_possible_truncation)]
        return Some(Value::Number((parsed as i64).into()));
    }
    if integer_only {
        return None;
    }
    Number::from_f64(parsed).map(Value::Number)
}

fn scalar_fits(value: &Value, ty: &str) -> bool {
    match ty {
        "integer" => value.as_i64().is_some() || value.as_u64().is_some(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "string" => value.is_string(),
        _ => false,
    }
}

/// The `type` of a schema as a list (empty when absent).
fn declared_types(schema: &Value) -> Vec<String> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// Does the schema (or any union branch) accept JSON values of `kind`?
fn accepts_type(schema: &Value, kind: &str) -> bool {
    if declared_types(schema).iter().any(|t| t == kind) {
        return true;
    }
    ["anyOf", "oneOf", "allOf"].iter().any(|union| {
        schema
            .get(*union)
            .and_then(Value::as_array)
            .is_some_and(|branches| branches.iter().any(|b| accepts_type(b, kind)))
    })
}

/// hermes' `_schema_allows_null`.
fn allows_null(schema: &Value) -> bool {
    if declared_types(schema).iter().any(|t| t == "null")
        || schema.get("nullable") == Some(&Value::Bool(true))
    {
        return true;
    }
    ["anyOf", "oneOf"].iter().any(|union| {
        schema
            .get(*union)
            .and_then(Value::as_array)
            .is_some_and(|branches| {
                branches
                    .iter()
                    .any(|b| b.get("type").and_then(Value::as_str) == Some("null"))
            })
    })
}

#[cfg(test)]
#[path = "coerce_tests.rs"]
mod tests;
