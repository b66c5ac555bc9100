use caduceus_llm::{ChatMessage, ToolCall};

use super::*;

fn row(id: &str, parent: Option<(&str, &str, usize)>) -> SessionRow {
    SessionRow {
        id: id.into(),
        parent_id: parent.map(|p| p.0.to_owned()),
        root_id: parent.map_or(id, |p| p.0).to_owned(),
        depth: u32::from(parent.is_some()),
        task_id: format!("task-{id}"),
        model: "m".into(),
        prompt: "list files".into(),
        parent_call_id: parent.map(|p| p.1.to_owned()),
        task_index: parent.map(|p| p.2),
        spec: ResumeSpec {
            max_iterations: 7,
            disabled_toolsets: vec!["web".into()],
            ..ResumeSpec::default()
        },
    }
}

#[tokio::test]
async fn a_session_and_its_transcript_are_written_as_it_goes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("state.db");
    let store = SessionStore::open(&path, false).unwrap();
    store.session_started(row("s1", None));
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

#[tokio::test]
async fn a_call_is_on_disk_before_it_is_dispatched_and_its_result_when_it_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = SessionStore::open(&path, true).unwrap();
    store.session_started(row("s1", None));
    let start = |id: &str| CallStart {
        session_id: "s1".into(),
        turn: 2,
        call_id: id.into(),
        tool: "terminal".into(),
        arguments: r#"{"command":"sleep 30"}"#.into(),
        task_id: "task-s1".into(),
    };
    // No flush: call_started itself waits for the disk.
    store.call_started(start("c1")).await;
    let calls = read_calls(&path, "s1").unwrap();
    assert_eq!(
        (calls.len(), calls[0].state.as_str(), calls[0].turn),
        (1, "pending", 2)
    );
    store.call_started(start("c2")).await;
    store.call_finished(CallResult {
        session_id: "s1".into(),
        turn: 2,
        call_id: "c2".into(),
        result: "{\"output\": \"done\"}".into(),
        status: "ok".into(),
        worker: Some("w1".into()),
    });
    store.placement("task-s1", "w1");
    store.flush().await;
    let calls = read_calls(&path, "s1").unwrap();
    let states: Vec<(&str, &str)> = calls
        .iter()
        .map(|c| (c.call_id.as_str(), c.state.as_str()))
        .collect();
    assert_eq!(states, [("c1", "pending"), ("c2", "done")]);
    assert_eq!(calls[1].worker.as_deref(), Some("w1"));
    assert_eq!(
        read_placement(&path, "task-s1").unwrap().as_deref(),
        Some("w1")
    );
    let stored = read_session(&path, "s1").unwrap().unwrap();
    assert_eq!(stored.spec.max_iterations, 7);
    assert_eq!(stored.spec.disabled_toolsets, ["web"]);
    assert!(stored.durable);
}

#[tokio::test]
async fn events_are_recorded_in_order_and_read_back_from_any_point() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = SessionStore::open(&path, false).unwrap();
    for seq in 1..=4 {
        store.event(StoredEvent {
            root_id: "r".into(),
            seq,
            session_id: if seq == 3 { "child".into() } else { "r".into() },
            kind: "tool_started".into(),
            json: format!("{{\"n\":{seq}}}"),
        });
    }
    store.flush().await;
    assert_eq!(last_seq(&path, "r").unwrap(), 4);
    assert_eq!(last_seq(&path, "other").unwrap(), 0);
    let seqs = |after, until| -> Vec<u64> {
        read_events(&path, "r", after, until)
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect()
    };
    assert_eq!(seqs(0, None), [1, 2, 3, 4]);
    assert_eq!(seqs(1, Some(3)), [2, 3]);
    assert_eq!(
        read_events(&path, "r", 2, None).unwrap()[0].session_id,
        "child"
    );
}

#[tokio::test]
async fn only_the_sessions_of_a_dead_durable_owner_are_orphans() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let gone = SessionStore::open(&path, true).unwrap();
    gone.session_started(row("dead-root", None));
    gone.session_started(row("dead-child", Some(("dead-root", "c1", 0))));
    gone.flush().await;
    let embedded = SessionStore::open(&path, false).unwrap();
    embedded.session_started(row("embedded-root", None));
    embedded.flush().await;
    let alive = SessionStore::open(&path, true).unwrap();
    alive.session_started(row("live-root", None));
    alive.flush().await;

    let owner = gone.owner().to_owned();
    assert!(owner_alive(&path, &owner));
    drop(gone);
    drop(embedded);
    assert!(!owner_alive(&path, &owner));
    let orphans: Vec<String> = orphaned_roots(&path)
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(orphans, ["dead-root"]);
    let children = read_children(&path, "dead-root", "c1").unwrap();
    assert_eq!((children.len(), children[0].task_index), (1, Some(0)));
}

#[test]
fn a_database_from_before_resuming_gains_the_new_columns() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(
        "CREATE TABLE sessions (
            id TEXT PRIMARY KEY, parent_id TEXT, root_id TEXT NOT NULL, depth INTEGER NOT NULL,
            task_id TEXT NOT NULL, model TEXT NOT NULL, prompt TEXT NOT NULL, state TEXT NOT NULL,
            started_at REAL NOT NULL, ended_at REAL, api_calls INTEGER NOT NULL DEFAULT 0,
            exit_reason TEXT, final_response TEXT, error TEXT,
            input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0);
         INSERT INTO sessions (id, root_id, depth, task_id, model, prompt, state, started_at)
            VALUES ('old', 'old', 0, 't', 'm', 'p', 'completed', 1.0);",
    )
    .unwrap();
    drop(conn);
    let sessions = read_sessions(&path).unwrap();
    assert_eq!(sessions[0].id, "old");
    assert!(!sessions[0].durable);
    assert_eq!(sessions[0].spec, ResumeSpec::default());
}

#[tokio::test]
async fn taking_a_session_over_keeps_its_row_and_changes_its_owner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let gone = SessionStore::open(&path, true).unwrap();
    gone.session_started(row("r", None));
    gone.flush().await;
    let before = read_session(&path, "r").unwrap().unwrap();
    drop(gone);
    assert_eq!(orphaned_roots(&path).unwrap().len(), 1);

    let next = SessionStore::open(&path, true).unwrap();
    next.session_started(row("r", None));
    next.flush().await;
    let after = read_session(&path, "r").unwrap().unwrap();
    assert_eq!(after.started_at, before.started_at);
    assert_eq!(after.owner.as_deref(), Some(next.owner()));
    assert!(orphaned_roots(&path).unwrap().is_empty());
}
