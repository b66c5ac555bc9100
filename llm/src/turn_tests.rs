use serde_json::json;

use super::*;

#[test]
fn usage_reads_details_and_fills_a_missing_total() {
    let usage = Usage::from_wire(&json!({
        "prompt_tokens": 10, "completion_tokens": 5,
        "completion_tokens_details": { "reasoning_tokens": 2 }
    }))
    .expect("usage");
    assert_eq!(usage.total_tokens, 15);
    assert_eq!(usage.reasoning_tokens, Some(2));
    assert_eq!(usage.cached_prompt_tokens, None);
    assert_eq!(Usage::from_wire(&json!(null)), None);
    assert_eq!(Usage::from_wire(&usage.to_wire()), Some(usage));
}

#[test]
fn a_turn_becomes_the_assistant_message_without_reasoning() {
    let turn = AssistantTurn {
        content: Some("Running it.".into()),
        tool_calls: vec![ToolCall::new("c1", "terminal", "{}")],
        finish_reason: FinishReason::ToolCalls,
        usage: None,
        reasoning: Some("hidden".into()),
    };
    let message = turn.to_message();
    assert_eq!(
        serde_json::to_value(&message).expect("json"),
        json!({
            "role": "assistant",
            "content": "Running it.",
            "tool_calls": [{ "id": "c1", "type": "function",
                "function": { "name": "terminal", "arguments": "{}" } }]
        })
    );
    assert_eq!(ChatMessage::from(turn), message);
}

#[test]
fn finish_reasons_round_trip_their_wire_names() {
    for name in ["stop", "length", "tool_calls", "content_filter", "end_turn"] {
        assert_eq!(FinishReason::from_wire(name).as_str(), name);
    }
    assert_eq!(
        FinishReason::from_wire("function_call"),
        FinishReason::ToolCalls
    );
}
