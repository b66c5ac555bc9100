//! `caduceus mcp serve` driven by the `mcp` Python SDK's own client
//! (tests/mcp-client/driver.py), over stdio and streamable HTTP, against a
//! served coordinator with two real worker processes.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use caduceus_tests::{Fleet, Proc, bin, require};
use serde_json::Value;

fn driver() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp-client/driver.py")
}

/// Whether the `mcp` SDK (and its httpx2) can be imported.
fn sdk_present() -> bool {
    require(
        "the `mcp` Python SDK",
        "`pip install mcp==2.3.0` (.ci/run installs it)",
        || {
            Command::new("python3")
                .args(["-c", "import mcp, httpx2"])
                .output()
                .is_ok_and(|o| o.status.success())
        },
    )
}

/// A coordinator (approvals asked, not auto-answered) with workers w1 and w2.
fn fleet() -> (Fleet, Proc, Vec<Proc>) {
    let fleet = Fleet::new();
    fleet.write_config("approvals:\n  mode: ask\n");
    let coordinator = fleet.serve(&[]);
    let workers = ["w1", "w2"]
        .iter()
        .map(|name| fleet.worker(&coordinator, name, &fleet.token, &[]))
        .collect();
    fleet.wait_for_workers(&coordinator, &["w1", "w2"], Duration::from_secs(30));
    (fleet, coordinator, workers)
}

/// Runs one driver scenario; `env` says how it reaches the server.
fn drive(fleet: &Fleet, scenario: &str, env: &[(&str, String)]) -> Value {
    let mut cmd = Command::new("python3");
    cmd.arg(driver())
        .arg(scenario)
        .env("CADUCEUS_HOME", fleet.home.path())
        .env("CADUCEUS_ALLOW_ROOT_SANDBOX", "1")
        .env_remove("CADUCEUS_COORDINATOR")
        .env_remove("CADUCEUS_TOKEN");
    for (key, value) in env {
        cmd.env(key, value);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "driver {scenario} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "driver printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn stdio_env(fleet: &Fleet, coordinator: &Proc) -> Vec<(&'static str, String)> {
    let argv = serde_json::json!([
        bin().display().to_string(),
        "mcp",
        "serve",
        "--coordinator",
        coordinator.url(),
    ]);
    vec![
        ("MCP_MODE", "stdio".to_owned()),
        ("MCP_COMMAND", argv.to_string()),
        ("CADUCEUS_TOKEN", fleet.token.clone()),
    ]
}

/// `mcp serve --listen` in front of `coordinator`: clients bring their own token.
fn http_server(fleet: &Fleet, coordinator: &Proc) -> (Proc, String) {
    let mut cmd = fleet.command();
    cmd.args([
        "mcp",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--coordinator",
        &coordinator.url(),
    ]);
    let mut server = Proc::spawn(cmd, "mcp-http");
    let line = server.wait_for_stderr("caduceus mcp listening on ", Duration::from_secs(30));
    let url = line.rsplit(' ').next().unwrap().trim().to_owned();
    (server, url)
}

fn http_env(fleet: &Fleet, url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("MCP_MODE", "http".to_owned()),
        ("MCP_URL", url.to_owned()),
        ("MCP_TOKEN", fleet.token.clone()),
    ]
}

/// What every transport must show for the two-environment scenario.
fn assert_fleet_scenario(seen: &Value) {
    let tools: Vec<&str> = seen["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for tool in [
        "environment_create",
        "environment_list",
        "environment_release",
        "terminal",
        "process",
        "read_file",
        "write_file",
        "patch",
        "search_files",
    ] {
        assert!(tools.contains(&tool), "{tool} missing from {tools:?}");
    }
    assert!(!tools.contains(&"delegate_task"), "{tools:?}");
    assert_eq!(
        seen["terminal_schema"]["properties"]["environment"]["type"],
        "string"
    );

    let created = seen["created"].as_array().unwrap();
    let workers: Vec<&str> = created
        .iter()
        .map(|c| c["worker"].as_str().unwrap())
        .collect();
    assert_ne!(
        workers[0], workers[1],
        "two environments on two workers: {created:?}"
    );
    let (a, b) = (
        created[0]["environment"].as_str().unwrap(),
        created[1]["environment"].as_str().unwrap(),
    );
    assert_ne!(a, b);

    // Both commands waited for each other: they ran at the same time.
    assert_eq!(
        seen["together"][0]["output"], "met-a",
        "{}",
        seen["together"]
    );
    assert_eq!(
        seen["together"][1]["output"], "met-b",
        "{}",
        seen["together"]
    );

    assert_eq!(seen["long"]["output"], "slept");
    let progress = seen["progress"].as_array().unwrap();
    assert!(
        progress
            .iter()
            .any(|p| p.as_str().unwrap().starts_with("terminal running in ")),
        "a 5 s call reports progress: {progress:?}"
    );

    assert!(seen["write"]["error"].is_null(), "{}", seen["write"]);
    let content = seen["read"]["content"].as_str().unwrap();
    assert!(content.contains("hello from a"), "{content}");
    assert_eq!(seen["default"]["output"], "default-env");

    let listed = seen["listed"]["environments"].as_array().unwrap();
    let ids: Vec<&str> = listed
        .iter()
        .map(|e| e["environment"].as_str().unwrap())
        .collect();
    assert!(ids.contains(&a) && ids.contains(&b), "{listed:?}");
    assert!(
        listed.iter().any(|e| e["default"] == true),
        "the default environment is listed once used: {listed:?}"
    );
    for env in listed {
        assert!(env["worker"].is_string(), "{env}");
    }

    assert_eq!(seen["unknown"]["is_error"], true);
    assert!(
        seen["unknown"]["text"]
            .as_str()
            .unwrap()
            .contains("unknown environment 'nope'"),
        "{}",
        seen["unknown"]
    );
    for released in seen["released"].as_array().unwrap() {
        assert_eq!(released["released"], true, "{released}");
    }
    assert_eq!(seen["released_again"]["is_error"], true);
    let after: Vec<&str> = seen["listed_after"]["environments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["environment"].as_str().unwrap())
        .collect();
    assert!(!after.contains(&a) && !after.contains(&b), "{after:?}");
}

#[test]
fn stdio_two_environments_on_two_workers_run_at_once() {
    if !sdk_present() {
        return;
    }
    let (fleet, coordinator, _workers) = fleet();
    let rendezvous = tempfile::tempdir().unwrap();
    let mut env = stdio_env(&fleet, &coordinator);
    env.push(("RENDEZVOUS", rendezvous.path().display().to_string()));
    let seen = drive(&fleet, "fleet", &env);
    assert_fleet_scenario(&seen);
    assert_session_environments_released(&fleet, &coordinator);
}

#[test]
fn http_two_environments_on_two_workers_run_at_once() {
    if !sdk_present() {
        return;
    }
    let (fleet, coordinator, _workers) = fleet();
    let (_server, url) = http_server(&fleet, &coordinator);
    let rendezvous = tempfile::tempdir().unwrap();
    let mut env = http_env(&fleet, &url);
    env.push(("RENDEZVOUS", rendezvous.path().display().to_string()));
    let seen = drive(&fleet, "fleet", &env);
    assert_fleet_scenario(&seen);
    assert_session_environments_released(&fleet, &coordinator);
}

/// The session's end releases what it still held (its default environment
/// was never released by the client).
fn assert_session_environments_released(fleet: &Fleet, coordinator: &Proc) {
    let held = |status: &Value| -> Vec<String> {
        status["workers"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|w| w["environments"].as_array().unwrap().clone())
            .filter_map(|e| e["task_id"].as_str().map(str::to_owned))
            .filter(|t| t.starts_with("mcp-"))
            .collect()
    };
    // Workers report their environments with each heartbeat (1 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left = held(&fleet.status(coordinator));
        if left.is_empty() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "environments of an ended MCP session are still held: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn dangerous(dir: &Path) -> String {
    std::fs::create_dir_all(dir.join("build")).unwrap();
    format!("rm -rf {}/build; echo removed-$?", dir.display())
}

fn assert_approval_scenario(seen: &Value, dir: &Path) {
    // A client without elicitation gets today's pending_approval result.
    assert_eq!(seen["without"]["status"], "pending_approval", "{seen}");
    assert!(seen["without"]["approval_id"].is_string());
    // A client with it is asked once, approves, and the command runs.
    let asked = seen["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{seen}");
    let message = asked[0]["message"].as_str().unwrap();
    assert!(message.contains("rm -rf"), "{message}");
    let choices = &asked[0]["schema"]["properties"]["decision"]["enum"];
    assert!(
        choices.as_array().unwrap().iter().any(|c| c == "deny"),
        "{choices}"
    );
    assert_eq!(seen["with"]["output"], "removed-0", "{}", seen["with"]);
    assert!(!dir.join("build").exists());
    // Declining is a denial the model reads.
    assert_ne!(
        seen["declined"]["output"], "removed-0",
        "{}",
        seen["declined"]
    );
    assert!(
        seen["declined"]["error"].is_string(),
        "{}",
        seen["declined"]
    );
}

#[test]
fn stdio_a_dangerous_command_asks_through_elicitation_or_stays_pending() {
    if !sdk_present() {
        return;
    }
    let (fleet, coordinator, _workers) = fleet();
    let dir = tempfile::tempdir().unwrap();
    let mut env = stdio_env(&fleet, &coordinator);
    env.push(("DANGEROUS", dangerous(dir.path())));
    let seen = drive(&fleet, "approval", &env);
    assert_approval_scenario(&seen, dir.path());
}

#[test]
fn http_a_dangerous_command_asks_through_elicitation_or_stays_pending() {
    if !sdk_present() {
        return;
    }
    let (fleet, coordinator, _workers) = fleet();
    let (_server, url) = http_server(&fleet, &coordinator);
    let dir = tempfile::tempdir().unwrap();
    let mut env = http_env(&fleet, &url);
    env.push(("DANGEROUS", dangerous(dir.path())));
    let seen = drive(&fleet, "approval", &env);
    assert_approval_scenario(&seen, dir.path());
}

fn create_token(fleet: &Fleet, coordinator: &Proc, role: &str) -> String {
    let mut cmd = fleet.command();
    cmd.args([
        "tokens",
        "create",
        "--role",
        role,
        "--name",
        &format!("mcp-{role}"),
        "--coordinator",
        &coordinator.url(),
        "--token",
        &fleet.token,
    ]);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn http_refuses_a_missing_or_wrong_token_and_respects_scoped_roles() {
    if !sdk_present() {
        return;
    }
    let (fleet, coordinator, _workers) = fleet();
    let (_server, url) = http_server(&fleet, &coordinator);
    let dir = tempfile::tempdir().unwrap();
    let mut env = http_env(&fleet, &url);
    env.push(("WORKER_TOKEN", create_token(&fleet, &coordinator, "worker")));
    env.push(("CLIENT_TOKEN", create_token(&fleet, &coordinator, "client")));
    env.push(("DANGEROUS", dangerous(dir.path())));
    let seen = drive(&fleet, "refused", &env);
    assert_eq!(seen["missing"]["status"], 401, "{seen}");
    assert_eq!(seen["missing"]["www_authenticate"], "Bearer");
    assert_eq!(seen["wrong"]["status"], 401, "{seen}");
    assert!(
        seen["wrong"]["body"]
            .as_str()
            .unwrap()
            .contains("invalid token"),
        "{seen}"
    );
    assert_eq!(seen["worker"]["status"], 403, "{seen}");
    assert_eq!(seen["client"]["status"], 200, "{seen}");
    assert_eq!(seen["shared"]["status"], 200, "{seen}");
    assert_eq!(seen["client_call"]["output"], "as-client");
    // A client token may not answer approvals: nobody is asked, the command
    // waits for an operator.
    assert_eq!(seen["client_dangerous"]["status"], "pending_approval");
    assert_eq!(seen["client_asked"], serde_json::json!([]));
    assert!(dir.path().join("build").exists());
}

#[test]
fn stdio_a_call_the_client_cancels_stops_its_command_on_the_worker() {
    if !sdk_present() {
        return;
    }
    let (fleet, coordinator, _workers) = fleet();
    let seen = drive(&fleet, "cancel", &stdio_env(&fleet, &coordinator));
    assert_ne!(seen["gave_up"], false, "{seen}");
    assert_eq!(seen["still_running"], false, "{seen}");
    assert_eq!(seen["next"]["output"], "next", "{seen}");
}
