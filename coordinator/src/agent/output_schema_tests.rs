use serde_json::json;

use super::*;

fn schema() -> OutputSchema {
    OutputSchema::compile(&json!({
        "type": "object",
        "properties": {"healthy": {"type": "array", "items": {"type": "string"}}},
        "required": ["healthy", "failing"]
    }))
    .unwrap()
}

#[test]
fn a_valid_answer_passes_with_or_without_prose_and_fences() {
    let schema = schema();
    for answer in [
        r#"{"healthy": ["a"], "failing": []}"#,
        "Here it is:\n```json\n{\"healthy\": [], \"failing\": [\"b\"]}\n```\nDone.",
        "Result: {\"healthy\": [\"a\"], \"failing\": 1} as asked",
    ] {
        assert_eq!(
            schema.check(answer),
            SchemaCheck {
                valid: true,
                errors: Vec::new()
            },
            "{answer}"
        );
    }
}

#[test]
fn an_invalid_answer_gets_its_errors() {
    let schema = schema();
    let check = schema.check(r#"{"healthy": [1]}"#);
    assert!(!check.valid);
    let errors = check.errors.join("\n");
    assert!(errors.contains("missing properties 'failing'"), "{errors}");
    assert!(errors.contains("/healthy/0"), "{errors}");
    assert!(!errors.contains(LOCATION), "{errors}");
    assert_eq!(
        schema.check("no json at all").errors,
        ["the answer contains no JSON value"]
    );
}

#[test]
fn a_schema_that_is_not_one_or_reaches_outside_is_refused() {
    assert!(OutputSchema::compile(&json!("string")).is_err());
    assert!(OutputSchema::compile(&json!({"type": 12})).is_err());
    let outside = OutputSchema::compile(&json!({"$ref": "file:///etc/passwd"}));
    let Err(reason) = outside else {
        panic!("a schema reaching for a file compiled")
    };
    assert!(reason.contains("may not load"), "{reason}");
}

#[test]
fn the_correction_lists_the_errors_without_the_schema() {
    let text = correction(&["at '': missing properties 'failing'".to_owned()]);
    assert!(text.contains("- at '': missing properties 'failing'"));
    assert!(!text.contains("\"type\""));
}

#[test]
fn a_huge_miss_keeps_a_bounded_list_of_errors() {
    let schema = schema();
    let items: Vec<u32> = (0..1000).collect();
    let answer = json!({"healthy": items}).to_string();
    let check = schema.check(&answer);
    assert!(!check.valid);
    assert_eq!(check.errors.len(), MAX_ERRORS + 1, "{:?}", check.errors);
    let last = check.errors.last().unwrap();
    assert!(
        last.starts_with("… and ") && last.ends_with(" more error(s)"),
        "{last}"
    );
    assert!(
        check
            .errors
            .iter()
            .all(|e| e.chars().count() <= MAX_ERROR_CHARS + 1)
    );
    assert!(correction(&check.errors).chars().count() < 20_000);
}

#[test]
fn a_transcript_with_the_correction_turn_has_used_it() {
    use caduceus_llm::ChatMessage;
    let before = vec![
        ChatMessage::system("s"),
        ChatMessage::user("the goal"),
        ChatMessage::assistant(Some("prose".to_owned()), Vec::new()),
    ];
    assert!(!corrected_in(&before));
    let mut after = before;
    after.push(ChatMessage::user(correction(
        &["at '': missing".to_owned()],
    )));
    assert!(corrected_in(&after));
}
