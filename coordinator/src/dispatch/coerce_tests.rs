use serde_json::{Value, json};

use super::*;

fn coerce(args: Value, parameters: Value) -> Value {
    let Value::Object(mut map) = args else {
        panic!("arguments must be an object")
    };
    coerce_arguments(&mut map, &parameters);
    drop(parameters);
    Value::Object(map)
}

fn params(props: Value) -> Value {
    let mut schema = json!({"type": "object"});
    schema["properties"] = props;
    schema
}

#[test]
fn hermes_samples() {
    // integer "3.5" stays a string; number "inf" stays a string.
    assert_eq!(
        coerce(
            json!({"n": "3.5"}),
            params(json!({"n": {"type": "integer"}}))
        ),
        json!({"n": "3.5"})
    );
    assert_eq!(
        coerce(
            json!({"x": "inf"}),
            params(json!({"x": {"type": "number"}}))
        ),
        json!({"x": "inf"})
    );
    assert_eq!(
        coerce(
            json!({"x": "nan"}),
            params(json!({"x": {"type": "number"}}))
        ),
        json!({"x": "nan"})
    );
    // array "https://a.com" -> ["https://a.com"]
    assert_eq!(
        coerce(
            json!({"urls": "https://a.com"}),
            params(json!({"urls": {"type": "array", "items": {"type": "string"}}}))
        ),
        json!({"urls": ["https://a.com"]})
    );
    // nullable "null" -> null
    assert_eq!(
        coerce(
            json!({"v": "null"}),
            params(json!({"v": {"type": ["string", "null"]}}))
        ),
        json!({"v": null})
    );
    assert_eq!(
        coerce(
            json!({"v": " NULL "}),
            params(json!({"v": {"type": "integer", "nullable": true}}))
        ),
        json!({"v": null})
    );
}

#[test]
fn scalars() {
    let p = params(json!({
        "i": {"type": "integer"}, "f": {"type": "number"}, "b": {"type": "boolean"}, "s": {"type": "string"}
    }));
    assert_eq!(
        coerce(
            json!({"i": "42", "f": "2.5", "b": " TRUE ", "s": "7"}),
            p.clone()
        ),
        json!({"i": 42, "f": 2.5, "b": true, "s": "7"})
    );
    assert_eq!(
        coerce(json!({"i": "1e3", "f": "3", "b": "false"}), p.clone()),
        json!({"i": 1000, "f": 3, "b": false})
    );
    // Not convertible: kept as given, the tool reports it.
    assert_eq!(
        coerce(json!({"i": "many", "b": "yes"}), p),
        json!({"i": "many", "b": "yes"})
    );
}

#[test]
fn large_integers_stay_exact() {
    let p = params(json!({"i": {"type": "integer"}}));
    assert_eq!(
        coerce(json!({"i": "9007199254740993"}), p),
        json!({"i": 9007199254740993_i64})
    );
}

#[test]
fn union_types_try_in_order() {
    let p = params(json!({"v": {"type": ["integer", "string"]}}));
    assert_eq!(coerce(json!({"v": "5"}), p.clone()), json!({"v": 5}));
    assert_eq!(coerce(json!({"v": "five"}), p), json!({"v": "five"}));
    let p = params(json!({"v": {"type": ["string", "integer"]}}));
    assert_eq!(coerce(json!({"v": "5"}), p), json!({"v": "5"}));
}

#[test]
fn json_text_becomes_containers() {
    let p = params(json!({
        "a": {"type": "array", "items": {"type": "integer"}},
        "o": {"type": "object", "properties": {"k": {"type": "boolean"}}}
    }));
    assert_eq!(
        coerce(json!({"a": "[1, \"2\"]", "o": "{\"k\": \"true\"}"}), p),
        json!({"a": [1, 2], "o": {"k": true}})
    );
}

#[test]
fn bare_scalars_wrapped_in_arrays() {
    let p = params(json!({"a": {"type": "array", "items": {"type": "integer"}}}));
    assert_eq!(coerce(json!({"a": 3}), p.clone()), json!({"a": [3]}));
    assert_eq!(coerce(json!({"a": "3"}), p.clone()), json!({"a": [3]}));
    // A string that looks like a broken array is still wrapped (hermes warns).
    assert_eq!(coerce(json!({"a": "[1, 2"}), p), json!({"a": ["[1, 2"]}));
}

/// The case hermes misses: an array arriving as one JSON string whose items are
/// objects with stringified fields (and items that are themselves JSON text).
#[test]
fn nested_array_string_with_stringified_fields() {
    let p = params(json!({
        "todos": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "priority": {"type": "integer"},
                    "done": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}}
                }
            }
        }
    }));
    let args = json!({
        "todos": "[{\"id\": \"1\", \"priority\": \"2\", \"done\": \"false\", \"tags\": \"[\\\"a\\\"]\"}, \"{\\\"id\\\": \\\"2\\\", \\\"priority\\\": \\\"7\\\"}\"]"
    });
    assert_eq!(
        coerce(args, p),
        json!({"todos": [
            {"id": "1", "priority": 2, "done": false, "tags": ["a"]},
            {"id": "2", "priority": 7}
        ]})
    );
}

#[test]
fn native_containers_with_json_string_items() {
    let p = params(json!({
        "tasks": {"type": "array", "items": {"type": "object", "properties": {"goal": {"type": "string"}, "n": {"type": "integer"}}}}
    }));
    assert_eq!(
        coerce(
            json!({"tasks": ["{\"goal\": \"x\", \"n\": \"4\"}", {"goal": "y", "n": "5"}]}),
            p
        ),
        json!({"tasks": [{"goal": "x", "n": 4}, {"goal": "y", "n": 5}]})
    );
}

#[test]
fn any_of_branches_are_followed() {
    let p = params(json!({
        "v": {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]}
    }));
    assert_eq!(
        coerce(json!({"v": "[\"1\", 2]"}), p.clone()),
        json!({"v": [1, 2]})
    );
    assert_eq!(coerce(json!({"v": "null"}), p), json!({"v": null}));
}

#[test]
fn strings_without_type_are_untouched() {
    let p = params(json!({"v": {"description": "anything"}}));
    assert_eq!(coerce(json!({"v": "42"}), p), json!({"v": "42"}));
}

#[test]
fn unknown_keys_are_untouched() {
    let p = params(json!({"i": {"type": "integer"}}));
    assert_eq!(coerce(json!({"other": "42"}), p), json!({"other": "42"}));
}

#[test]
fn null_and_empty_optionals_are_omitted() {
    let parameters = json!({
        "type": "object",
        "properties": {
            "command": {"type": "string"},
            "timeout": {"type": "integer"},
            "workdir": {"type": "string"},
            "background": {"type": "boolean"},
            "mode": {"type": "string", "enum": ["replace", "patch"]},
            "watch": {"type": "array", "items": {"type": "string"}},
            "maybe": {"type": ["integer", "null"]}
        },
        "required": ["command"]
    });
    assert_eq!(
        coerce(
            json!({"command": "ls", "timeout": null, "workdir": null, "background": "", "mode": "", "watch": "", "maybe": null}),
            parameters.clone()
        ),
        json!({"command": "ls", "maybe": null})
    );
    // An empty free-text string is a real value (patch's new_string deletes text).
    assert_eq!(
        coerce(json!({"command": "ls", "workdir": ""}), parameters.clone()),
        json!({"command": "ls", "workdir": ""})
    );
    // Required arguments are never dropped: the tool reports them.
    assert_eq!(
        coerce(json!({"command": null}), parameters),
        json!({"command": null})
    );
}
