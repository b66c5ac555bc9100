//! `execute_code` end to end, with real processes: a coordinator, a worker
//! per backend, `caduceus call` / the Control service. The script runs inside
//! the task's environment on the worker, and every tool call it makes comes
//! back to the coordinator through the whole pipeline (the guard, the audit
//! log), over the worker's own link.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_pass_by_value
)]

use std::time::Duration;

use caduceus_tests::Fleet;
use caduceus_tests::conformance::{BackendUnderTest, Stand};
use serde_json::{Value, json};

/// Writes, reads back and shells over five files from one script.
const LOOP: &str = r#"
from hermes_tools import terminal, read_file, write_file
import caduceus_tools
assert caduceus_tools.terminal is terminal
for i in range(5):
    written = write_file(f"exec-{i}.txt", f"line {i}\n")
    assert "error" not in written, written
    content = read_file(f"exec-{i}.txt")["content"]
    shouted = terminal(f"tr a-z A-Z < exec-{i}.txt")["output"]
    print(i, content.strip(), shouted.strip())
"#;

fn script_lines(result: &Value) -> Vec<String> {
    result["output"]
        .as_str()
        .unwrap_or_else(|| panic!("no output: {result}"))
        .lines()
        .map(str::to_owned)
        .collect()
}

async fn script_loop_on(backend: BackendUnderTest) {
    let stand = Stand::start(backend).await;
    let mut control = stand.control().await;
    let task = "exec-loop";
    let result = control
        .call(task, "execute_code", &json!({"code": LOOP}))
        .await;
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(result["tool_calls_made"], 15, "{result}");
    assert_eq!(
        script_lines(&result),
        (0..5)
            .map(|i| format!("{i} 1|line {i} LINE {i}"))
            .collect::<Vec<_>>(),
        "{result}"
    );
    // The files are in the task's environment: a plain terminal call of the
    // same task sees them.
    let listed = control
        .terminal(task, "cat exec-0.txt exec-4.txt", None)
        .await;
    assert_eq!(listed["output"], "line 0\nline 4", "{listed}");

    // Each of the script's calls went through the pipeline: one audit line
    // per call, for this task.
    let audit = std::fs::read_to_string(stand.fleet.home.path().join("audit.jsonl")).unwrap();
    let nested = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["task"] == task && l["tool"] == "write_file")
        .count();
    assert_eq!(nested, 5, "{audit}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_script_loops_over_terminal_read_and_write_on_local() {
    script_loop_on(BackendUnderTest::local()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_script_loops_over_terminal_read_and_write_on_ssh() {
    let Some(backend) = BackendUnderTest::ssh() else {
        return;
    };
    script_loop_on(backend).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_script_loops_over_terminal_read_and_write_on_docker() {
    let Some(backend) = BackendUnderTest::docker().ready_or_skip() else {
        return;
    };
    script_loop_on(backend).await;
}

/// A coordinator and a local worker; `config` is the config.yaml.
fn local_fleet(config: &str) -> (Fleet, caduceus_tests::Proc, caduceus_tests::Proc) {
    let fleet = Fleet::new();
    fleet.write_config(config);
    let coordinator = fleet.serve(&[]);
    let worker = fleet.worker(
        &coordinator,
        "w-exec",
        &fleet.token,
        &["--backends", "local"],
    );
    fleet.wait_for_backend(&coordinator, "w-exec", "local", Duration::from_secs(30));
    (fleet, coordinator, worker)
}

fn run(fleet: &Fleet, coordinator: &caduceus_tests::Proc, code: &str, task: &str) -> Value {
    fleet.call(coordinator, "execute_code", &json!({"code": code}), task)
}

#[test]
fn a_dangerous_command_inside_the_script_meets_the_guard() {
    let (fleet, coordinator, _worker) = local_fleet("approvals:\n  mode: deny\n");
    let result = run(
        &fleet,
        &coordinator,
        r#"
from hermes_tools import terminal
import base64, json
# Composed at run time, so the guard meets them at the calls, not in the text.
print(json.dumps(terminal(base64.b64decode("cm0gLXJmIC8=").decode())))
print(json.dumps(terminal(base64.b64decode("Y2htb2QgLVIgNzc3IC9ldGMvZXhlYy1ndWFyZC1wcm9iZQ==").decode())))
"#,
        "exec-guard",
    );
    assert_eq!(result["status"], "success", "{result}");
    let lines = script_lines(&result);
    let hardline: Value = serde_json::from_str(&lines[0]).unwrap();
    assert_eq!(hardline["status"], "blocked", "{hardline}");
    assert!(
        hardline["error"]
            .as_str()
            .unwrap()
            .starts_with("BLOCKED (hardline): recursive delete of root filesystem."),
        "{hardline}"
    );
    let denied: Value = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!(denied["status"], "blocked", "{denied}");
    assert_eq!(denied["exit_code"], -1, "{denied}");
    // Refused calls are still calls the script made.
    assert_eq!(result["tool_calls_made"], 2, "{result}");
}

/// Runs `sh -c` directly, out of the terminal tool's reach: only the guard's
/// reading of the whole script stands between it and the machine.
const DIRECT: &str = r#"
import subprocess
subprocess.run("mkdir -p probe && chmod -R 777 probe && echo ran > probe/ran.txt", shell=True)
print(open("probe/ran.txt").read().strip())
"#;

#[test]
fn a_script_with_a_dangerous_command_waits_for_approval_before_it_runs() {
    let (fleet, coordinator, _worker) = local_fleet("approvals:\n  mode: ask\n");
    let ran_marker = fleet.work.path().join("probe/ran.txt");
    let held = run(&fleet, &coordinator, DIRECT, "exec-approve");
    assert_eq!(held["status"], "error", "{held}");
    assert_eq!(held["approval_pending"], true, "{held}");
    assert_eq!(held["tool_calls_made"], 0, "{held}");
    assert_eq!(held["pattern_key"], "execute_code", "{held}");
    assert_eq!(
        held["description"],
        "script contains: world/other-writable permissions"
    );
    let id = held["approval_id"].as_str().unwrap().to_owned();
    assert!(
        held["error"]
            .as_str()
            .unwrap()
            .starts_with("Approval required: this execute_code script was flagged"),
        "{held}"
    );
    assert!(!ran_marker.exists(), "the script ran before approval");

    // The operator sees the whole script, and approves it once.
    let listed = fleet.client(&coordinator, &["approvals", "list", "--json"]);
    let listed: Vec<Value> = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["tool"], "execute_code");
    assert!(
        listed[0]["command"]
            .as_str()
            .unwrap()
            .starts_with("execute_code <<'PY'\n"),
        "{listed:?}"
    );
    let out = fleet.client(&coordinator, &["approvals", "approve", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let ran = run(&fleet, &coordinator, DIRECT, "exec-approve");
    assert_eq!(ran["status"], "success", "{ran}");
    assert_eq!(ran["output"], "ran\n", "{ran}");
    assert!(
        ran["approval"]
            .as_str()
            .unwrap()
            .starts_with("Command required approval (script contains: world/other-writable permissions. execute_code script execution."),
        "{ran}"
    );
    // Once means once: the same script asks again.
    let again = run(&fleet, &coordinator, DIRECT, "exec-approve");
    assert_eq!(again["approval_pending"], true, "{again}");
    assert_ne!(again["approval_id"], id.as_str(), "{again}");

    // A harmless script runs without asking.
    let plain = run(&fleet, &coordinator, "print(6 * 7)", "exec-approve");
    assert_eq!(plain["output"], "42\n", "{plain}");
}

#[test]
fn a_script_is_refused_whole_under_mode_deny_and_for_a_hardline_command() {
    let (fleet, coordinator, _worker) = local_fleet("approvals:\n  mode: deny\n");
    let denied = run(&fleet, &coordinator, DIRECT, "exec-deny");
    assert_eq!(
        denied,
        json!({
            "status": "error",
            "error": "BLOCKED: execute_code script flagged for approval (script contains: world/other-writable permissions. execute_code script execution. The script can spawn subprocesses or mutate files without passing through terminal command approval; approval is one-shot for this run.) but approvals.mode is deny, so it does not run. Use normal tools instead.",
            "tool_calls_made": 0,
            "duration_seconds": 0,
        })
    );
    assert!(!fleet.work.path().join("probe").exists(), "the script ran");
    let hardline = run(
        &fleet,
        &coordinator,
        "import os\nprint('started')\nos.system('rm -rf /')\n",
        "exec-deny",
    );
    assert_eq!(hardline["status"], "error", "{hardline}");
    assert!(
        hardline["error"].as_str().unwrap().starts_with(
            "BLOCKED (hardline): the script contains recursive delete of root filesystem."
        ),
        "{hardline}"
    );
    assert!(hardline.get("output").is_none(), "{hardline}");
}

#[test]
fn the_51st_call_gets_the_limit_error() {
    let (fleet, coordinator, _worker) = local_fleet("");
    let result = run(
        &fleet,
        &coordinator,
        r#"
from hermes_tools import terminal, write_file
import json
write_file("limit.txt", "x\n")
answers = [terminal("true") for _ in range(50)]
print(sum(1 for a in answers if a.get("exit_code") == 0))
print(json.dumps(answers[-1]))
"#,
        "exec-limit",
    );
    assert_eq!(result["status"], "success", "{result}");
    assert_eq!(result["tool_calls_made"], 50, "{result}");
    let lines = script_lines(&result);
    assert_eq!(lines[0], "49", "{result}");
    let last: Value = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!(
        last,
        json!({"error": "Tool call limit reached (50). No more tool calls allowed in this execution."})
    );
}

#[test]
fn a_forged_token_is_refused_and_printed_frames_do_nothing() {
    let (fleet, coordinator, _worker) = local_fleet("");
    let result = run(
        &fleet,
        &coordinator,
        r#"
import json, caduceus_tools
from hermes_tools import terminal
print(json.dumps(caduceus_tools._call("terminal", {"command": "touch forged.txt"}, token="forged")))
# A frame with the run's real token printed on the script's stdout is
# just output: the channel is not the script's stdout.
print("\x1ecaduceus-rpc " + json.dumps({"id": 99, "tool": "terminal",
      "args": {"command": "touch printed.txt"}, "token": caduceus_tools._token}))
print(terminal("ls forged.txt printed.txt 2>&1; echo rc=$?")["output"])
"#,
        "exec-forged",
    );
    assert_eq!(result["status"], "success", "{result}");
    let lines = script_lines(&result);
    assert_eq!(
        lines[0], r#"{"error": "Unauthorized RPC request"}"#,
        "{result}"
    );
    assert!(lines[1].contains("printed.txt"), "{result}");
    let ls = lines[2..].join("\n");
    assert!(ls.contains("rc=2"), "a refused call ran: {ls}");
    // The refused call is not counted; the terminal call is.
    assert_eq!(result["tool_calls_made"], 1, "{result}");
}

#[test]
fn the_timeout_kills_the_script_and_everything_it_started() {
    let (fleet, coordinator, _worker) = local_fleet("code_execution:\n  timeout: 3\n");
    let marker = format!("987{}", std::process::id());
    let code = format!(
        r#"
import subprocess, time
subprocess.Popen(["sleep", "{marker}"])
subprocess.Popen(["bash", "-c", "sleep {marker}1 & wait"])
print("started", flush=True)
time.sleep(600)
"#
    );
    let result = run(&fleet, &coordinator, &code, "exec-timeout");
    assert_eq!(result["status"], "timeout", "{result}");
    assert_eq!(result["error"], "Script timed out after 3s and was killed.");
    assert_eq!(
        result["output"],
        "started\n\n\n⏰ Script timed out after 3s and was killed."
    );
    assert!(
        caduceus_tests::wait_gone(&format!("sleep {marker}"), Duration::from_secs(10)),
        "the script's children outlived its timeout"
    );
}

#[test]
fn errors_show_the_traceback_and_big_output_is_cut_head_and_tail() {
    let (fleet, coordinator, _worker) = local_fleet("");
    let failed = run(
        &fleet,
        &coordinator,
        "print('before')\nraise ValueError('boom')\n",
        "exec-errors",
    );
    assert_eq!(failed["status"], "error", "{failed}");
    assert_eq!(failed["exit_code"], 1);
    assert_eq!(failed["error"], "Script exited with code 1");
    let output = failed["output"].as_str().unwrap();
    assert!(
        output.starts_with("before\n\n--- stderr ---\nTraceback (most recent call last):\n"),
        "{output}"
    );
    assert!(output.ends_with("ValueError: boom\n"), "{output}");

    let big = run(
        &fleet,
        &coordinator,
        "print('A' * 30000)\nprint('B' * 40000)\n",
        "exec-errors",
    );
    assert_eq!(big["status"], "success", "{big}");
    assert_eq!(big["stdout_truncated"], true);
    assert_eq!(big["stdout_bytes_total"], 70_002);
    assert_eq!(big["stdout_bytes_omitted"], 20_002);
    let text = big["output"].as_str().unwrap();
    assert!(
        text.contains(
            "\n\n... [OUTPUT TRUNCATED - 20,002 bytes omitted out of 70,002 total] ...\n\n"
        ),
        "{}",
        &text[19_990..20_100]
    );
    // The full text stays in the sandbox, readable with read_file.
    let spill = big["stdout_spill_path"].as_str().unwrap();
    let page = fleet.call(
        &coordinator,
        "read_file",
        &json!({"path": spill, "offset": 2, "limit": 1}),
        "exec-errors",
    );
    assert!(
        page["content"].as_str().unwrap().starts_with("2|BBBB"),
        "{page}"
    );
}
