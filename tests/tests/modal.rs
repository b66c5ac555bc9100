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

mod native {
    use std::time::Duration;

    use caduceus_tests::standins::FakeModal;
    use caduceus_worker::backends::modal::{ModalProvider, ModalSettings};
    use caduceus_worker::backends::{CreateRequest, Provider, SweepContext};
    use caduceus_worker::sandbox::SpawnSpec;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn settings(fake: &FakeModal, secret: &str) -> ModalSettings {
        let mut settings = ModalSettings::from_env(|name| match name {
            "MODAL_TOKEN_ID" => Some(FakeModal::TOKEN_ID.to_owned()),
            "MODAL_TOKEN_SECRET" => Some(secret.to_owned()),
            "MODAL_SERVER_URL" => Some(fake.url()),
            // No ~/.modal.toml of this machine's user.
            "MODAL_CONFIG_PATH" => Some("/nonexistent/modal.toml".to_owned()),
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

    fn bash(script: &str) -> SpawnSpec {
        SpawnSpec {
            program: "bash".to_owned(),
            args: vec!["-c".to_owned(), script.to_owned()],
            cwd: None,
            env: vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())],
        }
    }

    /// Our client against the stand-in: a wrong token is an error naming
    /// the service and the gRPC status; bytes go in and out exactly
    /// (stdin, output, files); exit codes and signals come back; the token
    /// is not in the sandbox's environment; the sandbox carries our tags and
    /// timeout; a held sandbox is not swept; destroy ends it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_native_client_against_the_stand_in() {
        let fake = FakeModal::start();
        let wrong = ModalProvider::new(settings(&fake, "as-not-the-secret"));
        assert!(!wrong.available().await);
        let err = match wrong.create(&request("t-wrong")).await {
            Ok(_) => panic!("a wrong token created a sandbox"),
            Err(err) => err.to_string(),
        };
        assert!(
            err.contains("Modal: PERMISSION_DENIED (token id ak-fa… not valid)"),
            "{err}"
        );

        let provider = ModalProvider::new(settings(&fake, FakeModal::TOKEN_SECRET));
        assert!(provider.available().await);
        let sandbox = provider.create(&request("t-native")).await.unwrap();
        let log = fake.log();
        assert!(
            log.contains(&format!("created sandbox {}", sandbox.id()))
                && log.contains("timeout 3600s")
                && log.contains("caduceus.task=t-native")
                && log.contains("caduceus.owner=coord-test"),
            "{log}"
        );

        let payload: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
        let mut process = sandbox.spawn(bash("cat; env; echo err >&2")).await.unwrap();
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
        assert!(env.contains("MODAL_SANDBOX_ID="), "{env}");
        assert!(env.ends_with("err\n"), "stderr is not merged: {env}");
        assert!(
            !env.contains(FakeModal::TOKEN_SECRET),
            "the token reached the sandbox: {env}"
        );

        let mut failing = sandbox.spawn(bash("exit 7")).await.unwrap();
        drop(failing.stdin);
        assert_eq!(failing.handle.wait().await, Some(7));
        let mut killed = sandbox.spawn(bash("kill -TERM $$")).await.unwrap();
        drop(killed.stdin);
        assert_eq!(killed.handle.wait().await, Some(143));
        let mut sleeper = sandbox.spawn(bash("sleep 600")).await.unwrap();
        sleeper.handle.kill().await;
        assert_eq!(sleeper.handle.wait().await, Some(137));

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
        assert!(sandbox.alive().await);
        sandbox.destroy().await.unwrap();
        assert!(!sandbox.alive().await);
        assert!(
            fake.log()
                .contains(&format!("sandbox {} finished: status 3", sandbox.id())),
            "{}",
            fake.log()
        );
    }

    /// A sandbox whose Modal `timeout` passes ends on the stand-in's side;
    /// the backend notices (vanished), and a sandbox nobody holds whose lease
    /// passed is terminated by the sweep.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn timeout_ends_a_sandbox_and_the_sweep_ends_an_unheld_one() {
        let fake = FakeModal::start();
        let mut short = settings(&fake, FakeModal::TOKEN_SECRET);
        short.lease = Duration::from_secs(1);
        short.timeout = Duration::from_secs(2);
        let provider = ModalProvider::new(short);
        let sandbox = provider.create(&request("t-short")).await.unwrap();
        let mut waited = 0;
        while !sandbox.vanished() {
            assert!(waited < 300, "the timed-out sandbox never vanished");
            tokio::time::sleep(Duration::from_millis(100)).await;
            waited += 1;
        }
        assert!(
            fake.log()
                .contains(&format!("sandbox {} reached its timeout", sandbox.id())),
            "{}",
            fake.log()
        );
        assert!(matches!(
            sandbox.spawn(bash("true")).await,
            Err(caduceus_worker::sandbox::SandboxError::Gone(_))
        ));

        let mut long = settings(&fake, FakeModal::TOKEN_SECRET);
        long.lease = Duration::from_secs(1);
        let provider = ModalProvider::new(long);
        let orphan = provider.create(&request("t-orphan")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2100)).await;
        let removed = provider
            .sweep(&SweepContext {
                worker_instance: "inst-other".to_owned(),
                live: Default::default(),
            })
            .await;
        assert_eq!(removed, vec![orphan.id().to_owned()]);
        assert!(!orphan.alive().await);
    }
}
