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
    // Under a timeout: a stand-in that stops answering must fail the test,
    // not hold it (coreutils' timeout; exit 124 when it fired).
    let out = Command::new("timeout")
        .args(["-k", "10", "600"])
        .arg(&python)
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

/// A worker's Daytona settings: the stand-in's URL and a credential
/// (`DAYTONA_API_KEY`, or the JWT with its organization).
fn worker_env(fake: &FakeDaytona, jwt: bool) -> Vec<(&'static str, String)> {
    let mut env = vec![("DAYTONA_API_URL", fake.api_url())];
    if jwt {
        env.push(("DAYTONA_JWT_TOKEN", FakeDaytona::JWT.to_owned()));
        env.push((
            "DAYTONA_ORGANIZATION_ID",
            FakeDaytona::ORGANIZATION.to_owned(),
        ));
    } else {
        env.push(("DAYTONA_API_KEY", FakeDaytona::API_KEY.to_owned()));
    }
    env
}

fn start_worker(
    fleet: &caduceus_tests::Fleet,
    coordinator: &caduceus_tests::Proc,
    name: &str,
    env: &[(&'static str, String)],
) -> caduceus_tests::Proc {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    fleet.worker_with_env(coordinator, name, &["--backends", "daytona"], &env)
}

/// Nobody sweeps (the worker is SIGKILLed, no other worker runs): the
/// sandbox ends on the stand-in's side, by the auto-stop and auto-delete
/// the backend set from the lease (3 s, rounded up to one Daytona minute,
/// two seconds here). While the worker lives its activity holds the
/// sandbox past that.
#[test]
fn a_daytona_sandbox_ends_itself_when_its_worker_is_gone() {
    use caduceus_tests::Fleet;
    let fake = FakeDaytona::start(2.0);
    let fleet = Fleet::new();
    fleet.write_config(
        "terminal:\n  backend: daytona\n  container_persistent: false\n  sandbox_lease_seconds: 3\n  sweep_interval_seconds: 3600\n  backend_probe_seconds: 1\n",
    );
    let c = fleet.serve(&[]);
    let name = format!("dt-expiry-{}", std::process::id());
    let mut w = start_worker(&fleet, &c, &name, &worker_env(&fake, false));
    fleet.wait_for_backend(&c, &name, "daytona", std::time::Duration::from_secs(60));
    let result = fleet.call(
        &c,
        "terminal",
        &serde_json::json!({"command": "echo held"}),
        "dt",
    );
    assert_eq!(result["output"], "held", "{result}");
    let held = fake.sandboxes_of_worker(&name);
    assert_eq!(held.len(), 1, "{held:?}");
    // Three Daytona minutes of the worker's activity: still started.
    std::thread::sleep(std::time::Duration::from_secs(6));
    let listed = fake.sandboxes_with(&serde_json::json!({"caduceus.worker": name}));
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        listed[0]["state"],
        "started",
        "a held sandbox stopped: {}",
        fake.log()
    );
    w.kill();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !fake.sandboxes_of_worker(&name).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sandbox of a dead worker is still there: {}",
            fake.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(
        fake.log().contains(&format!("auto-stop of {}", held[0])),
        "it did not end by auto-stop: {}",
        fake.log()
    );
}

/// The API key and the JWT never show in the worker's or the coordinator's
/// logs (at debug level), in any tool's output, or in the environment of
/// any process of the sandbox (the live shell, a background process, the
/// file tools' scripts).
#[test]
fn daytona_credentials_reach_no_log_output_or_sandbox() {
    use caduceus_tests::Fleet;
    use serde_json::json;
    for jwt in [false, true] {
        let fake = FakeDaytona::start(60.0);
        let fleet = Fleet::new();
        fleet.write_config("terminal:\n  backend: daytona\n  backend_probe_seconds: 1\n");
        let mut c = fleet.serve_with_env(&[], &[("CADUCEUS_LOG", "debug")]);
        let name = format!("dt-secret-{}-{jwt}", std::process::id());
        let mut env = worker_env(&fake, jwt);
        env.push(("CADUCEUS_LOG", "debug".to_owned()));
        let mut w = start_worker(&fleet, &c, &name, &env);
        fleet.wait_for_backend(&c, &name, "daytona", std::time::Duration::from_secs(60));
        let mut outputs = Vec::new();
        for (tool, args) in [
            (
                "terminal",
                json!({"command": "env; cd \"$(mktemp -d)\" && pwd"}),
            ),
            (
                "terminal",
                json!({"command": "echo \"[$DAYTONA_API_KEY][$DAYTONA_JWT_TOKEN]\""}),
            ),
            (
                "write_file",
                json!({"path": "notes.txt", "content": "hello\n"}),
            ),
            ("read_file", json!({"path": "notes.txt"})),
            ("search_files", json!({"pattern": "hello", "path": "."})),
            (
                "terminal",
                json!({"command": "sleep 30", "background": true}),
            ),
        ] {
            let result = fleet.call(&c, tool, &args, "dt-secret");
            assert!(result["error"].is_null(), "{tool}: {result}");
            outputs.push(result.to_string());
        }
        assert!(outputs[1].contains("[][]"), "{}", outputs[1]);
        let environments = fake.sandbox_environments();
        assert!(
            environments.len() >= 2,
            "the sandbox's processes were not found: {environments:?}"
        );
        caduceus_tests::signal(w.pid(), "TERM");
        w.wait_exit(std::time::Duration::from_secs(30))
            .expect("the worker exits");
        let worker_log = w.stderr_to_end();
        assert!(
            worker_log.contains("DEBUG"),
            "the worker logged nothing at debug level: {worker_log}"
        );
        caduceus_tests::signal(c.pid(), "TERM");
        c.wait_exit(std::time::Duration::from_secs(30));
        let coordinator_log = c.stderr_to_end();
        for secret in [FakeDaytona::API_KEY, FakeDaytona::JWT] {
            for (what, text) in [
                ("tool output", outputs.join("\n")),
                ("the sandbox's environments", environments.join("\n")),
                ("the coordinator's log", coordinator_log.clone()),
                ("the worker's log", worker_log.clone()),
            ] {
                assert!(!text.contains(secret), "{secret} in {what}:\n{text}");
            }
        }
    }
}

/// The stand-in frozen (SIGSTOP) under a live environment: a command with a
/// 5 s timeout comes back from the worker (exit 124) with an error naming
/// Daytona's toolbox as what is not answering, instead of waiting out every
/// signal's own timeout or the coordinator's deadline; after SIGCONT the
/// task works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_daytona_fails_calls_clearly_and_they_work_after() {
    use caduceus_tests::conformance::{BackendUnderTest, Stand};
    let backend = BackendUnderTest::daytona();
    let stand = Stand::start(backend.clone()).await;
    let mut control = stand.control().await;
    let before = control.terminal("dt-frozen", "echo before", None).await;
    assert_eq!(before["output"], "before", "{before}");
    let fake = backend.fake_daytona().unwrap();
    caduceus_tests::signal(fake.pid(), "STOP");
    let during = control.terminal("dt-frozen", "echo during", Some(5)).await;
    caduceus_tests::signal(fake.pid(), "CONT");
    assert_eq!(during["exit_code"], 124, "{during}");
    let error = during["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error in {during}"));
    assert!(
        error.contains("Daytona: the toolbox of sandbox") && error.contains("answer"),
        "{during}"
    );
    stand
        .wait_for_backend(std::time::Duration::from_secs(60))
        .await;
    let after = control.terminal("dt-frozen", "echo after", None).await;
    assert_eq!(after["output"], "after", "{after}");
    assert!(after["error"].is_null(), "{after}");
}

/// `container_persistent` (the default): an environment's end stops its
/// sandbox instead of deleting it, the task's next environment starts the
/// same sandbox again with its files, and no sweep takes a kept one for an
/// expired lease (3 s here, swept every second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_daytona_environment_is_stopped_and_started_again() {
    use caduceus_tests::conformance::{BackendUnderTest, Stand};
    let backend = BackendUnderTest::daytona_with(10.0, "  container_persistent: true\n");
    let stand = Stand::start(backend.clone()).await;
    let mut control = stand.control().await;
    let fake = backend.fake_daytona().unwrap();
    let task = "dt-kept";
    let wrote = control
        .terminal(task, "echo kept > ~/kept.txt && export KEPT_VAR=1", None)
        .await;
    assert_eq!(wrote["exit_code"], 0, "{wrote}");
    let first = control.sandbox_of(task).await;
    assert!(control.release(task).await);
    control.wait_until_released(task).await;
    let state = |fake: &FakeDaytona| {
        fake.sandboxes_with(&serde_json::json!({}))
            .iter()
            .find(|s| s["id"] == first.as_str())
            .map(|s| s["state"].as_str().unwrap_or("").to_owned())
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while state(fake).as_deref() != Some("stopped") {
        assert!(
            std::time::Instant::now() < deadline,
            "the released sandbox is {:?}, not stopped",
            state(fake)
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Past its lease, with sweeps every second: kept.
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    assert_eq!(state(fake).as_deref(), Some("stopped"), "{}", fake.log());
    let back = control
        .terminal(task, "cat ~/kept.txt; echo \"[$KEPT_VAR]\"", None)
        .await;
    assert_eq!(back["output"], "kept\n[]", "{back}");
    assert_eq!(
        control.sandbox_of(task).await,
        first,
        "not the same sandbox"
    );
}
