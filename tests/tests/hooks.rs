//! Hooks end to end: a plugin's `pre_tool_call` hook blocks a `terminal` call
//! in a session whose model is a scripted OpenAI-compatible server (the model
//! reads the hook's message); configured `post_tool_call` and session hooks
//! in hermes' layout see what happened; failing hooks block only when
//! fail-closed.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use caduceus_llm::ToolCall;
use caduceus_llm::testing::{ScriptedResponse, ScriptedServer};
use caduceus_tests::{Fleet, json_lines, parse_result};
use serde_json::{Value, json};

fn executable(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A hook script that appends its stdin (one JSON line) to `log`.
fn recorder(dir: &Path, log: &Path) -> String {
    let script = dir.join("record.sh");
    executable(
        &script,
        &format!("#!/bin/bash\n{{ cat; echo; }} >> '{}'\n", log.display()),
    );
    script.display().to_string()
}

fn logged(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_plugin_hook_blocks_a_terminal_call_and_the_model_reads_its_message() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let work = tempfile::tempdir().unwrap();
    let marker = work.path().join("marker");
    let server = runtime
        .block_on(ScriptedServer::start(vec![
            ScriptedResponse::tool_calls(vec![ToolCall::new(
                "t1",
                "terminal",
                json!({"command": format!("touch {}", marker.display())}).to_string(),
            )]),
            ScriptedResponse::text("The hook stopped me."),
        ]))
        .unwrap();
    let fleet = Fleet::new();
    let guard = fleet.home.path().join("plugins/guard");
    executable(
        &guard.join("block.sh"),
        "#!/bin/bash\ninput=$(cat)\ncase \"$input\" in\n  *'\"tool_name\":\"terminal\"'*) echo '{\"decision\": \"block\", \"reason\": \"terminal is off limits today\"}' ;;\nesac\n",
    );
    std::fs::write(
        guard.join("plugin.yaml"),
        "name: guard\nhooks:\n  pre_tool_call:\n    - matcher: terminal\n      command: ./block.sh\n      timeout: 10\n",
    )
    .unwrap();
    let log = work.path().join("hooks.jsonl");
    let record = recorder(work.path(), &log);
    fleet.write_config(&format!(
        "llm:\n  base_url: {}\n  model: scripted\n  max_retries: 0\nplugins:\n  enabled: [guard]\nhooks:\n  post_tool_call:\n    - matcher: \"term.*\"\n      command: {record}\n  on_session_start:\n    - command: {record}\n  on_session_end:\n    - command: {record}\n",
        server.base_url()
    ));
    let out = fleet
        .command()
        .current_dir(work.path())
        .env("CADUCEUS_LOG", "error")
        .args(["run", "--json", "touch the marker"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = json_lines(&out.stdout);
    assert_eq!(
        events.last().unwrap()["data"]["text"],
        "The hook stopped me."
    );
    assert!(!marker.exists(), "the blocked command ran");

    // The model read the hook's message as the tool's error.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let tool_message = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone();
    assert_eq!(
        serde_json::from_str::<Value>(tool_message["content"].as_str().unwrap()).unwrap(),
        json!({"error": "terminal is off limits today"})
    );

    let hooks = logged(&log);
    let kinds: Vec<&str> = hooks
        .iter()
        .map(|h| h["hook_event_name"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["on_session_start", "post_tool_call", "on_session_end"]
    );
    let post = &hooks[1];
    assert_eq!(post["tool_name"], "terminal");
    assert_eq!(
        post["tool_input"]["command"],
        format!("touch {}", marker.display())
    );
    assert_eq!(post["extra"]["status"], "blocked");
    assert_eq!(post["extra"]["error_type"], "plugin_block");
    assert_eq!(
        post["extra"]["error_message"],
        "terminal is off limits today"
    );
    assert!(post["extra"]["duration_ms"].is_u64(), "{post}");
    let session = hooks[0]["session_id"].as_str().unwrap();
    assert!(!session.is_empty());
    assert_eq!(hooks[2]["session_id"], session);
    assert_eq!(hooks[2]["extra"]["completed"], true);
    drop(runtime);
}

/// `caduceus call terminal` on the embedded fleet with `hooks` as configured.
fn terminal_with_hooks(hooks: &str, command: &str) -> Value {
    let fleet = Fleet::new();
    fleet.write_config(&format!("hooks:\n{hooks}"));
    let out = fleet
        .command()
        .env("CADUCEUS_LOG", "error")
        .args(["call", "terminal", &json!({"command": command}).to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_result(&out.stdout)
}

#[test]
fn a_failing_or_hanging_hook_is_ignored_unless_it_is_fail_closed() {
    let dir = tempfile::tempdir().unwrap();
    let slow = dir.path().join("slow.sh");
    executable(&slow, "#!/bin/bash\nsleep 30\n");
    let failing = dir.path().join("fail.sh");
    executable(&failing, "#!/bin/bash\necho oops >&2\nexit 2\n");

    let ran = terminal_with_hooks(
        &format!(
            "  pre_tool_call:\n    - command: {}\n      timeout: 1\n    - command: {}\n    - command: /no/such/hook\n",
            slow.display(),
            failing.display()
        ),
        "echo ran",
    );
    assert_eq!(ran["output"], "ran", "{ran}");

    let blocked = terminal_with_hooks(
        &format!(
            "  pre_tool_call:\n    - command: {}\n      timeout: 1\n      fail_closed: true\n",
            slow.display()
        ),
        "echo ran",
    );
    let error = blocked["error"].as_str().unwrap();
    assert!(
        error.contains("fail-closed") && error.contains("timed out after 1s"),
        "{blocked}"
    );
    assert!(blocked.get("output").is_none(), "{blocked}");

    // A fail-closed hook that meant to block but wrote broken JSON blocks;
    // the same answer from a fail-open hook lets the call run.
    let garbled = dir.path().join("garbled.sh");
    executable(
        &garbled,
        "#!/bin/bash\ncat > /dev/null\necho '{\"decision\": \"block\", \"reason\": '\n",
    );
    let entry = |closed: bool| {
        format!(
            "  pre_tool_call:\n    - command: {}\n      fail_closed: {closed}\n",
            garbled.display()
        )
    };
    let blocked = terminal_with_hooks(&entry(true), "echo ran");
    let error = blocked["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("fail-closed") && error.contains("not a JSON object"),
        "{blocked}"
    );
    assert!(blocked.get("output").is_none(), "{blocked}");
    let ran = terminal_with_hooks(&entry(false), "echo ran");
    assert_eq!(ran["output"], "ran", "{ran}");
}

#[test]
fn a_config_hook_blocks_with_hermes_action_shape_and_matchers_are_full_matches() {
    let dir = tempfile::tempdir().unwrap();
    let block = dir.path().join("block.sh");
    executable(
        &block,
        "#!/bin/bash\ncat > /dev/null\necho '{\"action\": \"block\", \"message\": \"no shell for you\"}'\n",
    );
    // `term` does not fully match `terminal`: the call runs.
    let ran = terminal_with_hooks(
        &format!(
            "  pre_tool_call:\n    - matcher: term\n      command: {}\n",
            block.display()
        ),
        "echo ran",
    );
    assert_eq!(ran["output"], "ran", "{ran}");
    let blocked = terminal_with_hooks(
        &format!(
            "  pre_tool_call:\n    - matcher: \"term.*|patch\"\n      command: {}\n",
            block.display()
        ),
        "echo ran",
    );
    assert_eq!(blocked, json!({"error": "no shell for you"}));
}
