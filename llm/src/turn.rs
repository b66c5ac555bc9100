//! What a model produces: one assistant turn, plus the progress events reported while
//! it is being produced.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::message::{ChatMessage, ToolCall};

/// Why the model stopped. Servers are not consistent here (some report `stop` for a
/// turn with tool calls), so the agent loop should act on `tool_calls`, not on this.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum FinishReason {
    #[default]
    Stop,
    /// The output hit `max_tokens`; content or tool arguments may be cut off.
    Length,
    ToolCalls,
    ContentFilter,
    Other(String),
}

impl FinishReason {
    pub fn from_wire(reason: &str) -> Self {
        match reason {
            "stop" => FinishReason::Stop,
            "length" => FinishReason::Length,
            // `function_call` is the pre-tools name of the same thing.
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            "content_filter" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Other(other) => other,
        }
    }

    /// The reason to assume when the server sent none.
    pub(crate) fn inferred(has_tool_calls: bool) -> Self {
        if has_tool_calls {
            FinishReason::ToolCalls
        } else {
            FinishReason::Stop
        }
    }
}

/// Token accounting of one turn, as reported by the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// `prompt_tokens_details.cached_tokens`, when reported.
    pub cached_prompt_tokens: Option<u64>,
    /// `completion_tokens_details.reasoning_tokens`, when reported.
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    /// Reads an OpenAI `usage` object; `None` for `null` or a non-object.
    pub fn from_wire(value: &Value) -> Option<Usage> {
        let object = value.as_object()?;
        let count = |key: &str| object.get(key).and_then(Value::as_u64);
        let nested = |outer: &str, inner: &str| {
            object
                .get(outer)
                .and_then(|details| details.get(inner))
                .and_then(Value::as_u64)
        };
        let prompt_tokens = count("prompt_tokens").unwrap_or(0);
        let completion_tokens = count("completion_tokens").unwrap_or(0);
        Some(Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: count("total_tokens").unwrap_or(prompt_tokens + completion_tokens),
            cached_prompt_tokens: nested("prompt_tokens_details", "cached_tokens"),
            reasoning_tokens: nested("completion_tokens_details", "reasoning_tokens"),
        })
    }

    /// The OpenAI wire shape.
    pub fn to_wire(&self) -> Value {
        let mut object = serde_json::json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        });
        if let Some(cached) = self.cached_prompt_tokens {
            object["prompt_tokens_details"] = serde_json::json!({ "cached_tokens": cached });
        }
        if let Some(reasoning) = self.reasoning_tokens {
            object["completion_tokens_details"] =
                serde_json::json!({ "reasoning_tokens": reasoning });
        }
        object
    }
}

/// The model's answer to one request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssistantTurn {
    /// The text of the answer; `None` when the model only called tools (an empty
    /// string from the server is reported as `None` too).
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: FinishReason,
    pub usage: Option<Usage>,
    /// Reasoning text from servers that expose it (`reasoning_content` or
    /// `reasoning`). Not part of [`AssistantTurn::to_message`]: providers disagree on
    /// whether it may be sent back.
    pub reasoning: Option<String>,
}

impl AssistantTurn {
    /// A text-only turn.
    pub fn text(content: impl Into<String>) -> Self {
        AssistantTurn {
            content: Some(content.into()),
            ..AssistantTurn::default()
        }
    }

    /// A turn that calls tools (finish reason `tool_calls`).
    pub fn calling(tool_calls: Vec<ToolCall>) -> Self {
        AssistantTurn {
            tool_calls,
            finish_reason: FinishReason::ToolCalls,
            ..AssistantTurn::default()
        }
    }

    pub fn has_tool_calls(&self) -> bool {
        !self.tool_calls.is_empty()
    }

    /// The assistant message to append to the conversation.
    pub fn to_message(&self) -> ChatMessage {
        ChatMessage::assistant(self.content.clone(), self.tool_calls.clone())
    }
}

impl From<AssistantTurn> for ChatMessage {
    fn from(turn: AssistantTurn) -> Self {
        ChatMessage::assistant(turn.content, turn.tool_calls)
    }
}

/// Progress reported while a turn is produced, so a UI can show it live.
///
/// Contract: within one attempt, the `TextDelta`s concatenate to the final `content`
/// and there is one `ToolCallStarted` per tool call. Non-streaming models report the
/// whole text as one delta when the answer arrives. After `Retrying`, everything
/// reported so far belongs to a failed attempt and should be discarded.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StreamEvent {
    TextDelta(String),
    ReasoningDelta(String),
    /// The model began a tool call. `id` may be empty if the server sends ids late or
    /// not at all (the final turn then carries a generated id).
    ToolCallStarted {
        index: usize,
        id: String,
        name: String,
    },
    /// The attempt failed with a retryable error; the next attempt starts after
    /// `delay`.
    Retrying {
        /// The attempt that failed (1 = the first request).
        attempt: u32,
        delay: Duration,
        reason: String,
    },
}

#[cfg(test)]
#[path = "turn_tests.rs"]
mod tests;
