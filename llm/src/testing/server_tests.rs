use serde_json::json;

use super::*;
use crate::config::LlmConfig;
use crate::message::ChatMessage;
use crate::model::ChatModel;
use crate::openai::OpenAiClient;
use crate::request::ChatRequest;

fn client_for(server: &ScriptedServer) -> OpenAiClient {
    OpenAiClient::new(LlmConfig {
        base_url: server.base_url(),
        model: "m".into(),
        stream: false,
        max_retries: 0,
        ..LlmConfig::default()
    })
    .expect("client")
}

fn goal(text: &str) -> ChatRequest {
    ChatRequest::new(vec![ChatMessage::user(text)])
}

#[tokio::test]
async fn responses_can_be_routed_by_conversation() {
    let server = ScriptedServer::start([
        ScriptedResponse::text("parent"),
        ScriptedResponse::text("child beta").for_conversation("beta"),
    ])
    .await
    .expect("server");
    let client = client_for(&server);

    let child = client
        .complete_quietly(&goal("count beta"))
        .await
        .expect("child");
    let parent = client.complete_quietly(&goal("top")).await.expect("parent");

    assert_eq!(child.content.as_deref(), Some("child beta"));
    assert_eq!(parent.content.as_deref(), Some("parent"));
    assert_eq!(server.remaining(), 0);
}

#[tokio::test]
async fn an_exhausted_script_answers_a_clear_400() {
    let server = ScriptedServer::start([]).await.expect("server");
    let error = client_for(&server)
        .complete_quietly(&goal("x"))
        .await
        .expect_err("empty");
    assert_eq!(error.status(), Some(400));
    assert!(
        error
            .to_string()
            .contains("no scripted response left for request #1"),
        "{error}"
    );
}

#[tokio::test]
async fn requests_are_recorded_and_pushes_extend_the_script() {
    let server = ScriptedServer::start([]).await.expect("server");
    server.push(ScriptedResponse::text("pushed"));
    let turn = client_for(&server)
        .complete_quietly(&goal("hello"))
        .await
        .expect("turn");
    assert_eq!(turn.content.as_deref(), Some("pushed"));
    let recorded = server.requests();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].method, "POST");
    assert_eq!(recorded[0].first_user_text(), "hello");
    assert_eq!(
        recorded[0].body["messages"],
        json!([{ "role": "user", "content": "hello" }])
    );
    assert!(!recorded[0].is_streaming());
}
