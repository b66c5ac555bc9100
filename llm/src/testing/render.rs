//! How the scripted server writes an [`AssistantTurn`] on the wire: as one
//! `chat.completion` JSON, or as `chat.completion.chunk` SSE events with the content
//! and each tool call's arguments split into several deltas.

use serde_json::{Value, json};

use crate::message::ToolCall;
use crate::turn::AssistantTurn;

/// Pieces each text (content, reasoning, tool arguments) is split into when streamed.
const PIECES: usize = 3;

pub(crate) fn completion_json(turn: &AssistantTurn, model: &str, number: usize) -> Value {
    let mut message = json!({
        "role": "assistant",
        "content": turn.content,
    });
    if !turn.tool_calls.is_empty() {
        message["tool_calls"] =
            Value::Array(turn.tool_calls.iter().map(ToolCall::to_wire).collect());
    }
    if let Some(reasoning) = &turn.reasoning {
        message["reasoning_content"] = Value::String(reasoning.clone());
    }
    let mut body = json!({
        "id": format!("chatcmpl-scripted-{number}"),
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": turn.finish_reason.as_str(),
        }],
    });
    if let Some(usage) = &turn.usage {
        body["usage"] = usage.to_wire();
    }
    body
}

/// The `data:` payloads of a streamed answer, `[DONE]` included.
pub(crate) fn stream_payloads(
    turn: &AssistantTurn,
    model: &str,
    number: usize,
    include_usage: bool,
) -> Vec<String> {
    let chunk = |delta: Value, finish_reason: Value| {
        json!({
            "id": format!("chatcmpl-scripted-{number}"),
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish_reason }],
        })
        .to_string()
    };
    let mut payloads = vec![chunk(
        json!({ "role": "assistant", "content": "" }),
        Value::Null,
    )];
    if let Some(reasoning) = &turn.reasoning {
        for piece in split_pieces(reasoning) {
            payloads.push(chunk(json!({ "reasoning_content": piece }), Value::Null));
        }
    }
    if let Some(content) = &turn.content {
        for piece in split_pieces(content) {
            payloads.push(chunk(json!({ "content": piece }), Value::Null));
        }
    }
    for (index, call) in turn.tool_calls.iter().enumerate() {
        let mut first = json!({
            "index": index,
            "id": call.id,
            "type": "function",
            "function": { "name": call.name, "arguments": "" },
        });
        for (key, value) in &call.extra {
            first[key] = value.clone();
        }
        payloads.push(chunk(json!({ "tool_calls": [first] }), Value::Null));
        for piece in split_pieces(&call.arguments) {
            let fragment = json!({ "index": index, "function": { "arguments": piece } });
            payloads.push(chunk(json!({ "tool_calls": [fragment] }), Value::Null));
        }
    }
    payloads.push(chunk(
        json!({}),
        Value::String(turn.finish_reason.as_str().to_string()),
    ));
    if include_usage && let Some(usage) = &turn.usage {
        payloads.push(
            json!({
                "id": format!("chatcmpl-scripted-{number}"),
                "object": "chat.completion.chunk",
                "created": 0,
                "model": model,
                "choices": [],
                "usage": usage.to_wire(),
            })
            .to_string(),
        );
    }
    payloads.push("[DONE]".to_string());
    payloads
}

/// Splits `text` into up to [`PIECES`] non-empty pieces on character boundaries.
fn split_pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(PIECES);
    chars
        .chunks(size)
        .map(|piece| piece.iter().collect())
        .collect()
}
