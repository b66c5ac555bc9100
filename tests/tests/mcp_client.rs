//! The MCP client against real servers from PyPI: `mcp-server-time` and
//! `mcp-server-git` over stdio, and a streamable-HTTP server written with the
//! `mcp` Python SDK (tests/fixtures/mcp/http_server.py) that adds a tool and
//! sends tools/list_changed mid-session. Their tools are registered on a
//! served coordinator as `mcp__<server>__<tool>` and called with
//! `caduceus call`, as a model's calls would be.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use caduceus_tests::{Fleet, Proc, require, signal};
use serde_json::{Value, json};

/// Whether `python3` can import `module` (an installed PyPI package).
fn python_has(module: &str, package: &str) -> bool {
    require(
        &format!("the Python package {package}"),
        "`pip install mcp==2.3.0 mcp-server-time==2026.10.19 mcp-server-git==2026.10.19` (.ci/run installs them)",
        || {
            Command::new("python3")
                .args(["-c", &format!("import {module}")])
                .output()
                .is_ok_and(|o| o.status.success())
        },
    )
}

fn stdio_servers_present() -> bool {
    python_has("mcp_server_time", "mcp-server-time")
        && python_has("mcp_server_git", "mcp-server-git")
}

/// The tool names `caduceus tools` lists for `toolsets` (all, when empty).
fn tool_names(fleet: &Fleet, coordinator: &Proc, toolsets: &str) -> Vec<String> {
    let mut args = vec!["tools", "--json"];
    if !toolsets.is_empty() {
        args.extend(["--toolsets", toolsets]);
    }
    let out = fleet.client(coordinator, &args);
    assert!(
        out.status.success(),
        "tools failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let defs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut names: Vec<String> = defs
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn script(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn git_repo(dir: &Path) {
    for args in [
        vec!["init", "-q", "-b", "main"],
        vec!["config", "user.email", "t@example.com"],
        vec!["config", "user.name", "t"],
    ] {
        assert!(
            Command::new("git")
                .args(&args)
                .current_dir(dir)
                .status()
                .unwrap()
                .success()
        );
    }
    std::fs::write(dir.join("notes.txt"), "hello\n").unwrap();
}

#[test]
fn stdio_servers_are_listed_and_called_with_hermes_shaped_results() {
    if !stdio_servers_present() {
        return;
    }
    let fleet = Fleet::new();
    let repo = tempfile::tempdir().unwrap();
    git_repo(repo.path());
    fleet.write_config(&format!(
        "mcp_servers:\n  time:\n    command: mcp-server-time\n    args: [--local-timezone, UTC]\n  git:\n    command: mcp-server-git\n    args: --repository '{}'\n    tools:\n      exclude: [git_init]\n  off:\n    command: mcp-server-time\n    enabled: false\n",
        repo.path().display()
    ));
    let coordinator = fleet.serve(&[]);

    let time_tools = tool_names(&fleet, &coordinator, "mcp-time");
    assert_eq!(
        time_tools,
        ["mcp__time__convert_time", "mcp__time__get_current_time"]
    );
    // The server's name is an alias of its toolset, as in hermes.
    assert_eq!(tool_names(&fleet, &coordinator, "time"), time_tools);
    let git_tools = tool_names(&fleet, &coordinator, "mcp-git");
    assert!(
        git_tools.contains(&"mcp__git__git_status".to_owned()),
        "{git_tools:?}"
    );
    assert!(
        !git_tools.contains(&"mcp__git__git_init".to_owned()),
        "excluded: {git_tools:?}"
    );
    let everything = tool_names(&fleet, &coordinator, "mcp-time,mcp-git,terminal");
    assert!(!everything.iter().any(|t| t.starts_with("mcp__off__")));

    // A successful call: {"result": <the text block>} (mcp-server-time's
    // structuredContent is its text serialized, so it is not repeated).
    let now = fleet.call(
        &coordinator,
        "mcp__time__get_current_time",
        &json!({"timezone": "Europe/Oslo"}),
        "t1",
    );
    let keys: Vec<&String> = now.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["result"], "{now}");
    let inner: Value = serde_json::from_str(now["result"].as_str().unwrap()).unwrap();
    assert_eq!(inner["timezone"], "Europe/Oslo", "{now}");

    // The server refuses the arguments: an error the model can read.
    let bad = fleet.call(
        &coordinator,
        "mcp__time__get_current_time",
        &json!({"timezone": "Not/A_Zone"}),
        "t1",
    );
    let message = bad["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {bad}"));
    assert!(message.contains("Not/A_Zone"), "{bad}");

    let status = fleet.call(
        &coordinator,
        "mcp__git__git_status",
        &json!({"repo_path": repo.path().display().to_string()}),
        "t1",
    );
    let text = status["result"]
        .as_str()
        .unwrap_or_else(|| panic!("{status}"));
    assert!(text.contains("notes.txt"), "{status}");
    // (Calling the excluded `mcp__git__git_init` is not asserted: the
    // pipeline's fuzzy name repair turns it into `mcp__git__git_commit`.)
}

/// `tests/fixtures/mcp/http_server.py`, started; its port.
fn http_fixture() -> (Child, u16) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/http_server.py");
    let mut child = Command::new("python3")
        .arg(script)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("fixture said {line:?}"))
        .parse()
        .unwrap();
    (child, port)
}

#[test]
fn http_server_tools_hot_reload_on_list_changed() {
    if !python_has("mcp, httpx2, uvicorn", "mcp") {
        return;
    }
    let (mut fixture, port) = http_fixture();
    let fleet = Fleet::new();
    fleet.write_config(&format!(
        "mcp_servers:\n  fixture:\n    url: http://127.0.0.1:{port}/mcp\n    headers:\n      X-Fixture-Token: \"tag-${{FIXTURE_TAG}}\"\n    timeout: 30\n"
    ));
    let coordinator = fleet.serve_with_env(&[], &[("FIXTURE_TAG", "blue-42")]);
    let call = |tool: &str, args: Value| fleet.call(&coordinator, tool, &args, "h1");

    let before = tool_names(&fleet, &coordinator, "mcp-fixture");
    assert_eq!(
        before,
        [
            "mcp__fixture__echo",
            "mcp__fixture__fail",
            "mcp__fixture__forecast",
            "mcp__fixture__grow",
            "mcp__fixture__retired_quarterly_ledger_export",
            "mcp__fixture__whoami",
        ]
    );
    // The configured header reached the server, ${VAR} interpolated.
    assert_eq!(
        call("mcp__fixture__whoami", json!({}))["result"],
        "tag-blue-42"
    );
    // Structured output only (the text block is its JSON): hermes puts the
    // text in `result` and drops the duplicate.
    let forecast = call("mcp__fixture__forecast", json!({"city": "Oslo"}));
    assert_eq!(forecast.as_object().unwrap().len(), 1, "{forecast}");
    let parsed: Value = serde_json::from_str(forecast["result"].as_str().unwrap()).unwrap();
    assert_eq!(
        parsed,
        json!({"city": "Oslo", "temperature_c": 21, "sky": "clear"})
    );
    // Text and a structured value that is not its serialization: both.
    assert_eq!(
        call("mcp__fixture__echo", json!({"text": "héllo"})),
        json!({"result": "héllo", "structuredContent": {"result": "héllo"}})
    );
    // isError: the tool's text as the error.
    let failed = call("mcp__fixture__fail", json!({"reason": "on purpose"}));
    assert!(
        failed["error"]
            .as_str()
            .is_some_and(|e| e.contains("fixture failure: on purpose")),
        "{failed}"
    );

    // Mid-session the server adds `sprout`, removes the ledger tool and
    // sends tools/list_changed: the next definitions request shows it.
    assert_eq!(call("mcp__fixture__grow", json!({}))["result"], "grown");
    wait_until(
        "the registry to show the new tool list",
        Duration::from_secs(30),
        || {
            let names = tool_names(&fleet, &coordinator, "mcp-fixture");
            names.contains(&"mcp__fixture__sprout".to_owned())
                && !names.contains(&"mcp__fixture__retired_quarterly_ledger_export".to_owned())
        },
    );
    assert_eq!(
        call("mcp__fixture__sprout", json!({"n": "3"}))["result"],
        "sprouted 3",
        "arguments are coerced to the new tool's schema"
    );
    let removed = call("mcp__fixture__retired_quarterly_ledger_export", json!({}));
    assert!(
        removed["error"].as_str().is_some_and(|e| e.starts_with(
            "Tool 'mcp__fixture__retired_quarterly_ledger_export' does not exist. Available tools: "
        )),
        "{removed}"
    );

    // The server dies: calls fail with an error naming it.
    let _ = fixture.kill();
    let _ = fixture.wait();
    let dead = call("mcp__fixture__echo", json!({"text": "anyone?"}));
    let message = dead["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {dead}"));
    assert!(message.contains("'fixture'"), "{dead}");
}

/// A stdio server started through a script that refuses to start while
/// `<dir>/<name>.up` is missing and records its pid in `<dir>/<name>.pid`.
fn switchable_server(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}.sh"));
    script(
        &path,
        &format!(
            "#!/bin/sh\n[ -e \"$STATE_DIR/{name}.up\" ] || {{ echo '{name} is switched off' >&2; exit 3; }}\necho $$ > \"$STATE_DIR/{name}.pid\"\nexec mcp-server-time --local-timezone UTC\n"
        ),
    );
    std::fs::write(dir.join(format!("{name}.up")), "").unwrap();
    path
}

fn kill_server(dir: &Path, name: &str) {
    std::fs::remove_file(dir.join(format!("{name}.up"))).unwrap();
    let pid: u32 = std::fs::read_to_string(dir.join(format!("{name}.pid")))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    signal(pid, "KILL");
}

#[test]
fn killed_or_hung_stdio_server_fails_clearly_is_hidden_while_reconnecting_and_parks_after_repeated_failures()
 {
    if !python_has("mcp_server_time", "mcp-server-time") {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let flaky = switchable_server(state.path(), "flaky");
    let fragile = switchable_server(state.path(), "fragile");
    let fleet = Fleet::new();
    let env = format!("    env:\n      STATE_DIR: '{}'\n", state.path().display());
    fleet.write_config(&format!(
        "mcp_servers:\n  flaky:\n    command: '{}'\n{env}    tools:\n      include: [get_current_time]\n    timeout: 3\n    reconnect: {{first_delay: 0.2, max_delay: 1, retries: 100000}}\n  fragile:\n    command: '{}'\n{env}    tools:\n      include: [convert_time]\n    reconnect: {{first_delay: 0.2, max_delay: 0.2, retries: 2, probe_interval: 2}}\n",
        flaky.display(),
        fragile.display()
    ));
    let coordinator = fleet.serve(&[]);
    let now = |server: &str| {
        let (tool, args) = match server {
            "flaky" => ("mcp__flaky__get_current_time", json!({"timezone": "UTC"})),
            _ => (
                "mcp__fragile__convert_time",
                json!({"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
            ),
        };
        fleet.call(&coordinator, tool, &args, "k1")
    };
    assert!(now("flaky")["result"].is_string(), "{}", now("flaky"));
    assert!(now("fragile")["result"].is_string(), "{}", now("fragile"));

    let mcp_tools = || -> Vec<String> {
        tool_names(&fleet, &coordinator, "")
            .into_iter()
            .filter(|t| t.starts_with("mcp__"))
            .collect()
    };
    // Killed, and unable to start again: calls fail with an error naming the
    // server, while the supervisor keeps retrying.
    kill_server(state.path(), "flaky");
    let down = now("flaky");
    let message = down["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {down}"));
    assert!(message.contains("MCP server 'flaky'"), "{down}");
    // While it reconnects its tools are hidden from the model (hermes'
    // check_fn), and a call still names the server and why.
    wait_until(
        "flaky's tools to be hidden while it reconnects",
        Duration::from_secs(60),
        || mcp_tools() == ["mcp__fragile__convert_time"],
    );
    assert_eq!(
        now("flaky")["error"],
        "Tool 'mcp__flaky__get_current_time' is not available right now: MCP server 'flaky' lost its connection and is reconnecting; its tools are back once it is.",
    );
    // Back: the next reconnect attempt picks it up and shows its tools again.
    std::fs::write(state.path().join("flaky.up"), "").unwrap();
    wait_until("flaky to reconnect", Duration::from_secs(60), || {
        now("flaky")["result"].is_string()
    });
    assert_eq!(
        mcp_tools(),
        ["mcp__flaky__get_current_time", "mcp__fragile__convert_time"]
    );

    // Hung (SIGSTOP): the call ends at the server's `timeout` with a timeout
    // error; once the server runs again, so do calls.
    let pid: u32 = std::fs::read_to_string(state.path().join("flaky.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    signal(pid, "STOP");
    let hung = now("flaky");
    signal(pid, "CONT");
    assert_eq!(
        hung["error"], "MCP call to 'get_current_time' on server 'flaky' timed out after 3s",
        "{hung}"
    );
    assert!(now("flaky")["result"].is_string());

    // Repeated failure: parked, its tools deregistered, then probed.
    kill_server(state.path(), "fragile");
    // (Hidden first, while its retries run; parked, it is gone: a call
    // reads the pipeline's unknown-tool error.)
    wait_until("fragile to be parked", Duration::from_secs(60), || {
        now("fragile")["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("Tool 'mcp__fragile__convert_time' does not exist"))
    });
    assert_eq!(mcp_tools(), ["mcp__flaky__get_current_time"]);
    std::fs::write(state.path().join("fragile.up"), "").unwrap();
    wait_until("fragile to be probed back", Duration::from_secs(60), || {
        now("fragile")["result"].is_string()
    });
}

#[test]
fn mcp_list_and_test_commands() {
    if !python_has("mcp_server_time", "mcp-server-time") {
        return;
    }
    let fleet = Fleet::new();
    fleet.write_config(
        "mcp_servers:\n  time:\n    command: mcp-server-time\n    tools:\n      exclude: [convert_time]\n  broken:\n    args: [x]\n  missing:\n    command: /nonexistent/mcp-server\n",
    );
    let run = |args: &[&str]| fleet.command().args(args).output().unwrap();

    let list = run(&["mcp", "list", "--json"]);
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    let rows: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(rows[0]["name"], "time");
    assert_eq!(rows[0]["transport"], "stdio");
    assert_eq!(rows[0]["toolset"], "mcp-time");
    assert_eq!(rows[0]["enabled"], true);
    assert_eq!(
        rows[1]["error"],
        "MCP server 'broken' has neither a command (stdio) nor a url (HTTP)"
    );
    let table = run(&["mcp", "list"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("all but convert_time"), "{table}");

    let test = run(&["mcp", "test", "time", "--json"]);
    assert!(
        test.status.success(),
        "{}",
        String::from_utf8_lossy(&test.stderr)
    );
    let probe: Value = serde_json::from_slice(&test.stdout).unwrap();
    assert_eq!(probe["ok"], true);
    assert_eq!(
        probe["tools"],
        json!([{"name": "mcp__time__get_current_time", "tool": "get_current_time", "description": probe["tools"][0]["description"]}])
    );
    assert_eq!(probe["filtered_out"], json!(["convert_time"]));

    let missing = run(&["mcp", "test", "missing", "--json"]);
    assert!(!missing.status.success());
    let failure: Value = serde_json::from_slice(&missing.stdout).unwrap();
    assert!(
        failure["error"]
            .as_str()
            .unwrap()
            .starts_with("MCP server 'missing' could not be started: /nonexistent/mcp-server"),
        "{failure}"
    );
    let unknown = run(&["mcp", "test", "nope"]);
    assert!(!unknown.status.success());
    assert!(
        String::from_utf8_lossy(&unknown.stderr)
            .contains("no MCP server 'nope' in mcp_servers (configured: time, broken, missing)")
    );
}

/// `tests/fixtures/mcp/legacy_server.py`: a server that knows only the
/// `initialize` handshake.
fn legacy_fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/legacy_server.py")
}

/// `(pid, method)` lines of a legacy fixture's log.
fn logged_methods(log: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(pid, method)| (pid.to_owned(), method.to_owned()))
        .collect()
}

#[test]
fn servers_that_only_know_initialize_are_spoken_to_in_their_older_protocol() {
    if !require("python3", "a python3 on PATH", || {
        Command::new("python3")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }) {
        return;
    }
    let logs = tempfile::tempdir().unwrap();
    let stdio_log = logs.path().join("stdio.log");
    let older_log = logs.path().join("older.log");
    let http_log = logs.path().join("http.log");
    let mut http = Command::new("python3")
        .arg(legacy_fixture())
        .args(["--http", "--log"])
        .arg(&http_log)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(http.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("fixture said {line:?}"))
        .parse()
        .unwrap();
    let fleet = Fleet::new();
    let fixture = legacy_fixture().display().to_string();
    fleet.write_config(&format!(
        "mcp_servers:\n  legacy:\n    command: python3\n    args: ['{fixture}', --log, '{}']\n  older:\n    command: python3\n    args: ['{fixture}', --protocol, '2025-06-18', --log, '{}']\n  legacyhttp:\n    url: http://127.0.0.1:{port}/mcp\n",
        stdio_log.display(),
        older_log.display()
    ));

    // `mcp test`: the handshake each server agreed to.
    let probe = |name: &str| -> Value {
        let out = fleet
            .command()
            .args(["mcp", "test", name, "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mcp test {name}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let legacy = probe("legacy");
    assert_eq!(legacy["protocol"], "2025-11-25", "{legacy}");
    assert_eq!(legacy["server_name"], "legacy-fixture", "{legacy}");
    assert_eq!(legacy["tools"].as_array().unwrap().len(), 2, "{legacy}");
    // Over stdio the current handshake was tried first and refused; a fresh
    // process was then spoken to with `initialize`.
    let methods = logged_methods(&stdio_log);
    assert_eq!(methods[0].1, "server/discover", "{methods:?}");
    let (second_pid, _) = methods
        .iter()
        .find(|(_, m)| m == "initialize")
        .unwrap_or_else(|| panic!("no initialize: {methods:?}"));
    assert_ne!(
        *second_pid, methods[0].0,
        "a fresh process for the fallback"
    );
    assert!(
        methods
            .iter()
            .filter(|(pid, _)| pid == second_pid)
            .any(|(_, m)| m == "tools/list"),
        "{methods:?}"
    );
    assert_eq!(probe("older")["protocol"], "2025-06-18");
    let over_http = probe("legacyhttp");
    assert_eq!(over_http["protocol"], "2025-11-25", "{over_http}");
    assert!(
        logged_methods(&http_log)
            .iter()
            .any(|(_, m)| m == "initialize")
    );

    // Served: their tools are registered and called like any other.
    let coordinator = fleet.serve(&[]);
    for server in ["legacy", "older", "legacyhttp"] {
        assert_eq!(
            tool_names(&fleet, &coordinator, &format!("mcp-{server}")),
            [
                format!("mcp__{server}__echo"),
                format!("mcp__{server}__protocol")
            ]
        );
        assert_eq!(
            fleet.call(
                &coordinator,
                &format!("mcp__{server}__echo"),
                &json!({"text": "héllo"}),
                "l1"
            ),
            json!({"result": "héllo"})
        );
    }
    assert_eq!(
        fleet.call(&coordinator, "mcp__older__protocol", &json!({}), "l1"),
        json!({"result": "2025-06-18"})
    );
    let _ = http.kill();
    let _ = http.wait();
}

/// Whether `pid` runs (a zombie nobody reaped yet has ended).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Processes whose parent is `parent` and whose command line contains `needle`.
fn children_running(parent: u32, needle: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid …`; comm may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if ppid == Some(parent) && String::from_utf8_lossy(&cmdline).contains(needle) {
            found.push(pid);
        }
    }
    found
}

#[test]
fn a_server_hosted_on_a_labelled_worker_runs_there_and_leaves_with_it() {
    if !python_has("mcp_server_time", "mcp-server-time") {
        return;
    }
    let fleet = Fleet::new();
    fleet.write_config(
        "mcp_servers:\n  labtime:\n    command: mcp-server-time\n    args: [--local-timezone, UTC]\n    on:\n      labels: {site: lab}\n",
    );
    let coordinator = fleet.serve(&[]);
    let listed = || tool_names(&fleet, &coordinator, "");
    let hosted = [
        "mcp__labtime__convert_time",
        "mcp__labtime__get_current_time",
    ];
    let has_hosted = |names: &[String]| hosted.iter().all(|t| names.contains(&(*t).to_owned()));
    assert!(
        !listed().iter().any(|t| t.starts_with("mcp__labtime__")),
        "no worker yet: no hosted tools"
    );
    let plain = fleet.worker(&coordinator, "plain", &fleet.token, &[]);
    let mut lab = fleet.worker(
        &coordinator,
        "lab",
        &fleet.token,
        &["--labels", "site=lab", "--host-mcp"],
    );
    wait_until(
        "the lab worker to host labtime",
        Duration::from_secs(60),
        || has_hosted(&listed()),
    );
    assert_eq!(
        tool_names(&fleet, &coordinator, "labtime"),
        hosted,
        "in toolset mcp-labtime, with the server's name as its alias"
    );

    // Called through the coordinator, as any tool; it runs on the worker.
    let now = fleet.call(
        &coordinator,
        "mcp__labtime__get_current_time",
        &json!({"timezone": "Europe/Oslo"}),
        "h1",
    );
    let inner: Value = serde_json::from_str(
        now["result"]
            .as_str()
            .unwrap_or_else(|| panic!("no result: {now}")),
    )
    .unwrap();
    assert_eq!(inner["timezone"], "Europe/Oslo", "{now}");
    let bad = fleet.call(
        &coordinator,
        "mcp__labtime__get_current_time",
        &json!({"timezone": "Not/A_Zone"}),
        "h1",
    );
    assert!(
        bad["error"]
            .as_str()
            .is_some_and(|e| e.contains("Not/A_Zone")),
        "{bad}"
    );
    // The server process is the lab worker's child, and nobody else's.
    let servers = children_running(lab.pid(), "mcp-server-time");
    assert_eq!(
        servers.len(),
        1,
        "one server on the lab worker: {servers:?}"
    );
    assert!(children_running(plain.pid(), "mcp-server-time").is_empty());
    assert!(children_running(coordinator.pid(), "mcp-server-time").is_empty());

    // The worker dies: its tools go with it, and so does its server.
    lab.kill();
    wait_until(
        "the hosted tools to leave with their worker",
        Duration::from_secs(60),
        || !listed().iter().any(|t| t.starts_with("mcp__labtime__")),
    );
    let gone = fleet.call(
        &coordinator,
        "mcp__labtime__get_current_time",
        &json!({"timezone": "UTC"}),
        "h1",
    );
    assert!(
        gone["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("Tool 'mcp__labtime__get_current_time' does not exist")),
        "{gone}"
    );
    wait_until(
        "the dead worker's server to end (its stdin closed)",
        Duration::from_secs(30),
        || !alive(servers[0]),
    );

    // Another worker with the labels: it hosts the server afresh.
    let lab2 = fleet.worker(
        &coordinator,
        "lab2",
        &fleet.token,
        &["--labels", "site=lab", "--host-mcp"],
    );
    wait_until("lab2 to host labtime", Duration::from_secs(60), || {
        has_hosted(&listed())
    });
    let again = fleet.call(
        &coordinator,
        "mcp__labtime__convert_time",
        &json!({"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}),
        "h2",
    );
    assert!(again["result"].is_string(), "{again}");
    assert_eq!(children_running(lab2.pid(), "mcp-server-time").len(), 1);
}

#[test]
fn a_hosted_server_that_dies_is_hidden_on_the_coordinator_until_its_worker_reconnects_it() {
    if !python_has("mcp_server_time", "mcp-server-time") {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let flaky = switchable_server(state.path(), "hflaky");
    let fleet = Fleet::new();
    fleet.write_config(&format!(
        "mcp_servers:\n  hflaky:\n    command: '{}'\n    env:\n      STATE_DIR: '{}'\n    tools:\n      include: [get_current_time]\n    reconnect: {{first_delay: 0.2, max_delay: 1, retries: 100000}}\n    on:\n      labels: {{site: lab}}\n",
        flaky.display(),
        state.path().display()
    ));
    let coordinator = fleet.serve(&[]);
    let _lab = fleet.worker(
        &coordinator,
        "lab",
        &fleet.token,
        &["--labels", "site=lab", "--host-mcp"],
    );
    let now = || {
        fleet.call(
            &coordinator,
            "mcp__hflaky__get_current_time",
            &json!({"timezone": "UTC"}),
            "f1",
        )
    };
    let offered = || {
        tool_names(&fleet, &coordinator, "").contains(&"mcp__hflaky__get_current_time".to_owned())
    };
    wait_until(
        "the lab worker to host hflaky",
        Duration::from_secs(60),
        offered,
    );
    assert!(now()["result"].is_string(), "{}", now());

    // Its process killed and kept down: the worker reconnects in vain, and
    // the coordinator hides the tool with the reason.
    kill_server(state.path(), "hflaky");
    wait_until(
        "the hosted tool to be hidden while its server reconnects",
        Duration::from_secs(60),
        || !offered(),
    );
    assert_eq!(
        now()["error"],
        "Tool 'mcp__hflaky__get_current_time' is not available right now: MCP server 'hflaky' lost its connection and is reconnecting; its tools are back once it is."
    );
    std::fs::write(state.path().join("hflaky.up"), "").unwrap();
    wait_until("hflaky to be back", Duration::from_secs(60), || {
        offered() && now()["result"].is_string()
    });
}

#[test]
fn a_worker_hosts_only_when_started_with_host_mcp_reads_the_variables_itself_and_its_servers_die_with_it()
 {
    if !python_has("mcp_server_time", "mcp-server-time") {
        return;
    }
    let state = tempfile::tempdir().unwrap();
    let dir = state.path().display().to_string();
    // The server records the key it was given, and leaves a helper running
    // that does not read its stdin (as many a server's children do).
    let server = state.path().join("keyed.sh");
    script(
        &server,
        &format!(
            "#!/bin/sh\nprintf '%s' \"$WHO\" > '{dir}/who'\nsleep 1000 &\necho $! > '{dir}/helper'\nexec mcp-server-time --local-timezone UTC\n"
        ),
    );
    let fleet = Fleet::new();
    fleet.write_config(&format!(
        "mcp_servers:\n  keyed:\n    command: '{}'\n    env:\n      WHO: '${{HOSTED_KEY}}'\n    on:\n      labels: {{site: lab}}\n",
        server.display()
    ));
    let coordinator = fleet.serve_with_env(&[], &[("HOSTED_KEY", "coordinator-secret")]);
    let offered = || {
        tool_names(&fleet, &coordinator, "").contains(&"mcp__keyed__get_current_time".to_owned())
    };

    // Labels alone do not make a worker run the coordinator's commands.
    let mut refusing = fleet.worker_with_env(
        &coordinator,
        "refusing",
        &["--labels", "site=lab"],
        &[("HOSTED_KEY", "refusing-secret")],
    );
    refusing.wait_for_stderr(
        "refused: this worker was not started with --host-mcp",
        Duration::from_secs(60),
    );
    assert!(!state.path().join("who").exists(), "nothing was started");
    assert!(!offered());

    let mut lab = fleet.worker_with_env(
        &coordinator,
        "lab",
        &["--labels", "site=lab", "--host-mcp"],
        &[("HOSTED_KEY", "worker-secret")],
    );
    wait_until(
        "the lab worker to host keyed",
        Duration::from_secs(60),
        offered,
    );
    // `${HOSTED_KEY}` was read on the worker: the coordinator's value never left it.
    assert_eq!(
        std::fs::read_to_string(state.path().join("who")).unwrap(),
        "worker-secret"
    );
    let helper: u32 = std::fs::read_to_string(state.path().join("helper"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let servers = children_running(lab.pid(), "mcp-server-time");
    assert_eq!(servers.len(), 1, "{servers:?}");
    assert!(alive(helper));

    // kill -9: the worker's guardian ends the server and what it started.
    lab.kill();
    wait_until(
        "the dead worker's server and its helper to end",
        Duration::from_secs(30),
        || !alive(servers[0]) && !alive(helper),
    );
}

/// Creates a scoped token with `role` named `name`; returns its secret.
fn create_token(fleet: &Fleet, coordinator: &Proc, role: &str, name: &str) -> String {
    let out = fleet.client(
        coordinator,
        &["tokens", "create", "--role", role, "--name", name],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The model's definition of `tool` (`caduceus tools --json`).
fn definition(fleet: &Fleet, coordinator: &Proc, tool: &str) -> Value {
    let out = fleet.client(coordinator, &["tools", "--json"]);
    assert!(out.status.success());
    let defs: Value = serde_json::from_slice(&out.stdout).unwrap();
    defs.as_array()
        .unwrap()
        .iter()
        .find(|d| d["function"]["name"] == tool)
        .cloned()
        .unwrap_or_else(|| panic!("no {tool} in {defs}"))
}

#[test]
fn a_worker_token_claims_only_the_labels_and_hosts_only_the_servers_the_coordinator_grants_it() {
    if !python_has("mcp_server_time", "mcp-server-time") {
        return;
    }
    let fleet = Fleet::new();
    fleet.write_config(
        "mcp_servers:\n  labtime:\n    command: mcp-server-time\n    args: [--local-timezone, UTC]\n    env:\n      LAB_API_KEY: canary-grant-7c41\n    on:\n      labels: {site: lab}\n\
         worker_grants:\n  lab-hosts:\n    labels: {site: lab, rack: '*'}\n    host: [labtime]\n  lab-plain:\n    labels: {site: lab}\n",
    );
    let mut coordinator = fleet.serve(&[]);
    let hosts_token = create_token(&fleet, &coordinator, "worker", "lab-hosts");
    let plain_token = create_token(&fleet, &coordinator, "worker", "lab-plain");
    let stranger_token = create_token(&fleet, &coordinator, "worker", "stranger");

    // A token without a grant claiming a label: refused at attach, and
    // the worker says why and stops (retrying would not help).
    let mut stranger = fleet.worker(
        &coordinator,
        "stranger",
        &stranger_token,
        &["--labels", "site=lab", "--host-mcp"],
    );
    assert!(
        stranger.wait_exit(Duration::from_secs(30)).is_some(),
        "the refused worker exits"
    );
    let said = stranger.stderr_to_end();
    assert!(
        said.contains("the worker token 'stranger' may not claim the label site=lab"),
        "{said}"
    );
    // A granted label with another value than granted: refused too.
    let mut wrong_value = fleet.worker(
        &coordinator,
        "wrong-value",
        &plain_token,
        &["--labels", "site=office"],
    );
    assert!(wrong_value.wait_exit(Duration::from_secs(30)).is_some());
    let said = wrong_value.stderr_to_end();
    assert!(said.contains("it grants site=lab only"), "{said}");

    // Granted the labels but not the server: it attaches and hosts nothing
    // (the coordinator withholds the server's settings from it).
    let plain = fleet.worker(
        &coordinator,
        "plain-lab",
        &plain_token,
        &["--labels", "site=lab", "--host-mcp"],
    );
    coordinator.wait_for_stderr(
        "hosted provider withheld: the worker's token is not granted it",
        Duration::from_secs(30),
    );
    fleet.wait_for_workers(&coordinator, &["plain-lab"], Duration::from_secs(30));
    assert!(
        !tool_names(&fleet, &coordinator, "")
            .iter()
            .any(|t| t.starts_with("mcp__labtime__")),
        "nobody hosts labtime yet"
    );

    // Granted both: it hosts the server; the tools' descriptions say whose
    // words they are; calls run there, not on the ungranted worker.
    let host = fleet.worker(
        &coordinator,
        "lab-host",
        &hosts_token,
        &["--labels", "site=lab,rack=r7", "--host-mcp"],
    );
    wait_until("lab-host to host labtime", Duration::from_secs(60), || {
        tool_names(&fleet, &coordinator, "").contains(&"mcp__labtime__get_current_time".to_owned())
    });
    let described = definition(&fleet, &coordinator, "mcp__labtime__get_current_time");
    let description = described["function"]["description"].as_str().unwrap();
    assert!(
        description.starts_with("[from the MCP server 'labtime', run on a worker] "),
        "{description}"
    );
    let now = fleet.call(
        &coordinator,
        "mcp__labtime__get_current_time",
        &json!({"timezone": "UTC"}),
        "g1",
    );
    assert!(now["result"].is_string(), "{now}");
    assert_eq!(children_running(host.pid(), "mcp-server-time").len(), 1);
    assert!(
        children_running(plain.pid(), "mcp-server-time").is_empty(),
        "the ungranted worker runs no server"
    );
    // The literal secret of the server's settings reached only the
    // granted worker's server process.
    for pid in children_running(plain.pid(), "") {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&environ).contains("canary-grant-7c41"));
    }
}

/// The state (`ready`, `suspect`, …) `caduceus status` gives the worker `name`.
fn worker_state(fleet: &Fleet, coordinator: &Proc, name: &str) -> String {
    fleet.status(coordinator)["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == name)
        .map_or_else(
            || "gone".to_owned(),
            |w| w["state"].as_str().unwrap_or("").to_owned(),
        )
}

#[test]
fn calls_of_a_server_hosted_twice_spread_skip_a_stopped_host_and_end_once_when_their_host_is_killed()
 {
    let state = tempfile::tempdir().unwrap();
    let log = state.path().join("calls.log");
    let fleet = Fleet::new();
    fleet.write_config(&format!(
        "mcp_servers:\n  slow:\n    command: python3\n    args: ['{}', --with-wait, --log, '{}']\n    on:\n      labels: {{site: lab}}\n",
        legacy_fixture().display(),
        log.display()
    ));
    // Suspect after 2 s of silence, lost only after 120 s: the stopped host
    // stays attached (and passed over) while it is stopped.
    let coordinator = fleet.serve(&[
        "--heartbeat-ms",
        "500",
        "--suspect-after-ms",
        "2000",
        "--lost-after-ms",
        "120000",
    ]);
    let url = coordinator.url();
    let mut one = fleet.worker(
        &coordinator,
        "host-one",
        &fleet.token,
        &["--labels", "site=lab", "--host-mcp"],
    );
    let mut two = fleet.worker(
        &coordinator,
        "host-two",
        &fleet.token,
        &["--labels", "site=lab", "--host-mcp"],
    );
    // The server a host runs once it has listed its tools (the first
    // process, which tried the newest protocol, is replaced by a fresh one).
    let listed_by = |worker: &Proc| {
        let running = children_running(worker.pid(), "legacy_server");
        let pid = running.first()?.to_string();
        logged_methods(&log)
            .iter()
            .any(|(p, m)| *p == pid && m == "tools/list")
            .then_some(pid)
    };
    wait_until(
        "both hosts to run the server",
        Duration::from_secs(60),
        || listed_by(&one).is_some() && listed_by(&two).is_some(),
    );
    let (server_one, server_two) = (listed_by(&one).unwrap(), listed_by(&two).unwrap());
    let echo = || {
        fleet.call(
            &coordinator,
            "mcp__slow__echo",
            &json!({"text": "hi"}),
            "s1",
        )
    };
    let served_by = |server: &str| {
        logged_methods(&log)
            .iter()
            .filter(|(pid, method)| pid == server && method == "tools/call")
            .count()
    };

    wait_until(
        "the server's tools to be offered",
        Duration::from_secs(60),
        || tool_names(&fleet, &coordinator, "").contains(&"mcp__slow__echo".to_owned()),
    );
    // Spread: once both have announced, calls take turns between them.
    let deadline = Instant::now() + Duration::from_secs(60);
    while served_by(&server_one) == 0 || served_by(&server_two) == 0 {
        let said = echo();
        assert_eq!(said["result"], "hi", "{said}");
        assert!(
            Instant::now() < deadline,
            "calls did not reach both hosts ({server_one}, {server_two}): {:?}",
            logged_methods(&log)
        );
    }

    // SIGSTOP one host: once it is suspect, every call goes to the other.
    signal(one.pid(), "STOP");
    wait_until("host-one to be suspect", Duration::from_secs(30), || {
        worker_state(&fleet, &coordinator, "host-one") == "suspect"
    });
    let before = served_by(&server_two);
    for _ in 0..4 {
        let said = echo();
        assert_eq!(said["result"], "hi", "{said}");
    }
    assert_eq!(served_by(&server_two), before + 4, "all went to host-two");
    signal(one.pid(), "CONT");
    wait_until(
        "host-one to be ready again",
        Duration::from_secs(30),
        || worker_state(&fleet, &coordinator, "host-one") == "ready",
    );

    // kill -9 the host serving a call mid-call: that call ends once, with
    // an error that says so; the next goes to the surviving host.
    let mark = state.path().join("serving.pid");
    let outcome = std::thread::scope(|scope| {
        let call = scope.spawn(|| {
            fleet.call_at(
                &url,
                "mcp__slow__wait",
                &json!({"seconds": 120, "mark": mark.display().to_string()}),
                "s2",
            )
        });
        wait_until("the call to reach a host", Duration::from_secs(60), || {
            std::fs::read_to_string(&mark).is_ok_and(|p| !p.is_empty())
        });
        let serving = std::fs::read_to_string(&mark).unwrap();
        let (killed, survivor) = if serving == server_one {
            (&mut one, "host-two")
        } else {
            assert_eq!(serving, server_two);
            (&mut two, "host-one")
        };
        killed.kill();
        (call.join().unwrap(), survivor)
    });
    let (result, survivor) = outcome;
    let error = result["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{result}"));
    assert!(
        error.contains("running the MCP server 'slow' was lost during this call")
            && error.contains("was not retried"),
        "{error}"
    );
    wait_until("the killed host to leave", Duration::from_secs(30), || {
        fleet.worker_names(&coordinator) == [survivor.to_owned()]
    });
    let _ = std::fs::remove_file(&mark);
    let after = fleet.call(
        &coordinator,
        "mcp__slow__wait",
        &json!({"seconds": 0, "mark": mark.display().to_string()}),
        "s3",
    );
    assert_eq!(after["result"], "waited", "{after}");
    let survivor_server = if survivor == "host-one" {
        &server_one
    } else {
        &server_two
    };
    assert_eq!(&std::fs::read_to_string(&mark).unwrap(), survivor_server);
}
