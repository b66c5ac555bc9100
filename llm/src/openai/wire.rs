//! The JSON of the chat-completions wire format: request bodies, non-streamed
//! answers, and error bodies.

use serde_json::{Map, Value, json};

use crate::message::ToolCall;
use crate::request::ChatRequest;
use crate::text::shorten;
use crate::turn::{AssistantTurn, FinishReason, Usage};

/// The request body: the request's own fields, then `extra_body` defaults for the
/// fields the request does not set, then the streaming switches.
pub(crate) fn request_body(
    request: &ChatRequest,
    model: &str,
    stream: bool,
    extra_body: &Map<String, Value>,
) -> Result<Value, serde_json::Error> {
    let mut body = match serde_json::to_value(request)? {
        Value::Object(object) => object,
        // A struct always serializes to an object; keep the type system honest.
        _ => Map::new(),
    };
    body.insert("model".into(), Value::String(model.to_string()));
    for (key, value) in extra_body {
        body.entry(key.clone()).or_insert_with(|| value.clone());
    }
    body.insert("stream".into(), Value::Bool(stream));
    if stream {
        body.insert("stream_options".into(), json!({ "include_usage": true }));
    } else {
        body.remove("stream_options");
    }
    Ok(Value::Object(body))
}

/// Reads a non-streamed `chat.completion`.
pub(crate) fn parse_completion(body: &Value) -> Result<AssistantTurn, String> {
    if let Some(error) = ApiError::from_error_object(body) {
        return Err(format!("the body is an error object: {}", error.message));
    }
    let choice = body
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|choices| choices.first())
        .ok_or_else(|| "no `choices[0]` in the answer".to_string())?;
    let message = choice
        .get("message")
        .ok_or_else(|| "no `choices[0].message` in the answer".to_string())?;
    let tool_calls = match message.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => calls
            .iter()
            .map(ToolCall::from_wire)
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => return Err(format!("`tool_calls` is not an array: {other}")),
    };
    let text = |key: &str| {
        message
            .get(key)
            .and_then(Value::as_str)
            .filter(|text| !text.is_empty())
            .map(str::to_string)
    };
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(FinishReason::from_wire)
        .unwrap_or_else(|| FinishReason::inferred(!tool_calls.is_empty()));
    Ok(AssistantTurn {
        content: text("content"),
        reasoning: text("reasoning_content").or_else(|| text("reasoning")),
        tool_calls,
        finish_reason,
        usage: body.get("usage").and_then(Usage::from_wire),
    })
}

/// What a server said when it refused a request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ApiError {
    pub(crate) message: String,
    pub(crate) code: Option<String>,
    /// A numeric `code` (some servers put the HTTP status there in mid-stream errors).
    pub(crate) numeric_code: Option<u64>,
}

impl ApiError {
    /// Reads an error body: the OpenAI shape `{"error": {"message", "type", "code"}}`,
    /// or `{"error": "text"}`, `{"message": ..}`, `{"detail": ..}`, or plain text.
    /// Falls back to the status' reason phrase for an empty body.
    pub(crate) fn from_body(body: &[u8], reason_phrase: &str) -> ApiError {
        if let Ok(value) = serde_json::from_slice::<Value>(body) {
            if let Some(error) = ApiError::from_error_object(&value) {
                return error;
            }
            for key in ["message", "detail"] {
                if let Some(message) = value.get(key).and_then(Value::as_str) {
                    return ApiError::plain(message);
                }
            }
        }
        let text = String::from_utf8_lossy(body);
        let text = text.trim();
        if text.is_empty() {
            ApiError::plain(reason_phrase)
        } else {
            ApiError::plain(&shorten(text, 1000))
        }
    }

    /// Reads `{"error": …}`; `None` when the value has no `error` field.
    pub(crate) fn from_error_object(value: &Value) -> Option<ApiError> {
        let error = value.get("error").filter(|error| !error.is_null())?;
        if let Some(message) = error.as_str() {
            return Some(ApiError::plain(message));
        }
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| error.to_string());
        let code = error.get("code");
        let textual_code = code
            .and_then(Value::as_str)
            .or_else(|| error.get("type").and_then(Value::as_str))
            .map(str::to_string);
        Some(ApiError {
            message,
            code: textual_code,
            numeric_code: code.and_then(Value::as_u64),
        })
    }

    fn plain(message: &str) -> ApiError {
        ApiError {
            message: message.to_string(),
            code: None,
            numeric_code: None,
        }
    }
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
