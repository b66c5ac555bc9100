use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::env::{test_env, test_manager};
use crate::tools::ToolSettings;
use crate::tools::terminal::{self, TerminalCall};

struct Harness {
    manager: EnvManager,
    settings: ToolSettings,
}

impl Harness {
    fn new() -> Self {
        let (manager, _) = test_manager();
        Harness {
            manager,
            settings: ToolSettings::default(),
        }
    }

    async fn raw(&self, task: &str, session: &str, args: Value) -> String {
        let Value::Object(args) = args else {
            panic!("arguments must be an object")
        };
        let cancel = CancellationToken::new();
        run(ProcessCall {
            envs: &self.manager,
            task_id: task,
            session_id: session,
            args: &args,
            cancel: &cancel,
            // The coordinator's `terminal.timeout`.
            max_wait: Duration::from_secs(5),
        })
        .await
        .body
    }

    async fn process(&self, args: Value) -> Value {
        serde_json::from_str(&self.raw("task", "session-1", args).await).unwrap()
    }

    async fn background(&self, task: &str, session: &str, command: &str) -> String {
        let env = test_env(&self.manager, task).await;
        let Value::Object(args) = json!({"command": command, "background": true}) else {
            unreachable!()
        };
        let cancel = CancellationToken::new();
        let result = terminal::run(
            &self.settings,
            TerminalCall {
                env: &env,
                args: &args,
                cancel: &cancel,
                session_id: session,
                timeout: None,
            },
        )
        .await;
        let result: Value = serde_json::from_str(&result.body).unwrap();
        result["session_id"].as_str().unwrap().to_owned()
    }
}

#[tokio::test]
async fn errors_as_hermes_words_them() {
    let h = Harness::new();
    assert_eq!(
        h.raw("task", "", json!({"action": "poll"})).await,
        r#"{"error": "session_id is required for poll"}"#
    );
    assert_eq!(
        h.raw("task", "", json!({"action": "restart", "session_id": "x"}))
            .await,
        r#"{"error": "Unknown process action: restart. Use: list, poll, log, wait, kill, write, submit, close"}"#
    );
    assert_eq!(
        h.raw(
            "task",
            "",
            json!({"action": "wait", "session_id": "proc_000000000000"})
        )
        .await,
        r#"{"status": "not_found", "error": "No process with ID proc_000000000000"}"#
    );
    // No environment is created for the task just to say it has nothing.
    assert_eq!(
        h.raw("fresh", "", json!({"action": "list"})).await,
        r#"{"processes": []}"#
    );
    assert!(h.manager.get("fresh").is_none());
    h.manager.shutdown().await;
}

#[tokio::test]
async fn poll_log_write_submit_close_wait() {
    let h = Harness::new();
    let id = h
        .background("task", "session-1", "echo ready; while IFS= read -r line; do echo \"got:$line\"; done; echo 'bye GH_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789'")
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let poll = h.process(json!({"action": "poll", "session_id": id})).await;
    assert_eq!(poll["status"], "running");
    assert_eq!(poll["output_preview"], "ready\n");
    assert_eq!(poll["session_id"], id.as_str());
    assert!(poll.get("exit_code").is_none());

    assert_eq!(
        h.raw(
            "task",
            "session-1",
            json!({"action": "write", "session_id": id, "data": "one\n"})
        )
        .await,
        r#"{"status": "ok", "bytes_written": 4}"#
    );
    let submit = h
        .process(json!({"action": "submit", "session_id": id, "data": "two"}))
        .await;
    assert_eq!(submit["bytes_written"], 4);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = h.process(json!({"action": "log", "session_id": id})).await;
    assert_eq!(log["output"], "ready\ngot:one\ngot:two");
    assert_eq!(log["total_lines"], 3);
    assert_eq!(log["showing"], "3 lines");
    let page = h
        .process(json!({"action": "log", "session_id": id, "offset": 1, "limit": 1}))
        .await;
    assert_eq!(page["output"], "got:one");

    assert_eq!(
        h.raw(
            "task",
            "session-1",
            json!({"action": "close", "session_id": id})
        )
        .await,
        r#"{"status": "ok", "message": "stdin closed"}"#
    );
    let wait = h
        .process(json!({"action": "wait", "session_id": id, "timeout": 10}))
        .await;
    assert_eq!(wait["status"], "exited");
    assert_eq!(wait["exit_code"], 0);
    assert_eq!(wait["completion_reason"], "exited");
    let output = wait["output"].as_str().unwrap();
    assert!(
        output.starts_with("ready\ngot:one\ngot:two\nbye GH_TOKEN="),
        "{output}"
    );
    assert!(
        !output.contains("abcdefghijklmnopqrstuvwxyz"),
        "redacted: {output}"
    );
    assert_eq!(
        h.raw(
            "task",
            "session-1",
            json!({"action": "write", "session_id": id, "data": "x"})
        )
        .await,
        r#"{"status": "already_exited", "error": "Process has already finished"}"#
    );
    let poll = h.process(json!({"action": "poll", "session_id": id})).await;
    assert_eq!(
        (poll["status"].as_str(), poll["exit_code"].as_i64()),
        (Some("exited"), Some(0))
    );
    assert_eq!(poll["termination_source"], "");
    h.manager.shutdown().await;
}

#[tokio::test]
async fn wait_times_out_clamps_and_kill_ends_it() {
    let h = Harness::new();
    let id = h
        .background("task", "session-1", "echo tick; sleep 60")
        .await;
    let wait = h
        .process(json!({"action": "wait", "session_id": id, "timeout": 1}))
        .await;
    assert_eq!(wait["status"], "timeout");
    assert_eq!(wait["timeout_note"], "Waited 1s, process still running");
    assert_eq!(wait["output"], "tick\n");
    let started = std::time::Instant::now();
    let wait = h
        .process(json!({"action": "wait", "session_id": id, "timeout": 900}))
        .await;
    assert_eq!(
        wait["timeout_note"],
        "Requested wait of 900s was clamped to configured limit of 5s"
    );
    assert!(started.elapsed() < Duration::from_secs(8));

    let kill = h.process(json!({"action": "kill", "session_id": id})).await;
    assert_eq!(kill["status"], "killed");
    assert_eq!(kill["completion_reason"], "killed");
    assert_eq!(kill["termination_source"], "process.kill");
    // bash may report its killed child ("Terminated") before it goes itself.
    assert!(
        kill["output"].as_str().unwrap().starts_with("tick\n"),
        "{kill}"
    );
    let again = h.process(json!({"action": "kill", "session_id": id})).await;
    assert_eq!(again["status"], "already_exited");
    assert_eq!(again["exit_code"], -15);
    h.manager.shutdown().await;
}

#[tokio::test]
async fn list_shows_the_tasks_processes_and_the_sessions_others() {
    let h = Harness::new();
    let mine = h.background("task", "session-1", "sleep 30").await;
    let sibling = h.background("other-task", "session-1", "sleep 30").await;
    let stranger = h.background("third-task", "session-2", "sleep 30").await;
    let list = h.process(json!({"action": "list"})).await;
    let processes = list["processes"].as_array().unwrap();
    let ids: Vec<&str> = processes
        .iter()
        .map(|p| p["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [mine.as_str(), sibling.as_str()]);
    assert!(!ids.contains(&stranger.as_str()));
    assert_eq!(processes[0]["status"], "running");
    assert_eq!(processes[0]["command"], "sleep 30");
    assert!(processes[0].get("session_scoped").is_none());
    assert_eq!(processes[1]["session_scoped"], true);
    let started_at = processes[0]["started_at"].as_str().unwrap();
    assert_eq!(
        started_at.len(),
        "2026-01-01T00:00:00Z".len(),
        "{started_at}"
    );
    for env in h.manager.all() {
        env.processes.kill_all("test").await;
    }
    h.manager.shutdown().await;
}

#[test]
fn python_slices_and_lines() {
    assert_eq!(python_slice(10, -3, i64::MAX), (7, 10));
    assert_eq!(python_slice(2, -200, i64::MAX), (0, 2));
    assert_eq!(python_slice(10, 8, 12), (8, 10));
    assert_eq!(python_slice(10, 12, 20), (10, 10));
    assert_eq!(python_slice(10, -2, -5), (8, 8));
    assert_eq!(split_lines("a\nb\r\nc\rd\n"), ["a", "b", "c", "d"]);
    assert_eq!(split_lines(""), Vec::<&str>::new());
}

#[test]
fn utc_timestamps() {
    assert_eq!(iso_utc(UNIX_EPOCH), "1970-01-01T00:00:00Z");
    assert_eq!(
        iso_utc(UNIX_EPOCH + Duration::from_secs(1_709_294_405)),
        "2024-03-01T12:00:05Z"
    );
}
