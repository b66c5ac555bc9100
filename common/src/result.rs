//! The JSON documents every tool returns.

use serde_json::{Map, Value};

/// `{"error": msg}` — the shape of every failure a model reads.
pub fn tool_error(message: impl Into<String>) -> String {
    let mut map = Map::new();
    map.insert("error".to_owned(), Value::String(message.into()));
    Value::Object(map).to_string()
}

/// `{"error": msg, ...extra}`.
pub fn tool_error_with(message: impl Into<String>, extra: Map<String, Value>) -> String {
    let mut map = Map::new();
    map.insert("error".to_owned(), Value::String(message.into()));
    map.extend(extra);
    Value::Object(map).to_string()
}
