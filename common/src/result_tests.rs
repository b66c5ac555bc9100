use serde_json::json;

use super::*;

#[test]
fn errors_look_like_hermes_json_dumps() {
    assert_eq!(tool_error("x"), r#"{"error": "x"}"#);
    let mut extra = Map::new();
    extra.insert("success".to_owned(), json!(false));
    assert_eq!(
        tool_error_with("x", extra),
        r#"{"error": "x", "success": false}"#
    );
}

#[test]
fn error_comes_first_and_extra_error_replaces_the_message() {
    let mut extra = Map::new();
    extra.insert("a_first_alphabetically".to_owned(), json!(1));
    extra.insert("error".to_owned(), json!("from extra"));
    assert_eq!(
        tool_error_with("ignored", extra),
        r#"{"error": "from extra", "a_first_alphabetically": 1}"#
    );
}

/// Spellings produced by Python's `json.dumps(…, ensure_ascii=False)`.
#[test]
fn values_are_spelled_like_python() {
    let floats = json!({"a": [1, 2.5, 1e-05, 1e16, 1e15, 123456789012345680.0, -0.0, 0.1, 100.0, 1.5e300, 9.313225746154785e-10]});
    assert_eq!(
        to_json(&floats),
        r#"{"a": [1, 2.5, 1e-05, 1e+16, 1000000000000000.0, 1.2345678901234568e+17, -0.0, 0.1, 100.0, 1.5e+300, 9.313225746154785e-10]}"#
    );
    assert_eq!(
        to_json(&json!({"s": "é\"\\\n\u{1}\u{7f}\u{2028}日"})),
        "{\"s\": \"é\\\"\\\\\\n\\u0001\u{7f}\u{2028}日\"}"
    );
    assert_eq!(
        to_json(&json!({"e": [[], {}], "n": null, "t": true})),
        r#"{"e": [[], {}], "n": null, "t": true}"#
    );
}

#[test]
fn structs_keep_field_order() {
    #[derive(serde::Serialize)]
    struct TerminalResult<'a> {
        output: &'a str,
        exit_code: i32,
        error: Option<&'a str>,
    }
    let result = TerminalResult {
        output: "[Command timed out after 1s]",
        exit_code: 124,
        error: None,
    };
    assert_eq!(
        to_json(&result),
        r#"{"output": "[Command timed out after 1s]", "exit_code": 124, "error": null}"#
    );
}

#[test]
fn unserializable_values_become_errors() {
    let mut bad = std::collections::HashMap::new();
    bad.insert(vec![1u8], 1);
    let out = to_json(&bad);
    assert!(
        out.starts_with(r#"{"error": "Tool result could not be serialized: "#),
        "{out}"
    );
}

#[test]
fn python_float_repr_edges() {
    for (value, expected) in [
        (0.0, "0.0"),
        (1.0, "1.0"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (123.456, "123.456"),
        (-2.5e-7, "-2.5e-07"),
        (1e22, "1e+22"),
        (f64::MAX, "1.7976931348623157e+308"),
        (5e-324, "5e-324"),
    ] {
        assert_eq!(python_float_repr(value), expected, "{value}");
    }
}
