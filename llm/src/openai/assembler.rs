//! Builds an [`AssistantTurn`] from streamed `chat.completion.chunk` objects.
//!
//! Content arrives as text fragments. Tool calls arrive as fragments keyed by
//! `index`: the first carries `id` and `function.name`, later ones carry pieces of
//! `function.arguments` to concatenate. Some servers send a whole call in one
//! fragment, omit `index` (then a new `id` starts a new call), or omit ids (then one
//! is generated).

use serde_json::{Map, Value};

use crate::message::ToolCall;
use crate::model::EventSink;
use crate::openai::retry::random_u64;
use crate::turn::{AssistantTurn, FinishReason, StreamEvent, Usage};

#[derive(Debug, Default)]
struct PartialCall {
    wire_index: Option<u64>,
    id: String,
    name: String,
    arguments: String,
    extra: Map<String, Value>,
    announced: bool,
}

#[derive(Debug, Default)]
pub(crate) struct StreamAssembler {
    content: String,
    reasoning: String,
    calls: Vec<PartialCall>,
    finish_reason: Option<FinishReason>,
    usage: Option<Usage>,
}

impl StreamAssembler {
    pub(crate) fn new() -> Self {
        StreamAssembler::default()
    }

    /// Folds one chunk in, reporting progress to `events`.
    pub(crate) fn push(&mut self, chunk: &Value, events: EventSink<'_>) {
        if let Some(usage) = chunk.get("usage").and_then(Usage::from_wire) {
            self.usage = Some(usage);
        }
        let Some(choice) = first_choice(chunk) else {
            return;
        };
        // A few servers put the final message under `message` instead of `delta`.
        if let Some(delta) = choice.get("delta").or_else(|| choice.get("message")) {
            self.push_delta(delta, events);
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(FinishReason::from_wire(reason));
        }
    }

    /// True once a choice reported its `finish_reason`.
    pub(crate) fn has_finished(&self) -> bool {
        self.finish_reason.is_some()
    }

    pub(crate) fn finish(self) -> AssistantTurn {
        let nonce = random_u64();
        let tool_calls: Vec<ToolCall> = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(position, call)| ToolCall {
                id: if call.id.is_empty() {
                    format!("call_{nonce:012x}_{position}")
                } else {
                    call.id
                },
                name: call.name,
                arguments: call.arguments,
                extra: call.extra,
            })
            .collect();
        let finish_reason = self
            .finish_reason
            .unwrap_or_else(|| FinishReason::inferred(!tool_calls.is_empty()));
        AssistantTurn {
            content: non_empty(self.content),
            tool_calls,
            finish_reason,
            usage: self.usage,
            reasoning: non_empty(self.reasoning),
        }
    }

    fn push_delta(&mut self, delta: &Value, events: EventSink<'_>) {
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            self.content.push_str(text);
            events(StreamEvent::TextDelta(text.to_string()));
        }
        let reasoning = delta
            .get("reasoning_content")
            .or_else(|| delta.get("reasoning"))
            .and_then(Value::as_str);
        if let Some(text) = reasoning
            && !text.is_empty()
        {
            self.reasoning.push_str(text);
            events(StreamEvent::ReasoningDelta(text.to_string()));
        }
        if let Some(fragments) = delta.get("tool_calls").and_then(Value::as_array) {
            for fragment in fragments {
                self.push_tool_call_fragment(fragment, events);
            }
        }
    }

    fn push_tool_call_fragment(&mut self, fragment: &Value, events: EventSink<'_>) {
        let wire_index = fragment.get("index").and_then(Value::as_u64);
        let id = fragment
            .get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty());
        let position = self.call_position(wire_index, id);
        let Some(call) = self.calls.get_mut(position) else {
            return;
        };
        if call.id.is_empty()
            && let Some(id) = id
        {
            call.id = id.to_string();
        }
        if let Some(function) = fragment.get("function") {
            if call.name.is_empty()
                && let Some(name) = function.get("name").and_then(Value::as_str)
            {
                call.name = name.to_string();
            }
            match function.get("arguments") {
                Some(Value::String(piece)) => call.arguments.push_str(piece),
                // A server that sends arguments as a JSON object sends them whole.
                Some(Value::Object(object)) => {
                    call.arguments = Value::Object(object.clone()).to_string();
                }
                _ => {}
            }
        }
        if let Some(object) = fragment.as_object() {
            for (key, value) in object {
                if !matches!(key.as_str(), "index" | "id" | "type" | "function") {
                    call.extra.insert(key.clone(), value.clone());
                }
            }
        }
        if !call.announced && !call.name.is_empty() {
            call.announced = true;
            events(StreamEvent::ToolCallStarted {
                index: position,
                id: call.id.clone(),
                name: call.name.clone(),
            });
        }
    }

    /// Which call a fragment belongs to, creating it if it is new.
    fn call_position(&mut self, wire_index: Option<u64>, id: Option<&str>) -> usize {
        let existing = match (wire_index, id) {
            (Some(index), _) => self
                .calls
                .iter()
                .position(|call| call.wire_index == Some(index)),
            (None, Some(id)) => self.calls.iter().position(|call| call.id == id),
            (None, None) => self.calls.len().checked_sub(1),
        };
        existing.unwrap_or_else(|| {
            self.calls.push(PartialCall {
                wire_index,
                ..PartialCall::default()
            });
            self.calls.len() - 1
        })
    }
}

/// The choice with index 0 (or the first one when indices are missing).
fn first_choice(chunk: &Value) -> Option<&Value> {
    let choices = chunk.get("choices")?.as_array()?;
    choices
        .iter()
        .find(|choice| choice.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
}

fn non_empty(text: String) -> Option<String> {
    if text.is_empty() { None } else { Some(text) }
}

#[cfg(test)]
#[path = "assembler_tests.rs"]
mod tests;
