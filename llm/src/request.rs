//! The request the agent loop hands to a [`crate::ChatModel`].

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::message::{ChatMessage, Role};

/// One chat-completions request, model-independent.
///
/// Serializes to the OpenAI request body (without the `stream` fields, which the
/// client adds).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The model name. Empty means "the model the client was configured with".
    #[serde(default)]
    pub model: String,
    pub messages: Vec<ChatMessage>,
    /// Tool definitions in OpenAI function format:
    /// `{"type":"function","function":{"name","description","parameters"}}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// `"auto"`, `"none"`, `"required"` or `{"type":"function","function":{"name":..}}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<Value>,
    /// Any other body parameter (`parallel_tool_calls`, `reasoning_effort`, `seed`, …).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatRequest {
    pub fn new(messages: Vec<ChatMessage>) -> Self {
        ChatRequest {
            messages,
            ..ChatRequest::default()
        }
    }

    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    pub fn with_tools(mut self, tools: Vec<Value>) -> Self {
        self.tools = tools;
        self
    }

    /// The text of the first user message: what identifies a conversation (the goal
    /// of a delegated child, the prompt of a session).
    pub fn first_user_text(&self) -> Option<String> {
        self.messages
            .iter()
            .find(|message| message.role == Role::User)
            .map(|message| message.text().into_owned())
    }
}
