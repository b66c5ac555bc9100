// Test helpers take `json!` literals by value.
#![allow(clippy::needless_pass_by_value)]

use serde_json::{Value, json};

use super::*;

fn args(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

#[test]
fn choices_are_flattened_trimmed_and_capped() {
    let q = parse(&args(json!({
        "question": "  Which target? ",
        "choices": ["staging", {"description": " prod "}, {"name": "x"}, "", "qa", "dev", "extra"]
    })))
    .unwrap();
    assert_eq!(q.question, "Which target?");
    assert_eq!(
        q.choices,
        Some(vec![
            "staging".to_owned(),
            "prod".to_owned(),
            "qa".to_owned(),
            "dev".to_owned()
        ])
    );
}

#[test]
fn empty_choices_mean_open_ended_and_bad_input_is_an_error() {
    assert_eq!(
        parse(&args(json!({"question": "Why?", "choices": []})))
            .unwrap()
            .choices,
        None
    );
    assert_eq!(
        parse(&args(json!({"question": " "}))).unwrap_err().body,
        r#"{"error": "Question text is required."}"#
    );
    assert_eq!(
        parse(&args(json!({"question": "q", "choices": "a"})))
            .unwrap_err()
            .body,
        r#"{"error": "choices must be a list of strings."}"#
    );
}

#[test]
fn the_answer_has_hermes_shape() {
    let q = Question {
        question: "Which?".to_owned(),
        choices: Some(vec!["a".to_owned()]),
    };
    assert_eq!(
        answered(&q, " a \n").body,
        r#"{"question": "Which?", "choices_offered": ["a"], "user_response": "a"}"#
    );
    let open = Question {
        question: "Why?".to_owned(),
        choices: None,
    };
    assert_eq!(
        answered(&open, "because").body,
        r#"{"question": "Why?", "choices_offered": null, "user_response": "because"}"#
    );
    assert_eq!(
        unavailable().body,
        r#"{"error": "Clarify tool is not available in this execution context."}"#
    );
}
