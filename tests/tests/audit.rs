//! The audit log end to end: `caduceus serve` and a worker, an interactive
//! session whose dangerous command an operator approves, and a client call;
//! `$CADUCEUS_HOME/audit.jsonl` and `caduceus audit tail` show who did what.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Output;
use std::time::{Duration, Instant};

use caduceus_tests::{Fleet, Proc, parse_result};
use serde_json::{Value, json};

const SECRET: &str = "hunter2hunter2";

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A client command with `token`.
fn client_as(fleet: &Fleet, coordinator: &Proc, token: &str, args: &[&str]) -> Output {
    let mut cmd = fleet.command();
    cmd.args(args)
        .env("CADUCEUS_COORDINATOR", coordinator.url())
        .env("CADUCEUS_TOKEN", token);
    cmd.output().unwrap()
}

fn create_token(fleet: &Fleet, coordinator: &Proc, role: &str, name: &str) -> String {
    let out = client_as(
        fleet,
        coordinator,
        &fleet.token,
        &["tokens", "create", "--role", role, "--name", name],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The log's lines once `done` holds for them (the writer thread syncs
/// shortly after each call returns).
fn audit_lines(fleet: &Fleet, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let path = fleet.home.path().join("audit.jsonl");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let lines: Vec<Value> = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if done(&lines) {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "the audit log never showed the expected lines: {lines:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_with_an_approval_is_logged_with_who_answered_and_masked_arguments() {
    use caduceus_proto::control_client::ControlClient;
    use caduceus_proto::{AnswerApprovalRequest, StartSessionRequest, bearer};
    use tonic::metadata::MetadataValue;

    let fleet = Fleet::new();
    fleet.write_config("approvals:\n  mode: ask\n  timeout: 30\n");
    let coordinator = fleet.serve(&[]);
    let _worker = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));
    let ops = create_token(&fleet, &coordinator, "admin", "ops");
    let ci = create_token(&fleet, &coordinator, "client", "ci");

    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("doomed");
    std::fs::create_dir_all(target.join("inner")).unwrap();
    let command = format!("DB_PASSWORD={SECRET} rm -rf {}", target.display());
    let replay = dir.path().join("model.jsonl");
    let call = json!({"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": json!({"command": command}).to_string()}}]});
    std::fs::write(
        &replay,
        format!("{call}\n{}\n", json!({"content": "removed it"})),
    )
    .unwrap();

    // The session is started, and its approval answered, with the `ops` token.
    let channel = tonic::transport::Endpoint::from_shared(coordinator.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let header: MetadataValue<_> = bearer(&ops).parse().unwrap();
    let mut client = ControlClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
        req.metadata_mut().insert("authorization", header.clone());
        Ok(req)
    });
    let mut events = client
        .start_session(StartSessionRequest {
            prompt: "clean up".into(),
            model: format!("replay:{}", replay.display()),
            interactive: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut approval_id = None;
    let mut session_id = None;
    while let Some(event) = events.message().await.unwrap() {
        session_id.get_or_insert_with(|| event.session_id.clone());
        if event.kind == "approval_needed" {
            let data: Value = serde_json::from_str(&event.json).unwrap();
            let id = data["approval_id"].as_str().unwrap().to_owned();
            let answer = client
                .answer_approval(AnswerApprovalRequest {
                    id: id.clone(),
                    approve: true,
                    scope: "once".into(),
                    reason: String::new(),
                })
                .await
                .unwrap()
                .into_inner();
            assert!(answer.accepted, "{}", answer.message);
            approval_id = Some(id);
        }
        if event.kind == "final" {
            break;
        }
    }
    let approval_id = approval_id.expect("the session asked for approval");
    let session_id = session_id.unwrap();
    assert!(!target.exists(), "the approved command ran");

    // A client call with the `ci` token.
    let out = client_as(
        &fleet,
        &coordinator,
        &ci,
        &[
            "call",
            "terminal",
            &json!({"command": format!("echo DB_PASSWORD={SECRET} > /dev/null; echo hi")})
                .to_string(),
            "--task",
            "t-ci",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(parse_result(&out.stdout)["output"], "hi");

    let lines = audit_lines(&fleet, |lines| {
        lines
            .iter()
            .filter(|l| l["event"] == "tool_call" && l["tool"] == "terminal")
            .count()
            >= 2
    });
    let text = lines
        .iter()
        .map(Value::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        !text.contains(SECRET),
        "a secret reached the audit log: {text}"
    );
    assert!(!text.contains(&ops) && !text.contains(&ci) && !text.contains(&fleet.token));

    let approval = lines
        .iter()
        .find(|l| l["event"] == "approval")
        .unwrap_or_else(|| panic!("no approval line: {text}"));
    assert_eq!(approval["approval_id"], approval_id.as_str(), "{approval}");
    assert_eq!(approval["answered_by"], "ops", "{approval}");
    assert_eq!(approval["decision"], "approve", "{approval}");
    assert_eq!(approval["scope"], "once", "{approval}");
    assert_eq!(approval["accepted"], true, "{approval}");
    assert_eq!(approval["session"], session_id.as_str(), "{approval}");
    assert_eq!(approval["tool"], "terminal", "{approval}");
    assert!(
        approval["command"].as_str().unwrap().contains("rm -rf"),
        "{approval}"
    );

    let approved = lines
        .iter()
        .find(|l| l["event"] == "tool_call" && l["session"] == session_id.as_str())
        .unwrap_or_else(|| panic!("no call line for the session: {text}"));
    assert_eq!(approved["tool"], "terminal", "{approved}");
    assert_eq!(approved["token"], "ops", "{approved}");
    assert_eq!(approved["verdict"], "approved", "{approved}");
    assert_eq!(approved["status"], "ok", "{approved}");
    assert_eq!(approved["worker"], "w1", "{approved}");
    assert!(approved["duration_ms"].is_u64(), "{approved}");
    let logged = approved["arguments"]["command"].as_str().unwrap();
    assert!(
        logged.contains("rm -rf") && logged.contains("DB_PASSWORD="),
        "{approved}"
    );
    // The approval line comes before the call it let through.
    let position = |line: &Value| lines.iter().position(|l| l == line).unwrap();
    assert!(position(approval) < position(approved));

    let plain = lines
        .iter()
        .find(|l| l["event"] == "tool_call" && l["task"] == "t-ci")
        .unwrap_or_else(|| panic!("no call line for the client call: {text}"));
    assert_eq!(plain["token"], "ci", "{plain}");
    assert_eq!(plain["verdict"], "allowed", "{plain}");
    assert_eq!(plain["status"], "ok", "{plain}");

    // Token use: one line per connection and token, with the role.
    let uses: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "token_use" && l["token"] == "ci")
        .collect();
    assert_eq!(uses.len(), 1, "{uses:?}");
    assert_eq!(uses[0]["role"], "client");
    assert_eq!(uses[0]["admitted"], true);
    let ops_uses = lines
        .iter()
        .filter(|l| l["event"] == "token_use" && l["token"] == "ops")
        .count();
    assert_eq!(
        ops_uses, 1,
        "StartSession and AnswerApproval share one connection: {text}"
    );

    // `caduceus audit tail` reads the same lines.
    let mut cmd = fleet.command();
    let out = cmd
        .args(["audit", "tail", "-n", "2", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let tail: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let current = audit_lines(&fleet, |_| true);
    assert_eq!(tail.as_slice(), &current[current.len() - 2..]);
    let mut cmd = fleet.command();
    let out = cmd.args(["audit", "tail", "-n", "1000"]).output().unwrap();
    let readable = String::from_utf8_lossy(&out.stdout);
    assert!(
        readable.contains(&format!(
            "approval approval_id={approval_id} decision=approve scope=once answered_by=ops"
        )),
        "{readable}"
    );
}

#[test]
fn a_refused_token_is_logged_once_per_connection() {
    let fleet = Fleet::new();
    let coordinator = fleet.serve(&[]);
    let out = client_as(&fleet, &coordinator, "cdt_not-a-token", &["status"]);
    assert!(!out.status.success());
    let lines = audit_lines(&fleet, |lines| {
        lines
            .iter()
            .any(|l| l["event"] == "token_use" && l["admitted"] == false)
    });
    let refused: Vec<&Value> = lines
        .iter()
        .filter(|l| l["event"] == "token_use" && l["admitted"] == false)
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(refused[0]["token"].is_null());
    assert!(
        refused[0]["error"]
            .as_str()
            .unwrap()
            .contains("invalid token"),
        "{}",
        refused[0]
    );
    assert!(!refused[0].to_string().contains("cdt_not-a-token"));
}

#[test]
fn audit_tail_follow_prints_lines_as_they_are_written() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let fleet = Fleet::new();
    let coordinator = fleet.serve(&[]);
    let todo_call = |task: &str| {
        let out = client_as(
            &fleet,
            &coordinator,
            &fleet.token,
            &["call", "todo", "{}", "--task", task],
        );
        assert!(out.status.success(), "{}", stderr(&out));
    };
    // A coordinator tool (no worker needed): todo. The first call's line is in
    // the log before `--follow` starts, so it is shown once `--follow` has
    // read to the end (`-n 5`: the call line and the token line before it): only then is the second call made, and its line must
    // arrive as it is written.
    todo_call("t-before");
    let mut follow = fleet
        .command()
        .args(["audit", "tail", "-n", "5", "--follow", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = follow.stdout.take().unwrap();
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    let next_call_line = |task: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = received
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("--follow printed no tool_call line for {task}"));
            let value: Value = serde_json::from_str(&line).unwrap();
            if value["event"] == "tool_call" {
                // Every earlier call's line was shown already: another one
                // here would be a line printed twice.
                assert_eq!(value["task"], task, "printed again: {value}");
                break value;
            }
        }
    };
    next_call_line("t-before");
    todo_call("t-follow");
    let call = next_call_line("t-follow");
    // Lines already shown are not shown again when the file grows.
    todo_call("t-after");
    next_call_line("t-after");
    let _ = follow.kill();
    let _ = follow.wait();
    assert_eq!(call["tool"], "todo", "{call}");
    assert_eq!(call["task"], "t-follow", "{call}");
    assert_eq!(call["token"], "shared", "{call}");
}
