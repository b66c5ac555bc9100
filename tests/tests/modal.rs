//! The Modal stand-in (`tests/fake-modal`) answers to the official SDK
//! (`modal==1.6.4` from PyPI) before anything of ours is tested against it:
//! `tests/fake-modal/sdk_check.py` creates a sandbox, runs
//! `sandbox.exec("echo", "hi")` and reads its stdout, writes stdin,
//! lists by tag, terminates, and sees a timeout end a sandbox. Skipped
//! loudly without the SDK's venv (fails under `CADUCEUS_REQUIRE_ALL=1`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::process::Command;

use caduceus_tests::standins::{FakeModal, modal_sdk};

const SDK_CHECK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fake-modal/sdk_check.py");

#[test]
fn the_official_sdk_drives_the_stand_in() {
    let Some(python) = modal_sdk("the Modal SDK against the stand-in") else {
        return;
    };
    let fake = FakeModal::start();
    let out = Command::new(&python)
        .args(["-W", "ignore", SDK_CHECK])
        .envs(fake.env())
        .env_remove("MODAL_PROFILE")
        .env_remove("MODAL_CONFIG_PATH")
        .env_remove("MODAL_ENVIRONMENT")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let log = fake.log();
    assert!(
        out.status.success() && stdout.contains("SDK CHECK OK"),
        "the SDK check failed:\n{stdout}\n{stderr}\nstand-in log:\n{log}"
    );
    // The SDK went the V2 way and through the router, as 1.6.4 does.
    for rpc in [
        "AuthTokenGet",
        "ImageJoinStreaming",
        "TaskExecStart",
        "SandboxListV2",
    ] {
        assert!(log.contains(rpc), "no {rpc} in the stand-in's log:\n{log}");
    }
    assert!(
        !log.contains(FakeModal::TOKEN_SECRET),
        "the stand-in logged the token secret"
    );
}
