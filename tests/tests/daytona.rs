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

mod native {
    use std::time::Duration;

    use caduceus_tests::standins::FakeDaytona;
    use caduceus_worker::backends::daytona::{DaytonaProvider, DaytonaSettings};
    use caduceus_worker::backends::{CreateRequest, Provider, SweepContext};
    use caduceus_worker::sandbox::SpawnSpec;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn settings(fake: &FakeDaytona, key: &str) -> DaytonaSettings {
        let mut settings = DaytonaSettings::from_env(|name| match name {
            "DAYTONA_API_KEY" => Some(key.to_owned()),
            "DAYTONA_API_URL" => Some(fake.api_url()),
            _ => None,
        })
        .unwrap();
        settings.lease = Duration::from_secs(600);
        settings
    }

    fn request(task: &str) -> CreateRequest {
        CreateRequest {
            task_id: task.to_owned(),
            owner: "coord-test".to_owned(),
            worker: "w-native".to_owned(),
            worker_instance: "inst-native".to_owned(),
            settings: serde_json::json!({}),
        }
    }

    /// Our client against the stand-in: a wrong key is an error naming the
    /// service and the status; bytes go in and out exactly (stdin, output,
    /// files); the key is not in the sandbox's environment; the sandbox
    /// carries our labels and intervals; destroy removes it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_native_client_against_the_stand_in() {
        let fake = FakeDaytona::start(60.0);
        let wrong = DaytonaProvider::new(settings(&fake, "not-the-key"));
        assert!(!wrong.available().await);
        let err = wrong
            .create(&request("t-wrong"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("Daytona: 401 Unauthorized (Invalid credentials)"),
            "{err}"
        );

        let provider = DaytonaProvider::new(settings(&fake, FakeDaytona::API_KEY));
        assert!(provider.available().await);
        let sandbox = provider.create(&request("t-native")).await.unwrap();
        let listed = fake.sandboxes_with(&serde_json::json!({"caduceus.task": "t-native"}));
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0]["autoStopInterval"], 10);
        assert_eq!(listed[0]["autoDeleteInterval"], 10);
        assert_eq!(listed[0]["labels"]["caduceus.owner"], "coord-test");

        let payload: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
        let mut process = sandbox
            .spawn(SpawnSpec {
                program: "bash".to_owned(),
                args: vec!["-c".to_owned(), "cat; env".to_owned()],
                cwd: None,
                env: vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())],
            })
            .await
            .unwrap();
        process.stdin.write_all(&payload).await.unwrap();
        drop(process.stdin);
        let mut out = Vec::new();
        process.output.read_to_end(&mut out).await.unwrap();
        assert_eq!(process.handle.wait().await, Some(0));
        assert_eq!(
            &out[..payload.len()],
            &payload[..],
            "stdin to output is not exact"
        );
        let env = String::from_utf8_lossy(&out[payload.len()..]).into_owned();
        assert!(env.contains("DAYTONA_SANDBOX_ID="), "{env}");
        assert!(
            !env.contains(FakeDaytona::API_KEY),
            "the key reached the sandbox: {env}"
        );

        let files = sandbox.files();
        let path = format!("{}/blob.bin", sandbox.home_dir());
        files.write_atomic(&path, &payload).await.unwrap();
        let back = files.read_range(&path, 0, None).await.unwrap().unwrap();
        assert_eq!(
            back.data, payload,
            "write then read through ShellFs is not exact"
        );

        let kept = provider
            .sweep(&SweepContext {
                worker_instance: "inst-native".to_owned(),
                live: [sandbox.id().to_owned()].into(),
            })
            .await;
        assert!(kept.is_empty(), "a held sandbox was swept: {kept:?}");
        sandbox.destroy().await.unwrap();
    }
}
