//! The command guard and approvals end to end: `caduceus serve` with a
//! configuration file, a worker, `caduceus call`, and `caduceus approvals`
//! answering from another process.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use caduceus_tests::{Fleet, Proc, parse_result};
use serde_json::{Value, json};

const NOT_CONSENTED: &str = "The user has NOT consented to this action. Do NOT retry this command, do NOT rephrase it, and do NOT attempt the same outcome via a different command.";

/// A coordinator loaded with `config` (written to `$CADUCEUS_HOME/config.yaml`)
/// and one worker.
fn start(config: &str) -> (Fleet, Proc, Proc) {
    let fleet = Fleet::new();
    std::fs::write(fleet.home.path().join("config.yaml"), config).unwrap();
    let coordinator = fleet.serve(&[]);
    let worker = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));
    (fleet, coordinator, worker)
}

fn terminal(fleet: &Fleet, coordinator: &Proc, task: &str, command: &str) -> Value {
    let arguments = json!({ "command": command }).to_string();
    let out = fleet.client(
        coordinator,
        &["call", "terminal", &arguments, "--task", task],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    parse_result(&out.stdout)
}

fn approvals(fleet: &Fleet, coordinator: &Proc, args: &[&str]) -> Output {
    let mut all = vec!["approvals"];
    all.extend_from_slice(args);
    fleet.client(coordinator, &all)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn pending_id(result: &Value) -> String {
    assert_eq!(result["status"], "pending_approval", "{result}");
    assert_eq!(result["approval_pending"], true, "{result}");
    assert_eq!(result["output"], "", "{result}");
    assert_eq!(result["exit_code"], -1, "{result}");
    result["approval_id"].as_str().unwrap().to_owned()
}

fn listed(fleet: &Fleet, coordinator: &Proc) -> Vec<Value> {
    let out = approvals(fleet, coordinator, &["list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
}

/// A directory with a `build/` subdirectory to delete.
fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("build")).unwrap();
    std::fs::create_dir_all(dir.path().join("dist")).unwrap();
    dir
}

fn rm(dir: &Path, sub: &str) -> String {
    format!("rm -rf {}/{sub}; echo removed-$?", dir.display())
}

#[test]
fn a_dangerous_command_waits_for_the_operator_and_approve_once_runs_the_retry() {
    let (fleet, coordinator, _worker) = start("approvals:\n  mode: ask\n");
    let dir = workspace();
    let command = rm(dir.path(), "build");

    let held = terminal(&fleet, &coordinator, "t1", &command);
    let id = pending_id(&held);
    assert_eq!(held["description"], "delete in root path");
    assert_eq!(held["pattern_key"], "delete in root path");
    assert_eq!(held["command"], command.as_str());
    assert!(
        held["error"].as_str().unwrap().contains("did NOT run"),
        "{held}"
    );
    assert!(dir.path().join("build").exists(), "nothing ran");

    // A retry before the answer is the same request.
    let again = terminal(&fleet, &coordinator, "t1", &command);
    assert_eq!(pending_id(&again), id);

    let list = listed(&fleet, &coordinator);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["id"], id.as_str());
    assert_eq!(list[0]["task_id"], "t1");
    assert_eq!(list[0]["tool"], "terminal");
    assert_eq!(list[0]["description"], "delete in root path");
    let expires = list[0]["expires_in_ms"].as_u64().unwrap();
    assert!(expires > 0 && expires <= 60_000, "{expires}");
    let table = stdout(&approvals(&fleet, &coordinator, &["list"]));
    assert!(table.contains(&id) && table.contains("task t1"), "{table}");

    let out = approvals(&fleet, &coordinator, &["approve", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("approved {id}")),
        "{}",
        stdout(&out)
    );
    assert!(listed(&fleet, &coordinator).is_empty());

    // The retry runs, for real.
    let ran = terminal(&fleet, &coordinator, "t1", &command);
    assert_eq!(ran["output"], "removed-0", "{ran}");
    assert_eq!(ran["exit_code"], 0);
    assert_eq!(
        ran["approval"],
        "Command required approval (delete in root path) and was approved by the user."
    );
    assert!(!dir.path().join("build").exists());

    // "once" was used up: the next dangerous command asks again.
    let next = terminal(&fleet, &coordinator, "t1", &rm(dir.path(), "dist"));
    assert_ne!(pending_id(&next), id);
    assert!(dir.path().join("dist").exists());

    // An answered id cannot be answered twice.
    let out = approvals(&fleet, &coordinator, &["approve", &id]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no pending approval"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn deny_tells_the_model_the_user_did_not_consent() {
    let (fleet, coordinator, _worker) = start("");
    let dir = workspace();
    let command = rm(dir.path(), "build");
    let id = pending_id(&terminal(&fleet, &coordinator, "t1", &command));

    let out = approvals(
        &fleet,
        &coordinator,
        &["deny", &id, "--reason", "keep the cache"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&format!("denied {id}")));

    let refused = terminal(&fleet, &coordinator, "t1", &command);
    assert_eq!(refused["status"], "blocked", "{refused}");
    assert_eq!(refused["exit_code"], -1);
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "BLOCKED: Command denied by user. Reason given by the user: \"keep the cache\"."
        ),
        "{error}"
    );
    assert!(error.contains(NOT_CONSENTED), "{error}");
    assert!(dir.path().join("build").exists());
}

#[test]
fn session_scope_covers_the_same_kind_of_command_and_always_writes_the_allowlist() {
    let config = "# operator notes stay\napprovals:\n  mode: ask\nterminal:\n  timeout: 60\n";
    let (fleet, coordinator, _worker) = start(config);
    let dir = workspace();

    let id = pending_id(&terminal(
        &fleet,
        &coordinator,
        "t1",
        &rm(dir.path(), "build"),
    ));
    let out = approvals(
        &fleet,
        &coordinator,
        &["approve", &id, "--scope", "session"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let ran = terminal(&fleet, &coordinator, "t1", &rm(dir.path(), "build"));
    assert_eq!(ran["output"], "removed-0", "{ran}");
    // Same approval key, other command, same task: runs without asking.
    let ran = terminal(&fleet, &coordinator, "t1", &rm(dir.path(), "dist"));
    assert_eq!(ran["output"], "removed-0", "{ran}");
    assert!(ran.get("approval").is_none(), "{ran}");
    // Another task is not covered.
    std::fs::create_dir_all(dir.path().join("build")).unwrap();
    let other = terminal(&fleet, &coordinator, "t2", &rm(dir.path(), "build"));
    let id = pending_id(&other);
    assert!(dir.path().join("build").exists());

    // "always": the key goes into command_allowlist in the loaded file.
    let out = approvals(&fleet, &coordinator, &["approve", &id, "--scope", "always"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("added to command_allowlist"),
        "{}",
        stdout(&out)
    );
    let written = std::fs::read_to_string(fleet.home.path().join("config.yaml")).unwrap();
    assert_eq!(
        written,
        format!("{config}command_allowlist:\n  - \"delete in root path\"\n")
    );
    let ran = terminal(&fleet, &coordinator, "t2", &rm(dir.path(), "build"));
    assert_eq!(ran["output"], "removed-0", "{ran}");
    assert_eq!(
        ran["approval"],
        "Command required approval (delete in root path) and was approved by the user."
    );
    // Every task now.
    std::fs::create_dir_all(dir.path().join("x")).unwrap();
    let ran = terminal(&fleet, &coordinator, "t3", &rm(dir.path(), "x"));
    assert_eq!(ran["output"], "removed-0", "{ran}");

    // A restarted coordinator reads it back.
    drop(coordinator);
    let coordinator = fleet.serve(&[]);
    let _worker2 = fleet.worker(&coordinator, "w2", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w2"], Duration::from_secs(30));
    std::fs::create_dir_all(dir.path().join("y")).unwrap();
    let ran = terminal(&fleet, &coordinator, "t4", &rm(dir.path(), "y"));
    assert_eq!(ran["output"], "removed-0", "{ran}");
}

#[test]
fn hardline_and_deny_rules_hold_with_approvals_off() {
    let config = "approvals:\n  mode: off\n  deny:\n    - \"git push*\"\n";
    let (fleet, coordinator, _worker) = start(config);
    let dir = workspace();

    let refused = terminal(&fleet, &coordinator, "t1", "rm -rf /");
    assert_eq!(refused["status"], "blocked", "{refused}");
    assert_eq!(refused["output"], "");
    assert_eq!(refused["exit_code"], -1);
    assert_eq!(
        refused["error"],
        "BLOCKED (hardline): recursive delete of root filesystem. This command is on the unconditional blocklist and cannot be executed via the agent — not even with --yolo, /yolo, approvals.mode=off, or cron approve mode. If you genuinely need to run it, run it yourself in a terminal outside the agent."
    );
    let refused = terminal(&fleet, &coordinator, "t1", "sleep 0; sudo reboot");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .starts_with("BLOCKED (hardline): system shutdown/reboot."),
        "{refused}"
    );

    let refused = terminal(&fleet, &coordinator, "t1", "git push origin main");
    assert_eq!(refused["status"], "blocked", "{refused}");
    assert_eq!(
        refused["error"],
        "BLOCKED: this command matches the user-defined deny rule 'git push*' (approvals.deny in config.yaml). It cannot be executed via the agent — not even with --yolo, /yolo, or approvals.mode=off. Do NOT retry or rephrase this command; the user has explicitly forbidden it."
    );

    // Off: a dangerous command runs without a request.
    let ran = terminal(&fleet, &coordinator, "t1", &rm(dir.path(), "build"));
    assert_eq!(ran["output"], "removed-0", "{ran}");
    assert!(listed(&fleet, &coordinator).is_empty());
}

#[test]
fn an_unanswered_approval_expires_and_the_retry_is_told_so() {
    let (fleet, coordinator, _worker) = start("approvals:\n  timeout: 2\n");
    let dir = workspace();
    let command = rm(dir.path(), "build");
    let held = terminal(&fleet, &coordinator, "t1", &command);
    let id = pending_id(&held);
    assert_eq!(held["expires_in_s"], 2);
    assert_eq!(listed(&fleet, &coordinator).len(), 1);

    std::thread::sleep(Duration::from_millis(2500));
    assert!(listed(&fleet, &coordinator).is_empty());
    let out = approvals(&fleet, &coordinator, &["approve", &id]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!("no pending approval '{id}'")),
        "{}",
        stderr(&out)
    );

    let refused = terminal(&fleet, &coordinator, "t1", &command);
    assert_eq!(refused["status"], "blocked", "{refused}");
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.starts_with("BLOCKED: Command timed out without user response."),
        "{error}"
    );
    assert!(error.ends_with("Silence is not consent."), "{error}");
    assert!(dir.path().join("build").exists());
    // After that, a new request.
    let next = pending_id(&terminal(&fleet, &coordinator, "t1", &command));
    assert_ne!(next, id);
}

#[test]
fn approvals_need_a_running_coordinator() {
    let fleet = Fleet::new();
    let out = fleet
        .command()
        .args(["approvals", "list"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("approvals are answered on a running coordinator"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_invalid_approvals_section_is_refused_at_start() {
    let fleet = Fleet::new();
    std::fs::write(
        fleet.home.path().join("config.yaml"),
        "approvals:\n  mode: yolo\n",
    )
    .unwrap();
    let out = fleet
        .command()
        .args(["guard", "check", "ls"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown approvals.mode 'yolo'"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn guard_check_prints_the_verdict() {
    let fleet = Fleet::new();
    let check = |command: &str| -> Value {
        let out = fleet
            .command()
            .args(["guard", "check", command])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        parse_result(&out.stdout)
    };
    assert_eq!(
        check("git branch -d feat"),
        json!({"verdict": "allow", "description": null})
    );
    assert_eq!(
        check("git branch -D feat"),
        json!({"verdict": "approve", "description": "git branch force delete"})
    );
    assert_eq!(
        check("rm -rf /home/user"),
        json!({"verdict": "approve", "description": "delete in root path"})
    );
    assert_eq!(
        check("rm${IFS}-rf${IFS}/"),
        json!({"verdict": "hardline", "description": "recursive delete of root filesystem"})
    );
    assert_eq!(
        check("echo done; sudo reboot"),
        json!({"verdict": "hardline", "description": "system shutdown/reboot"})
    );
}

/// A person follows the session (interactive StartSession): the gate sends the
/// request to the session's event stream and waits; the answer lets it run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_session_waits_for_the_person_and_runs_when_approved() {
    use caduceus_proto::control_client::ControlClient;
    use caduceus_proto::{AnswerApprovalRequest, StartSessionRequest, bearer};
    use tonic::metadata::MetadataValue;

    let (fleet, coordinator, _worker) = start("approvals:\n  mode: ask\n  timeout: 30\n");
    let dir = workspace();
    let target = dir.path().join("doomed");
    std::fs::create_dir_all(target.join("inner")).unwrap();
    let command = format!("rm -rf {}", target.display());
    let replay = dir.path().join("model.jsonl");
    let call = json!({"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": json!({"command": command}).to_string()}}]});
    std::fs::write(
        &replay,
        format!("{call}\n{}\n", json!({"content": "removed it"})),
    )
    .unwrap();

    let channel = tonic::transport::Endpoint::from_shared(coordinator.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let token: MetadataValue<_> = bearer(&fleet.token).parse().unwrap();
    let mut client = ControlClient::with_interceptor(channel, move |mut req: tonic::Request<()>| {
        req.metadata_mut().insert("authorization", token.clone());
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
    let mut answered = false;
    let mut finished = None;
    while let Some(event) = events.message().await.unwrap() {
        let data: Value = serde_json::from_str(&event.json).unwrap();
        match event.kind.as_str() {
            "approval_needed" => {
                assert!(target.exists(), "nothing ran before the answer");
                assert!(
                    !data["description"].as_str().unwrap_or_default().is_empty(),
                    "{data}"
                );
                assert!(data["scopes"].to_string().contains("once"), "{data}");
                let answer = client
                    .answer_approval(AnswerApprovalRequest {
                        id: data["approval_id"].as_str().unwrap().into(),
                        approve: true,
                        scope: "once".into(),
                        reason: String::new(),
                    })
                    .await
                    .unwrap()
                    .into_inner();
                assert!(answer.accepted, "{}", answer.message);
                answered = true;
            }
            "tool_finished" => finished = Some(data),
            "final" => break,
            _ => {}
        }
    }
    assert!(answered, "the person was asked");
    let finished = finished.expect("the call finished");
    assert_eq!(finished["status"], "ok", "{finished}");
    assert!(!target.exists(), "the approved command ran");
}
