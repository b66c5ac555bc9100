//! Operations on a running fleet with real processes (issue 11, item 2):
//! `caduceus workers list | cordon | uncordon | drain`, and `--json` on
//! every client command.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use caduceus_tests::{Fleet, Proc, leftovers};
use serde_json::{Value, json};

/// Runs a client command with `--json` and parses its stdout; it must succeed.
fn json_of(fleet: &Fleet, c: &Proc, args: &[&str]) -> Value {
    let out = fleet.client(c, args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "{args:?} printed no JSON ({err}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn state_of(fleet: &Fleet, c: &Proc, name: &str) -> String {
    let list = json_of(fleet, c, &["workers", "list", "--json"]);
    list.as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == name)
        .map(|w| w["state"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("{name} not listed: {list}"))
}

/// The worker a new task's terminal call ran on.
fn worker_of_new_task(fleet: &Fleet, c: &Proc, task: &str) -> String {
    let done = json_of(
        fleet,
        c,
        &[
            "call",
            "terminal",
            r#"{"command": "echo ok"}"#,
            "--task",
            task,
            "--json",
        ],
    );
    assert_eq!(done["result"]["output"], "ok", "{done}");
    done["worker"].as_str().unwrap().to_owned()
}

#[test]
fn cordon_stops_new_environments_and_uncordon_lets_them_in_again() {
    let fleet = Fleet::new();
    fleet.write_config("placement:\n  wait_seconds: 0\n");
    let c = fleet.serve(&[]);
    let _w1 = fleet.worker(&c, "w1", &fleet.token, &[]);
    let _w2 = fleet.worker(&c, "w2", &fleet.token, &[]);
    fleet.wait_for_workers(&c, &["w1", "w2"], Duration::from_secs(30));
    // A task on w1 before it is cordoned.
    let kept = loop {
        let task = format!("kept-{}", uuid_like());
        if worker_of_new_task(&fleet, &c, &task) == "w1" {
            break task;
        }
    };
    let cordoned = json_of(&fleet, &c, &["workers", "cordon", "w1", "--json"]);
    assert_eq!(cordoned["state"], "cordoned", "{cordoned}");
    assert_eq!(state_of(&fleet, &c, "w1"), "cordoned");
    for t in 0..4 {
        assert_eq!(worker_of_new_task(&fleet, &c, &format!("new-{t}")), "w2");
    }
    // Its own task carries on there.
    let again = json_of(
        &fleet,
        &c,
        &[
            "call",
            "terminal",
            r#"{"command": "echo still"}"#,
            "--task",
            &kept,
            "--json",
        ],
    );
    assert_eq!(
        (&again["worker"], &again["result"]["output"]),
        (&json!("w1"), &json!("still")),
        "{again}"
    );
    // Both cordoned: a new task is told, at once with wait_seconds 0.
    json_of(&fleet, &c, &["workers", "cordon", "w2", "--json"]);
    let refused = json_of(
        &fleet,
        &c,
        &[
            "call",
            "terminal",
            r#"{"command": "echo x"}"#,
            "--task",
            "nowhere",
            "--json",
        ],
    );
    assert_eq!(
        refused["result"]["error"],
        "no attached worker offers backend 'local' and free capacity; 2 workers offer the backend but are cordoned or draining",
        "{refused}"
    );
    let uncordoned = json_of(&fleet, &c, &["workers", "uncordon", "w1", "--json"]);
    assert_eq!(uncordoned["state"], "ready", "{uncordoned}");
    assert_eq!(worker_of_new_task(&fleet, &c, "back"), "w1");
    // An unknown name is an error, in the --json shape too.
    let out = fleet.client(&c, &["workers", "cordon", "nobody", "--json"]);
    assert!(!out.status.success());
    let error: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        error,
        json!({"error": "no attached worker is named 'nobody'"})
    );
}

fn uuid_like() -> String {
    format!(
        "{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    )
}

fn wait_for_file(path: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn drain_lets_the_running_call_finish_then_the_worker_exits_0_leaving_nothing() {
    let fleet = Fleet::new();
    let tmp: PathBuf = fleet.home.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let c = fleet.serve(&[]);
    let mut w1 = fleet.worker_with_env(&c, "w1", &[], &[("TMPDIR", tmp.to_str().unwrap())]);
    let _w2 = fleet.worker(&c, "w2", &fleet.token, &[]);
    fleet.wait_for_workers(&c, &["w1", "w2"], Duration::from_secs(30));
    // A second environment on w1 that is idle when the drain comes.
    let idle = loop {
        let task = format!("idle-{}", uuid_like());
        if worker_of_new_task(&fleet, &c, &task) == "w1" {
            break task;
        }
    };
    assert!(
        !leftovers(&tmp).is_empty(),
        "w1's environments live in {tmp:?}"
    );
    let started = fleet.home.path().join("started");
    let command = format!("touch {}; sleep 2; echo finished", started.display());
    let url = c.url();
    let (result, drained) = std::thread::scope(|scope| {
        let running = scope.spawn(|| {
            fleet.call_at(
                &url,
                "terminal",
                &json!({"command": command, "timeout": 120}),
                &idle,
            )
        });
        wait_for_file(&started, Duration::from_secs(30));
        let drained = json_of(&fleet, &c, &["workers", "drain", "w1", "--json"]);
        (running.join().unwrap(), drained)
    });
    assert_eq!(drained["state"], "draining", "{drained}");
    assert_eq!(result["output"], "finished", "{result}");
    assert_eq!(result["exit_code"], 0, "{result}");
    let status = w1
        .wait_exit(Duration::from_secs(30))
        .expect("the drained worker exits");
    assert!(status.success(), "exit status {status:?}");
    fleet.wait_for_workers(&c, &["w2"], Duration::from_secs(10));
    assert_eq!(leftovers(&tmp), Vec::<String>::new());
    // The drained worker's task carries on elsewhere, and the model is told
    // its environment is new.
    let moved = fleet.call(&c, "terminal", &json!({"command": "echo moved"}), &idle);
    assert_eq!(moved["output"], "moved", "{moved}");
    assert!(
        moved["environment_reset"]
            .as_str()
            .is_some_and(|n| n.contains("'w1'")),
        "{moved}"
    );
}

#[test]
fn drain_wait_returns_once_the_worker_has_left() {
    let fleet = Fleet::new();
    let c = fleet.serve(&[]);
    let mut w = fleet.worker(&c, "w", &fleet.token, &[]);
    fleet.wait_for_workers(&c, &["w"], Duration::from_secs(30));
    let drained = json_of(
        &fleet,
        &c,
        &["workers", "drain", "w", "--wait", "30", "--json"],
    );
    assert_eq!(drained["left"], true, "{drained}");
    assert_eq!(fleet.worker_names(&c), Vec::<String>::new());
    let status = w.wait_exit(Duration::from_secs(30)).expect("it exits");
    assert!(status.success(), "exit status {status:?}");
}

#[test]
fn every_client_command_prints_json_with_json() {
    let fleet = Fleet::new();
    let c = fleet.serve(&[]);
    let _w = fleet.worker(&c, "w", &fleet.token, &[]);
    fleet.wait_for_workers(&c, &["w"], Duration::from_secs(30));
    let call = json_of(
        &fleet,
        &c,
        &["call", "terminal", r#"{"command": "echo hi"}"#, "--json"],
    );
    assert_eq!(
        (&call["result"]["output"], &call["worker"], &call["status"]),
        (&json!("hi"), &json!("w"), &json!("ok")),
        "{call}"
    );
    assert!(json_of(&fleet, &c, &["status", "--json"])["workers"].is_array());
    assert!(json_of(&fleet, &c, &["tools", "--json"]).is_array());
    let workers = json_of(&fleet, &c, &["workers", "list", "--json"]);
    assert_eq!(workers[0]["name"], "w", "{workers}");
    assert!(
        workers[0]["max_environments"].as_u64().unwrap() > 0,
        "{workers}"
    );
    assert!(json_of(&fleet, &c, &["approvals", "list", "--json"]).is_array());
    assert!(json_of(&fleet, &c, &["tokens", "list", "--json"]).is_array());
    let created = json_of(
        &fleet,
        &c,
        &[
            "tokens", "create", "--role", "client", "--name", "ci", "--json",
        ],
    );
    assert!(
        created["secret"].as_str().is_some_and(|s| !s.is_empty()),
        "{created}"
    );
    let revoked = json_of(&fleet, &c, &["tokens", "revoke", "ci", "--json"]);
    assert_eq!(revoked["revoked"][0]["name"], "ci", "{revoked}");
    let denied = fleet.client(&c, &["approvals", "deny", "appr_000000000000", "--json"]);
    assert!(!denied.status.success());
    let error: Value = serde_json::from_slice(&denied.stdout).unwrap();
    assert!(error["error"].is_string(), "{error}");
    assert!(json_of(&fleet, &c, &["sessions", "list", "--json"]).is_array());
    assert!(json_of(&fleet, &c, &["guard", "check", "rm -rf /", "--json"]).is_object());
    // The audit log of this host's coordinator, one JSON line per event.
    let audit = fleet.client(&c, &["audit", "tail", "--json"]);
    assert!(audit.status.success());
    for line in String::from_utf8_lossy(&audit.stdout).lines() {
        serde_json::from_str::<Value>(line).unwrap();
    }
}
