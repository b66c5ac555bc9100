use super::*;

fn yaml(text: &str) -> serde_yaml::Value {
    serde_yaml::from_str(text).unwrap()
}

#[test]
fn hermes_layout_parses_with_defaults_and_clamps() {
    let specs = parse_hooks(Some(&yaml(
        "pre_tool_call:\n  - matcher: terminal\n    command: ./check.sh\n    timeout: 999\n    fail_closed: true\npost_tool_call:\n  - command: log.sh\non_session_start:\n  - matcher: ignored\n    command: start.sh\npre_llm_call:\n  - command: x\nbogus_event:\n  - command: y\n",
    )))
    .unwrap();
    assert_eq!(specs.len(), 3);
    assert_eq!(specs[0].event, HookEvent::PreToolCall);
    assert_eq!(specs[0].timeout, MAX_TIMEOUT);
    assert!(specs[0].fail_closed);
    assert!(specs[0].matches("terminal"));
    // hermes' fullmatch: a prefix is not a match.
    assert!(!specs[0].matches("terminal2"));
    assert_eq!(specs[1].timeout, DEFAULT_TIMEOUT);
    assert!(specs[1].matches("anything"));
    // A matcher on a session event is dropped (hermes warns and ignores it).
    assert!(specs[2].matcher.is_none());
}

#[test]
fn an_entry_without_a_command_is_refused() {
    assert!(parse_hooks(Some(&yaml("pre_tool_call:\n  - matcher: x\n"))).is_err());
    assert!(parse_hooks(Some(&yaml("[1, 2]"))).is_err());
}

#[test]
fn both_block_shapes_are_read() {
    assert_eq!(
        block_message(r#"{"decision": "block", "reason": "no"}"#).as_deref(),
        Some("no")
    );
    assert_eq!(
        block_message(r#"{"action": "block", "message": "nope"}"#).as_deref(),
        Some("nope")
    );
    assert_eq!(
        block_message(r#"{"action": "block"}"#).as_deref(),
        Some("Blocked by shell hook.")
    );
    assert_eq!(block_message(r#"{"decision": "allow"}"#), None);
    assert_eq!(block_message("not json"), None);
}

#[test]
fn an_answer_that_is_not_a_json_object_is_unreadable_but_silence_is_not() {
    assert!(unreadable_answer("{\"decision\": \"block\""));
    assert!(unreadable_answer("block"));
    assert!(unreadable_answer("[1]"));
    assert!(!unreadable_answer(""));
    assert!(!unreadable_answer("  \n"));
    assert!(!unreadable_answer("{\"decision\": \"allow\"}"));
}
