//! Edit approvals end to end (`approvals.edits: ask`): `write_file` and
//! `patch` wait for a person, who sees the diff in `caduceus approvals list`
//! and answers with `caduceus approvals approve|deny`; approved edits apply,
//! denied ones change nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use caduceus_tests::{Fleet, Proc};
use serde_json::{Value, json};

fn start(config: &str) -> (Fleet, Proc, Proc) {
    let fleet = Fleet::new();
    fleet.write_config(config);
    let coordinator = fleet.serve(&[]);
    let worker = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));
    (fleet, coordinator, worker)
}

fn approvals(fleet: &Fleet, coordinator: &Proc, args: &[&str]) -> String {
    let mut all = vec!["approvals"];
    all.extend_from_slice(args);
    let out = fleet.client(coordinator, &all);
    assert!(
        out.status.success(),
        "approvals {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits for the one pending approval and returns it.
fn pending(fleet: &Fleet, coordinator: &Proc) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let list: Vec<Value> =
            serde_json::from_str(&approvals(fleet, coordinator, &["list", "--json"])).unwrap();
        if let Some(first) = list.into_iter().next() {
            return first;
        }
        assert!(Instant::now() < deadline, "no edit approval appeared");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Makes `tool` call in a thread (it waits for the answer), lets `answer`
/// decide on the pending request, and returns the call's result.
fn held_call(
    fleet: &Fleet,
    coordinator: &Proc,
    tool: &str,
    args: &Value,
    answer: impl for<'r> FnOnce(&'r Value) -> Vec<&'r str>,
) -> (Value, Value) {
    let url = coordinator.url();
    std::thread::scope(|scope| {
        let call = scope.spawn(|| fleet.call_at(&url, tool, args, "edits"));
        let request = pending(fleet, coordinator);
        assert!(!call.is_finished(), "the edit did not wait");
        let id = request["id"].as_str().unwrap();
        let mut words = answer(&request);
        words.insert(1, id);
        let said = approvals(fleet, coordinator, &words);
        assert!(said.contains(request["id"].as_str().unwrap()), "{said}");
        (call.join().unwrap(), request)
    })
}

#[test]
fn a_patch_waits_shows_its_diff_is_approved_from_the_cli_and_applies() {
    let (fleet, coordinator, _worker) = start("approvals:\n  edits: ask\n  timeout: 60\n");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("main.rs");
    std::fs::write(&file, "fn main() {\n    println!(\"old\");\n}\n").unwrap();
    let (result, request) = held_call(
        &fleet,
        &coordinator,
        "patch",
        &json!({"path": file, "old_string": "\"old\"", "new_string": "\"new\""}),
        |request| {
            let diff = request["diff"].as_str().unwrap();
            assert!(
                diff.contains("-    println!(\"old\");\n+    println!(\"new\");"),
                "{diff}"
            );
            assert_eq!(request["tool"], "patch");
            assert_eq!(request["waiting"], true);
            // Nothing is written while the person looks at it.
            assert!(
                std::fs::read_to_string(&file).unwrap().contains("old"),
                "the file changed before the answer"
            );
            vec!["approve"]
        },
    );
    assert_eq!(request["description"], "file edit");
    assert_eq!(result["success"], true, "{result}");
    assert!(
        result["approval"]
            .as_str()
            .unwrap()
            .contains("approved by the user"),
        "{result}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "fn main() {\n    println!(\"new\");\n}\n"
    );
    // The table shows it too, before the answer; afterwards nothing is pending.
    assert!(approvals(&fleet, &coordinator, &["list"]).contains("no pending approvals"));
}

#[test]
fn a_denied_edit_changes_nothing() {
    let (fleet, coordinator, _worker) = start("approvals:\n  edits: ask\n");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "keep me\n").unwrap();
    let (result, _) = held_call(
        &fleet,
        &coordinator,
        "patch",
        &json!({"path": file, "old_string": "keep", "new_string": "lose"}),
        |_| vec!["deny", "--reason", "not today"],
    );
    assert_eq!(
        result,
        json!({"error": "Edit approval denied by the user; the file was not modified. Reason given by the user: \"not today\"."})
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me\n");

    let created = dir.path().join("new/child.txt");
    let (result, request) = held_call(
        &fleet,
        &coordinator,
        "write_file",
        &json!({"path": created, "content": "hello\n"}),
        |_| vec!["deny"],
    );
    assert!(
        request["diff"]
            .as_str()
            .unwrap()
            .starts_with("--- /dev/null"),
        "{request}"
    );
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .starts_with("Edit approval denied"),
        "{result}"
    );
    assert!(!created.exists() && !dir.path().join("new").exists());
}

#[test]
fn an_edit_the_tool_would_refuse_is_refused_without_asking() {
    let (fleet, coordinator, _worker) = start("approvals:\n  edits: ask\n");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.txt");
    std::fs::write(&file, "alpha\n").unwrap();
    let result = fleet.call(
        &coordinator,
        "patch",
        &json!({"path": file, "old_string": "omega", "new_string": "x"}),
        "edits",
    );
    assert!(
        result["error"].as_str().unwrap().contains("Could not find"),
        "{result}"
    );
    assert!(approvals(&fleet, &coordinator, &["list"]).contains("no pending approvals"));
}

#[test]
fn without_edit_approvals_edits_apply_at_once() {
    let (fleet, coordinator, _worker) = start("approvals:\n  mode: ask\n");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("b.txt");
    let result = fleet.call(
        &coordinator,
        "write_file",
        &json!({"path": file, "content": "now\n"}),
        "edits",
    );
    assert!(result.get("error").is_none(), "{result}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "now\n");
}

#[test]
fn a_coordinator_killed_while_an_edit_waits_leaves_the_file_alone() {
    let (fleet, mut coordinator, _worker) = start("approvals:\n  edits: ask\n");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.txt");
    std::fs::write(&file, "before\n").unwrap();
    let url = coordinator.url();
    let args = json!({"path": file, "content": "after\n"});
    let result = std::thread::scope(|scope| {
        let call = scope.spawn(|| fleet.call_at(&url, "write_file", &args, "edits"));
        pending(&fleet, &coordinator);
        coordinator.kill();
        call.join().unwrap()
    });
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("connection to the coordinator"),
        "{result}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "before\n");
}

/// The person approves the diff they were shown. When the file changes while
/// they look (another process, the model's own terminal), the same call
/// would apply another diff: it is refused and writes nothing.
#[test]
fn an_edit_whose_file_changed_while_it_waited_is_refused_and_writes_nothing() {
    let (fleet, coordinator, _worker) = start("approvals:\n  edits: ask\n  timeout: 60\n");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.txt");
    std::fs::write(&file, "mode = old\nsafe = yes\n").unwrap();
    let (result, request) = held_call(
        &fleet,
        &coordinator,
        "patch",
        &json!({"path": file, "old_string": "mode = old", "new_string": "mode = new"}),
        |_| {
            std::fs::write(&file, "mode = old\nsafe = no\n").unwrap();
            vec!["approve"]
        },
    );
    assert!(
        request["diff"].as_str().unwrap().contains(" safe = yes"),
        "{request}"
    );
    assert_eq!(
        result,
        json!({"error": "The file changed while the edit waited for approval, so the approved diff no longer applies; nothing was written. Read the file again and retry."})
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "mode = old\nsafe = no\n"
    );
}
