//! Secrets out of reach (issue 12): scoped tokens and their roles, revocation,
//! the serve warnings, and what a sandbox can learn about its worker.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Output;
use std::time::Duration;

use caduceus_tests::{Fleet, Proc, parse_result};

/// A client command against `coordinator` presenting `token` (through the
/// environment, as a careful operator would).
fn client_as(fleet: &Fleet, coordinator: &Proc, token: &str, args: &[&str]) -> Output {
    fleet
        .command()
        .args(args)
        .env("CADUCEUS_COORDINATOR", coordinator.url())
        .env("CADUCEUS_TOKEN", token)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A command with the fleet's shared (admin) token that must succeed; its stdout.
fn admin(fleet: &Fleet, coordinator: &Proc, args: &[&str]) -> String {
    let out = client_as(fleet, coordinator, &fleet.token, args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

/// `tokens create` with the fleet's shared (admin) token; the new token.
fn create_token(fleet: &Fleet, coordinator: &Proc, role: &str, name: &str) -> String {
    let token = admin(
        fleet,
        coordinator,
        &["tokens", "create", "--role", role, "--name", name],
    );
    assert!(
        token.starts_with("cdt_"),
        "stdout is the token alone: {token:?}"
    );
    token
}

/// A worker that takes its token from the environment.
fn worker_with_token(fleet: &Fleet, coordinator: &Proc, name: &str, token: &str) -> Proc {
    worker_with_env(
        fleet,
        coordinator,
        name,
        &[("CADUCEUS_TOKEN", token.to_owned())],
    )
}

/// A worker with `env` (its token among it) in its environment, and the
/// default for a root worker: sandboxes run as nobody.
fn worker_with_env(fleet: &Fleet, coordinator: &Proc, name: &str, env: &[(&str, String)]) -> Proc {
    let mut cmd = fleet.command();
    cmd.args([
        "worker",
        "--coordinator",
        &coordinator.url(),
        "--name",
        name,
    ])
    .env_remove("CADUCEUS_ALLOW_ROOT_SANDBOX");
    for (key, value) in env {
        cmd.env(key, value);
    }
    Proc::spawn(cmd, name)
}

#[test]
fn scoped_tokens_reach_only_their_methods_and_revoking_one_disconnects_its_worker() {
    let fleet = Fleet::new();
    let coordinator = fleet.serve(&[]);
    let worker_token = create_token(&fleet, &coordinator, "worker", "gpu-box");
    let client_token = create_token(&fleet, &coordinator, "client", "ci");

    let mut worker = worker_with_token(&fleet, &coordinator, "w1", &worker_token);
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));

    // A worker token (what a sandbox on a worker host could learn) calls no tool.
    let echo = r#"{"command":"echo from-the-sandbox"}"#;
    let refused = client_as(
        &fleet,
        &coordinator,
        &worker_token,
        &["call", "terminal", echo],
    );
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("a worker token may not call CallTool"),
        "{}",
        stderr(&refused)
    );
    let refused = client_as(&fleet, &coordinator, &worker_token, &["status"]);
    assert!(!refused.status.success(), "status is for clients");

    // A client token runs tools but answers no approvals and makes no tokens.
    let ran = client_as(
        &fleet,
        &coordinator,
        &client_token,
        &["call", "terminal", echo],
    );
    assert!(ran.status.success(), "{}", stderr(&ran));
    assert!(
        parse_result(&ran.stdout)["output"]
            .as_str()
            .unwrap()
            .contains("from-the-sandbox")
    );
    for args in [
        &["approvals", "list"][..],
        &["tokens", "create", "--role", "admin"][..],
        &["tokens", "list"][..],
    ] {
        let refused = client_as(&fleet, &coordinator, &client_token, args);
        assert!(!refused.status.success(), "{args:?}");
        assert!(
            stderr(&refused).contains("a client token may not call"),
            "{args:?}: {}",
            stderr(&refused)
        );
    }
    // Nor does a client token attach a worker.
    let mut fake = worker_with_token(&fleet, &coordinator, "fake", &client_token);
    assert!(
        fake.wait_exit(Duration::from_secs(30))
            .is_some_and(|s| !s.success())
    );
    assert!(
        fake.stderr_to_end()
            .contains("a client token may not call Attach")
    );

    // The listing shows names and roles, never the secrets.
    let text = admin(&fleet, &coordinator, &["tokens", "list", "--json"]);
    assert!(!text.contains(&worker_token) && !text.contains(&client_token));
    let list: serde_json::Value = serde_json::from_str(&text).unwrap();
    let roles: Vec<(&str, &str, &str)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap(),
                t["role"].as_str().unwrap(),
                t["state"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        [("gpu-box", "worker", "live"), ("ci", "client", "live")]
    );

    // Revoking the worker token ends its worker's stream; its reconnection is
    // refused and it exits naming the cause.
    let said = admin(&fleet, &coordinator, &["tokens", "revoke", "gpu-box"]);
    assert!(said.contains("revoked worker token 'gpu-box'"), "{said}");
    assert!(said.contains("disconnected 1 worker"), "{said}");
    let exit = worker.wait_exit(Duration::from_secs(30));
    assert!(
        exit.is_some_and(|s| !s.success()),
        "the worker exits: {exit:?}"
    );
    assert!(worker.stderr_to_end().contains("was revoked"));
    fleet.wait_for_workers(&coordinator, &[], Duration::from_secs(30));

    // A revoked client token is refused on its next request.
    admin(&fleet, &coordinator, &["tokens", "revoke", "ci"]);
    let refused = client_as(&fleet, &coordinator, &client_token, &["status"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("'ci' was revoked"),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn tokens_survive_a_coordinator_restart() {
    let fleet = Fleet::new();
    let client_token = {
        let coordinator = fleet.serve(&[]);
        create_token(&fleet, &coordinator, "client", "nightly")
    };
    let coordinator = fleet.serve(&[]);
    let out = client_as(&fleet, &coordinator, &client_token, &["status", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn serve_warns_about_a_short_token_a_reachable_address_without_tls_and_a_token_in_its_arguments() {
    let fleet = Fleet::new();
    let mut cmd = fleet.command();
    cmd.args(["serve", "--listen", "0.0.0.0:0", "--token", "short-token"]);
    let mut coordinator = Proc::spawn(cmd, "coordinator");
    coordinator.wait_for_stderr(
        "caduceus coordinator listening on ",
        Duration::from_secs(30),
    );
    let said = coordinator.stderr.join("\n");
    assert!(said.contains("shorter than 16 characters"), "{said}");
    assert!(said.contains("without TLS"), "{said}");
    assert!(
        said.contains("given with --token is visible to every process"),
        "{said}"
    );
    // ... and moved it out of its arguments: ps no longer shows it.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", coordinator.pid())).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(cmdline.contains("serve --listen 0.0.0.0:0"), "{cmdline}");
    assert!(!cmdline.contains("short-token"), "{cmdline}");

    // A long token from the environment on loopback: no warnings.
    let mut cmd = fleet.command();
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .env("CADUCEUS_TOKEN", "a-long-random-token-0123456789");
    let mut quiet = Proc::spawn(cmd, "quiet coordinator");
    quiet.wait_for_stderr(
        "caduceus coordinator listening on ",
        Duration::from_secs(30),
    );
    let said = quiet.stderr.join("\n");
    assert!(!said.contains("WARN"), "{said}");
}

/// Everything a command in a local sandbox can read about the processes
/// around it, reversed (`rev`) so that no masking of known secret shapes in
/// tool output can hide a leak.
const PROBE: &str = r#"{
  echo "whoami: $(id -un) $(id -u)"
  echo "--- parent environ"; tr '\0' '\n' < /proc/$PPID/environ
  echo "--- parent cmdline"; tr '\0' ' ' < /proc/$PPID/cmdline; echo
  echo "--- every environ"; for f in /proc/[0-9]*/environ; do tr '\0' '\n' < "$f"; done
  echo "--- ps"; ps -eo args
  echo "--- own environment"; env
} 2>&1 | rev"#;

fn probe_arguments() -> String {
    serde_json::json!({ "command": PROBE, "timeout": 60 }).to_string()
}

/// The probe's output, turned back the right way round.
fn probe(out: &Output) -> String {
    assert!(out.status.success(), "{}", stderr(out));
    parse_result(&out.stdout)["output"]
        .as_str()
        .unwrap()
        .lines()
        .map(|line| line.chars().rev().collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

fn assert_none_leaked(seen: &str, secrets: &[(&str, String)]) {
    // The probe did read: ps lists the worker.
    assert!(seen.contains("caduceus-under-test worker"), "{seen}");
    for (name, value) in secrets {
        let reversed: String = value.chars().rev().collect();
        assert!(
            !seen.contains(value.as_str()) && !seen.contains(&reversed),
            "{name} leaked into the sandbox:\n{seen}"
        );
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

/// A coordinator that takes its token (and a model key) from the environment.
fn serve_with_env(fleet: &Fleet, env: &[(&str, String)]) -> Proc {
    let mut cmd = fleet.command();
    cmd.args(["serve", "--listen", "127.0.0.1:0"]);
    for (name, value) in env {
        cmd.env(name, value);
    }
    let mut coordinator = Proc::spawn(cmd, "coordinator");
    let line = coordinator.wait_for_stderr(
        "caduceus coordinator listening on ",
        Duration::from_secs(30),
    );
    coordinator.address = Some(line.rsplit(' ').next().unwrap().trim().to_owned());
    coordinator
}

fn wait_attached(fleet: &Fleet, coordinator: &Proc, token: &str, name: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !stdout(&client_as(fleet, coordinator, token, &["status"])).contains(name) {
        assert!(
            std::time::Instant::now() < deadline,
            "{name} never attached"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_local_sandbox_reads_none_of_its_workers_or_coordinators_secrets() {
    let fleet = Fleet::new();
    let pid = std::process::id();
    let token = format!("fleet-token-{pid}-abcdefghijklmnop");
    let secrets = [
        ("AWS_SECRET_ACCESS_KEY", format!("plainawsvalue{pid}x")),
        ("GITHUB_TOKEN", format!("plaingithubvalue{pid}x")),
        ("OPENAI_API_KEY", format!("plainopenaivalue{pid}x")),
        ("CADUCEUS_TOKEN", token.clone()),
    ];
    let coordinator = serve_with_env(&fleet, &secrets);

    let _worker = worker_with_env(&fleet, &coordinator, "w1", &secrets);
    let client = |args: &[&str]| client_as(&fleet, &coordinator, &token, args);
    wait_attached(&fleet, &coordinator, &token, "w1");

    let seen = probe(&client(&["call", "terminal", &probe_arguments()]));
    assert_none_leaked(&seen, &secrets);
    let whoami = seen.lines().find(|l| l.starts_with("whoami:")).unwrap();
    // A test run as root means a root worker.
    let root = is_root();
    if root {
        assert_eq!(
            whoami, "whoami: nobody 65534",
            "a root worker's sandbox runs as nobody"
        );
    }

    // The file tools of that sandbox work as its user, in its home.
    let write = serde_json::json!({ "path": "notes.txt", "content": "hello\n" }).to_string();
    let out = client(&["call", "write_file", &write]);
    assert!(out.status.success(), "{}", stderr(&out));
    let written = parse_result(&out.stdout);
    assert!(written["error"].is_null(), "{written}");
    let out = client(&[
        "call",
        "terminal",
        r#"{"command":"stat -c '%U %n' notes.txt && cat notes.txt"}"#,
    ]);
    let listed = parse_result(&out.stdout)["output"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(listed.contains("hello"), "{listed}");
    if root {
        assert!(listed.contains("nobody notes.txt"), "{listed}");
        // They are served by one file server per environment, running as
        // the sandbox's user (not a shell script per primitive).
        let out = client(&[
            "call",
            "terminal",
            r#"{"command":"ps -eo user:12,args | grep -- '__file-serve[r]'"}"#,
        ]);
        let servers = parse_result(&out.stdout)["output"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(servers.lines().count(), 1, "{servers}");
        assert!(servers.starts_with("nobody "), "{servers}");
        // Its environment is as clean as the commands': the probe, run
        // again now that it exists, finds no secret in it either.
        let seen = probe(&client(&["call", "terminal", &probe_arguments()]));
        assert_none_leaked(&seen, &secrets);
        // The sandbox's user may kill it; the next file call starts another.
        let out = client(&[
            "call",
            "terminal",
            r#"{"command":"pkill -f -- '__file-serve[r]'; sleep 0.2; pgrep -f -- '__file-serve[r]' || echo gone"}"#,
        ]);
        let killed = parse_result(&out.stdout);
        assert!(
            killed["output"].as_str().unwrap().contains("gone"),
            "{killed}"
        );
        let out = client(&["call", "read_file", r#"{"path":"notes.txt"}"#]);
        let read = parse_result(&out.stdout);
        assert_eq!(read["content"], "1|hello", "{read}");
    }
}

#[test]
fn a_sandbox_of_a_worker_running_as_the_same_user_cannot_read_the_worker() {
    // Without root the test above already is this case (worker and sandbox
    // share the user); as root, start the worker itself as nobody.
    if !is_root() {
        return;
    }
    if !caduceus_tests::require(
        "setpriv",
        "util-linux's setpriv to start a worker as nobody",
        || {
            std::process::Command::new("setpriv")
                .arg("--version")
                .output()
                .is_ok()
        },
    ) {
        return;
    }
    let fleet = Fleet::new();
    let pid = std::process::id();
    let token = format!("fleet-token-{pid}-qrstuvwxyz012345");
    let secrets = [
        ("AWS_SECRET_ACCESS_KEY", format!("plainawsvalue{pid}y")),
        ("CADUCEUS_TOKEN", token.clone()),
    ];
    let coordinator = serve_with_env(&fleet, &secrets);
    let home = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(home.path(), Some(65534), Some(65534)).unwrap();
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(caduceus_tests::bin())
        .args([
            "worker",
            "--coordinator",
            &coordinator.url(),
            "--name",
            "w-nobody",
        ])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("CADUCEUS_HOME", home.path())
        .current_dir(home.path());
    for (name, value) in &secrets {
        cmd.env(name, value);
    }
    let _worker = Proc::spawn(cmd, "w-nobody");
    wait_attached(&fleet, &coordinator, &token, "w-nobody");
    let seen = probe(&client_as(
        &fleet,
        &coordinator,
        &token,
        &["call", "terminal", &probe_arguments()],
    ));
    assert!(seen.contains("whoami: nobody 65534"), "{seen}");
    // The worker is the sandbox's parent and of the same user: only its
    // non-dumpable flag keeps /proc/$PPID/environ closed.
    assert!(seen.contains("Permission denied"), "{seen}");
    assert_none_leaked(&seen, &secrets);
}

#[test]
fn a_worker_whose_token_expires_is_disconnected_and_not_let_back() {
    let fleet = Fleet::new();
    let coordinator = fleet.serve(&[]);
    let token = admin(
        &fleet,
        &coordinator,
        &[
            "tokens",
            "create",
            "--role",
            "worker",
            "--name",
            "short-lived",
            "--expires",
            "8s",
        ],
    );
    let mut worker = worker_with_token(&fleet, &coordinator, "brief", &token);
    fleet.wait_for_workers(&coordinator, &["brief"], Duration::from_secs(8));
    let exit = worker.wait_exit(Duration::from_secs(30));
    assert!(
        exit.is_some_and(|s| !s.success()),
        "the worker exits: {exit:?}"
    );
    assert!(worker.stderr_to_end().contains("'short-lived' has expired"));
    fleet.wait_for_workers(&coordinator, &[], Duration::from_secs(30));
}
