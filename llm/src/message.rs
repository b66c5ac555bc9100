//! Chat messages in the OpenAI chat-completions shape.
//!
//! The common fields are typed; every other field of a message (and of a tool call)
//! is kept in `extra` and written back unchanged, so provider-specific fields such as
//! `reasoning_content` or Gemini's `extra_content` survive a round trip through the
//! agent loop.

use std::borrow::Cow;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Who wrote a message. Unknown roles round-trip through `Other`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
    Other(String),
}

impl Role {
    pub fn as_str(&self) -> &str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::Other(other) => other,
        }
    }
}

impl From<&str> for Role {
    fn from(role: &str) -> Self {
        match role {
            "system" => Role::System,
            "developer" => Role::Developer,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            other => Role::Other(other.to_string()),
        }
    }
}

impl Serialize for Role {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Role {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let role = String::deserialize(deserializer)?;
        Ok(Role::from(role.as_str()))
    }
}

/// A message body: plain text, or OpenAI content parts (`[{"type":"text","text":..},
/// {"type":"image_url",..}]`) kept as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<Value>),
}

impl MessageContent {
    /// The text of the content; for parts, the `text` of every text part joined by
    /// newlines (images and other parts are skipped).
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            MessageContent::Text(text) => Cow::Borrowed(text),
            MessageContent::Parts(parts) => {
                let texts: Vec<&str> = parts
                    .iter()
                    .filter(|part| part.get("type").and_then(Value::as_str) == Some("text"))
                    .filter_map(|part| part.get("text").and_then(Value::as_str))
                    .collect();
                Cow::Owned(texts.join("\n"))
            }
        }
    }
}

impl From<String> for MessageContent {
    fn from(text: String) -> Self {
        MessageContent::Text(text)
    }
}

impl From<&str> for MessageContent {
    fn from(text: &str) -> Self {
        MessageContent::Text(text.to_string())
    }
}

/// One tool call requested by the model.
///
/// Serialized in OpenAI shape: `{"id", "type": "function", "function": {"name",
/// "arguments"}}` plus any extra fields the server attached to the call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The raw argument text as the model produced it. It is usually a JSON object but
    /// may be malformed; the agent loop reports that back to the model.
    pub arguments: String,
    /// Fields of the tool-call object other than `id`, `type`, `function` and `index`
    /// (e.g. Gemini's `extra_content` thought signature), echoed back verbatim.
    pub extra: Map<String, Value>,
}

impl ToolCall {
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
            extra: Map::new(),
        }
    }

    /// Parses `arguments` as JSON. Empty or blank arguments (which models send for
    /// tools without parameters) parse as `{}`.
    pub fn parse_arguments(&self) -> Result<Value, serde_json::Error> {
        if self.arguments.trim().is_empty() {
            return Ok(Value::Object(Map::new()));
        }
        serde_json::from_str(&self.arguments)
    }

    /// The OpenAI wire shape of this call.
    pub fn to_wire(&self) -> Value {
        let mut object = Map::new();
        object.insert("id".into(), Value::String(self.id.clone()));
        object.insert("type".into(), Value::String("function".into()));
        let mut function = Map::new();
        function.insert("name".into(), Value::String(self.name.clone()));
        function.insert("arguments".into(), Value::String(self.arguments.clone()));
        object.insert("function".into(), Value::Object(function));
        for (key, value) in &self.extra {
            if !object.contains_key(key) {
                object.insert(key.clone(), value.clone());
            }
        }
        Value::Object(object)
    }

    /// Reads a call in OpenAI wire shape. `function.arguments` may also be a JSON
    /// value other than a string (some servers and hand-written replay files do
    /// that); it is then kept as its compact JSON text.
    pub fn from_wire(value: &Value) -> Result<ToolCall, String> {
        let object = value
            .as_object()
            .ok_or_else(|| format!("a tool call must be a JSON object, got {value}"))?;
        let id = object
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let function = object
            .get("function")
            .and_then(Value::as_object)
            .ok_or_else(|| "a tool call needs a \"function\" object".to_string())?;
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| "a tool call needs \"function.name\"".to_string())?
            .to_string();
        let arguments = match function.get("arguments") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
        };
        let extra = object
            .iter()
            .filter(|(key, _)| !matches!(key.as_str(), "id" | "type" | "function" | "index"))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        Ok(ToolCall {
            id,
            name,
            arguments,
            extra,
        })
    }
}

impl Serialize for ToolCall {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_wire().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ToolCall {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        ToolCall::from_wire(&value).map_err(D::Error::custom)
    }
}

/// One message of a conversation, in OpenAI chat-completions shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<MessageContent>,
    /// Calls requested by an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a `tool` message: the id of the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Every other field (`name`, `reasoning_content`, `cache_control`, …), kept as is.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatMessage {
    fn with_role(role: Role, content: Option<MessageContent>) -> Self {
        ChatMessage {
            role,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
            extra: Map::new(),
        }
    }

    pub fn system(text: impl Into<String>) -> Self {
        Self::with_role(Role::System, Some(MessageContent::Text(text.into())))
    }

    pub fn user(text: impl Into<String>) -> Self {
        Self::with_role(Role::User, Some(MessageContent::Text(text.into())))
    }

    pub fn assistant(content: Option<String>, tool_calls: Vec<ToolCall>) -> Self {
        let mut message = Self::with_role(Role::Assistant, content.map(MessageContent::Text));
        message.tool_calls = tool_calls;
        message
    }

    /// The result of a tool call, answering the call with id `tool_call_id`.
    pub fn tool_result(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        let mut message = Self::with_role(Role::Tool, Some(MessageContent::Text(content.into())));
        message.tool_call_id = Some(tool_call_id.into());
        message
    }

    /// Adds (or replaces) a non-standard field, e.g. `reasoning_content`.
    pub fn with_extra(mut self, key: impl Into<String>, value: Value) -> Self {
        self.extra.insert(key.into(), value);
        self
    }

    /// The text of the message ("" when it has no content).
    pub fn text(&self) -> Cow<'_, str> {
        match &self.content {
            Some(content) => content.text(),
            None => Cow::Borrowed(""),
        }
    }
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;
