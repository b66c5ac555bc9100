//! TLS: a coordinator with a certificate, a worker and a client that trust its CA.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use caduceus_tests::{Fleet, parse_result, require};

/// A CA and a server certificate for 127.0.0.1/localhost, made with openssl.
fn make_certs(dir: &Path) -> bool {
    let script = r#"
set -e
openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj "/CN=caduceus test CA" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=localhost" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' > ext.cnf
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile ext.cnf 2>/dev/null
"#;
    run_in(dir, script)
}

/// Whether the openssl CLI is here (skipping loudly, or failing under
/// CADUCEUS_REQUIRE_ALL, when not).
fn have_openssl() -> bool {
    require(
        "openssl",
        "the openssl CLI (apt-get install openssl) to make test certificates",
        || Command::new("openssl").arg("version").output().is_ok(),
    )
}

/// Runs a bash script in `dir`; whether it succeeded.
fn run_in(dir: &Path, script: &str) -> bool {
    Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[test]
fn tls_coordinator_worker_and_client() {
    if !have_openssl() {
        return;
    }
    let fleet = Fleet::new();
    let certs = tempfile::tempdir().unwrap();
    assert!(
        make_certs(certs.path()),
        "openssl failed to make certificates"
    );
    let cert = certs.path().join("server.pem");
    let key = certs.path().join("server.key");
    let ca = certs.path().join("ca.pem");

    let mut coordinator = fleet.serve(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let https = format!("https://{}", coordinator.address.clone().unwrap());
    coordinator.address = None;

    let mut cmd = fleet.command();
    cmd.args([
        "worker",
        "--coordinator",
        &https,
        "--token",
        &fleet.token,
        "--name",
        "secure",
        "--tls-ca",
        ca.to_str().unwrap(),
    ]);
    let _worker = caduceus_tests::Proc::spawn(cmd, "secure");

    let client = |args: &[&str]| {
        let mut cmd = fleet.command();
        cmd.args(args).args([
            "--coordinator",
            &https,
            "--token",
            &fleet.token,
            "--tls-ca",
            ca.to_str().unwrap(),
        ]);
        cmd.output().unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = client(&["status", "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if status["workers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["name"] == "secure")
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the TLS worker never attached"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = client(&["call", "terminal", r#"{"command": "echo over tls"}"#]);
    assert_eq!(parse_result(&out.stdout)["output"], "over tls");

    // A client that does not trust the CA is refused by TLS itself.
    let mut cmd = fleet.command();
    let out = cmd
        .args(["status", "--coordinator", &https, "--token", &fleet.token])
        .output()
        .unwrap();
    assert!(!out.status.success());
    // Plain HTTP to the TLS port does not work either.
    let mut cmd = fleet.command();
    let plain = https.replacen("https://", "http://", 1);
    let out = cmd
        .args(["status", "--coordinator", &plain, "--token", &fleet.token])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// A client certificate for workers, signed by the test CA in `dir`.
fn make_client_cert(dir: &Path) -> bool {
    let script = r#"
set -e
openssl req -newkey rsa:2048 -nodes -keyout worker.key -out worker.csr -subj "/CN=caduceus worker" 2>/dev/null
printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' > client.cnf
openssl x509 -req -in worker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out worker.pem -days 2 -extfile client.cnf 2>/dev/null
"#;
    run_in(dir, script)
}

#[test]
fn with_a_client_ca_only_workers_with_a_client_certificate_attach() {
    if !have_openssl() {
        return;
    }
    let fleet = Fleet::new();
    let certs = tempfile::tempdir().unwrap();
    assert!(make_certs(certs.path()) && make_client_cert(certs.path()));
    let file = |name: &str| certs.path().join(name).to_str().unwrap().to_owned();
    let mut coordinator = fleet.serve(&[
        "--tls-cert",
        &file("server.pem"),
        "--tls-key",
        &file("server.key"),
        "--tls-client-ca",
        &file("ca.pem"),
    ]);
    let https = format!("https://{}", coordinator.address.clone().unwrap());
    coordinator.address = None;
    let worker = |name: &str, extra: &[&str]| {
        let mut cmd = fleet.command();
        cmd.args(["worker", "--coordinator", &https, "--name", name])
            .args(["--tls-ca", &file("ca.pem")])
            .args(extra)
            .env("CADUCEUS_TOKEN", &fleet.token);
        caduceus_tests::Proc::spawn(cmd, name)
    };

    // Without a certificate the shared (admin) token is not enough to attach.
    let mut bare = worker("bare", &[]);
    assert!(
        bare.wait_exit(Duration::from_secs(30))
            .is_some_and(|s| !s.success())
    );
    assert!(bare.stderr_to_end().contains("client certificate required"));

    let _good = worker(
        "certified",
        &[
            "--tls-cert",
            &file("worker.pem"),
            "--tls-key",
            &file("worker.key"),
        ],
    );
    // Clients need no certificate.
    let status = || {
        fleet
            .command()
            .args([
                "status",
                "--coordinator",
                &https,
                "--tls-ca",
                &file("ca.pem"),
            ])
            .env("CADUCEUS_TOKEN", &fleet.token)
            .output()
            .unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let out = status();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if String::from_utf8_lossy(&out.stdout).contains("certified") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the certified worker never attached"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // A certificate from another CA fails the handshake.
    let other = tempfile::tempdir().unwrap();
    assert!(make_certs(other.path()) && make_client_cert(other.path()));
    let stranger = other.path().join("worker.pem");
    let stranger_key = other.path().join("worker.key");
    let mut forged = worker(
        "forged",
        &[
            "--tls-cert",
            stranger.to_str().unwrap(),
            "--tls-key",
            stranger_key.to_str().unwrap(),
        ],
    );
    // It is refused at the handshake and keeps retrying, never attached.
    forged.wait_for_stderr("cannot attach", Duration::from_secs(30));
    let out = status();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("forged"));
    forged.kill();
}
