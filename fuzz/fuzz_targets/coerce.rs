//! Argument coercion (`coordinator/src/dispatch/coerce.rs`, included by path: it needs
//! only serde_json, and building the whole coordinator under the sanitizer costs more
//! than the target). The first byte picks a schema; the rest is the arguments as JSON
//! text, or else one string given to every property. Coercion never panics and never
//! adds an argument the model did not send.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};

#[allow(dead_code, clippy::all)]
#[path = "../../coordinator/src/dispatch/coerce.rs"]
mod coerce;

fn schemas() -> Vec<Value> {
    vec![
        // terminal
        json!({"type": "object", "properties": {
            "command": {"type": "string"}, "background": {"type": "boolean"},
            "timeout": {"type": "integer", "minimum": 1}, "workdir": {"type": "string"},
            "pty": {"type": "boolean"}}, "required": ["command"]}),
        // unions, nullables, enums, numbers
        json!({"type": "object", "properties": {
            "a": {"type": ["integer", "string"]}, "b": {"type": ["number", "null"]},
            "c": {"enum": ["x", "y", ""]}, "d": {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]},
            "e": {"oneOf": [{"type": "object"}, {"type": "boolean"}]}}}),
        // nested arrays of objects (delegate_task's tasks)
        json!({"type": "object", "properties": {"tasks": {"type": "array", "items": {
            "type": "object", "properties": {"goal": {"type": "string"}, "max": {"type": "integer"},
            "toolsets": {"type": "array", "items": {"type": "string"}}}}}}}),
        // todo
        json!({"type": "object", "properties": {"todos": {"type": "array", "items": {"type": "object",
            "properties": {"id": {"type": "string"}, "status": {"type": "string", "enum": ["pending", "done"]}}}},
            "merge": {"type": "boolean"}}}),
    ]
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let schemas = schemas();
    let schema = &schemas[usize::from(pick) % schemas.len()];
    let mut args: Map<String, Value> = match serde_json::from_slice(rest) {
        Ok(Value::Object(map)) => map,
        _ => {
            let Ok(text) = std::str::from_utf8(rest) else {
                return;
            };
            let mut map = Map::new();
            if let Some(properties) = schema["properties"].as_object() {
                for key in properties.keys() {
                    map.insert(key.clone(), Value::String(text.to_owned()));
                }
            }
            map
        }
    };
    let sent: Vec<String> = args.keys().cloned().collect();
    coerce::coerce_arguments(&mut args, schema);
    assert!(args.keys().all(|key| sent.contains(key)), "coercion added an argument");
});
