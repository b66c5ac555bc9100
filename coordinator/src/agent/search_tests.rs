use caduceus_llm::{ChatMessage, ToolCall};

use super::super::store::{ResumeSpec, SessionRow, SessionStore};
use super::*;

fn row(id: &str, parent: Option<&str>, prompt: &str) -> SessionRow {
    SessionRow {
        id: id.into(),
        parent_id: parent.map(str::to_owned),
        root_id: parent.unwrap_or(id).to_owned(),
        depth: u32::from(parent.is_some()),
        task_id: format!("task-{id}"),
        model: "test-model".into(),
        prompt: prompt.into(),
        parent_call_id: None,
        task_index: None,
        spec: ResumeSpec::default(),
    }
}

/// Three sessions: s1 about the auth refactor, s2 about docker networking,
/// and a child of s2 that also talks about the auth refactor.
async fn fixture() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = SessionStore::open(&path, false).unwrap();
    store.session_started(row("s1", None, "refactor the auth module"));
    let s1 = [
        ChatMessage::system("system prompt"),
        ChatMessage::user("refactor the auth module"),
        ChatMessage::assistant(
            None,
            vec![ToolCall::new(
                "c1",
                "terminal",
                r#"{"command":"grep -r login"}"#,
            )],
        ),
        ChatMessage::tool_result("c1", "{\"output\":\"src/login.rs\"}"),
        ChatMessage::assistant(
            Some("The auth refactor moved login into chat-send.rs".into()),
            vec![],
        ),
        ChatMessage::user("thanks"),
        ChatMessage::assistant(Some("Done: auth is in its own crate".into()), vec![]),
    ];
    for (i, m) in s1.iter().enumerate() {
        let tool = (m.role.as_str() == "tool").then_some("terminal");
        store.message("s1", i, m, tool);
    }
    store.session_started(row("s2", None, "fix docker networking"));
    store.message("s2", 0, &ChatMessage::user("fix docker networking"), None);
    store.message(
        "s2",
        1,
        &ChatMessage::assistant(Some("docker networking needs a bridge".into()), vec![]),
        None,
    );
    store.session_started(row("s2-child", Some("s2"), "auth refactor child"));
    store.message(
        "s2-child",
        0,
        &ChatMessage::user("auth refactor in a child"),
        None,
    );
    store.flush().await;
    (dir, path)
}

fn search(path: &Path, args: Value, current: Option<&str>) -> Value {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    session_search(path, &SearchArgs::from_map(&args), current)
}

#[tokio::test]
async fn discover_finds_the_session_with_its_window_and_bookends() {
    let (_dir, path) = fixture().await;
    let found = search(&path, json!({"query": "auth refactor"}), None);
    assert_eq!(found["mode"], "discover");
    assert_eq!(found["count"], 1, "{found}");
    let hit = &found["results"][0];
    assert_eq!(hit["session_id"], "s1");
    assert_eq!(hit["model"], "test-model");
    assert_eq!(hit["source"], "cli");
    assert!(
        hit["snippet"].as_str().unwrap().contains(">>>auth<<<"),
        "{hit}"
    );
    let window = hit["messages"].as_array().unwrap();
    // The tool message is left out of the window; the hit is flagged.
    assert!(window.iter().all(|m| m["role"] != "tool"));
    assert!(window.iter().any(|m| m["anchor"] == true));
    assert_eq!(
        hit["match_message_id"],
        window.iter().find(|m| m["anchor"] == true).unwrap()["id"]
    );
}

#[tokio::test]
async fn children_and_the_current_session_are_not_searched() {
    let (_dir, path) = fixture().await;
    let found = search(&path, json!({"query": "auth"}), Some("s1"));
    assert_eq!(found["count"], 0, "{found}");
    assert_eq!(found["message"], "No matching sessions found.");
}

#[tokio::test]
async fn role_filter_reaches_tool_output_and_bad_syntax_finds_nothing() {
    let (_dir, path) = fixture().await;
    let tool_only = search(
        &path,
        json!({"query": "login", "role_filter": "tool"}),
        None,
    );
    assert_eq!(
        tool_only["results"][0]["matched_role"], "tool",
        "{tool_only}"
    );
    // Hyphenated words are quoted, stray operators dropped.
    let hyphen = search(&path, json!({"query": "chat-send"}), None);
    assert_eq!(hyphen["count"], 1, "{hyphen}");
    let junk = search(&path, json!({"query": "AND ((( \"unbalanced"}), None);
    assert_eq!(junk["success"], true);
    // What the sanitiser lets through and FTS5 then refuses finds nothing
    // too (a refused query is not a database error).
    for query in ["-login", "login NOT NOT", "login AND AND send", "a:b"] {
        let refused = search(&path, json!({"query": query}), None);
        assert_eq!(refused["success"], true, "{query}: {refused}");
    }
    let prefix = search(&path, json!({"query": "network*"}), None);
    assert_eq!(prefix["results"][0]["session_id"], "s2");
}

#[tokio::test]
async fn scroll_returns_a_window_around_any_message() {
    let (_dir, path) = fixture().await;
    let first = search(&path, json!({"session_id": "s1"}), None);
    assert_eq!(first["mode"], "read");
    assert_eq!(first["message_count"], 7);
    let ids: Vec<i64> = first["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_i64().unwrap())
        .collect();
    let scroll = search(
        &path,
        json!({"session_id": "s1", "around_message_id": ids[3], "window": 1}),
        None,
    );
    assert_eq!(scroll["mode"], "scroll");
    assert_eq!(scroll["messages"].as_array().unwrap().len(), 3);
    assert_eq!(scroll["messages_before"], 1);
    assert_eq!(scroll["messages"][1]["tool_name"], "terminal");
    let missing = search(
        &path,
        json!({"session_id": "s1", "around_message_id": 999_999}),
        None,
    );
    assert_eq!(
        missing["error"],
        "around_message_id 999999 not in session_id s1"
    );
    let own = search(
        &path,
        json!({"session_id": "s1", "around_message_id": ids[0]}),
        Some("s1"),
    );
    assert_eq!(
        own["error"],
        "scroll rejected: anchor lives in the current session lineage (already in your active context)"
    );
    let unknown = search(&path, json!({"session_id": "nope"}), None);
    assert_eq!(unknown["error"], "session_id not found: nope");
}

#[tokio::test]
async fn browse_lists_recent_top_level_sessions() {
    let (_dir, path) = fixture().await;
    let recent = search(&path, json!({}), Some("s2"));
    assert_eq!(recent["mode"], "browse");
    assert_eq!(recent["count"], 1);
    assert_eq!(recent["results"][0]["session_id"], "s1");
    assert_eq!(recent["results"][0]["preview"], "refactor the auth module");
    assert_eq!(recent["results"][0]["message_count"], 7);
}

#[tokio::test]
async fn an_older_database_is_migrated_and_indexed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE sessions (
                id TEXT PRIMARY KEY, parent_id TEXT, root_id TEXT NOT NULL, depth INTEGER NOT NULL,
                task_id TEXT NOT NULL, model TEXT NOT NULL, prompt TEXT NOT NULL, state TEXT NOT NULL,
                started_at REAL NOT NULL, ended_at REAL, api_calls INTEGER NOT NULL DEFAULT 0,
                exit_reason TEXT, final_response TEXT, error TEXT,
                input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0);
             CREATE TABLE messages (
                session_id TEXT NOT NULL, idx INTEGER NOT NULL, role TEXT NOT NULL, content TEXT,
                tool_calls TEXT, tool_call_id TEXT, tool_name TEXT, message TEXT NOT NULL,
                created_at REAL NOT NULL, PRIMARY KEY (session_id, idx));
             INSERT INTO sessions (id, root_id, depth, task_id, model, prompt, state, started_at)
                VALUES ('old', 'old', 0, 't', 'm', 'p', 'completed', 1764000000);
             INSERT INTO messages VALUES ('old', 0, 'user', 'kubernetes upgrade plan', NULL, NULL, NULL, '{}', 1764000001);",
        )
        .unwrap();
    }
    super::super::store::ensure_schema(&path).unwrap();
    let found = search(&path, json!({"query": "kubernetes"}), None);
    assert_eq!(found["results"][0]["session_id"], "old", "{found}");
    assert_eq!(found["results"][0]["when"], "November 24, 2025 at 04:00 PM");
    // New messages after the migration are indexed by the triggers.
    let store = SessionStore::open(&path, false).unwrap();
    store.message(
        "old",
        1,
        &ChatMessage::assistant(Some("helm chart bumped".into()), vec![]),
        None,
    );
    store.flush().await;
    assert_eq!(search(&path, json!({"query": "helm"}), None)["count"], 1);
    // A message rewritten in place keeps its id and is re-indexed.
    store.message(
        "old",
        1,
        &ChatMessage::assistant(Some("kustomize instead".into()), vec![]),
        None,
    );
    store.flush().await;
    assert_eq!(search(&path, json!({"query": "helm"}), None)["count"], 0);
    assert_eq!(
        search(&path, json!({"query": "kustomize"}), None)["count"],
        1
    );
}

#[test]
fn the_query_sanitizer_keeps_phrases_and_quotes_dotted_words() {
    assert_eq!(
        sanitize_fts_query("\"docker networking\" fix"),
        "\"docker networking\" fix"
    );
    assert_eq!(
        sanitize_fts_query("P2.2 my-app.config.ts"),
        "\"P2.2\" \"my-app.config.ts\""
    );
    assert_eq!(sanitize_fts_query("OR alpha AND"), "alpha");
    assert_eq!(sanitize_fts_query("(a:b) ^c"), "a b   c");
    assert_eq!(sanitize_fts_query("***deploy*"), "deploy*");
}

#[test]
fn timestamps_read_as_hermes_writes_them() {
    assert_eq!(format_timestamp(0.0), "January 01, 1970 at 12:00 AM");
    assert_eq!(
        format_timestamp(1_764_513_900.0),
        "November 30, 2025 at 02:45 PM"
    );
}

#[test]
fn the_batch_planner_may_run_it_beside_other_read_only_calls() {
    let dir = tempfile::tempdir().unwrap();
    let entry = registry_entry(dir.path().join("state.db")).unwrap();
    assert_eq!(entry.parallel, ParallelClass::Safe);
    assert_eq!(entry.toolset, "session_search");
}
