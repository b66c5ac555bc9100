use serde_json::json;

use super::*;

fn chunk(delta: Value) -> Value {
    let mut chunk = json!({ "choices": [{ "index": 0, "finish_reason": null }] });
    chunk["choices"][0]["delta"] = delta;
    chunk
}

fn assemble(chunks: &[Value]) -> (AssistantTurn, Vec<StreamEvent>) {
    let mut assembler = StreamAssembler::new();
    let mut events = Vec::new();
    for chunk in chunks {
        assembler.push(chunk, &mut |event| events.push(event));
    }
    (assembler.finish(), events)
}

#[test]
fn content_deltas_are_concatenated_and_reported() {
    let (turn, events) = assemble(&[
        chunk(json!({ "role": "assistant", "content": "" })),
        chunk(json!({ "content": "Hel" })),
        chunk(json!({ "content": "lo" })),
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "stop" }] }),
    ]);
    assert_eq!(turn.content.as_deref(), Some("Hello"));
    assert_eq!(turn.finish_reason, FinishReason::Stop);
    assert_eq!(
        events,
        vec![
            StreamEvent::TextDelta("Hel".into()),
            StreamEvent::TextDelta("lo".into())
        ]
    );
}

#[test]
fn interleaved_tool_call_fragments_are_assembled_by_index() {
    let (turn, events) = assemble(&[
        chunk(
            json!({ "tool_calls": [{ "index": 0, "id": "call_a", "type": "function",
            "function": { "name": "read_file", "arguments": "" } }] }),
        ),
        chunk(json!({ "tool_calls": [{ "index": 0, "function": { "arguments": "{\"path\":" } }] })),
        chunk(
            json!({ "tool_calls": [{ "index": 1, "id": "call_b", "type": "function",
            "function": { "name": "terminal", "arguments": "{\"command\"" } }] }),
        ),
        chunk(
            json!({ "tool_calls": [{ "index": 0, "function": { "arguments": " \"a.txt\"}" } }] }),
        ),
        chunk(json!({ "tool_calls": [{ "index": 1, "function": { "arguments": ": \"ls\"}" } }] })),
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "tool_calls" }] }),
    ]);
    assert_eq!(
        turn.tool_calls,
        vec![
            ToolCall::new("call_a", "read_file", "{\"path\": \"a.txt\"}"),
            ToolCall::new("call_b", "terminal", "{\"command\": \"ls\"}"),
        ]
    );
    assert_eq!(turn.finish_reason, FinishReason::ToolCalls);
    assert_eq!(turn.content, None);
    assert_eq!(
        events,
        vec![
            StreamEvent::ToolCallStarted {
                index: 0,
                id: "call_a".into(),
                name: "read_file".into()
            },
            StreamEvent::ToolCallStarted {
                index: 1,
                id: "call_b".into(),
                name: "terminal".into()
            },
        ]
    );
}

#[test]
fn a_whole_call_in_one_chunk_is_accepted() {
    let (turn, _) = assemble(&[chunk(json!({ "tool_calls": [
        { "index": 0, "id": "c1", "type": "function", "function": { "name": "todo", "arguments": "{}" } },
        { "index": 1, "id": "c2", "type": "function", "function": { "name": "memory", "arguments": "{\"a\":1}" } }
    ] }))]);
    assert_eq!(
        turn.tool_calls,
        vec![
            ToolCall::new("c1", "todo", "{}"),
            ToolCall::new("c2", "memory", "{\"a\":1}")
        ]
    );
    // No finish_reason was sent: inferred from the calls.
    assert_eq!(turn.finish_reason, FinishReason::ToolCalls);
}

#[test]
fn fragments_without_index_follow_their_id() {
    let (turn, _) = assemble(&[
        chunk(
            json!({ "tool_calls": [{ "id": "x", "function": { "name": "a", "arguments": "{\"n\":" } }] }),
        ),
        chunk(json!({ "tool_calls": [{ "function": { "arguments": "1}" } }] })),
        chunk(
            json!({ "tool_calls": [{ "id": "y", "function": { "name": "b", "arguments": "{}" } }] }),
        ),
    ]);
    assert_eq!(
        turn.tool_calls,
        vec![
            ToolCall::new("x", "a", "{\"n\":1}"),
            ToolCall::new("y", "b", "{}")
        ]
    );
}

#[test]
fn missing_ids_are_generated_and_distinct() {
    let (turn, _) = assemble(&[chunk(json!({ "tool_calls": [
        { "index": 0, "function": { "name": "a", "arguments": "{}" } },
        { "index": 1, "function": { "name": "b", "arguments": "{}" } }
    ] }))]);
    let ids: Vec<&str> = turn
        .tool_calls
        .iter()
        .map(|call| call.id.as_str())
        .collect();
    assert!(ids.iter().all(|id| id.starts_with("call_")), "{ids:?}");
    assert_ne!(ids[0], ids[1]);
}

#[test]
fn extra_tool_call_fields_are_kept() {
    let signature = json!({ "google": { "thought_signature": "abc" } });
    let (turn, _) = assemble(&[chunk(json!({ "tool_calls": [{ "index": 0, "id": "c",
        "function": { "name": "a", "arguments": "{}" }, "extra_content": signature }] }))]);
    assert_eq!(
        turn.tool_calls[0].extra.get("extra_content"),
        Some(&signature)
    );
}

#[test]
fn usage_in_a_final_chunk_without_choices_is_read() {
    let (turn, _) = assemble(&[
        chunk(json!({ "content": "hi" })),
        json!({ "choices": [{ "index": 0, "delta": {}, "finish_reason": "length" }], "usage": null }),
        json!({ "choices": [], "usage": { "prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15 } }),
    ]);
    assert_eq!(turn.finish_reason, FinishReason::Length);
    let usage = turn.usage.expect("usage");
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens
        ),
        (12, 3, 15)
    );
}

#[test]
fn reasoning_deltas_are_collected_apart_from_content() {
    let (turn, events) = assemble(&[
        chunk(json!({ "reasoning_content": "think" })),
        chunk(json!({ "reasoning": "ing" })),
        chunk(json!({ "content": "answer" })),
    ]);
    assert_eq!(turn.reasoning.as_deref(), Some("thinking"));
    assert_eq!(turn.content.as_deref(), Some("answer"));
    assert_eq!(events[0], StreamEvent::ReasoningDelta("think".into()));
}

#[test]
fn only_the_first_choice_counts() {
    let (turn, _) = assemble(&[json!({ "choices": [
        { "index": 1, "delta": { "content": "other" } },
        { "index": 0, "delta": { "content": "mine" } }
    ] })]);
    assert_eq!(turn.content.as_deref(), Some("mine"));
}
