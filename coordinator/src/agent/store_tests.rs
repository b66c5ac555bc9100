use caduceus_llm::{ChatMessage, ToolCall};

use super::*;

#[tokio::test]
async fn a_session_and_its_transcript_are_written_as_it_goes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("state.db");
    let store = SessionStore::open(&path).unwrap();
    store.session_started(SessionRow {
        id: "s1".into(),
        parent_id: None,
        root_id: "s1".into(),
        depth: 0,
        task_id: "t1".into(),
        model: "m".into(),
        prompt: "list files".into(),
    });
    store.message("s1", 0, &ChatMessage::user("list files"), None);
    store.message(
        "s1",
        1,
        &ChatMessage::assistant(
            None,
            vec![ToolCall::new("c1", "terminal", r#"{"command":"ls"}"#)],
        ),
        None,
    );
    store.message(
        "s1",
        2,
        &ChatMessage::tool_result("c1", "{\"output\":\"a\"}"),
        Some("terminal"),
    );
    store.flush().await;

    // Readable while the session runs.
    assert_eq!(read_state(&path, "s1").unwrap().as_deref(), Some("running"));
    let transcript = read_transcript(&path, "s1").unwrap();
    assert_eq!(transcript.len(), 3);
    assert_eq!(
        transcript[1].message["tool_calls"][0]["function"]["name"],
        "terminal"
    );
    assert_eq!(transcript[2].tool_name.as_deref(), Some("terminal"));
    assert_eq!(transcript[2].tool_call_id.as_deref(), Some("c1"));

    store.session_ended(SessionEnd {
        id: "s1".into(),
        state: "completed".into(),
        api_calls: 2,
        exit_reason: "completed".into(),
        final_response: Some("a".into()),
        error: None,
        input_tokens: 5,
        output_tokens: 1,
    });
    store.flush().await;
    let sessions = read_sessions(&path).unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(
        (sessions[0].state.as_str(), sessions[0].api_calls),
        ("completed", 2)
    );
    assert_eq!(sessions[0].final_response.as_deref(), Some("a"));
    assert_eq!(read_state(&path, "nope").unwrap(), None);
}
