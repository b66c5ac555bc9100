//! `vision_analyze` and `browser_vision` in the pipeline: the image is got on
//! the task's worker (a URL fetched through the worker's URL judge, a file
//! read in the task's environment, a screenshot of the task's browser) and
//! comes back as an internal document; the question goes from here to the
//! configured auxiliary vision model, so its API key never leaves the
//! coordinator. The model reads hermes' `{"success", "analysis", …}`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use caduceus_common::result::{CallStatus, ToolReply};
use caduceus_llm::{ChatMessage, ChatModel, ChatRequest, MessageContent, Role};

/// The auxiliary vision model (`auxiliary.vision`).
#[derive(Clone)]
pub struct VisionModel {
    pub model: Arc<dyn ChatModel>,
    /// hermes' `auxiliary.vision.timeout` (120 s).
    pub timeout: Duration,
    /// hermes' `auxiliary.vision.temperature` (0.1).
    pub temperature: f64,
}

impl std::fmt::Debug for VisionModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VisionModel")
            .field("model", &self.model.describe())
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// The tools whose image the worker gets and whose question is asked here.
pub fn is_vision_tool(tool: &str) -> bool {
    matches!(tool, "vision_analyze" | "browser_vision")
}

/// The worker's answer, turned into the model's document: the image sent
/// with the question to the vision model, or the worker's failure as it is.
pub async fn answer(
    vision: Option<&VisionModel>,
    tool: &str,
    args: &Map<String, Value>,
    worker_reply: ToolReply,
) -> ToolReply {
    let Ok(Value::Object(mut document)) = serde_json::from_str::<Value>(&worker_reply.body) else {
        return worker_reply;
    };
    let Some(Value::Object(image)) = document.remove("image") else {
        return worker_reply;
    };
    let mime = image
        .get("mime")
        .and_then(Value::as_str)
        .unwrap_or("image/png");
    let data = image
        .get("data")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let data_url = format!("data:{mime};base64,{data}");
    let question = args.get("question").and_then(Value::as_str).unwrap_or("");
    let Some(vision) = vision else {
        return failed(
            tool,
            "no auxiliary vision model is configured (auxiliary.vision.model)",
            &document,
        );
    };
    let prompt = match tool {
        // hermes' browser_vision prompt.
        "browser_vision" => format!(
            "You are analyzing a screenshot of a web browser.\n\nUser's question: {question}\n\nProvide a detailed and helpful answer based on what you see in the screenshot. If there are interactive elements, describe them. If there are verification challenges or CAPTCHAs, describe what type they are and what action might be needed. Focus on answering the user's specific question."
        ),
        // hermes' vision_analyze prompt (`_handle_vision_analyze`).
        _ => format!(
            "Fully describe and explain everything about this image, then answer the following question:\n\n{question}"
        ),
    };
    let message = ChatMessage {
        role: Role::User,
        content: Some(MessageContent::Parts(vec![
            json!({"type": "text", "text": prompt}),
            json!({"type": "image_url", "image_url": {"url": data_url}}),
        ])),
        tool_calls: Vec::new(),
        tool_call_id: None,
        extra: Map::new(),
    };
    let mut request = ChatRequest::new(vec![message]);
    request.max_tokens = Some(2000);
    request.temperature = Some(vision.temperature);
    let asked = tokio::time::timeout(vision.timeout, vision.model.complete_quietly(&request)).await;
    let analysis = match asked {
        Ok(Ok(turn)) => turn
            .content
            .filter(|c| !c.trim().is_empty())
            .or(turn.reasoning)
            .unwrap_or_default()
            .trim()
            .to_owned(),
        Ok(Err(err)) => return failed(tool, &err.to_string(), &document),
        Err(_) => {
            return failed(
                tool,
                &format!(
                    "the vision model did not answer within {} s",
                    vision.timeout.as_secs()
                ),
                &document,
            );
        }
    };
    // The vision model may read a secret off the screen.
    let analysis =
        caduceus_common::redact::redact(&analysis, caduceus_common::redact::RedactMode::General)
            .into_owned();
    let mut out = Map::new();
    out.insert("success".to_owned(), Value::Bool(true));
    let fallback = match tool {
        "browser_vision" => "Vision analysis returned no content.",
        _ => "There was a problem with the request and the image could not be analyzed.",
    };
    out.insert(
        "analysis".to_owned(),
        Value::String(if analysis.is_empty() {
            fallback.to_owned()
        } else {
            analysis
        }),
    );
    // What the worker added beside the image (browser_vision's screenshot_path).
    for (key, value) in document {
        if key != "success" {
            out.insert(key, value);
        }
    }
    ToolReply::json(&Value::Object(out))
}

/// hermes' failure documents: `vision_analyze` adds an `analysis` the model
/// can relay, `browser_vision` keeps the screenshot it took.
fn failed(tool: &str, error: &str, worker_fields: &Map<String, Value>) -> ToolReply {
    let body = match tool {
        "browser_vision" => {
            let mut out = json!({"success": false, "error": format!("Error during vision analysis: {error}")});
            if let Some(path) = worker_fields.get("screenshot_path") {
                out["screenshot_path"] = path.clone();
                out["note"] = json!(
                    "Screenshot was captured but vision analysis failed. You can still share it via MEDIA:<path>."
                );
            }
            out
        }
        _ => json!({
            "success": false,
            "error": format!("Error analyzing image: {error}"),
            "analysis": format!("There was a problem with the request and the image could not be analyzed. Error: {error}"),
        }),
    };
    ToolReply::new(CallStatus::Error, caduceus_common::result::to_json(&body))
}

#[cfg(test)]
#[path = "vision_tests.rs"]
mod tests;
