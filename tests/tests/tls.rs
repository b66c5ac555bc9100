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
    if !require(
        "openssl",
        "the openssl CLI (apt-get install openssl) to make test certificates",
        || Command::new("openssl").arg("version").output().is_ok(),
    ) {
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
