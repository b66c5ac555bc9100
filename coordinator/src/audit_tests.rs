#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, UNIX_EPOCH};

use serde_json::{Value, json};

use super::*;

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A finished call of `tool` with `arguments`.
fn done(
    tool: &str,
    arguments: Option<&Value>,
    worker: Option<&str>,
    status: CallStatus,
) -> ToolResult {
    ToolResult {
        worker: worker.map(str::to_owned),
        duration: Duration::from_millis(42),
        arguments: arguments.and_then(Value::as_object).cloned(),
        ..ToolResult::new(
            tool.to_owned(),
            crate::call::ToolReply::new(status, "{}".to_owned()),
        )
    }
}

fn ctx() -> CallContext {
    CallContext {
        task_id: "t1".to_owned(),
        session_id: Some("s1".to_owned()),
        caller: Some("ops".to_owned()),
        ..CallContext::default()
    }
}

#[test]
fn each_event_is_one_line_with_its_time_and_fields() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(AuditConfig::in_home(dir.path())).unwrap();
    let args = json!({"command": "echo hi", "timeout": 5});
    log.tool_call(
        &ctx(),
        &done("terminal", Some(&args), Some("w1"), CallStatus::Ok),
        Some("allowed"),
    );
    log.record(AuditEvent::Approval(ApprovalLine {
        approval_id: "ap_1".to_owned(),
        answered_by: "ops".to_owned(),
        decision: "approve",
        scope: Some("once"),
        accepted: true,
        session: None,
        task: Some("t1".to_owned()),
        tool: Some("terminal".to_owned()),
        command: Some("rm -rf build".to_owned()),
    }));
    log.flush();
    let lines = lines(&dir.path().join("audit.jsonl"));
    assert_eq!(lines.len(), 2);
    let call = &lines[0];
    assert_eq!(call["event"], "tool_call");
    assert_eq!(call["token"], "ops");
    assert_eq!(call["session"], "s1");
    assert_eq!(call["task"], "t1");
    assert_eq!(call["tool"], "terminal");
    assert_eq!(call["arguments"], args);
    assert_eq!(call["verdict"], "allowed");
    assert_eq!(call["worker"], "w1");
    assert_eq!(call["status"], "ok");
    assert_eq!(call["duration_ms"], 42);
    assert!(call["time"].as_str().unwrap().ends_with('Z'), "{call}");
    assert_eq!(lines[1]["event"], "approval");
    assert_eq!(lines[1]["approval_id"], "ap_1");
    assert_eq!(lines[1]["answered_by"], "ops");
}

#[test]
fn secrets_in_arguments_are_masked() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(AuditConfig::in_home(dir.path())).unwrap();
    let args = json!({"command": "curl -H 'x' https://x; DB_PASSWORD=hunter2hunter2 ./deploy.sh", "env": ["OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz123456"]});
    log.tool_call(
        &ctx(),
        &done("terminal", Some(&args), None, CallStatus::Error),
        None,
    );
    log.flush();
    let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert!(!text.contains("hunter2hunter2"), "{text}");
    assert!(
        !text.contains("sk-abcdefghijklmnopqrstuvwxyz123456"),
        "{text}"
    );
    assert!(text.contains("curl -H"), "{text}");
}

#[test]
fn the_log_rotates_by_size_and_keeps_the_configured_number_of_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(AuditConfig {
        path: path.clone(),
        max_bytes: 300,
        keep: 2,
        sync_interval: AuditConfig::DEFAULT_SYNC_INTERVAL,
    })
    .unwrap();
    for n in 0..40 {
        log.record(AuditEvent::TokenUse(TokenUseLine {
            token: Some(format!("token-{n}")),
            role: Some("client"),
            peer: "127.0.0.1:1".to_owned(),
            method: "/caduceus.v1.Control/CallTool".to_owned(),
            admitted: true,
            error: None,
        }));
        // One line per batch, so every write is judged for rotation.
        log.flush();
    }
    let rotated = |n: usize| dir.path().join(format!("audit.jsonl.{n}"));
    assert!(rotated(1).exists() && rotated(2).exists());
    assert!(!rotated(3).exists(), "only `keep` rotated files stay");
    for file in [path.clone(), rotated(1), rotated(2)] {
        let size = std::fs::metadata(&file).unwrap().len();
        // A file is rotated once it reaches the limit: at most one line over.
        assert!(size < 300 + 200, "{} is {size} bytes", file.display());
    }
    // The newest line is in the live file (or, just rotated, in .1), the
    // oldest ones are gone.
    let live_and_last: Vec<Value> = [rotated(1), path].iter().flat_map(|p| lines(p)).collect();
    assert_eq!(live_and_last.last().unwrap()["token"], "token-39");
    let all: Vec<Value> = [rotated(2), rotated(1), dir.path().join("audit.jsonl")]
        .iter()
        .flat_map(|p| lines(p))
        .collect();
    assert!(all.iter().all(|l| l["token"] != "token-0"));
}

#[test]
fn token_use_is_logged_once_per_connection_and_token() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::open(AuditConfig::in_home(dir.path())).unwrap();
    let line = |peer: &str, token: &str| TokenUseLine {
        token: Some(token.to_owned()),
        role: Some("client"),
        peer: peer.to_owned(),
        method: "/caduceus.v1.Control/CallTool".to_owned(),
        admitted: true,
        error: None,
    };
    log.token_use(line("127.0.0.1:5000", "ci"));
    log.token_use(line("127.0.0.1:5000", "ci"));
    log.token_use(line("127.0.0.1:5001", "ci"));
    log.token_use(line("127.0.0.1:5000", "ops"));
    log.flush();
    let lines = lines(&dir.path().join("audit.jsonl"));
    assert_eq!(lines.len(), 3, "{lines:?}");
}

#[test]
fn lines_queued_before_the_last_handle_drops_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(AuditConfig::in_home(dir.path())).unwrap();
    for _ in 0..100 {
        log.tool_call(&ctx(), &done("read_file", None, None, CallStatus::Ok), None);
    }
    drop(log);
    // The writer drains its queue and exits; wait for it without a fixed sleep.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while lines(&path).len() < 100 {
        assert!(std::time::Instant::now() < deadline, "lines were lost");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_unwritable_location_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "x").unwrap();
    let err = AuditLog::open(AuditConfig::in_home(&blocker.join("sub"))).unwrap_err();
    assert!(
        err.to_string().contains("cannot open the audit log"),
        "{err}"
    );
}

#[test]
fn times_are_rfc3339_utc() {
    assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
    let t = UNIX_EPOCH + Duration::from_millis(1_796_182_068_123);
    assert_eq!(rfc3339(t), "2026-12-02T03:27:48.123Z");
    let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
    assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
}

#[test]
fn a_line_is_in_the_file_before_its_sync_is_due() {
    // A coordinator killed with SIGKILL loses no line the writer has run
    // for: lines are written as they come, only their fsync waits.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let log = AuditLog::open(AuditConfig {
        sync_interval: Duration::from_secs(3600),
        ..AuditConfig::in_home(dir.path())
    })
    .unwrap();
    let args = json!({"command": "echo hi"});
    log.tool_call(
        &ctx(),
        &done("terminal", Some(&args), Some("w1"), CallStatus::Ok),
        None,
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(&path)
        .unwrap_or_default()
        .is_empty()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the line was not written within 10 s without a flush"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(lines(&path)[0]["tool"], "terminal");
}
