//! A `tools/call` answer as the model reads it, in hermes' shapes
//! (`tools/mcp_tool_handlers.py` `_render_call_tool_result`):
//!
//! - `isError` → `{"error": <the blocks' text, or "MCP tool returned an error">}`;
//! - text only → `{"result": "<text blocks joined by newlines>"}`;
//! - text and `structuredContent` → `{"result": text, "structuredContent": …}`,
//!   except when a text block is the structured value serialized (the spec's
//!   backwards-compatible dual emit), which would reach the model twice:
//!   then `{"result": text}`;
//! - `structuredContent` only → `{"result": <the structured value>}`.
//!
//! Blocks that are not text (images, audio, binary resources) are named in
//! place (`[image/png image content, 1234 bytes base64; not shown]`) rather
//! than dropped, so the model knows the tool returned more than it sees.

use serde_json::{Map, Value};

use caduceus_common::redact::{RedactMode, redact};
use caduceus_common::result::{CallStatus, ToolReply, to_json};

use crate::CallOutput;

/// The text of one content block, or the notice that stands for it.
fn block_text(block: &Value) -> Option<String> {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => block.get("text").and_then(Value::as_str).map(str::to_owned),
        "resource" => {
            let resource = block.get("resource")?;
            if let Some(text) = resource.get("text").and_then(Value::as_str) {
                return Some(text.to_owned());
            }
            let uri = resource.get("uri").and_then(Value::as_str).unwrap_or("?");
            let size = resource
                .get("blob")
                .and_then(Value::as_str)
                .map_or(0, str::len);
            Some(format!(
                "[binary resource {uri}, {size} bytes base64; not shown]"
            ))
        }
        "resource_link" => {
            let uri = block.get("uri").and_then(Value::as_str).unwrap_or("?");
            Some(format!("[resource link: {uri}]"))
        }
        "image" | "audio" => {
            let mime = block
                .get("mimeType")
                .and_then(Value::as_str)
                .unwrap_or("application/octet-stream");
            let size = block
                .get("data")
                .and_then(Value::as_str)
                .map_or(0, str::len);
            Some(format!(
                "[{mime} {kind} content, {size} bytes base64; not shown]"
            ))
        }
        other => Some(format!(
            "[unsupported MCP content block of type '{other}' dropped]"
        )),
    }
}

/// True when some text block is `structured` serialized (compared as parsed JSON).
fn dual_emits(out: &CallOutput, structured: &Value) -> bool {
    out.content.iter().any(|block| {
        block.get("type").and_then(Value::as_str) == Some("text")
            && block
                .get("text")
                .and_then(Value::as_str)
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .is_some_and(|parsed| &parsed == structured)
    })
}

/// The reply the model reads for `out`.
pub fn render(out: &CallOutput) -> ToolReply {
    if out.is_error {
        let text: String = out
            .content
            .iter()
            .filter_map(|b| {
                b.get("text")
                    .or_else(|| b.get("resource").and_then(|r| r.get("text")))
                    .and_then(Value::as_str)
            })
            .collect();
        let message = if text.is_empty() {
            "MCP tool returned an error".to_owned()
        } else {
            text
        };
        return ToolReply::error(redact(&message, RedactMode::General).into_owned());
    }
    let mut usable = 0usize;
    let parts: Vec<String> = out
        .content
        .iter()
        .filter_map(|block| {
            let text = block_text(block)?;
            if !text.trim().is_empty() {
                usable += 1;
            }
            Some(text)
        })
        .collect();
    let text = parts.join("\n");
    let structured = out
        .structured
        .as_ref()
        .filter(|s| !(usable > 0 && dual_emits(out, s)));
    let mut doc = Map::new();
    match structured {
        None => {
            doc.insert("result".to_owned(), Value::String(text));
        }
        Some(s) if text.is_empty() => {
            doc.insert("result".to_owned(), s.clone());
        }
        Some(s) => {
            doc.insert("result".to_owned(), Value::String(text));
            doc.insert("structuredContent".to_owned(), s.clone());
        }
    }
    ToolReply::new(CallStatus::Ok, to_json(&Value::Object(doc)))
}

#[cfg(test)]
#[path = "result_tests.rs"]
mod tests;
