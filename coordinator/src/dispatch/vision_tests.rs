use super::*;

use caduceus_llm::testing::{ScriptedResponse, ScriptedServer};
use caduceus_llm::{LlmConfig, OpenAiClient};

fn vision_of(server: &ScriptedServer) -> VisionModel {
    let client = OpenAiClient::new(LlmConfig {
        base_url: server.base_url(),
        model: "vis".to_owned(),
        stream: false,
        max_retries: 0,
        ..LlmConfig::default()
    })
    .unwrap();
    VisionModel {
        model: Arc::new(client),
        timeout: Duration::from_secs(30),
        temperature: 0.1,
    }
}

fn args(question: &str) -> Map<String, Value> {
    let mut args = Map::new();
    args.insert("question".to_owned(), json!(question));
    args
}

#[tokio::test]
async fn the_image_goes_to_the_model_as_an_image_part_and_the_answer_is_hermes_shape() {
    let server = ScriptedServer::start(vec![ScriptedResponse::text("a cat")])
        .await
        .unwrap();
    let worker = ToolReply::ok(
        r#"{"success": true, "image": {"mime": "image/jpeg", "data": "/9j/4A==", "bytes": 4}, "screenshot_path": "/tmp/s.png"}"#,
    );
    let reply = answer(
        Some(&vision_of(&server)),
        "browser_vision",
        &args("what?"),
        worker,
    )
    .await;
    assert_eq!(reply.status, CallStatus::Ok);
    let doc: Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(
        doc,
        json!({"success": true, "analysis": "a cat", "screenshot_path": "/tmp/s.png"})
    );
    let body = &server.requests()[0].body;
    assert_eq!(body["max_tokens"], 2000);
    let parts = &body["messages"][0]["content"];
    assert_eq!(parts[0]["type"], "text");
    assert!(
        parts[0]["text"]
            .as_str()
            .unwrap()
            .contains("User's question: what?")
    );
    assert_eq!(
        parts[1],
        json!({"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4A=="}})
    );
}

#[tokio::test]
async fn a_worker_failure_passes_through_and_a_model_failure_is_hermes_error() {
    let failed = ToolReply::new(
        CallStatus::Error,
        r#"{"success": false, "error": "Error analyzing image: file not found: /x.png"}"#,
    );
    let server = ScriptedServer::start(vec![ScriptedResponse::error(
        400,
        "model does not support image input",
    )])
    .await
    .unwrap();
    let vision = vision_of(&server);
    let same = answer(Some(&vision), "vision_analyze", &args("q"), failed.clone()).await;
    assert_eq!(same, failed);
    assert_eq!(server.request_count(), 0);

    let worker = ToolReply::ok(
        r#"{"success": true, "image": {"mime": "image/png", "data": "iVBORw==", "bytes": 4}}"#,
    );
    let reply = answer(Some(&vision), "vision_analyze", &args("q"), worker).await;
    assert_eq!(reply.status, CallStatus::Error);
    let doc: Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(doc["success"], false);
    assert!(
        doc["error"]
            .as_str()
            .unwrap()
            .starts_with("Error analyzing image: "),
        "{doc}"
    );
    assert!(
        doc["analysis"]
            .as_str()
            .unwrap()
            .contains("could not be analyzed"),
        "{doc}"
    );
    // The image itself never reaches the model's text.
    assert!(!reply.body.contains("iVBORw=="), "{}", reply.body);
}
