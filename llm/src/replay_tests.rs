use std::io::Write as _;
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::*;
use crate::config::LlmConfig;
use crate::model::model_from_config;
use crate::turn::StreamEvent;

/// A parent that delegates to three children, whose goals differ, then sums up.
const DELEGATION_SCRIPT: &str = r#"
# parent (default conversation)
{"content": "Splitting the work.", "tool_calls": [{"id": "d1", "type": "function", "function": {"name": "delegate_task", "arguments": "{\"tasks\":[{\"goal\":\"count alpha\"},{\"goal\":\"count beta\"},{\"goal\":\"count gamma\"}]}"}}]}
{"content": "All three children are done.", "expect_tool_results": 1}
{"match": "alpha", "tool_calls": [{"id": "a1", "type": "function", "function": {"name": "terminal", "arguments": "{\"command\":\"wc -l alpha\"}"}}]}
{"match": "alpha", "content": "alpha has 3 lines"}
{"match": "beta", "content": "beta has 5 lines"}
{"match": "gamma", "content": "gamma has 8 lines"}
"#;

fn request(first_user: &str, history: Vec<ChatMessage>) -> ChatRequest {
    let mut messages = vec![ChatMessage::system("sys"), ChatMessage::user(first_user)];
    messages.extend(history);
    ChatRequest::new(messages)
}

async fn next(model: &ReplayModel, request: &ChatRequest) -> Result<AssistantTurn, LlmError> {
    model.complete_quietly(request).await
}

#[tokio::test]
async fn conversations_are_routed_by_match_and_keep_their_own_cursor() {
    let model =
        Arc::new(ReplayModel::from_jsonl("script.jsonl", DELEGATION_SCRIPT).expect("script"));

    let parent_goal = "Count the lines of three files";
    let first = next(&model, &request(parent_goal, vec![]))
        .await
        .expect("parent turn 1");
    assert_eq!(first.tool_calls[0].name, "delegate_task");
    assert_eq!(first.finish_reason, FinishReason::ToolCalls);

    // The children run concurrently.
    let child = |goal: &'static str| {
        let model = Arc::clone(&model);
        tokio::spawn(async move {
            let opening = next(&model, &request(goal, vec![])).await?;
            let mut history = vec![opening.to_message()];
            let mut last = opening;
            while last.has_tool_calls() {
                history.push(ChatMessage::tool_result(&last.tool_calls[0].id, "3 alpha"));
                last = next(&model, &request(goal, history.clone())).await?;
            }
            Ok::<_, LlmError>(last.content)
        })
    };
    let (alpha, beta, gamma) = tokio::join!(
        child("count alpha"),
        child("count beta"),
        child("count gamma")
    );
    assert_eq!(
        alpha.expect("join").expect("alpha").as_deref(),
        Some("alpha has 3 lines")
    );
    assert_eq!(
        beta.expect("join").expect("beta").as_deref(),
        Some("beta has 5 lines")
    );
    assert_eq!(
        gamma.expect("join").expect("gamma").as_deref(),
        Some("gamma has 8 lines")
    );

    let history = vec![
        first.to_message(),
        ChatMessage::tool_result("d1", "{\"results\":[]}"),
    ];
    let last = next(&model, &request(parent_goal, history))
        .await
        .expect("parent turn 2");
    assert_eq!(
        last.content.as_deref(),
        Some("All three children are done.")
    );
}

#[tokio::test]
async fn the_longest_match_wins() {
    let script = r#"
{"match": "child", "content": "generic child"}
{"match": "child beta", "content": "specific child"}
{"content": "parent"}
"#;
    let model = ReplayModel::from_jsonl("s", script).expect("script");
    let specific = next(&model, &request("you are child beta", vec![]))
        .await
        .expect("beta");
    let generic = next(&model, &request("you are child alpha", vec![]))
        .await
        .expect("alpha");
    let parent = next(&model, &request("top level", vec![]))
        .await
        .expect("parent");
    assert_eq!(specific.content.as_deref(), Some("specific child"));
    assert_eq!(generic.content.as_deref(), Some("generic child"));
    assert_eq!(parent.content.as_deref(), Some("parent"));
}

#[tokio::test]
async fn running_out_of_turns_names_the_conversation() {
    let model =
        ReplayModel::from_jsonl("demo.jsonl", r#"{"match": "beta", "content": "only turn"}"#)
            .expect("script");
    let conversation = request("please count beta", vec![]);
    next(&model, &conversation).await.expect("first turn");

    let error = next(&model, &conversation).await.expect_err("exhausted");

    assert!(
        matches!(error, LlmError::ReplayExhausted { used: 1, .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("demo.jsonl"), "{message}");
    assert!(message.contains("\"please count beta\""), "{message}");
    assert!(message.contains("\"beta\""), "{message}");
}

#[test]
fn a_malformed_line_is_reported_with_its_line_number() {
    let script = "{\"content\": \"fine\"}\n\n{\"content\": \"broken\"\n";
    let error = ReplayModel::from_jsonl("bad.jsonl", script).expect_err("malformed");
    assert!(
        matches!(error, LlmError::ReplayFormat { line: 3, .. }),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .starts_with("replay file bad.jsonl line 3: not valid JSON"),
        "{error}"
    );
}

#[test]
fn lines_are_validated() {
    let cases = [
        (r#"{"contnet": "typo"}"#, "unknown field \"contnet\""),
        (r#"["content"]"#, "expected a JSON object"),
        (
            r#"{"match": "x"}"#,
            "needs \"content\" and/or \"tool_calls\"",
        ),
        (
            r#"{"role": "user", "content": "x"}"#,
            "\"role\" must be \"assistant\"",
        ),
        (
            r#"{"tool_calls": [{"id": "c"}]}"#,
            "tool_calls[0]: a tool call needs a \"function\" object",
        ),
        (
            r#"{"content": "x", "delay_ms": -5}"#,
            "\"delay_ms\" must be a non-negative integer",
        ),
    ];
    for (line, expected) in cases {
        let error = ReplayModel::from_jsonl("f", line).expect_err(line);
        assert!(error.to_string().contains(expected), "{line}: {error}");
    }
}

#[tokio::test]
async fn arguments_may_be_objects_and_ids_may_be_omitted() {
    let script = r#"{"tool_calls": [{"function": {"name": "write_file", "arguments": {"path": "a.txt", "content": "hi"}}}, {"function": {"name": "todo", "arguments": "{not json"}}]}"#;
    let model = ReplayModel::from_jsonl("f", script).expect("script");
    let turn = next(&model, &request("go", vec![])).await.expect("turn");
    assert_eq!(turn.tool_calls[0].id, "call_l1_0");
    assert_eq!(turn.tool_calls[1].id, "call_l1_1");
    assert_eq!(
        turn.tool_calls[0].parse_arguments().expect("object"),
        json!({ "path": "a.txt", "content": "hi" })
    );
    // Malformed arguments are replayed as they are: the agent loop must cope.
    assert_eq!(turn.tool_calls[1].arguments, "{not json");
}

#[tokio::test]
async fn expectations_check_what_the_session_sent_back() {
    let script = r#"
{"tool_calls": [{"id": "c1", "function": {"name": "terminal", "arguments": "{}"}}, {"id": "c2", "function": {"name": "terminal", "arguments": "{}"}}]}
{"content": "both ran", "expect_tool_results": 2, "expect_contains": "exit_code"}
"#;
    let model = ReplayModel::from_jsonl("e.jsonl", script).expect("script");
    let first = next(&model, &request("go", vec![])).await.expect("turn 1");

    let one_result = vec![
        first.to_message(),
        ChatMessage::tool_result("c1", "{\"exit_code\":0}"),
    ];
    let error = next(&model, &request("go", one_result))
        .await
        .expect_err("one result");
    assert!(
        matches!(error, LlmError::ReplayMismatch { line: 3, .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("expected 2 tool result(s)"),
        "{error}"
    );

    let model = ReplayModel::from_jsonl("e.jsonl", script).expect("script");
    next(&model, &request("go", vec![])).await.expect("turn 1");
    let two_results = vec![
        first.to_message(),
        ChatMessage::tool_result("c1", "{\"output\":\"\",\"exit_code\":0}"),
        ChatMessage::tool_result("c2", "{\"output\":\"\",\"exit_code\":1}"),
    ];
    let turn = next(&model, &request("go", two_results))
        .await
        .expect("turn 2");
    assert_eq!(turn.content.as_deref(), Some("both ran"));
}

#[tokio::test]
async fn delays_make_demos_watchable() {
    let script = r#"
{"content": "slow", "delay_ms": 200}
{"content": "default delay"}
"#;
    let model = ReplayModel::from_jsonl("d", script)
        .expect("script")
        .with_default_delay(Duration::from_millis(100));
    let started = Instant::now();
    next(&model, &request("go", vec![])).await.expect("turn 1");
    assert!(started.elapsed() >= Duration::from_millis(200));
    let started = Instant::now();
    next(&model, &request("go", vec![])).await.expect("turn 2");
    assert!(started.elapsed() >= Duration::from_millis(100));
}

#[tokio::test]
async fn events_report_the_replayed_turn() {
    let script = r#"{"content": "Looking.", "tool_calls": [{"id": "c", "function": {"name": "read_file", "arguments": "{}"}}]}"#;
    let model = ReplayModel::from_jsonl("f", script).expect("script");
    let mut events = Vec::new();
    model
        .complete(&request("go", vec![]), &mut |event| events.push(event))
        .await
        .expect("turn");
    assert_eq!(
        events,
        vec![
            StreamEvent::TextDelta("Looking.".into()),
            StreamEvent::ToolCallStarted {
                index: 0,
                id: "c".into(),
                name: "read_file".into()
            },
        ]
    );
}

#[tokio::test]
async fn recorded_lines_replay_to_the_same_turn() {
    let turn = AssistantTurn {
        content: Some("hi \"there\"\nsecond line".into()),
        ..AssistantTurn::calling(vec![ToolCall::new(
            "c9",
            "terminal",
            "{\"command\":\"ls\"}",
        )])
    };
    let line = replay_line(&turn, Some("child"));
    let model = ReplayModel::from_jsonl("rec", &line).expect("recorded line");
    let replayed = next(&model, &request("the child goal", vec![]))
        .await
        .expect("turn");
    assert_eq!(replayed, turn);
}

#[tokio::test]
async fn replay_models_come_from_config_and_files() {
    let mut file = tempfile::NamedTempFile::new().expect("temp file");
    writeln!(file, r#"{{"content": "from a file"}}"#).expect("write");
    let config = LlmConfig {
        model: format!("replay:{}", file.path().display()),
        ..LlmConfig::default()
    };
    let model = model_from_config(&config).expect("model");
    assert!(
        model.describe().starts_with("replay:"),
        "{}",
        model.describe()
    );
    let turn = model
        .complete_quietly(&request("go", vec![]))
        .await
        .expect("turn");
    assert_eq!(turn.content.as_deref(), Some("from a file"));

    let missing = ReplayModel::open("/nonexistent/replay.jsonl").expect_err("missing");
    assert!(matches!(missing, LlmError::ReplayIo { .. }), "{missing:?}");
    assert!(
        missing.to_string().contains("/nonexistent/replay.jsonl"),
        "{missing}"
    );
}

#[tokio::test]
async fn a_conversation_resumed_from_its_transcript_goes_on_past_its_turns() {
    // A new process (a restarted coordinator) replays a conversation that
    // already holds the parent's first turn and its result.
    let model = ReplayModel::from_jsonl("script.jsonl", DELEGATION_SCRIPT).expect("script");
    let first = ToolCall::new("d1", "delegate_task", "{}");
    let history = vec![
        ChatMessage::assistant(Some("Splitting the work.".into()), vec![first]),
        ChatMessage::tool_result("d1", "{\"results\": []}"),
    ];
    let turn = next(&model, &request("Count the lines", history))
        .await
        .expect("the parent's second line");
    assert_eq!(
        turn.content.as_deref(),
        Some("All three children are done.")
    );
}
