use serde_json::json;

use super::*;

#[test]
fn unknown_message_fields_round_trip() {
    let wire = json!({
        "role": "assistant",
        "content": "thinking done",
        "reasoning_content": "first I…",
        "name": "planner",
        "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": { "name": "terminal", "arguments": "{\"command\":\"ls\"}" },
            "extra_content": { "google": { "thought_signature": "sig" } }
        }]
    });
    let message: ChatMessage = serde_json::from_value(wire.clone()).expect("message");
    assert_eq!(message.role, Role::Assistant);
    assert_eq!(message.tool_calls[0].name, "terminal");
    assert_eq!(message.extra["reasoning_content"], json!("first I…"));
    assert_eq!(serde_json::to_value(&message).expect("json"), wire);
}

#[test]
fn constructors_produce_openai_messages() {
    let messages = vec![
        ChatMessage::system("rules"),
        ChatMessage::user("do it"),
        ChatMessage::assistant(None, vec![ToolCall::new("c1", "todo", "{}")]),
        ChatMessage::tool_result("c1", "{\"ok\":true}"),
    ];
    assert_eq!(
        serde_json::to_value(&messages).expect("json"),
        json!([
            { "role": "system", "content": "rules" },
            { "role": "user", "content": "do it" },
            { "role": "assistant", "tool_calls": [
                { "id": "c1", "type": "function", "function": { "name": "todo", "arguments": "{}" } }
            ] },
            { "role": "tool", "content": "{\"ok\":true}", "tool_call_id": "c1" },
        ])
    );
}

#[test]
fn unknown_roles_round_trip() {
    let message: ChatMessage =
        serde_json::from_value(json!({ "role": "function", "content": "x" })).expect("message");
    assert_eq!(message.role, Role::Other("function".into()));
    assert_eq!(
        serde_json::to_value(&message).expect("json")["role"],
        json!("function")
    );
}

#[test]
fn text_of_content_parts_joins_text_parts() {
    let message: ChatMessage = serde_json::from_value(json!({
        "role": "user",
        "content": [
            { "type": "text", "text": "look at" },
            { "type": "image_url", "image_url": { "url": "data:image/png;base64,AAA" } },
            { "type": "text", "text": "this" }
        ]
    }))
    .expect("message");
    assert_eq!(message.text(), "look at\nthis");
    assert_eq!(ChatMessage::assistant(None, vec![]).text(), "");
}

#[test]
fn arguments_parse_with_empty_meaning_no_arguments() {
    assert_eq!(
        ToolCall::new("c", "t", "  ")
            .parse_arguments()
            .expect("empty"),
        json!({})
    );
    assert_eq!(
        ToolCall::new("c", "t", "{\"a\":1}")
            .parse_arguments()
            .expect("json"),
        json!({ "a": 1 })
    );
    assert!(
        ToolCall::new("c", "t", "{\"a\":")
            .parse_arguments()
            .is_err()
    );
}

#[test]
fn tool_call_arguments_given_as_an_object_become_text() {
    let call = ToolCall::from_wire(&json!({
        "id": "c", "function": { "name": "t", "arguments": { "path": "x" } }
    }))
    .expect("call");
    assert_eq!(call.arguments, "{\"path\":\"x\"}");
}

#[test]
fn tool_call_without_function_name_is_an_error() {
    let error = ToolCall::from_wire(&json!({ "id": "c", "function": {} })).expect_err("no name");
    assert!(error.contains("function.name"), "{error}");
}
