//! The Modal stand-in (`tests/fake-modal`) answers to the official SDK
//! (`modal==1.6.4` from PyPI) before anything of ours is tested against it:
//! `tests/fake-modal/sdk_check.py` creates a sandbox, runs
//! `sandbox.exec("echo", "hi")` and reads its stdout, writes stdin,
//! lists by tag, terminates, and sees a timeout end a sandbox. Skipped
//! loudly without the SDK's venv (fails under `CADUCEUS_REQUIRE_ALL=1`).
//! Then our side: the native client against the stand-in (`native`), an
//! ended sandbox (terminated behind the worker's back, or past its Modal
//! timeout) resetting the environment with a notice, and the token in no
//! log, tool output or sandbox environment. The shared conformance cases
//! run in `conformance.rs` (`modal_backend`).

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
    // Under a timeout: a stand-in that stops answering must fail the test,
    // not hold it (coreutils' timeout; exit 124 when it fired).
    let out = Command::new("timeout")
        .args(["-k", "10", "600"])
        .arg(&python)
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
        // Terminated (status 3), not just forgotten.
        super::wait_for_log(
            &fake,
            &format!("sandbox {} finished: status 3", sandbox.id()),
        )
        .await;
    }

    /// A stand-in dropped with sandboxes running (a test that failed, or
    /// one that SIGSTOPped it) takes their processes with it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_stand_in_leaves_no_sandbox_process() {
        let fake = FakeModal::start();
        let provider = ModalProvider::new(settings(&fake, FakeModal::TOKEN_SECRET));
        let sandbox = provider.create(&request("t-drop")).await.unwrap();
        let _sleeper = sandbox.spawn(bash("sleep 300")).await.unwrap();
        let id = sandbox.id().to_owned();
        assert!(!fake.processes_of(&id).is_empty());
        caduceus_tests::signal(fake.pid(), "STOP");
        let needle = format!("MODAL_SANDBOX_ID={id}");
        drop(fake);
        let left = caduceus_tests::standins::processes_with_env(|v| v == needle.as_bytes());
        assert!(left.is_empty(), "left running: {left:?}");
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
        // Held: renewed as a live environment is (else its lease watchdog
        // would end it first, at one lease).
        let renewer = {
            let sandbox = sandbox.clone();
            tokio::spawn(async move {
                loop {
                    let record = caduceus_worker::backends::lease::LeaseRecord {
                        task: "t-short".to_owned(),
                        renewed_at: caduceus_worker::backends::lease::epoch_secs(
                            std::time::SystemTime::now(),
                        ),
                        ttl_secs: 1,
                        ..Default::default()
                    };
                    let _ = sandbox.renew_lease(&record).await;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            })
        };
        let mut waited = 0;
        while !sandbox.vanished() {
            assert!(waited < 300, "the timed-out sandbox never vanished");
            tokio::time::sleep(Duration::from_millis(100)).await;
            waited += 1;
        }
        super::wait_for_log(
            &fake,
            &format!("sandbox {} reached its timeout", sandbox.id()),
        )
        .await;
        assert!(matches!(
            sandbox.spawn(bash("true")).await,
            Err(caduceus_worker::sandbox::SandboxError::Gone(_))
        ));
        renewer.abort();

        let mut long = settings(&fake, FakeModal::TOKEN_SECRET);
        long.lease = Duration::from_secs(1);
        let provider = ModalProvider::new(long);
        let orphan = provider.create(&request("t-orphan")).await.unwrap();
        // A sandbox whose own watchdog cannot act (frozen) and that is not
        // idle (a process runs, as a live shell would): only the sweep ends it.
        let _busy = orphan.spawn(bash("sleep 60")).await.unwrap();
        for pid in fake.processes_of(orphan.id()) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains("caduceus-lease") {
                caduceus_tests::signal(pid as u32, "STOP");
            }
        }
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

/// Terminates a sandbox behind the worker's back, through our own client
/// (as the Modal dashboard or another client would).
async fn terminate_behind_the_back(fake: &FakeModal, sandbox_id: &str) {
    use caduceus_modal_proto::client as pb;
    use caduceus_worker::backends::modal::{Api, Credentials};
    let api = Api::new(
        &fake.url(),
        Credentials {
            token_id: FakeModal::TOKEN_ID.to_owned(),
            token_secret: FakeModal::TOKEN_SECRET.to_owned(),
        },
    )
    .unwrap();
    api.call(
        "SandboxTerminateV2",
        pb::SandboxTerminateRequest {
            sandbox_id: sandbox_id.to_owned(),
        },
        true,
        std::time::Duration::from_secs(30),
        |mut c, r| async move { c.sandbox_terminate_v2(r).await },
    )
    .await
    .unwrap();
}

/// Waits until the stand-in has logged `needle` (it logs every end).
async fn wait_for_log(fake: &FakeModal, needle: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !fake.log().contains(needle) {
        assert!(
            std::time::Instant::now() < deadline,
            "the stand-in never logged {needle:?}:\n{}",
            fake.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn reset_notice(result: &serde_json::Value) -> &str {
    result["environment_reset"]
        .as_str()
        .unwrap_or_else(|| panic!("no environment_reset in {result}"))
}

/// A sandbox terminated behind the worker's back, and one whose Modal
/// `timeout` passed (the stand-in ends it: the lease on Modal's side): the
/// next call runs in a fresh environment and says so; the one after is
/// quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_modal_sandbox_resets_the_environment_with_a_notice() {
    use caduceus_tests::conformance::{BackendUnderTest, Stand};
    for timed_out in [false, true] {
        let extra = if timed_out {
            "  sandbox_lease_seconds: 2\n  modal_timeout_seconds: 2\n"
        } else {
            ""
        };
        let stand = Stand::start(BackendUnderTest::modal_with(extra)).await;
        let fake = stand.backend.fake_modal().unwrap();
        let mut control = stand.control().await;
        let task = format!("modal-reset-{timed_out}");
        let first = control
            .terminal(&task, "export KEPT=no; echo one", None)
            .await;
        assert_eq!(first["output"], "one", "{first}");
        let sandbox = control.sandbox_of(&task).await;
        if timed_out {
            wait_for_log(fake, &format!("sandbox {sandbox} reached its timeout")).await;
        } else {
            terminate_behind_the_back(fake, &sandbox).await;
        }
        wait_for_log(fake, &format!("sandbox {sandbox} finished")).await;
        let next = control.terminal(&task, "echo two \"[$KEPT]\"", None).await;
        assert!(reset_notice(&next).contains("fresh environment"), "{next}");
        if !timed_out {
            assert_eq!(next["output"], "two []", "{next}");
            let third = control.terminal(&task, "echo three", None).await;
            assert_eq!(third["output"], "three", "{third}");
            assert!(third.get("environment_reset").is_none(), "{third}");
        }
    }
}

/// The token never shows in the worker's or the coordinator's logs (at
/// debug level), in any tool's output, or in the sandbox's environment.
#[test]
fn modal_credentials_reach_no_log_output_or_sandbox() {
    use caduceus_tests::Fleet;
    use serde_json::json;
    let fake = FakeModal::start();
    let fleet = Fleet::new();
    fleet.write_config("terminal:\n  backend: modal\n  backend_probe_seconds: 1\n");
    let mut c = fleet.serve_with_env(&[], &[("CADUCEUS_LOG", "debug")]);
    let name = format!("modal-secret-{}", std::process::id());
    let mut env = fake.env();
    env.push((
        "MODAL_CONFIG_PATH".to_owned(),
        "/nonexistent/modal.toml".to_owned(),
    ));
    env.push(("CADUCEUS_LOG".to_owned(), "debug".to_owned()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut w = fleet.worker_with_env(&c, &name, &["--backends", "modal"], &env);
    fleet.wait_for_backend(&c, &name, "modal", std::time::Duration::from_secs(60));
    let mut outputs = Vec::new();
    for (tool, args) in [
        (
            "terminal",
            json!({"command": "env; cat /proc/self/environ | tr '\\0' '\\n'"}),
        ),
        (
            "terminal",
            json!({"command": "echo \"[$MODAL_TOKEN_ID][$MODAL_TOKEN_SECRET]\""}),
        ),
        (
            "write_file",
            json!({"path": "notes.txt", "content": "hello\n"}),
        ),
        ("read_file", json!({"path": "notes.txt"})),
        ("search_files", json!({"pattern": "hello", "path": "."})),
    ] {
        let result = fleet.call(&c, tool, &args, "modal-secret");
        assert!(result["error"].is_null(), "{tool}: {result}");
        outputs.push(result.to_string());
    }
    assert!(outputs[0].contains("MODAL_SANDBOX_ID="), "{}", outputs[0]);
    assert!(outputs[1].contains("[][]"), "{}", outputs[1]);
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
    // A graceful stop ends the worker's sandboxes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !fake.log().contains("terminating sandbox") {
        assert!(
            std::time::Instant::now() < deadline,
            "the stopped worker left its sandbox: {}",
            fake.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for secret in [FakeModal::TOKEN_ID, FakeModal::TOKEN_SECRET] {
        for (what, text) in [
            ("tool output", outputs.join("\n")),
            ("the coordinator's log", coordinator_log.clone()),
            ("the worker's log", worker_log.clone()),
            ("the stand-in's log", fake.log()),
        ] {
            assert!(!text.contains(secret), "{secret} in {what}:\n{text}");
        }
    }
}

/// The stand-in frozen (SIGSTOP) under a live environment: a command with a
/// 5 s timeout comes back from the worker (exit 124) with an error naming
/// Modal's task router as what is not answering, instead of waiting on
/// signals whose control execs get no answer (or the coordinator's
/// deadline); after SIGCONT the task works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_modal_fails_calls_clearly_and_they_work_after() {
    use caduceus_tests::conformance::{BackendUnderTest, Stand};
    let backend = BackendUnderTest::modal_with("");
    let stand = Stand::start(backend.clone()).await;
    let mut control = stand.control().await;
    let before = control.terminal("md-frozen", "echo before", None).await;
    assert_eq!(before["output"], "before", "{before}");
    let fake = backend.fake_modal().unwrap();
    caduceus_tests::signal(fake.pid(), "STOP");
    let started = std::time::Instant::now();
    let during = control.terminal("md-frozen", "echo during", Some(5)).await;
    // Said, not asserted: the coordinator's deadline (timeout + 30 s) is
    // what a slow stop sequence would run into, and the test would fail.
    eprintln!("the frozen call took {:?}", started.elapsed());
    caduceus_tests::signal(fake.pid(), "CONT");
    assert_eq!(during["exit_code"], 124, "{during}");
    let error = during["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error in {during}"));
    assert!(
        error.contains("Modal: the task router of sandbox") && error.contains("not answering"),
        "{during}"
    );
    stand
        .wait_for_backend(std::time::Duration::from_secs(60))
        .await;
    let after = control.terminal("md-frozen", "echo after", None).await;
    assert_eq!(after["output"], "after", "{after}");
    assert!(after["error"].is_null(), "{after}");
}

/// A worker killed with SIGKILL leaves its sandbox behind with nobody to
/// renew it or sweep it: the sandbox's lease watchdog ends it on Modal's
/// side one lease after the last renewal (here 6 s), long before its Modal
/// `timeout` (an hour), while its live shell still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_modal_sandbox_ends_one_lease_after_its_last_renewal() {
    use caduceus_tests::conformance::{BackendUnderTest, Stand};
    let backend =
        BackendUnderTest::modal_with("  sandbox_lease_seconds: 6\n  modal_timeout_seconds: 3600\n");
    let mut stand = Stand::start(backend.clone()).await;
    let fake = backend.fake_modal().unwrap();
    let mut control = stand.control().await;
    let task = "modal-killed-worker";
    // Longer than a lease: the renewals keep it alive while the worker is.
    let first = control.terminal(task, "sleep 8; echo alive", None).await;
    assert_eq!(first["output"], "alive", "{first}");
    let sandbox = control.sandbox_of(task).await;
    assert!(!fake.log().contains(&format!("sandbox {sandbox} finished")));
    stand.worker.kill();
    // A hang guard, not a speed check: the lease is 6 s, the timeout 3600 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let finished = format!("sandbox {sandbox} finished");
    while !fake.log().contains(&finished) {
        assert!(
            std::time::Instant::now() < deadline,
            "the abandoned sandbox never ended:\n{}",
            fake.log()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let log = fake.log();
    assert!(
        !log.contains(&format!("sandbox {sandbox} reached its timeout")),
        "{log}"
    );
    // Its entrypoint (the watchdog) ended it, not a terminate from anyone.
    let line = log.lines().find(|l| l.contains(&finished)).unwrap();
    assert!(line.contains("status 1 "), "{line}");
    assert!(fake.processes_of(&sandbox).is_empty());
}
