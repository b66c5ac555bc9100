//! Agent sessions on a coordinator process with two worker processes, the
//! model being an OpenAI-compatible scripted server: delegated children run
//! in parallel on different workers, children do not get the blocked tools,
//! and a worker dying under one child fails that child's call alone;
//! background children listed, steered (the next request carries the steer)
//! and stopped (its background process killed with it); a stalled child
//! reported; an `output_schema` miss corrected once.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_pass_by_value
)]

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use caduceus_llm::ToolCall;
use caduceus_llm::testing::{ScriptedResponse, ScriptedServer};
use caduceus_tests::{Fleet, Proc, call_workers, calls_overlapped, json_lines, subagent_calls};
use serde_json::{Value, json};

/// A scripted server on a runtime of its own, alive as long as this value.
struct Model {
    server: ScriptedServer,
    _runtime: tokio::runtime::Runtime,
}

fn model(script: Vec<ScriptedResponse>) -> Model {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(ScriptedServer::start(script)).unwrap();
    Model {
        server,
        _runtime: runtime,
    }
}

/// A fleet whose configuration asks `model`.
fn fleet_asking(model: &Model, stream: bool) -> Fleet {
    let fleet = Fleet::new();
    fleet.write_config(&format!(
        "llm:\n  base_url: {}\n  model: scripted\n  stream: {stream}\n  max_retries: 0\n",
        model.server.base_url()
    ));
    fleet
}

/// A coordinator that asks `model`, with workers w1 and w2.
fn fleet_with(model: &Model, stream: bool) -> (Fleet, Proc, Proc, Proc) {
    let fleet = fleet_asking(model, stream);
    let coordinator = fleet.serve(&[]);
    let w1 = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
    let w2 = fleet.worker(&coordinator, "w2", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1", "w2"], Duration::from_secs(30));
    (fleet, coordinator, w1, w2)
}

fn call(id: &str, name: &str, args: Value) -> ToolCall {
    ToolCall::new(id, name, args.to_string())
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|d| d["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn delegated_children_run_in_parallel_on_two_worker_processes() {
    let out_dir = tempfile::tempdir().unwrap();
    let mut script = vec![ScriptedResponse::tool_calls(vec![call(
        "d",
        "delegate_task",
        json!({"tasks": [{"goal": "job alpha"}, {"goal": "job beta"}, {"goal": "job gamma"}]}),
    )])];
    for key in ["alpha", "beta", "gamma"] {
        let file = out_dir.path().join(format!("{key}.txt"));
        let command = format!("sleep 1 && echo {key} > {}", file.display());
        script.push(
            ScriptedResponse::tool_calls(vec![call(
                &format!("{key}1"),
                "terminal",
                json!({"command": command}),
            )])
            .for_conversation(key),
        );
        script.push(ScriptedResponse::text(format!("{key} written")).for_conversation(key));
    }
    script.push(ScriptedResponse::text("All three written."));
    let model = model(script);
    let (fleet, coordinator, _w1, _w2) = fleet_with(&model, false);

    let out = fleet.client(&coordinator, &["run", "--json", "Split the work"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = json_lines(&out.stdout);
    let root = events[0]["session_id"].as_str().unwrap();
    assert_eq!(events.last().unwrap()["data"]["text"], "All three written.");
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));

    // The three `sleep 1` ran at the same time, on both workers.
    let runs = subagent_calls(&events, root);
    assert_eq!(runs.len(), 3);
    assert!(
        calls_overlapped(&runs),
        "children did not overlap: {runs:#?}"
    );
    assert_eq!(
        call_workers(&runs),
        BTreeSet::from(["w1".to_owned(), "w2".to_owned()])
    );
    for key in ["alpha", "beta", "gamma"] {
        assert_eq!(
            std::fs::read_to_string(out_dir.path().join(format!("{key}.txt"))).unwrap(),
            format!("{key}\n")
        );
    }

    // Non-streaming requests; a child's tool list lacks the blocked tools.
    let requests = model.server.requests();
    assert!(requests.iter().all(|r| !r.is_streaming()));
    let parent_tools = tool_names(&requests[0].body);
    assert!(
        parent_tools.contains(&"delegate_task".to_owned())
            && parent_tools.contains(&"clarify".to_owned())
    );
    let child = requests
        .iter()
        .find(|r| r.first_user_text() == "job beta")
        .unwrap();
    let child_tools = tool_names(&child.body);
    assert!(
        child_tools.contains(&"terminal".to_owned()),
        "{child_tools:?}"
    );
    for blocked in [
        "delegate_task",
        "clarify",
        "memory",
        "send_message",
        "execute_code",
        "cronjob",
    ] {
        assert!(
            !child_tools.contains(&blocked.to_owned()),
            "{blocked} offered to a child: {child_tools:?}"
        );
    }

    // The coordinator recorded the tree.
    let sessions =
        caduceus_coordinator::agent::store::read_sessions(&fleet.home.path().join("state.db"))
            .unwrap();
    assert_eq!(sessions.len(), 4);
    assert_eq!(
        sessions
            .iter()
            .filter(|s| s.parent_id.as_deref() == Some(root))
            .count(),
        3
    );
}

/// `caduceus run --json` in the background, its events read as they come.
struct LiveRun {
    child: Child,
    lines: mpsc::Receiver<Value>,
    seen: Vec<Value>,
}

impl LiveRun {
    fn start(fleet: &Fleet, coordinator: &Proc, prompt: &str) -> LiveRun {
        let mut cmd = fleet.command();
        cmd.args(["run", "--json", prompt])
            .env("CADUCEUS_COORDINATOR", coordinator.url())
            .env("CADUCEUS_TOKEN", &fleet.token)
            .env("CADUCEUS_LOG", "error")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx
                    .send(serde_json::from_str::<Value>(&line).unwrap())
                    .is_err()
                {
                    break;
                }
            }
        });
        LiveRun {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads events until one satisfies `want`.
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

impl Drop for LiveRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn killing_a_childs_worker_fails_that_child_alone() {
    let script = vec![
        ScriptedResponse::tool_calls(vec![call(
            "d",
            "delegate_task",
            json!({"tasks": [{"goal": "job alpha"}, {"goal": "job beta"}]}),
        )]),
        ScriptedResponse::tool_calls(vec![call("a1", "terminal", json!({"command": "sleep 20"}))])
            .for_conversation("alpha"),
        ScriptedResponse::text("alpha: my worker went away").for_conversation("alpha"),
        ScriptedResponse::tool_calls(vec![call(
            "b1",
            "terminal",
            json!({"command": "sleep 2 && echo beta"}),
        )])
        .for_conversation("beta"),
        ScriptedResponse::text("beta done").for_conversation("beta"),
        ScriptedResponse::text("One child lost its worker; the other finished."),
    ];
    let model = model(script);
    let (fleet, coordinator, w1, w2) = fleet_with(&model, true);
    let mut workers: HashMap<&str, Proc> = [("w1", w1), ("w2", w2)].into_iter().collect();

    let mut run = LiveRun::start(&fleet, &coordinator, "Two jobs");
    let alpha = run.until("alpha's session", |e| {
        e["kind"] == "session_started" && e["data"]["prompt"] == "job alpha"
    });
    let alpha_session = alpha["session_id"].as_str().unwrap().to_owned();
    let root = run.seen[0]["session_id"].as_str().unwrap().to_owned();
    let alpha_task = alpha["data"]["task_id"].as_str().unwrap().to_owned();
    run.until("alpha's command", |e| {
        e["kind"] == "tool_started" && e["session_id"] == alpha_session.as_str()
    });

    // Find the worker that holds alpha's environment and kill it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let victim = loop {
        let status = fleet.status(&coordinator);
        let holder = status["workers"].as_array().unwrap().iter().find(|w| {
            w["environments"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e["task_id"] == alpha_task.as_str())
        });
        if let Some(holder) = holder {
            break holder["name"].as_str().unwrap().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "alpha's environment never showed up: {status}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // The running sessions are listed with their parents.
    let sessions = fleet.status(&coordinator)["sessions"]
        .as_array()
        .unwrap()
        .clone();
    let listed = sessions
        .iter()
        .find(|s| s["session_id"] == alpha_session.as_str())
        .unwrap();
    assert!(listed["parent_id"].as_str().unwrap().starts_with("sess_"));
    assert!(
        sessions
            .iter()
            .any(|s| s["parent_id"] == "" && s["state"] == "running")
    );
    workers.get_mut(victim.as_str()).unwrap().kill();

    let done = run.until("the root's final", |e| {
        e["kind"] == "final"
            && e["session_id"] == root.as_str()
            && e["data"]["text"] == "One child lost its worker; the other finished."
    });
    assert_eq!(done["data"]["status"], "completed");
    let events = run.seen.clone();

    // Alpha's call failed with the lost worker named; beta ran on the other worker.
    let alpha_call = events
        .iter()
        .find(|e| e["kind"] == "tool_finished" && e["session_id"] == alpha_session.as_str())
        .unwrap();
    assert_eq!(alpha_call["data"]["status"], "error");
    let preview = alpha_call["data"]["preview"].as_str().unwrap();
    assert!(
        preview.contains(&format!("The worker '{victim}' running this call was lost")),
        "{preview}"
    );
    let beta_call = events
        .iter()
        .find(|e| e["kind"] == "tool_finished" && e["data"]["call_id"] == "b1")
        .unwrap();
    assert_eq!(beta_call["data"]["status"], "ok");
    assert_ne!(beta_call["data"]["worker"].as_str().unwrap(), victim);

    // The parent got both entries: alpha's trace shows the failed call, beta completed.
    let parent_last = model
        .server
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.first_user_text() == "Two jobs")
        .unwrap();
    let result = parent_last.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let results: Value = serde_json::from_str(&result).unwrap();
    assert_eq!(results["results"][0]["tool_trace"][0]["status"], "error");
    assert_eq!(results["results"][1]["status"], "completed");
    assert_eq!(results["results"][1]["summary"], "beta done");
}

/// `caduceus run` on the embedded default, the model a scripted server.
fn embedded_session_with_terminal_and_file_tools(stream: bool) {
    let work = tempfile::tempdir().unwrap();
    let model = model(vec![
        ScriptedResponse::tool_calls(vec![call(
            "t1",
            "terminal",
            json!({"command": "mkdir -p proj && echo 'fn main() {}' > proj/main.rs"}),
        )]),
        ScriptedResponse::tool_calls(vec![
            call("r1", "read_file", json!({"path": "proj/main.rs"})),
            call(
                "s1",
                "search_files",
                json!({"pattern": "fn main", "path": "proj"}),
            ),
        ]),
        ScriptedResponse::tool_calls(vec![call(
            "p1",
            "patch",
            json!({"path": "proj/main.rs", "old_string": "fn main() {}", "new_string": "fn main() { println!(\"hi\"); }"}),
        )]),
        ScriptedResponse::tool_calls(vec![call(
            "t2",
            "terminal",
            json!({"command": "cat proj/main.rs"}),
        )]),
        ScriptedResponse::text("main.rs now prints hi."),
    ]);
    let fleet = fleet_asking(&model, stream);
    let mut cmd = fleet.command();
    cmd.current_dir(work.path())
        .env("CADUCEUS_LOG", "error")
        .args(["run", "--json", "Make main print hi"]);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = json_lines(&out.stdout);
    assert_eq!(
        events.last().unwrap()["data"]["text"],
        "main.rs now prints hi."
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("proj/main.rs")).unwrap(),
        "fn main() { println!(\"hi\"); }\n"
    );

    let requests = model.server.requests();
    assert_eq!(requests.len(), 5);
    assert!(requests.iter().all(|r| r.is_streaming() == stream));
    let tools = tool_names(&requests[0].body);
    for tool in [
        "terminal",
        "read_file",
        "write_file",
        "patch",
        "search_files",
        "todo",
        "delegate_task",
    ] {
        assert!(
            tools.contains(&tool.to_owned()),
            "{tool} missing from {tools:?}"
        );
    }
    // The read and the search ran together; their results came back in order.
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "tool_started" && e["data"]["iteration"] == 2)
        .collect();
    assert!(
        started.iter().all(|e| e["data"]["parallel"] == true),
        "{started:#?}"
    );
    let third = requests[2].body["messages"].as_array().unwrap();
    let results: Vec<&Value> = third
        .iter()
        .filter(|m| m["role"] == "tool")
        .skip(1)
        .collect();
    assert_eq!(
        (
            results[0]["tool_call_id"].as_str(),
            results[1]["tool_call_id"].as_str()
        ),
        (Some("r1"), Some("s1"))
    );
    assert!(
        results[0]["content"]
            .as_str()
            .unwrap()
            .contains("fn main() {}")
    );
    let last_result = requests[4].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(last_result.contains("println!"), "{last_result}");
}

#[test]
fn a_multi_turn_session_with_terminal_and_file_tools_streaming() {
    embedded_session_with_terminal_and_file_tools(true);
}

#[test]
fn a_multi_turn_session_with_terminal_and_file_tools_not_streaming() {
    embedded_session_with_terminal_and_file_tools(false);
}

#[test]
fn a_client_that_goes_away_cancels_its_session_and_its_running_call() {
    let marker = format!("sleep 3{}", std::process::id() % 10);
    let model = model(vec![ScriptedResponse::tool_calls(vec![call(
        "s",
        "terminal",
        json!({"command": marker}),
    )])]);
    let (fleet, coordinator, _w1, _w2) = fleet_with(&model, true);
    let mut run = LiveRun::start(&fleet, &coordinator, "Wait a while");
    run.until("the running call", |e| e["kind"] == "tool_started");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !caduceus_tests::process_alive_with(&marker) {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(run); // kills the client

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let idle = fleet.status(&coordinator)["sessions"]
            .as_array()
            .unwrap()
            .is_empty();
        if idle && !caduceus_tests::process_alive_with(&marker) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the session or its command outlived the client"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let sessions =
        caduceus_coordinator::agent::store::read_sessions(&fleet.home.path().join("state.db"))
            .unwrap();
    assert_eq!(sessions[0].state, "interrupted");
}

/// A fleet whose configuration asks `model`, with a `delegation:` section.
fn fleet_with_delegation(model: &Model, delegation: &str) -> (Fleet, Proc, Proc) {
    let fleet = Fleet::new();
    fleet.write_config(&format!(
        "llm:\n  base_url: {}\n  model: scripted\n  stream: true\n  max_retries: 0\ndelegation:\n{delegation}",
        model.server.base_url()
    ));
    let coordinator = fleet.serve(&[]);
    let w1 = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));
    (fleet, coordinator, w1)
}

/// A command that waits until the test creates `file`.
fn wait_for_file(file: &std::path::Path) -> String {
    format!(
        "while [ ! -e {} ]; do sleep 0.1; done; echo released",
        file.display()
    )
}

/// The result of call `id` in the last request whose conversation began
/// with `prompt`.
fn result_in(model: &Model, prompt: &str, id: &str) -> Value {
    let requests = model.server.requests();
    let request = requests
        .iter()
        .rev()
        .find(|r| r.first_user_text() == prompt)
        .unwrap();
    let message = request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .unwrap_or_else(|| panic!("no result of {id}"));
    serde_json::from_str(message["content"].as_str().unwrap()).unwrap()
}

fn pgrep(pattern: &str) -> bool {
    std::process::Command::new("pgrep")
        .args(["-f", pattern])
        .output()
        .unwrap()
        .status
        .success()
}

#[test]
fn background_children_are_listed_steered_and_stopped_and_a_stopped_childs_processes_die_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let gate = |name: &str| dir.path().join(name);
    // An unusual duration names the stopped child's background process.
    let marker = "sleep 3917";
    let script = vec![
        ScriptedResponse::tool_calls(vec![call(
            "d",
            "delegate_task",
            json!({"background": true, "tasks": [{"goal": "job steered"}, {"goal": "job stopped"}]}),
        )]),
        ScriptedResponse::tool_calls(vec![call(
            "s1",
            "terminal",
            json!({"command": wait_for_file(&gate("steered-go"))}),
        )])
        .for_conversation("steered"),
        ScriptedResponse::text("steered: looked at pricing").for_conversation("steered"),
        ScriptedResponse::tool_calls(vec![
            call(
                "t1",
                "terminal",
                json!({"command": marker, "background": true}),
            ),
            call(
                "t2",
                "terminal",
                json!({"command": wait_for_file(&gate("never"))}),
            ),
        ])
        .for_conversation("stopped"),
        // The parent waits in its environment until the test has the ids.
        ScriptedResponse::tool_calls(vec![call(
            "p1",
            "terminal",
            json!({"command": wait_for_file(&gate("parent-go"))}),
        )]),
    ];
    let model = model(script);
    let (fleet, coordinator, _w1) = fleet_with_delegation(&model, "  max_concurrent_children: 3\n");
    let prompt = "Two background jobs";
    let mut run = LiveRun::start(&fleet, &coordinator, prompt);
    let mut ids = HashMap::new();
    for _ in 0..2 {
        let started = run.until("a child", |e| e["kind"] == "child_started");
        ids.insert(
            started["data"]["goal"].as_str().unwrap().to_owned(),
            started["data"]["child_session_id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let steered = ids["job steered"].clone();
    let stopped = ids["job stopped"].clone();
    // Both children are in their waiting command.
    run.until("the steered child's command", |e| {
        e["kind"] == "tool_started" && e["session_id"] == steered.as_str()
    });
    run.until("the stopped child's waiting command", |e| {
        e["kind"] == "tool_started"
            && e["session_id"] == stopped.as_str()
            && e["data"]["call_id"] == "t2"
    });
    model.server.push(ScriptedResponse::tool_calls(vec![
        call("l", "delegate_task", json!({"action": "list"})),
        call(
            "s",
            "delegate_task",
            json!({"action": "steer", "subagent_id": steered, "message": "focus on pricing"}),
        ),
        call(
            "x",
            "delegate_task",
            json!({"action": "stop", "subagent_id": stopped}),
        ),
    ]));
    // The results may arrive before or after the parent's answer: the last
    // text is this one either way.
    for _ in 0..2 {
        model.server.push(ScriptedResponse::text("Both reported."));
    }
    std::fs::write(gate("parent-go"), "").unwrap();
    run.until("the steer", |e| e["kind"] == "steer_queued");
    std::fs::write(gate("steered-go"), "").unwrap();
    let root = run.seen[0]["session_id"].as_str().unwrap().to_owned();
    let last = run.until("the parent's end", |e| {
        e["kind"] == "final" && e["session_id"] == root.as_str()
    });
    assert_eq!(last["data"]["text"], "Both reported.", "{:#?}", run.seen);

    let listed = result_in(&model, prompt, "l");
    assert_eq!(listed["count"], 2);
    assert!(
        listed["subagents"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["status"] == "running" && s["accepting_steer"] == true),
        "{listed}"
    );
    assert_eq!(result_in(&model, prompt, "s")["status"], "queued");
    assert_eq!(result_in(&model, prompt, "x")["status"], "stopping");

    // The steered child's next request carried the steer.
    let requests = model.server.requests();
    let second = requests
        .iter()
        .filter(|r| r.first_user_text() == "job steered")
        .nth(1)
        .expect("the steered child asked again");
    let messages = second.body["messages"].as_array().unwrap();
    let steer = messages.iter().rev().find(|m| m["role"] == "user").unwrap();
    assert!(
        steer["content"]
            .as_str()
            .unwrap()
            .ends_with("\nfocus on pricing"),
        "{steer}"
    );

    // The delivery: one completed (steered), one interrupted (stopped) whose
    // background process was killed with it.
    let delivered = requests
        .iter()
        .filter(|r| r.first_user_text() == prompt)
        .flat_map(|r| r.body["messages"].as_array().unwrap().clone())
        .find(|m| {
            m["role"] == "user"
                && m["content"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("[Background delegation ")
        })
        .expect("the results were delivered");
    let text = delivered["content"].as_str().unwrap();
    let results = caduceus_coordinator::agent::delegate::background_results(text).unwrap();
    let entries = results["results"].as_array().unwrap();
    assert_eq!(entries[0]["status"], "completed");
    assert_eq!(entries[0]["summary"], "steered: looked at pricing");
    assert_eq!(entries[1]["status"], "interrupted", "{}", entries[1]);
    assert_eq!(
        entries[1]["orphaned_processes"].as_array().unwrap().len(),
        1,
        "{}",
        entries[1]
    );
    assert!(!pgrep(marker), "the stopped child's `{marker}` outlived it");
}

#[test]
fn a_stalled_child_is_reported_and_an_output_schema_miss_is_corrected_once() {
    let schema = json!({"type": "object", "properties": {"files": {"type": "integer"}}, "required": ["files"]});
    let script = vec![
        ScriptedResponse::tool_calls(vec![call(
            "d",
            "delegate_task",
            json!({"tasks": [
                {"goal": "job stuck"},
                {"goal": "job counted", "output_schema": schema},
            ]}),
        )]),
        ScriptedResponse::tool_calls(vec![call(
            "k1",
            "terminal",
            json!({"command": "sleep 120"}),
        )])
        .for_conversation("stuck"),
        // (No tool call: its first would create an environment, which the
        // one-second in-tool threshold here would not allow.)
        ScriptedResponse::text("There are many files.").for_conversation("counted"),
        ScriptedResponse::text("{\"files\": 20}").for_conversation("counted"),
        ScriptedResponse::text("One stalled, one counted."),
    ];
    let model = model(script);
    let (fleet, coordinator, _w1) = fleet_with_delegation(
        &model,
        "  stall_in_tool_seconds: 1\n  stall_grace_seconds: 30\n",
    );
    // (No child's match key may appear in it.)
    let prompt = "Two jobs for the fleet";
    let out = fleet.client(&coordinator, &["run", "--json", prompt]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = json_lines(&out.stdout);
    assert_eq!(
        events.last().unwrap()["data"]["text"],
        "One stalled, one counted.",
        "{events:#?}"
    );
    let results = result_in(&model, prompt, "d");
    let stuck = &results["results"][0];
    assert_eq!(stuck["status"], "stalled", "{stuck}");
    assert_eq!(stuck["stall_phase"], "in_tool");
    assert!(
        stuck["error"]
            .as_str()
            .unwrap()
            .starts_with("Subagent stopped making progress after 1 API call(s)"),
        "{stuck}"
    );
    let counted = &results["results"][1];
    assert_eq!(counted["status"], "completed", "{counted}");
    assert_eq!(counted["schema_valid"], true);
    assert_eq!(counted["summary"], "{\"files\": 20}");
    assert_eq!(counted["api_calls"], 2);
    let requests = model.server.requests();
    let correction = requests
        .iter()
        .filter(|r| r.first_user_text() == "job counted")
        .nth(1)
        .unwrap();
    let last_user = correction.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .unwrap();
    assert!(
        last_user["content"]
            .as_str()
            .unwrap()
            .contains("- the answer contains no JSON value\n"),
        "{last_user}"
    );
}

/// Break: the worker running a background child's command (and its
/// parent's) is SIGSTOPped, and the parent's model then fails. The parent
/// still ends — `final` arrives, nothing hangs — with the delegation's
/// results in its recorded transcript; the worker, continued, serves again.
#[test]
fn a_stopped_worker_under_a_background_child_and_a_failing_parent_lose_no_result() {
    let dir = tempfile::tempdir().unwrap();
    let never = dir.path().join("never");
    let script = vec![
        ScriptedResponse::tool_calls(vec![call(
            "d",
            "delegate_task",
            json!({"goal": "job frozen", "background": true}),
        )]),
        ScriptedResponse::tool_calls(vec![call("c1", "terminal", json!({"command": "sleep 60"}))])
            .for_conversation("frozen"),
        ScriptedResponse::text("frozen: my worker stopped answering").for_conversation("frozen"),
        ScriptedResponse::tool_calls(vec![call(
            "p1",
            "terminal",
            json!({"command": wait_for_file(&never)}),
        )]),
        // Nothing more for the parent: its next request fails (400).
    ];
    let model = model(script);
    let (fleet, coordinator, w1) = fleet_with_delegation(&model, "  stall_grace_seconds: 20\n");
    let prompt = "Freeze the worker";
    let mut run = LiveRun::start(&fleet, &coordinator, prompt);
    let started = run.until("the child", |e| e["kind"] == "child_started");
    let child = started["data"]["child_session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let root = run.seen[0]["session_id"].as_str().unwrap().to_owned();
    // Both commands are running on w1 (in either order).
    let running = |seen: &[Value], session: &str| {
        seen.iter()
            .any(|e| e["kind"] == "tool_started" && e["session_id"] == session)
    };
    while !(running(&run.seen, &child) && running(&run.seen, &root)) {
        run.until("a command", |e| e["kind"] == "tool_started");
    }
    caduceus_tests::signal(w1.pid(), "STOP");
    let last = run.until("the parent's end", |e| {
        e["kind"] == "final" && e["session_id"] == root.as_str()
    });
    caduceus_tests::signal(w1.pid(), "CONT");
    assert_eq!(last["data"]["status"], "failed", "{:#?}", run.seen);
    let db = fleet.home.path().join("state.db");
    let transcript = caduceus_coordinator::agent::store::read_transcript(&db, &root).unwrap();
    let delivered = transcript
        .iter()
        .filter_map(|m| m.content.as_deref())
        .find(|t| t.starts_with("[Background delegation "))
        .unwrap_or_else(|| panic!("no delegation in the transcript: {transcript:#?}"));
    let results = caduceus_coordinator::agent::delegate::background_results(delivered).unwrap();
    let status = results["results"][0]["status"].as_str().unwrap();
    assert!(["completed", "interrupted"].contains(&status), "{results}");
    assert!(
        run.seen
            .iter()
            .any(|e| e["kind"] == "delegation_finished" && e["session_id"] == root.as_str()),
        "{:#?}",
        run.seen
    );
    // The continued worker serves calls again.
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));
}

/// Break: the client is killed (Ctrl-C) while a background child runs with
/// a background process of its own. The session is cancelled; the child is
/// stopped, its process dies with it, and the delegation is recorded in the
/// parent's transcript as stopped (status `interrupted`).
#[test]
fn a_client_killed_under_a_background_child_stops_it_kills_its_process_and_records_it() {
    let dir = tempfile::tempdir().unwrap();
    let never = dir.path().join("never");
    let marker = format!("sleep 4{}", std::process::id() % 100);
    let script = vec![
        ScriptedResponse::tool_calls(vec![call(
            "d",
            "delegate_task",
            json!({"goal": "job orphaned", "background": true}),
        )]),
        ScriptedResponse::tool_calls(vec![
            call(
                "t1",
                "terminal",
                json!({"command": marker, "background": true}),
            ),
            call("t2", "terminal", json!({"command": wait_for_file(&never)})),
        ])
        .for_conversation("orphaned"),
        ScriptedResponse::tool_calls(vec![call(
            "p1",
            "terminal",
            json!({"command": wait_for_file(&never)}),
        )]),
    ];
    let model = model(script);
    let (fleet, coordinator, _w1) = fleet_with_delegation(&model, "");
    let mut run = LiveRun::start(&fleet, &coordinator, "Go away mid-delegation");
    let started = run.until("the child", |e| e["kind"] == "child_started");
    let child = started["data"]["child_session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let root = run.seen[0]["session_id"].as_str().unwrap().to_owned();
    run.until("the child's waiting command", |e| {
        e["kind"] == "tool_started"
            && e["session_id"] == child.as_str()
            && e["data"]["call_id"] == "t2"
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !caduceus_tests::process_alive_with(&marker) {
        assert!(
            Instant::now() < deadline,
            "the background process never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(run); // kills the client

    let db = fleet.home.path().join("state.db");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let idle = fleet.status(&coordinator)["sessions"]
            .as_array()
            .unwrap()
            .is_empty();
        if idle && !caduceus_tests::process_alive_with(&marker) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the sessions or the child's process outlived the client"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let sessions = caduceus_coordinator::agent::store::read_sessions(&db).unwrap();
    for id in [&root, &child] {
        let session = sessions.iter().find(|s| &s.id == id).unwrap();
        assert_eq!(session.state, "interrupted", "{session:#?}");
    }
    let transcript = caduceus_coordinator::agent::store::read_transcript(&db, &root).unwrap();
    let delivered = transcript
        .iter()
        .filter_map(|m| m.content.as_deref())
        .find(|t| t.starts_with("[Background delegation "))
        .unwrap_or_else(|| panic!("no delegation in the transcript: {transcript:#?}"));
    assert!(
        delivered.contains("was stopped because this session ended (interrupted)"),
        "{delivered}"
    );
    let results = caduceus_coordinator::agent::delegate::background_results(delivered).unwrap();
    assert_eq!(results["results"][0]["status"], "interrupted");
    assert_eq!(
        results["results"][0]["orphaned_processes"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "{results}"
    );
}
