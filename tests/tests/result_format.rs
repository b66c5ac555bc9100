//! Every built-in tool's results read the same on every path: an embedded
//! `caduceus call` (coordinator and worker in one process), a coordinator
//! with a worker process, and the first call after the task's environment
//! was lost with its worker (the reset notice). "The same" is hermes'
//! `json.dumps(…, ensure_ascii=False)`: `", "` and `": "`, non-ASCII as is,
//! keys in hermes' order.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use caduceus_common::result::to_json;
use caduceus_tests::{Fleet, Proc};
use serde_json::{Value, json};

/// What `caduceus call` prints: the text the model reads. `url` = None runs
/// the embedded fleet.
fn raw_call(fleet: &Fleet, url: Option<&str>, tool: &str, args: &str, task: &str) -> String {
    let mut cmd = fleet.command();
    cmd.args(["call", tool, args, "--task", task]);
    if let Some(url) = url {
        cmd.env("CADUCEUS_COORDINATOR", url)
            .env("CADUCEUS_TOKEN", &fleet.token);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "call {tool} {args} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .trim_end_matches('\n')
        .to_owned()
}

/// The JSON document of a result (search_files may put a hint after it).
fn document(text: &str) -> &str {
    text.split("\n\n[Hint:").next().unwrap()
}

/// Asserts the text is its own document re-written in hermes' spelling.
fn assert_hermes_spelling(label: &str, text: &str) -> Value {
    let doc = document(text);
    let value: Value =
        serde_json::from_str(doc).unwrap_or_else(|e| panic!("{label}: not JSON ({e}): {text}"));
    assert_eq!(doc, to_json(&value), "{label}: not hermes' spelling");
    value
}

/// The calls every path makes, in order: (label, tool, arguments).
fn script(dir: &str) -> Vec<(&'static str, &'static str, String)> {
    let file = format!("{dir}/notes.py");
    vec![
        (
            "terminal",
            "terminal",
            json!({"command": "echo 'héllo, wörld: 1'"}).to_string(),
        ),
        (
            "terminal exit code",
            "terminal",
            json!({"command": "grep -q nothing /dev/null"}).to_string(),
        ),
        (
            "terminal refusal",
            "terminal",
            json!({"command": 42}).to_string(),
        ),
        (
            "terminal type error",
            "terminal",
            json!({"command": "true", "timeout": "abc"}).to_string(),
        ),
        (
            "terminal blocked workdir",
            "terminal",
            json!({"command": "true", "workdir": "/tmp;x"}).to_string(),
        ),
        (
            "process unknown id",
            "process",
            json!({"action": "poll", "session_id": "proc_nope"}).to_string(),
        ),
        (
            "write_file",
            "write_file",
            json!({"path": file, "content": "x = 'é'\nprint(x)\n"}).to_string(),
        ),
        ("read_file", "read_file", json!({"path": file}).to_string()),
        (
            "patch",
            "patch",
            json!({"path": file, "old_string": "print(x)", "new_string": "print(x, x)"})
                .to_string(),
        ),
        (
            "patch not found",
            "patch",
            json!({"path": file, "old_string": "absent", "new_string": "y"}).to_string(),
        ),
        (
            "search_files",
            "search_files",
            json!({"pattern": "print", "path": dir}).to_string(),
        ),
        (
            "read_file missing",
            "read_file",
            json!({"path": format!("{dir}/nope.txt")}).to_string(),
        ),
        ("agent-loop tool", "todo", json!({"todos": []}).to_string()),
        ("invalid arguments", "terminal", "{not json".to_owned()),
        ("unknown tool", "launch_rocket", json!({}).to_string()),
    ]
}

/// Runs the script and checks each result's spelling; returns the texts.
fn run_script(fleet: &Fleet, url: Option<&str>, dir: &str, task: &str) -> Vec<String> {
    script(dir)
        .into_iter()
        .map(|(label, tool, args)| {
            let text = raw_call(fleet, url, tool, &args, task);
            assert_hermes_spelling(label, &text);
            text
        })
        .collect()
}

/// A result without a reset notice (a loaded machine can make a worker look
/// lost; the reset path is checked on its own below).
fn without_reset(text: &str) -> String {
    let mut value: Value = serde_json::from_str(document(text)).unwrap();
    if let Some(map) = value.as_object_mut() {
        map.remove("environment_reset");
    }
    to_json(&value)
}

#[test]
fn every_path_writes_hermes_spelling_and_the_same_bytes() {
    let fleet = Fleet::new();
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().display().to_string();

    let embedded = run_script(&fleet, None, &dir, "format");

    std::fs::remove_file(work.path().join("notes.py")).unwrap();
    let coordinator = fleet.serve(&[]);
    let _worker = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));
    let url = coordinator.url();
    let remote = run_script(&fleet, Some(&url), &dir, "format");

    for ((label, _, _), (a, b)) in script(&dir).iter().zip(embedded.iter().zip(&remote)) {
        assert_eq!(
            without_reset(a),
            without_reset(b),
            "{label}: embedded and coordinator+worker differ"
        );
    }
    // Spot checks of hermes' bytes.
    assert_eq!(
        remote[0],
        r#"{"output": "héllo, wörld: 1", "exit_code": 0, "error": null}"#
    );
    assert_eq!(
        remote[3],
        r#"{"error": "[TOOL_ERROR] Tool execution failed: TypeError: '>' not supported between instances of 'str' and 'int'"}"#
    );
    assert_eq!(
        remote[13],
        r#"{"error": "Invalid tool arguments", "message": "Tool arguments must be a valid JSON object; tool was not executed."}"#
    );
}

#[test]
fn the_reset_notice_is_a_field_in_hermes_spelling() {
    let fleet = Fleet::new();
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().display().to_string();
    std::fs::write(work.path().join("kept.txt"), "kept\n").unwrap();
    let coordinator = fleet.serve(&[]);
    let mut first: Proc = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));
    let url = coordinator.url();
    let tasks = [
        "reset-terminal",
        "reset-read",
        "reset-search",
        "reset-process",
    ];
    for task in tasks {
        raw_call(
            &fleet,
            Some(&url),
            "terminal",
            r#"{"command": "true"}"#,
            task,
        );
    }
    first.kill();
    let _second = fleet.worker(&coordinator, "w2", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w2"], Duration::from_secs(30));

    let calls = [
        ("terminal", json!({"command": "echo après"})),
        ("read_file", json!({"path": format!("{dir}/kept.txt")})),
        ("search_files", json!({"pattern": "kept", "path": dir})),
        ("process", json!({"action": "list"})),
    ];
    for (task, (tool, args)) in tasks.iter().zip(calls) {
        let text = raw_call(&fleet, Some(&url), tool, &args.to_string(), task);
        let value = assert_hermes_spelling(tool, &text);
        let notice = value["environment_reset"]
            .as_str()
            .unwrap_or_else(|| panic!("{tool}: no environment_reset in {text}"));
        assert!(notice.contains("worker 'w1' went away"), "{notice}");
        // The notice is the last field, after the tool's own document.
        let again = raw_call(&fleet, Some(&url), tool, &args.to_string(), task);
        assert_hermes_spelling(tool, &again);
        if tool != "read_file" {
            // (a second read of an unchanged file is hermes' dedup stub)
            assert_eq!(without_reset(&text), without_reset(&again), "{tool}");
        }
    }
}
