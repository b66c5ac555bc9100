//! `caduceus run` on the embedded default (a coordinator and two local
//! workers in the process) against recorded model turns (`replay:FILE`):
//! progress on stderr, the answer on stdout, `--json` events, the session
//! database, and the README demo.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_pass_by_value
)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use caduceus_tests::{Fleet, call_workers, calls_overlapped, json_lines, subagent_calls};
use serde_json::{Value, json};

fn tool_call(id: &str, name: &str, args: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
}

/// A replay file of recorded model turns, one a line; its `--model` value.
fn replay(dir: &Path, name: &str, turns: &[Value]) -> String {
    let path: PathBuf = dir.join(name);
    std::fs::write(
        &path,
        turns.iter().map(|t| format!("{t}\n")).collect::<String>(),
    )
    .unwrap();
    format!("replay:{}", path.display())
}

/// A replay: list the files, write one, answer.
fn write_replay(dir: &Path) -> String {
    replay(
        dir,
        "session.jsonl",
        &[
            json!({"content": "Looking around first.", "tool_calls": [tool_call("c1", "terminal", json!({"command": "echo hello > greeting.txt && ls"}))]}),
            json!({"tool_calls": [tool_call("c2", "terminal", json!({"command": "cat greeting.txt"}))], "expect_contains": "greeting.txt"}),
            json!({"content": "greeting.txt says hello.", "expect_contains": "hello"}),
        ],
    )
}

fn run(fleet: &Fleet, cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = fleet.command();
    cmd.current_dir(cwd)
        .env("CADUCEUS_LOG", "error")
        .arg("run")
        .args(args);
    cmd.output().unwrap()
}

/// `run` that must succeed.
fn run_ok(fleet: &Fleet, cwd: &Path, args: &[&str]) -> Output {
    let out = run(fleet, cwd, args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn run_shows_progress_and_prints_the_final_answer() {
    let fleet = Fleet::new();
    let work = tempfile::tempdir().unwrap();
    let model = write_replay(work.path());
    let out = run(
        &fleet,
        work.path(),
        &["--model", &model, "What does the greeting say?"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "greeting.txt says hello.\n"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines[0].starts_with("▶ session sess_") && lines[0].contains(&model),
        "{stderr}"
    );
    assert!(lines.contains(&"💬 Looking around first."), "{stderr}");
    assert!(
        lines.iter().any(
            |l| l.starts_with("💻 terminal  echo hello > greeting.txt && ls  ✓ ")
                && l.contains("@local-")
        ),
        "{stderr}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("💻 terminal  cat greeting.txt  ✓ ")),
        "{stderr}"
    );
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("✓ completed · 3 api calls"),
        "{stderr}"
    );
    assert!(
        !stderr.contains('\r'),
        "no spinner when stderr is not a terminal"
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("greeting.txt")).unwrap(),
        "hello\n"
    );

    // The session and its transcript are in $CADUCEUS_HOME/state.db.
    let db = fleet.home.path().join("state.db");
    let sessions = caduceus_coordinator::agent::store::read_sessions(&db).unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(
        (sessions[0].state.as_str(), sessions[0].api_calls),
        ("completed", 3)
    );
    let transcript =
        caduceus_coordinator::agent::store::read_transcript(&db, &sessions[0].id).unwrap();
    assert_eq!(
        transcript.len(),
        7,
        "system, user, 2 × (assistant, tool), assistant"
    );
    assert_eq!(transcript[3].tool_name.as_deref(), Some("terminal"));
}

#[test]
fn run_json_prints_one_event_per_line() {
    let fleet = Fleet::new();
    let work = tempfile::tempdir().unwrap();
    let model = write_replay(work.path());
    let out = run_ok(
        &fleet,
        work.path(),
        &["--json", "--model", &model, "What does the greeting say?"],
    );
    let events = json_lines(&out.stdout);
    let kinds: Vec<&str> = events.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "session_started",
            "assistant_text",
            "tool_started",
            "tool_finished",
            "tool_started",
            "tool_finished",
            "assistant_text",
            "final"
        ]
    );
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    assert!(
        events
            .iter()
            .all(|e| e["session_id"] == events[0]["session_id"])
    );
    assert_eq!(events[3]["data"]["status"], "ok");
    assert!(
        events[3]["data"]["worker"]
            .as_str()
            .unwrap()
            .starts_with("local-")
    );
    assert_eq!(events[7]["data"]["text"], "greeting.txt says hello.");
}

#[test]
fn a_failing_model_fails_the_run() {
    let fleet = Fleet::new();
    let work = tempfile::tempdir().unwrap();
    // One turn, then the replay has nothing left for the second request.
    let model = replay(
        work.path(),
        "short.jsonl",
        &[json!({"tool_calls": [tool_call("c1", "terminal", json!({"command": "true"}))]})],
    );
    let out = run(&fleet, work.path(), &["--model", &model, "Do it"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("has no turn left"), "{stderr}");
    assert!(
        stderr.contains("error: the session ended failed"),
        "{stderr}"
    );
}

#[test]
fn the_demo_delegates_three_pages_to_subagents_on_two_embedded_workers() {
    let fleet = Fleet::new();
    let work = tempfile::tempdir().unwrap();
    let replay = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/delegate-demo.jsonl");
    let out = run_ok(
        &fleet,
        work.path(),
        &[
            "--json",
            "--model",
            &format!("replay:{}", replay.display()),
            "Build a small static site in demo-out: three pages written in parallel by subagents, then an index page.",
        ],
    );
    let events = json_lines(&out.stdout);
    let root = events[0]["session_id"].as_str().unwrap();

    // Three child sessions, each with its own environment.
    let children: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "session_started" && e["data"]["depth"] == 1)
        .collect();
    assert_eq!(children.len(), 3);
    let tasks: BTreeSet<&str> = children
        .iter()
        .map(|c| c["data"]["task_id"].as_str().unwrap())
        .collect();
    assert_eq!(tasks.len(), 3);

    // Their commands ran at the same time, on both workers.
    let runs = subagent_calls(&events, root);
    assert_eq!(runs.len(), 3);
    assert!(
        calls_overlapped(&runs),
        "the subagents' commands did not overlap"
    );
    assert_eq!(
        call_workers(&runs),
        BTreeSet::from(["local-1".to_owned(), "local-2".to_owned()])
    );

    // Real files.
    for page in ["alpha", "beta", "gamma"] {
        let html =
            std::fs::read_to_string(work.path().join(format!("demo-out/{page}.html"))).unwrap();
        assert!(
            html.starts_with(&format!("<h1>{}", page[..1].to_uppercase())),
            "{html}"
        );
    }
    let index = std::fs::read_to_string(work.path().join("demo-out/index.html")).unwrap();
    assert!(index.contains("<a href=\"gamma.html\">gamma</a>"));
    let done = events.last().unwrap();
    assert_eq!(
        (done["kind"].as_str(), done["data"]["status"].as_str()),
        (Some("final"), Some("completed"))
    );
}

#[test]
fn file_tools_run_in_parallel_on_distinct_paths_and_in_order_on_one_path() {
    let fleet = Fleet::new();
    let work = tempfile::tempdir().unwrap();
    let lines = [
        json!({"tool_calls": [
            tool_call("w1", "write_file", json!({"path": "notes/a.txt", "content": "alpha\n"})),
            tool_call("w2", "write_file", json!({"path": "notes/b.txt", "content": "beta\n"})),
        ]}),
        json!({"tool_calls": [
            tool_call("r1", "read_file", json!({"path": "notes/a.txt"})),
            tool_call("r2", "read_file", json!({"path": "notes/b.txt"})),
        ], "expect_tool_results": 2}),
        json!({"tool_calls": [
            tool_call("o1", "write_file", json!({"path": "out.txt", "content": "first\n"})),
            tool_call("o2", "write_file", json!({"path": "./out.txt", "content": "second\n"})),
            tool_call("o3", "patch", json!({"path": "out.txt", "old_string": "second", "new_string": "third"})),
        ], "expect_contains": "alpha"}),
        json!({"content": "out.txt says third.", "expect_tool_results": 3}),
    ];
    let model = replay(work.path(), "files.jsonl", &lines);
    let out = run_ok(
        &fleet,
        work.path(),
        &["--json", "--model", &model, "Take notes"],
    );
    let events = json_lines(&out.stdout);
    let parallel = |id: &str| {
        events
            .iter()
            .find(|e| e["kind"] == "tool_started" && e["data"]["call_id"] == id)
            .unwrap_or_else(|| panic!("no call {id}"))["data"]["parallel"]
            .as_bool()
            .unwrap()
    };
    assert!(
        parallel("w1") && parallel("w2"),
        "writes to distinct paths run together"
    );
    assert!(
        parallel("r1") && parallel("r2"),
        "reads of distinct paths run together"
    );
    assert!(
        !parallel("o1") && !parallel("o2") && !parallel("o3"),
        "calls on one path run in order"
    );
    let finished = |id: &str| {
        events
            .iter()
            .find(|e| e["kind"] == "tool_finished" && e["data"]["call_id"] == id)
            .unwrap()["data"]
            .clone()
    };
    assert!(finished("o1")["finished_at_ms"].as_u64() <= finished("o2")["started_at_ms"].as_u64());
    assert!(
        ["w1", "w2", "r1", "r2", "o1", "o2", "o3"]
            .iter()
            .all(|id| finished(id)["status"] == "ok"),
        "{events:#?}"
    );
    // The side effects happened in the model's order.
    assert_eq!(
        std::fs::read_to_string(work.path().join("out.txt")).unwrap(),
        "third\n"
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("notes/b.txt")).unwrap(),
        "beta\n"
    );
    assert_eq!(
        events.last().unwrap()["data"]["text"],
        "out.txt says third."
    );
}

#[test]
fn a_turn_over_its_result_budget_saves_its_largest_result_in_the_sandbox() {
    let fleet = Fleet::new();
    let work = tempfile::tempdir().unwrap();
    // Five 45,000-character outputs: 225,000 characters in one turn.
    let ids: Vec<String> = (0..5)
        .map(|i| format!("big-{}-{i}", std::process::id()))
        .collect();
    let calls: Vec<Value> = ids
        .iter()
        .map(|id| {
            tool_call(
                id,
                "terminal",
                json!({"command": "head -c 45000 /dev/zero | tr '\\0' a"}),
            )
        })
        .collect();
    let lines = [
        json!({"tool_calls": calls}),
        json!({"content": "saw them", "expect_contains": "Full output saved to: "}),
    ];
    let model = replay(work.path(), "big.jsonl", &lines);
    run_ok(&fleet, work.path(), &["--model", &model, "Print a lot"]);

    let db = fleet.home.path().join("state.db");
    let session = caduceus_coordinator::agent::store::read_sessions(&db)
        .unwrap()
        .remove(0);
    let tools: Vec<String> = caduceus_coordinator::agent::store::read_transcript(&db, &session.id)
        .unwrap()
        .into_iter()
        .filter(|m| m.role == "tool")
        .map(|m| m.content.unwrap())
        .collect();
    assert_eq!(tools.len(), 5);
    let persisted: Vec<&String> = tools
        .iter()
        .filter(|t| t.starts_with("<persisted-output>"))
        .collect();
    assert_eq!(
        persisted.len(),
        1,
        "one result is enough to fit 200,000 characters"
    );
    let path = persisted[0]
        .lines()
        .find_map(|l| l.strip_prefix("Full output saved to: "))
        .unwrap();
    assert!(path.ends_with(&format!("{}.txt", ids[0])), "{path}");
    let saved = std::fs::read_to_string(path).unwrap();
    assert!(saved.contains(&"a".repeat(45_000)));
    let _ = std::fs::remove_file(path);
}
