use serde_json::json;

use super::*;
use crate::message::ChatMessage;

#[test]
fn request_body_has_the_openai_shape() {
    let request = ChatRequest {
        temperature: Some(0.2),
        max_tokens: Some(512),
        tool_choice: Some(json!("auto")),
        ..ChatRequest::new(vec![ChatMessage::user("hi")])
    }
    .with_tools(vec![
        json!({ "type": "function", "function": { "name": "todo", "parameters": {} } }),
    ]);
    let body = request_body(&request, "gpt-test", true, &Map::new()).expect("body");
    assert_eq!(
        body,
        json!({
            "model": "gpt-test",
            "messages": [{ "role": "user", "content": "hi" }],
            "tools": [{ "type": "function", "function": { "name": "todo", "parameters": {} } }],
            "temperature": 0.2,
            "max_tokens": 512,
            "tool_choice": "auto",
            "stream": true,
            "stream_options": { "include_usage": true },
        })
    );
}

#[test]
fn non_streaming_body_omits_stream_options_and_empty_tools() {
    let body = request_body(&ChatRequest::new(vec![]), "m", false, &Map::new()).expect("body");
    assert_eq!(
        body,
        json!({ "model": "m", "messages": [], "stream": false })
    );
}

#[test]
fn extra_body_fills_only_fields_the_request_leaves_unset() {
    let mut request = ChatRequest::new(vec![]);
    request.temperature = Some(1.0);
    let extra: Map<String, Value> =
        serde_json::from_value(json!({ "temperature": 0.0, "reasoning_effort": "low" }))
            .expect("map");
    let body = request_body(&request, "m", false, &extra).expect("body");
    assert_eq!(body["temperature"], json!(1.0));
    assert_eq!(body["reasoning_effort"], json!("low"));
}

#[test]
fn completion_with_tool_calls_and_usage_is_parsed() {
    let body = json!({
        "choices": [{ "index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null,
            "tool_calls": [{ "id": "c1", "type": "function",
                "function": { "name": "terminal", "arguments": "{\"command\":\"ls\"}" } }]
        } }],
        "usage": { "prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
            "prompt_tokens_details": { "cached_tokens": 64 } }
    });
    let turn = parse_completion(&body).expect("turn");
    assert_eq!(turn.content, None);
    assert_eq!(
        turn.tool_calls,
        vec![ToolCall::new("c1", "terminal", "{\"command\":\"ls\"}")]
    );
    assert_eq!(turn.finish_reason, FinishReason::ToolCalls);
    let usage = turn.usage.expect("usage");
    assert_eq!(usage.total_tokens, 120);
    assert_eq!(usage.cached_prompt_tokens, Some(64));
}

#[test]
fn completion_without_choices_is_rejected() {
    let error = parse_completion(&json!({ "choices": [] })).expect_err("no choices");
    assert!(error.contains("choices[0]"), "{error}");
}

#[test]
fn error_bodies_of_several_shapes_give_their_message() {
    let openai = br#"{"error":{"message":"Invalid 'messages[1]'","type":"invalid_request_error","code":"bad"}}"#;
    let parsed = ApiError::from_body(openai, "Bad Request");
    assert_eq!(parsed.message, "Invalid 'messages[1]'");
    assert_eq!(parsed.code.as_deref(), Some("bad"));

    let typed_only = br#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#;
    assert_eq!(
        ApiError::from_body(typed_only, "").code.as_deref(),
        Some("rate_limit_error")
    );

    assert_eq!(
        ApiError::from_body(br#"{"error":"model not found"}"#, "").message,
        "model not found"
    );
    assert_eq!(
        ApiError::from_body(br#"{"detail":"Not authenticated"}"#, "").message,
        "Not authenticated"
    );
    assert_eq!(
        ApiError::from_body(b"upstream exploded\n", "").message,
        "upstream exploded"
    );
    assert_eq!(
        ApiError::from_body(b"", "Too Many Requests").message,
        "Too Many Requests"
    );
}
