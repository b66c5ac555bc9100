//! `--token-file` / `CADUCEUS_TOKEN_FILE`: the coordinator, a worker and a
//! client read the shared token from a file (a mounted Docker or Kubernetes
//! secret), so it never stands on a command line.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use caduceus_tests::{Fleet, Proc, parse_result};
use serde_json::json;

#[test]
fn coordinator_worker_and_client_take_the_token_from_files() {
    let fleet = Fleet::new();
    let secrets = tempfile::tempdir().unwrap();
    let token_file = secrets.path().join("caduceus-token");
    // As `echo` writes it: the newline is not part of the token.
    std::fs::write(&token_file, format!("{}\n", fleet.token)).unwrap();
    let token_path = token_file.to_str().unwrap();

    let mut serve = fleet.command();
    serve.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        token_path,
    ]);
    for (flag, value) in caduceus_tests::TEST_LIVENESS {
        serve.args([flag, value]);
    }
    let mut coordinator = Proc::spawn(serve, "coordinator");
    let line = coordinator.wait_for_stderr(
        "caduceus coordinator listening on ",
        Duration::from_secs(30),
    );
    coordinator.address = Some(line.rsplit(' ').next().unwrap().trim().to_owned());
    let url = coordinator.url();

    // The worker by the environment variable, as a compose file or a
    // Kubernetes manifest sets it.
    let mut worker = fleet.command();
    worker
        .args(["worker", "--coordinator", &url, "--name", "from-file"])
        .env("CADUCEUS_TOKEN_FILE", token_path);
    let _worker = Proc::spawn(worker, "from-file");

    let client = |args: &[&str]| {
        fleet
            .command()
            .args(args)
            .args(["--coordinator", &url])
            .output()
            .unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = client(&["status", "--json", "--token-file", token_path]);
        assert!(
            out.status.success(),
            "status with --token-file failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if status["workers"][0]["name"] == "from-file" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the worker with CADUCEUS_TOKEN_FILE never attached: {status}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let out = client(&[
        "call",
        "terminal",
        &json!({"command": "echo via-file"}).to_string(),
        "--token-file",
        token_path,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result = parse_result(&out.stdout);
    assert_eq!(result["output"], "via-file", "{result}");

    // A file with another token is refused like a wrong --token.
    let wrong = secrets.path().join("wrong");
    std::fs::write(&wrong, "not-the-token").unwrap();
    let out = client(&["status", "--token-file", wrong.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("invalid token"), "{stderr}");

    // A missing file: a clear error naming it, not a refused request.
    let missing = secrets.path().join("missing");
    let out = client(&["status", "--token-file", missing.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot read the token file") && stderr.contains("missing"),
        "{stderr}"
    );

    // Both a token and a token file: refused before anything is sent.
    let out = client(&["status", "--token", "x", "--token-file", token_path]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot be used with"), "{stderr}");

    // The token itself shows in no log line.
    coordinator.kill();
    let logs = coordinator.stderr_to_end();
    assert!(!logs.contains(&fleet.token), "{logs}");
}

#[test]
fn serve_with_an_empty_token_file_refuses_to_start() {
    let fleet = Fleet::new();
    let secrets = tempfile::tempdir().unwrap();
    let empty = secrets.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let out = fleet
        .command()
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env("CADUCEUS_TOKEN_FILE", &empty)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("the token file {} is empty", empty.display())),
        "{stderr}"
    );
}
