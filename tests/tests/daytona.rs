//! The Daytona stand-in (`tests/fake-daytona`) answers to the official SDK
//! (`daytona==0.226.1` from PyPI) before anything of ours is tested against
//! it: `tests/fake-daytona/sdk_check.py` creates sandboxes (from a snapshot
//! and from an image), runs `process.exec` and session commands, uploads and
//! downloads a file, lists by label, stops, starts and deletes, and is
//! refused with a wrong key. Skipped loudly without the SDK's venv (fails
//! under `CADUCEUS_REQUIRE_ALL=1`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::process::Command;

use caduceus_tests::standins::{FakeDaytona, daytona_sdk};

const SDK_CHECK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fake-daytona/sdk_check.py");

#[test]
fn the_official_sdk_drives_the_stand_in() {
    let Some(python) = daytona_sdk("the Daytona SDK against the stand-in") else {
        return;
    };
    let fake = FakeDaytona::start(60.0);
    let out = Command::new(&python)
        .args(["-W", "ignore", SDK_CHECK])
        .env("DAYTONA_API_URL", fake.api_url())
        .env("DAYTONA_API_KEY", FakeDaytona::API_KEY)
        .env("DAYTONA_USE_DEPRECATED_POLLING", "true")
        .env_remove("DAYTONA_JWT_TOKEN")
        .env_remove("DAYTONA_ORGANIZATION_ID")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("SDK CHECK OK"),
        "the SDK check failed:\n{stdout}\n{stderr}\nstand-in log:\n{}",
        fake.log()
    );
    // The SDK's labels arrived as sent, with the one it adds itself.
    assert!(
        fake.log().contains("\"code-toolbox-language\":\"python\""),
        "{}",
        fake.log()
    );
}
