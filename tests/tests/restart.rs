//! Durable sessions across a coordinator restart (issue 9): the coordinator
//! is killed with SIGKILL while a session is mid-turn — its delegated child
//! runs a `sleep` on a worker — and started again on the same address and
//! home. The session resumes on its own once the worker is back, the child
//! is told (once) that the interrupted call's outcome is unknown and reports
//! to its parent, and `run --resume` shows the whole stream.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_pass_by_value
)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use caduceus_coordinator::agent::store;
use caduceus_tests::{Fleet, Proc, json_lines};
use serde_json::{Value, json};

const UNKNOWN: &str = "{\"error\": \"The coordinator restarted while this call was running; its outcome is unknown. Check before repeating it.\"}";

fn tool_call(id: &str, name: &str, args: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
}

/// The parent delegates one slow step; the child sleeps, then (after the
/// restart) must see the unknown outcome; the parent must see the child complete.
fn replay_file(fleet: &Fleet) -> String {
    let turns = [
        json!({"content": "Handing the slow step to a subagent.", "tool_calls": [tool_call("p1", "delegate_task", json!({"tasks": [{"goal": "Run the slow step"}]}))]}),
        json!({"content": "The subagent reported back.", "expect_contains": "\"status\": \"completed\""}),
        json!({"match": "slow step", "content": "Sleeping.", "tool_calls": [tool_call("s1", "terminal", json!({"command": "sleep 30 && echo slept"}))]}),
        json!({"match": "slow step", "content": "The sleep may or may not have finished; its outcome is unknown.", "expect_contains": "its outcome is unknown"}),
    ];
    let path = fleet.home.path().join("restart.jsonl");
    std::fs::write(
        &path,
        turns.iter().map(|t| format!("{t}\n")).collect::<String>(),
    )
    .unwrap();
    format!("replay:{}", path.display())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `caduceus serve` on a fixed address (a restart must come back on it).
fn serve_on(fleet: &Fleet, address: &str) -> Proc {
    let mut cmd = fleet.command();
    cmd.args([
        "serve",
        "--listen",
        address,
        "--token",
        &fleet.token,
        "--heartbeat-ms",
        "500",
    ]);
    let mut proc = Proc::spawn(cmd, "coordinator");
    proc.wait_for_stderr(
        "caduceus coordinator listening on ",
        Duration::from_secs(30),
    );
    proc.address = Some(address.to_owned());
    proc
}

/// `caduceus run --json …` against `url`, its events read as they come.
struct Client {
    child: Child,
    lines: mpsc::Receiver<Value>,
    seen: Vec<Value>,
}

impl Client {
    fn start(fleet: &Fleet, url: &str, args: &[&str]) -> Client {
        let mut cmd = fleet.command();
        cmd.arg("run")
            .arg("--json")
            .args(args)
            .env("CADUCEUS_COORDINATOR", url)
            .env("CADUCEUS_TOKEN", &fleet.token)
            .env("CADUCEUS_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(value) = serde_json::from_str::<Value>(&line)
                    && tx.send(value).is_err()
                {
                    break;
                }
            }
        });
        Client {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    fn until(&mut self, what: &str, want: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {what}; events so far: {:#?}", self.seen));
            self.seen.push(event.clone());
            if want(&event) {
                return event;
            }
        }
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_session_killed_mid_turn_with_a_child_resumes_after_the_coordinator_restarts() {
    let fleet = Fleet::new();
    let model = replay_file(&fleet);
    let db = fleet.home.path().join("state.db");
    let address = format!("127.0.0.1:{}", free_port());
    let mut coordinator = serve_on(&fleet, &address);
    let _worker = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));

    let mut first = Client::start(
        &fleet,
        &coordinator.url(),
        &["--model", &model, "Delegate the long-running work"],
    );
    let root = first.until("the root's start", |e| e["kind"] == "session_started")["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let started = first.until("the child's sleep", |e| {
        e["kind"] == "tool_started" && e["data"]["tool"] == "terminal"
    });
    let child = started["session_id"].as_str().unwrap().to_owned();
    assert_ne!(child, root);
    // The call is on disk as pending before it leaves, and then runs.
    wait_until(
        "the sleep recorded as pending",
        Duration::from_secs(10),
        || {
            store::read_calls(&db, &child)
                .unwrap()
                .iter()
                .any(|c| c.call_id == "s1" && c.state == "pending")
        },
    );
    wait_until("the sleep running on w1", Duration::from_secs(10), || {
        fleet.status(&coordinator)["workers"][0]["running_calls"] == 1
    });

    coordinator.kill();
    // The first client loses its stream; it is not needed any more.
    drop(first);
    let coordinator = serve_on(&fleet, &address);

    let resumed = fleet
        .command()
        .args(["run", "--json", "--resume", &root])
        .env("CADUCEUS_COORDINATOR", coordinator.url())
        .env("CADUCEUS_TOKEN", &fleet.token)
        .env("CADUCEUS_LOG", "error")
        .output()
        .unwrap();
    let events = json_lines(&resumed.stdout);
    assert!(
        resumed.status.success(),
        "run --resume failed: {}\n{events:#?}",
        String::from_utf8_lossy(&resumed.stderr)
    );

    // The whole stream, numbered without gaps across the restart.
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    let kinds = |session: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["session_id"] == session)
            .map(|e| e["kind"].as_str().unwrap().to_owned())
            .collect()
    };
    let root_kinds = kinds(&root);
    assert_eq!(
        root_kinds.first().map(String::as_str),
        Some("session_started")
    );
    assert!(
        root_kinds.contains(&"session_resumed".to_owned()),
        "{root_kinds:?}"
    );
    assert_eq!(root_kinds.last().map(String::as_str), Some("final"));
    let child_kinds = kinds(&child);
    assert!(
        child_kinds.contains(&"session_resumed".to_owned()),
        "{child_kinds:?}"
    );
    let resumed_child = events
        .iter()
        .find(|e| e["session_id"] == child && e["kind"] == "session_resumed")
        .unwrap();
    assert_eq!(resumed_child["data"]["unknown_calls"], json!(["s1"]));
    let finished = events
        .iter()
        .find(|e| {
            e["session_id"] == child && e["kind"] == "tool_finished" && e["data"]["call_id"] == "s1"
        })
        .unwrap_or_else(|| panic!("no tool_finished for the sleep: {events:#?}"));
    assert!(
        finished["data"]["preview"]
            .as_str()
            .unwrap()
            .contains("its outcome is unknown"),
        "{finished}"
    );
    let child_finished = events
        .iter()
        .find(|e| e["kind"] == "child_finished")
        .unwrap();
    assert_eq!(child_finished["data"]["status"], "completed");
    let last = events.last().unwrap();
    assert_eq!(
        (last["session_id"].as_str(), last["kind"].as_str()),
        (Some(root.as_str()), Some("final"))
    );
    assert_eq!(last["data"]["status"], "completed");
    assert_eq!(last["data"]["text"], "The subagent reported back.");

    // The model read the unknown outcome exactly once, and the sleep never
    // ran again: one record of it, one answer.
    let transcript = store::read_transcript(&db, &child).unwrap();
    let answers: Vec<&str> = transcript
        .iter()
        .filter(|m| m.tool_call_id.as_deref() == Some("s1"))
        .map(|m| m.content.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(answers, [UNKNOWN]);
    let sleeps = store::read_calls(&db, &child)
        .unwrap()
        .into_iter()
        .filter(|c| c.tool == "terminal")
        .count();
    assert_eq!(sleeps, 1);
    let sessions = store::read_sessions(&db).unwrap();
    assert!(
        sessions.iter().all(|s| s.state == "completed"),
        "{sessions:#?}"
    );

    // A finished session replays its stream, and `sessions` shows it.
    let again = fleet
        .command()
        .args(["run", "--json", "--resume", &child, "--after", "2"])
        .env("CADUCEUS_COORDINATOR", coordinator.url())
        .env("CADUCEUS_TOKEN", &fleet.token)
        .output()
        .unwrap();
    assert!(again.status.success());
    let tail = json_lines(&again.stdout);
    assert_eq!(tail.first().unwrap()["seq"], 3);
    assert_eq!(tail.len(), events.len() - 2);
    let list = fleet.command().args(["sessions", "list"]).output().unwrap();
    let listed = String::from_utf8_lossy(&list.stdout);
    assert!(
        listed.contains(&root) && listed.contains(&child),
        "{listed}"
    );
    let show = fleet
        .command()
        .args(["sessions", "show", &child, "--json"])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&show.stdout).unwrap();
    assert_eq!(shown["session"]["parent_id"], root.as_str());
    assert_eq!(shown["calls"][0]["state"], "done");
    assert_eq!(shown["calls"][0]["result"], UNKNOWN);
}

#[test]
fn an_embedded_run_killed_mid_call_is_resumed_by_run_resume() {
    let fleet = Fleet::new();
    let work = tempfile::tempdir().unwrap();
    let turns = [
        json!({"content": "Waiting.", "tool_calls": [tool_call("w1", "terminal", json!({"command": "sleep 20"}))]}),
        json!({"content": "I cannot tell whether the wait finished.", "expect_contains": "its outcome is unknown"}),
    ];
    let script = work.path().join("embedded.jsonl");
    std::fs::write(
        &script,
        turns.iter().map(|t| format!("{t}\n")).collect::<String>(),
    )
    .unwrap();
    let model = format!("replay:{}", script.display());
    let db = fleet.home.path().join("state.db");

    let mut cmd = fleet.command();
    cmd.current_dir(work.path())
        .args(["run", "--json", "--model", &model, "Wait for a while"])
        .env("CADUCEUS_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut run = cmd.spawn().unwrap();
    let mut root = String::new();
    wait_until(
        "the call recorded as pending",
        Duration::from_secs(60),
        || {
            let Ok(sessions) = store::read_sessions(&db) else {
                return false;
            };
            let Some(session) = sessions.first() else {
                return false;
            };
            root = session.id.clone();
            store::read_calls(&db, &root)
                .unwrap()
                .iter()
                .any(|c| c.state == "pending")
        },
    );
    run.kill().unwrap();
    run.wait().unwrap();
    assert_eq!(
        store::read_state(&db, &root).unwrap().as_deref(),
        Some("running")
    );

    // An embedded run's sessions are not resumed behind anyone's back; asked
    // for, the session resumes in the asking process and finishes.
    let resumed = fleet
        .command()
        .current_dir(work.path())
        .args(["run", "--json", "--resume", &root])
        .env("CADUCEUS_LOG", "error")
        .output()
        .unwrap();
    let events = json_lines(&resumed.stdout);
    assert!(
        resumed.status.success(),
        "{}\n{events:#?}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let last = events.last().unwrap();
    assert_eq!(last["kind"], "final");
    assert_eq!(
        last["data"]["text"],
        "I cannot tell whether the wait finished."
    );
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "session_resumed" && e["data"]["unknown_calls"] == json!(["w1"]))
    );
    assert_eq!(
        store::read_state(&db, &root).unwrap().as_deref(),
        Some("completed")
    );
}

/// A background delegation across a SIGKILL of the coordinator: the parent
/// had answered and was waiting for its background child, which was in a
/// `sleep` on the worker. After the restart the parent takes the delegation
/// back, the child resumes (told its call's outcome is unknown) and its
/// results start the parent's next turn — nothing is lost silently.
#[test]
fn a_background_child_killed_with_the_coordinator_resumes_and_reports_to_its_parent() {
    let fleet = Fleet::new();
    let turns = [
        json!({"content": "Handing the slow step to a background subagent.", "tool_calls": [tool_call("p1", "delegate_task", json!({"goal": "Run the slow step", "background": true}))]}),
        json!({"content": "Waiting for the subagent."}),
        json!({"content": "The background subagent reported back.", "expect_contains": "[Background delegation "}),
        json!({"match": "slow step", "content": "Sleeping.", "tool_calls": [tool_call("s1", "terminal", json!({"command": "sleep 30 && echo slept"}))]}),
        json!({"match": "slow step", "content": "The sleep's outcome is unknown.", "expect_contains": "its outcome is unknown"}),
    ];
    let path = fleet.home.path().join("background.jsonl");
    std::fs::write(
        &path,
        turns.iter().map(|t| format!("{t}\n")).collect::<String>(),
    )
    .unwrap();
    let model = format!("replay:{}", path.display());
    let db = fleet.home.path().join("state.db");
    let address = format!("127.0.0.1:{}", free_port());
    let mut coordinator = serve_on(&fleet, &address);
    let _worker = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));

    let mut first = Client::start(
        &fleet,
        &coordinator.url(),
        &["--model", &model, "Delegate the long-running work"],
    );
    let root = first.until("the root's start", |e| e["kind"] == "session_started")["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let started = first.until("the child's sleep", |e| {
        e["kind"] == "tool_started" && e["data"]["tool"] == "terminal"
    });
    let child = started["session_id"].as_str().unwrap().to_owned();
    wait_until("the sleep running on w1", Duration::from_secs(10), || {
        fleet.status(&coordinator)["workers"][0]["running_calls"] == 1
    });
    // The parent has answered and waits for its child (recorded on disk).
    wait_until(
        "the parent's answer recorded",
        Duration::from_secs(10),
        || {
            store::read_transcript(&db, &root)
                .unwrap()
                .last()
                .is_some_and(|m| {
                    m.role == "assistant"
                        && m.content.as_deref() == Some("Waiting for the subagent.")
                })
        },
    );

    coordinator.kill();
    drop(first);
    let coordinator = serve_on(&fleet, &address);
    let resumed = fleet
        .command()
        .args(["run", "--json", "--resume", &root])
        .env("CADUCEUS_COORDINATOR", coordinator.url())
        .env("CADUCEUS_TOKEN", &fleet.token)
        .env("CADUCEUS_LOG", "error")
        .output()
        .unwrap();
    let events = json_lines(&resumed.stdout);
    assert!(
        resumed.status.success(),
        "run --resume failed: {}\n{events:#?}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let find = |session: &str, kind: &str| {
        events
            .iter()
            .find(|e| e["session_id"] == session && e["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} of {session}: {events:#?}"))
    };
    let taken = find(&root, "delegation_resumed");
    assert_eq!(taken["data"]["subagent_ids"], json!([child]));
    assert_eq!(taken["data"]["resumed"], 1);
    assert_eq!(
        find(&child, "session_resumed")["data"]["unknown_calls"],
        json!(["s1"])
    );
    assert_eq!(find(&root, "child_finished")["data"]["status"], "completed");
    assert_eq!(
        find(&root, "delegation_finished")["data"]["statuses"],
        json!(["completed"])
    );
    let last = events.last().unwrap();
    assert_eq!(
        (last["session_id"].as_str(), last["kind"].as_str()),
        (Some(root.as_str()), Some("final"))
    );
    assert_eq!(last["data"]["status"], "completed");
    assert_eq!(
        last["data"]["text"],
        "The background subagent reported back."
    );
    // The sleep never ran again, and no session is left `running`.
    let sleeps = store::read_calls(&db, &child)
        .unwrap()
        .into_iter()
        .filter(|c| c.tool == "terminal")
        .count();
    assert_eq!(sleeps, 1);
    let sessions = store::read_sessions(&db).unwrap();
    assert!(
        sessions.iter().all(|s| s.state == "completed"),
        "{sessions:#?}"
    );
}
