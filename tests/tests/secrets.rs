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

/// `tokens create` with the fleet's shared (admin) token; the new token.
fn create_token(fleet: &Fleet, coordinator: &Proc, role: &str, name: &str) -> String {
    let out = client_as(
        fleet,
        coordinator,
        &fleet.token,
        &["tokens", "create", "--role", role, "--name", name],
    );
    assert!(out.status.success(), "tokens create: {}", stderr(&out));
    let token = stdout(&out);
    assert!(
        token.starts_with("cdt_"),
        "stdout is the token alone: {token:?}"
    );
    token
}

/// A worker that takes its token from the environment.
fn worker_with_token(fleet: &Fleet, coordinator: &Proc, name: &str, token: &str) -> Proc {
    let mut cmd = fleet.command();
    cmd.args([
        "worker",
        "--coordinator",
        &coordinator.url(),
        "--name",
        name,
    ])
    .env("CADUCEUS_TOKEN", token);
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
    let listed = client_as(
        &fleet,
        &coordinator,
        &fleet.token,
        &["tokens", "list", "--json"],
    );
    assert!(listed.status.success(), "{}", stderr(&listed));
    let text = stdout(&listed);
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
    let revoked = client_as(
        &fleet,
        &coordinator,
        &fleet.token,
        &["tokens", "revoke", "gpu-box"],
    );
    assert!(revoked.status.success(), "{}", stderr(&revoked));
    let said = stdout(&revoked);
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
    let revoked = client_as(
        &fleet,
        &coordinator,
        &fleet.token,
        &["tokens", "revoke", "ci"],
    );
    assert!(revoked.status.success(), "{}", stderr(&revoked));
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
