use std::time::Instant as StdInstant;

use serde_json::json;

use super::*;
use crate::message::{ChatMessage, ToolCall};
use crate::testing::{ScriptedResponse, ScriptedServer};
use crate::turn::{FinishReason, Usage};

const API_KEY: &str = "sk-test-do-not-leak";

fn config_for(server: &ScriptedServer, stream: bool) -> LlmConfig {
    LlmConfig {
        base_url: server.base_url(),
        api_key: Some(API_KEY.into()),
        model: "test-model".into(),
        stream,
        timeout_seconds: 5.0,
        retry_initial_delay_ms: 10,
        ..LlmConfig::default()
    }
}

fn client(config: LlmConfig) -> OpenAiClient {
    OpenAiClient::new(config).expect("client")
}

fn request() -> ChatRequest {
    ChatRequest::new(vec![
        ChatMessage::system("You are terse."),
        ChatMessage::user("List the files."),
    ])
}

async fn run(
    client: &OpenAiClient,
    request: &ChatRequest,
) -> (Result<AssistantTurn, LlmError>, Vec<StreamEvent>) {
    let mut events = Vec::new();
    let result = client
        .complete(request, &mut |event| events.push(event))
        .await;
    (result, events)
}

fn text_deltas(events: &[StreamEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            StreamEvent::TextDelta(text) => Some(text.clone()),
            _ => None,
        })
        .collect()
}

fn two_calls() -> Vec<ToolCall> {
    vec![
        ToolCall::new(
            "call_1",
            "read_file",
            r#"{"path": "src/main.rs", "offset": 1}"#,
        ),
        ToolCall::new("call_2", "terminal", r#"{"command": "ls -la /tmp"}"#),
    ]
}

fn usage() -> Usage {
    Usage {
        prompt_tokens: 42,
        completion_tokens: 7,
        total_tokens: 49,
        cached_prompt_tokens: Some(32),
        reasoning_tokens: None,
    }
}

#[tokio::test]
async fn non_streaming_text_turn() {
    let turn = AssistantTurn {
        usage: Some(usage()),
        ..AssistantTurn::text("Cargo.toml and src/.")
    };
    let server = ScriptedServer::start([ScriptedResponse::turn(turn)])
        .await
        .expect("server");
    let client = client(config_for(&server, false));

    let (result, events) = run(&client, &request()).await;
    let answer = result.expect("turn");

    assert_eq!(answer.content.as_deref(), Some("Cargo.toml and src/."));
    assert_eq!(answer.finish_reason, FinishReason::Stop);
    assert_eq!(answer.usage, Some(usage()));
    assert_eq!(text_deltas(&events), vec!["Cargo.toml and src/."]);
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {API_KEY}").as_str())
    );
    assert_eq!(sent.body["model"], json!("test-model"));
    assert_eq!(sent.body["stream"], json!(false));
    assert_eq!(sent.body.get("stream_options"), None);
    assert_eq!(
        sent.body["messages"][1],
        json!({ "role": "user", "content": "List the files." })
    );
}

#[tokio::test]
async fn streaming_text_turn_reports_deltas_and_usage() {
    let turn = AssistantTurn {
        usage: Some(usage()),
        ..AssistantTurn::text("Here are the files: Cargo.toml, src/lib.rs ✓")
    };
    let server = ScriptedServer::start([ScriptedResponse::turn(turn)])
        .await
        .expect("server");
    let client = client(config_for(&server, true));

    let (result, events) = run(&client, &request()).await;
    let answer = result.expect("turn");

    assert_eq!(
        answer.content.as_deref(),
        Some("Here are the files: Cargo.toml, src/lib.rs ✓")
    );
    let deltas = text_deltas(&events);
    assert!(
        deltas.len() > 1,
        "content should arrive in several deltas: {deltas:?}"
    );
    assert_eq!(
        deltas.concat(),
        "Here are the files: Cargo.toml, src/lib.rs ✓"
    );
    assert_eq!(answer.usage, Some(usage()));
    let sent = &server.requests()[0];
    assert_eq!(sent.body["stream"], json!(true));
    assert_eq!(
        sent.body["stream_options"],
        json!({ "include_usage": true })
    );
    assert_eq!(sent.header("accept"), Some("text/event-stream"));
}

#[tokio::test]
async fn streaming_turn_with_several_tool_calls() {
    let turn = AssistantTurn {
        content: Some("Let me look.".into()),
        ..AssistantTurn::calling(two_calls())
    };
    let server = ScriptedServer::start([ScriptedResponse::turn(turn)])
        .await
        .expect("server");
    let client = client(config_for(&server, true));

    let (result, events) = run(&client, &request()).await;
    let answer = result.expect("turn");

    assert_eq!(answer.tool_calls, two_calls());
    assert_eq!(answer.content.as_deref(), Some("Let me look."));
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    let started: Vec<&StreamEvent> = events
        .iter()
        .filter(|event| matches!(event, StreamEvent::ToolCallStarted { .. }))
        .collect();
    assert_eq!(
        started,
        vec![
            &StreamEvent::ToolCallStarted {
                index: 0,
                id: "call_1".into(),
                name: "read_file".into()
            },
            &StreamEvent::ToolCallStarted {
                index: 1,
                id: "call_2".into(),
                name: "terminal".into()
            },
        ]
    );
}

#[tokio::test]
async fn non_streaming_turn_with_several_tool_calls() {
    let server = ScriptedServer::start([ScriptedResponse::tool_calls(two_calls())])
        .await
        .expect("server");
    let client = client(config_for(&server, false));

    let (result, events) = run(&client, &request()).await;
    let answer = result.expect("turn");

    assert_eq!(answer.tool_calls, two_calls());
    assert_eq!(answer.content, None);
    assert_eq!(answer.finish_reason, FinishReason::ToolCalls);
    assert_eq!(events.len(), 2, "{events:?}");
}

#[tokio::test]
async fn retries_after_429_waiting_for_retry_after_seconds() {
    let server = ScriptedServer::start([
        ScriptedResponse::error(429, "Rate limit reached").with_header("Retry-After", "1"),
        ScriptedResponse::text("done"),
    ])
    .await
    .expect("server");
    let client = client(config_for(&server, true));

    let started = StdInstant::now();
    let (result, events) = run(&client, &request()).await;
    let elapsed = started.elapsed();

    assert_eq!(result.expect("turn").content.as_deref(), Some("done"));
    assert_eq!(server.request_count(), 2);
    assert!(elapsed >= Duration::from_secs(1), "waited only {elapsed:?}");
    assert!(elapsed < Duration::from_secs(3), "waited {elapsed:?}");
    assert!(
        matches!(
            &events[0],
            StreamEvent::Retrying { attempt: 1, delay, reason }
                if *delay == Duration::from_secs(1) && reason.contains("429") && reason.contains("Rate limit reached")
        ),
        "{events:?}"
    );
}

#[tokio::test]
async fn retries_after_429_honouring_retry_after_ms() {
    let server = ScriptedServer::start([
        ScriptedResponse::error(429, "slow down").with_header("retry-after-ms", "300"),
        ScriptedResponse::text("ok"),
    ])
    .await
    .expect("server");
    let client = client(config_for(&server, false));

    let started = StdInstant::now();
    let (result, _) = run(&client, &request()).await;

    assert!(result.is_ok(), "{result:?}");
    assert!(started.elapsed() >= Duration::from_millis(300));
}

#[tokio::test]
async fn a_retry_after_longer_than_the_limit_is_reported_not_waited_for() {
    let server = ScriptedServer::start([
        ScriptedResponse::error(429, "quota exhausted").with_header("retry-after", "3600"),
        ScriptedResponse::text("never served"),
    ])
    .await
    .expect("server");
    let client = client(config_for(&server, false));

    let started = StdInstant::now();
    let error = run(&client, &request()).await.0.expect_err("429");

    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(error.status(), Some(429));
    let message = error.to_string();
    assert!(
        message.contains("quota exhausted") && message.contains("3600"),
        "{message}"
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn retries_after_server_errors() {
    let server = ScriptedServer::start([
        ScriptedResponse::error(500, "internal"),
        ScriptedResponse::status(503, "<html>Service Unavailable</html>"),
        ScriptedResponse::text("recovered"),
    ])
    .await
    .expect("server");
    let client = client(config_for(&server, true));

    let (result, events) = run(&client, &request()).await;

    assert_eq!(result.expect("turn").content.as_deref(), Some("recovered"));
    assert_eq!(server.request_count(), 3);
    let retries = events
        .iter()
        .filter(|event| matches!(event, StreamEvent::Retrying { .. }))
        .count();
    assert_eq!(retries, 2);
}

#[tokio::test]
async fn server_errors_fail_once_the_retries_are_spent() {
    let server = ScriptedServer::start((0..4).map(|_| ScriptedResponse::error(502, "bad gateway")))
        .await
        .expect("server");
    let client = client(LlmConfig {
        max_retries: 2,
        ..config_for(&server, false)
    });

    let error = run(&client, &request()).await.0.expect_err("502");

    assert_eq!(server.request_count(), 3);
    assert!(
        matches!(
            error,
            LlmError::Api {
                status: 502,
                attempts: 3,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("after 3 attempts: bad gateway"),
        "{error}"
    );
}

#[tokio::test]
async fn a_400_is_not_retried_and_carries_the_server_message() {
    let server = ScriptedServer::start([
        ScriptedResponse::error(
            400,
            "Invalid value for 'tool_choice': must be one of auto, none.",
        ),
        ScriptedResponse::text("never served"),
    ])
    .await
    .expect("server");
    let client = client(config_for(&server, true));

    let error = run(&client, &request()).await.0.expect_err("400");

    assert_eq!(server.request_count(), 1);
    assert_eq!(error.status(), Some(400));
    let message = error.to_string();
    assert!(message.contains("HTTP 400"), "{message}");
    assert!(
        message.contains("Invalid value for 'tool_choice'"),
        "{message}"
    );
    assert!(message.contains(&server.base_url()), "{message}");
    assert!(!message.contains(API_KEY));
}

#[tokio::test]
async fn x_should_retry_false_stops_retries_of_a_500() {
    let server = ScriptedServer::start([
        ScriptedResponse::error(500, "do not retry me").with_header("x-should-retry", "false"),
        ScriptedResponse::text("never served"),
    ])
    .await
    .expect("server");
    let client = client(config_for(&server, false));

    let error = run(&client, &request()).await.0.expect_err("500");

    assert_eq!(error.status(), Some(500));
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn context_overflow_is_recognisable() {
    let body = json!({ "error": { "message": "This model's maximum context length is 8192 tokens.",
        "type": "invalid_request_error", "code": "context_length_exceeded" } });
    let server = ScriptedServer::start([ScriptedResponse::status(400, body.to_string())])
        .await
        .expect("server");
    let client = client(config_for(&server, false));

    let error = run(&client, &request()).await.0.expect_err("400");

    assert!(error.is_context_length_exceeded(), "{error:?}");
}

#[tokio::test]
async fn a_slow_server_times_out_after_the_retries() {
    let server = ScriptedServer::start([
        ScriptedResponse::text("late").after(Duration::from_secs(3)),
        ScriptedResponse::text("late again").after(Duration::from_secs(3)),
    ])
    .await
    .expect("server");
    let client = client(LlmConfig {
        timeout_seconds: 0.3,
        max_retries: 1,
        ..config_for(&server, false)
    });

    let started = StdInstant::now();
    let error = run(&client, &request()).await.0.expect_err("timeout");

    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(error, LlmError::Timeout { attempts: 2, .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("did not answer within 0.3 s"),
        "{error}"
    );
}

#[tokio::test]
async fn a_timeout_is_retried_and_can_recover() {
    let server = ScriptedServer::start([
        ScriptedResponse::text("late").after(Duration::from_secs(3)),
        ScriptedResponse::text("on time"),
    ])
    .await
    .expect("server");
    let client = client(LlmConfig {
        timeout_seconds: 0.3,
        ..config_for(&server, true)
    });

    let (result, _) = run(&client, &request()).await;

    assert_eq!(result.expect("turn").content.as_deref(), Some("on time"));
}

#[tokio::test]
async fn a_long_stream_is_not_cut_while_chunks_keep_coming() {
    // About 12 chunks 100 ms apart: 1.2 s in total, far over the 0.4 s timeout, but
    // never silent for that long.
    let turn = AssistantTurn {
        content: Some("a slow but steady answer".into()),
        ..AssistantTurn::calling(two_calls())
    };
    let server = ScriptedServer::start([
        ScriptedResponse::turn(turn).chunk_delay(Duration::from_millis(100))
    ])
    .await
    .expect("server");
    let client = client(LlmConfig {
        timeout_seconds: 0.4,
        max_retries: 0,
        ..config_for(&server, true)
    });

    let started = StdInstant::now();
    let (result, _) = run(&client, &request()).await;

    assert!(
        started.elapsed() > Duration::from_millis(800),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(result.expect("turn").tool_calls, two_calls());
}

#[tokio::test]
async fn a_stream_that_goes_silent_times_out() {
    let server = ScriptedServer::start([
        ScriptedResponse::text("stalls").chunk_delay(Duration::from_secs(2))
    ])
    .await
    .expect("server");
    let client = client(LlmConfig {
        timeout_seconds: 0.3,
        max_retries: 0,
        ..config_for(&server, true)
    });

    let started = StdInstant::now();
    let error = run(&client, &request()).await.0.expect_err("silent stream");

    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(error, LlmError::Timeout { attempts: 1, .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn connection_refused_gives_a_clear_error_after_retries() {
    // Bind and release a port so that nothing listens on it.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").port()
    };
    let client = client(LlmConfig {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        model: "m".into(),
        max_retries: 2,
        retry_initial_delay_ms: 10,
        ..LlmConfig::default()
    });

    let (result, events) = run(&client, &request()).await;
    let error = result.expect_err("refused");

    assert!(
        matches!(error, LlmError::Connection { attempts: 3, .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(
        message.contains(&format!("127.0.0.1:{port}/v1/chat/completions")),
        "{message}"
    );
    assert!(
        message.to_lowercase().contains("connection refused"),
        "{message}"
    );
    assert_eq!(events.len(), 2, "two Retrying events: {events:?}");
}

#[tokio::test]
async fn a_dropped_connection_is_retried() {
    let server = ScriptedServer::start([
        ScriptedResponse::close_connection(),
        ScriptedResponse::text("second try"),
    ])
    .await
    .expect("server");
    let client = client(config_for(&server, false));

    let (result, _) = run(&client, &request()).await;

    assert_eq!(result.expect("turn").content.as_deref(), Some("second try"));
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn a_stream_cut_short_is_retried_and_the_ui_told_to_discard() {
    let cut = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial\"}}]}\n\n";
    let server = ScriptedServer::start([
        ScriptedResponse::raw_sse(cut),
        ScriptedResponse::text("complete answer"),
    ])
    .await
    .expect("server");
    let client = client(config_for(&server, true));

    let (result, events) = run(&client, &request()).await;

    assert_eq!(
        result.expect("turn").content.as_deref(),
        Some("complete answer")
    );
    assert_eq!(events[0], StreamEvent::TextDelta("partial".into()));
    assert!(
        matches!(&events[1], StreamEvent::Retrying { reason, .. } if reason.contains("stream ended")),
        "{events:?}"
    );
}

#[tokio::test]
async fn an_irregular_stream_is_understood() {
    // CRLF line endings, keep-alive comments, an event split over two data lines,
    // one whole tool call in a single chunk, usage, and no [DONE].
    let stream = concat!(
        ": OPENROUTER PROCESSING\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Chec\"}}]}\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\r\n",
        "data: \"delta\":{\"content\":\"king\"}}]}\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_z\",\"type\":\"function\",\"function\":{\"name\":\"search_files\",\"arguments\":\"{\\\"pattern\\\":\\\"TODO\\\"}\"}}]}}]}\r\n\r\n",
        ": keep-alive\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9,\"total_tokens\":14}}\r\n\r\n",
    );
    let server = ScriptedServer::start([ScriptedResponse::raw_sse(stream)])
        .await
        .expect("server");
    let client = client(config_for(&server, true));

    let (result, _) = run(&client, &request()).await;
    let answer = result.expect("turn");

    assert_eq!(answer.content.as_deref(), Some("Checking"));
    assert_eq!(
        answer.tool_calls,
        vec![ToolCall::new(
            "call_z",
            "search_files",
            r#"{"pattern":"TODO"}"#
        )]
    );
    assert_eq!(answer.usage.map(|usage| usage.total_tokens), Some(14));
}

#[tokio::test]
async fn an_error_inside_the_stream_is_reported() {
    let stream = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        "data: {\"error\":{\"message\":\"Provider returned error\",\"code\":\"invalid_prompt\"}}\n\n",
    );
    let server = ScriptedServer::start([ScriptedResponse::raw_sse(stream)])
        .await
        .expect("server");
    let client = client(config_for(&server, true));

    let error = run(&client, &request()).await.0.expect_err("stream error");

    assert!(matches!(error, LlmError::StreamError { .. }), "{error:?}");
    assert!(
        error.to_string().contains("Provider returned error"),
        "{error}"
    );
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_server_that_ignores_the_stream_flag_is_still_understood() {
    let completion = json!({
        "choices": [{ "index": 0, "finish_reason": "stop",
            "message": { "role": "assistant", "content": "plain JSON" } }]
    });
    let server = ScriptedServer::start([ScriptedResponse::status(200, completion.to_string())])
        .await
        .expect("server");
    let client = client(config_for(&server, true));

    let (result, events) = run(&client, &request()).await;

    assert_eq!(result.expect("turn").content.as_deref(), Some("plain JSON"));
    assert_eq!(text_deltas(&events), vec!["plain JSON"]);
}

#[tokio::test]
async fn garbage_with_status_200_is_an_invalid_response() {
    let server = ScriptedServer::start([ScriptedResponse::status(200, "<html>login</html>")])
        .await
        .expect("server");
    let client = client(config_for(&server, false));

    let error = run(&client, &request()).await.0.expect_err("invalid");

    assert!(
        matches!(error, LlmError::InvalidResponse { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("<html>login</html>"), "{error}");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn extra_headers_and_body_are_sent_and_the_request_model_wins() {
    let server = ScriptedServer::start([ScriptedResponse::text("ok")])
        .await
        .expect("server");
    let client = client(LlmConfig {
        extra_headers: [("X-Title".to_string(), "caduceus tests".to_string())].into(),
        extra_body: serde_json::from_value(json!({ "parallel_tool_calls": false })).expect("map"),
        ..config_for(&server, false)
    });

    let result = client
        .complete_quietly(&request().with_model("other-model"))
        .await;

    assert!(result.is_ok(), "{result:?}");
    let sent = &server.requests()[0];
    assert_eq!(sent.header("x-title"), Some("caduceus tests"));
    assert_eq!(sent.body["parallel_tool_calls"], json!(false));
    assert_eq!(sent.body["model"], json!("other-model"));
}

#[tokio::test]
async fn the_base_url_query_is_kept() {
    let server = ScriptedServer::start([ScriptedResponse::text("ok")])
        .await
        .expect("server");
    let client = client(LlmConfig {
        base_url: format!("{}/?api-version=2024-10-21", server.base_url()),
        ..config_for(&server, false)
    });

    let result = client.complete_quietly(&request()).await;

    assert!(result.is_ok(), "{result:?}");
    assert_eq!(
        server.requests()[0].path,
        "/v1/chat/completions?api-version=2024-10-21"
    );
}

#[tokio::test]
async fn no_model_anywhere_is_a_configuration_error() {
    let server = ScriptedServer::start([]).await.expect("server");
    let client = client(LlmConfig {
        model: String::new(),
        ..config_for(&server, false)
    });

    let error = client
        .complete_quietly(&request())
        .await
        .expect_err("no model");

    assert!(matches!(error, LlmError::Config(_)), "{error:?}");
    assert!(error.to_string().contains("CADUCEUS_MODEL"), "{error}");
    assert_eq!(server.request_count(), 0);
}

#[test]
fn bad_base_urls_are_rejected_at_construction() {
    for base_url in ["not a url", "ftp://example.org/v1"] {
        let error = OpenAiClient::new(LlmConfig {
            base_url: base_url.into(),
            ..LlmConfig::default()
        })
        .expect_err(base_url);
        assert!(matches!(error, LlmError::Config(_)), "{error:?}");
    }
}

#[test]
fn the_endpoint_is_derived_from_the_base_url_and_shown_without_secrets() {
    let secretive = client(LlmConfig {
        base_url: "https://user:pass@llm.example.org/v1/?token=abc".into(),
        api_key: Some(API_KEY.into()),
        model: "m".into(),
        ..LlmConfig::default()
    });
    assert_eq!(
        secretive.endpoint(),
        "https://llm.example.org/v1/chat/completions"
    );
    let full = client(LlmConfig {
        base_url: "http://localhost:8080/v1/chat/completions".into(),
        ..LlmConfig::default()
    });
    assert_eq!(full.endpoint(), "http://localhost:8080/v1/chat/completions");
    let shown = format!("{secretive:?} {}", secretive.describe());
    assert!(
        !shown.contains(API_KEY) && !shown.contains("pass") && !shown.contains("abc"),
        "{shown}"
    );
    assert_eq!(
        secretive.describe(),
        "m via https://llm.example.org/v1/chat/completions (streaming)"
    );
}
