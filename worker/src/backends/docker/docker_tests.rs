//! Unit tests of the pure parts, and tests against the local Docker engine
//! with the `caduceus-base:bookworm` image (`deploy/base-image.sh`). Without
//! an engine or the image the engine tests say so on stderr and pass, unless
//! `CADUCEUS_REQUIRE_ALL=1`, where they fail.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::json;

use super::settings::{DEFAULT_IMAGE, DockerSettings, safe_name};
use super::spec::{EngineSupport, PersistentMounts, Refused, container_body, refused_feature};
use super::*;
use crate::backends::lease::{LeasePolicy, LeaseRecord};
use crate::sandbox::Sandbox;
use crate::shell::{ExecEnd, ExecRequest, PersistentShell, ShellConfig};

#[test]
fn overrides_apply_coordinator_keys_and_ignore_host_keys() {
    let base = DockerSettings {
        volumes: vec!["/srv:/srv".into()],
        ..DockerSettings::default()
    };
    let merged = base
        .with_overrides(&json!({
            "docker_image": "debian:bookworm-slim",
            "container_cpu": 0.5,
            "container_memory": 256,
            "docker_network": false,
            "docker_env": {"A": "1", "B": 2},
            "docker_volumes": ["/etc:/host-etc"],
            "ssh_host": "elsewhere"
        }))
        .unwrap();
    assert_eq!(merged.image, "debian:bookworm-slim");
    assert_eq!(merged.cpu, 0.5);
    assert_eq!(merged.memory_mb, 256);
    assert!(!merged.network);
    assert_eq!(merged.env.get("B").map(String::as_str), Some("2"));
    // Host paths are the worker's to choose.
    assert_eq!(merged.volumes, vec!["/srv:/srv".to_owned()]);
    let err = base
        .with_overrides(&json!({"container_memory": "lots"}))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid docker setting 'container_memory': expected MB as a whole number"
    );
}

#[test]
fn pool_fingerprint_separates_settings_and_refuses_persistent() {
    let plain = DockerSettings {
        persistent: false,
        ..DockerSettings::default()
    };
    let other_image = DockerSettings {
        image: "x:1".into(),
        ..plain.clone()
    };
    assert!(plain.pool_fingerprint().is_some());
    assert_ne!(plain.pool_fingerprint(), other_image.pool_fingerprint());
    assert_eq!(DockerSettings::default().pool_fingerprint(), None);
}

#[test]
fn container_body_is_hardened_like_hermes() {
    let settings = DockerSettings {
        persistent: false,
        network: false,
        ..DockerSettings::default()
    };
    let body = container_body(
        &settings,
        HashMap::new(),
        None,
        EngineSupport::default(),
        90,
    );
    let host = body.host_config.unwrap();
    let cmd = body.cmd.unwrap();
    assert_eq!(cmd[..2], ["sh", "-c"]);
    assert_eq!(cmd[3..], ["caduceus-watchdog", "90"]);
    assert_eq!(host.init, Some(true));
    assert_eq!(host.cap_drop, Some(vec!["ALL".to_owned()]));
    assert_eq!(
        host.cap_add.unwrap(),
        ["DAC_OVERRIDE", "CHOWN", "FOWNER", "SETUID", "SETGID"]
    );
    assert_eq!(
        host.security_opt,
        Some(vec!["no-new-privileges".to_owned()])
    );
    let tmpfs = host.tmpfs.unwrap();
    assert_eq!(tmpfs["/tmp"], "rw,nosuid,size=512m");
    assert_eq!(tmpfs["/var/tmp"], "rw,noexec,nosuid,size=256m");
    assert_eq!(tmpfs["/run"], "rw,noexec,nosuid,size=64m");
    assert_eq!(tmpfs["/workspace"], "rw,exec,size=10g");
    assert_eq!(host.pids_limit, Some(256));
    assert_eq!(host.nano_cpus, Some(1_000_000_000));
    assert_eq!(host.memory, Some(5120 * 1024 * 1024));
    assert_eq!(host.storage_opt.unwrap()["size"], "51200m");
    assert_eq!(host.network_mode.as_deref(), Some("none"));

    let persistent = PersistentMounts {
        home: "/s/home".into(),
        workspace: "/s/ws".into(),
    };
    let body = container_body(
        &DockerSettings::default(),
        HashMap::new(),
        Some(&persistent),
        EngineSupport {
            storage_opt: false,
            resources: false,
            file_server: true,
        },
        90,
    );
    let host = body.host_config.unwrap();
    assert_eq!(host.binds.unwrap(), ["/s/home:/root", "/s/ws:/workspace"]);
    assert!(!host.tmpfs.unwrap().contains_key("/workspace"));
    assert_eq!(host.storage_opt, None);
    assert_eq!(host.memory, None);
    assert_eq!(host.network_mode, None);
}

#[test]
fn engine_refusals_name_the_feature() {
    assert_eq!(
        refused_feature("--storage-opt is not supported"),
        Some(Refused::StorageOpt)
    );
    assert_eq!(
        refused_feature(
            "NanoCPUs can not be set, as your kernel does not support CPU CFS scheduler"
        ),
        Some(Refused::Resources)
    );
    assert_eq!(
        refused_feature(
            "invalid mount config for type \"bind\": bind source path does not exist: /usr/local/bin/caduceus"
        ),
        Some(Refused::FileServer)
    );
    assert_eq!(refused_feature("No such image: x"), None);
}

#[test]
fn the_file_server_is_mounted_read_only_unless_the_engine_refused_it() {
    let settings = DockerSettings {
        file_server: Some("/opt/caduceus/bin/caduceus".into()),
        ..DockerSettings::default()
    };
    let body = container_body(
        &settings,
        HashMap::new(),
        None,
        EngineSupport::default(),
        90,
    );
    let mounts = body.host_config.unwrap().mounts.unwrap();
    assert_eq!(mounts.len(), 1);
    assert_eq!(
        mounts[0].source.as_deref(),
        Some("/opt/caduceus/bin/caduceus")
    );
    assert_eq!(
        mounts[0].target.as_deref(),
        Some(super::spec::FILE_SERVER_PATH)
    );
    assert_eq!(mounts[0].read_only, Some(true));
    let refused = EngineSupport {
        file_server: false,
        ..EngineSupport::default()
    };
    let body = container_body(&settings, HashMap::new(), None, refused, 90);
    assert_eq!(body.host_config.unwrap().mounts, None);
    let body = container_body(
        &DockerSettings::default(),
        HashMap::new(),
        None,
        EngineSupport::default(),
        90,
    );
    assert_eq!(body.host_config.unwrap().mounts, None);
}

#[test]
fn names_and_images() {
    assert_eq!(safe_name("../etc/passwd"), ".._etc_passwd");
    assert_eq!(safe_name(".."), "task_..");
    assert!(container_name("my task/1").starts_with("caduceus-my_task_1-"));
    assert_eq!(
        split_image("debian:bookworm-slim"),
        ("debian", "bookworm-slim")
    );
    assert_eq!(
        split_image("localhost:5000/img"),
        ("localhost:5000/img", "latest")
    );
    assert_eq!(split_image("img"), ("img", "latest"));
}

// ---- against the engine ----

/// A provider for the test image, or `None` (after saying why) when this
/// machine has no engine or no image.
async fn provider() -> Option<DockerProvider> {
    let settings = DockerSettings {
        persistent: false,
        memory_mb: 512,
        ..DockerSettings::default()
    };
    let provider = DockerProvider::new(
        settings,
        LeasePolicy::new(Duration::from_secs(3), Duration::from_secs(1)),
    );
    let missing = match provider.unavailable_reason().await {
        Some(reason) => Some(format!(
            "no Docker engine ({reason}); install and start one"
        )),
        None => {
            let docker = provider.engine.client().await.ok()?;
            match docker.inspect_image(DEFAULT_IMAGE).await {
                Ok(_) => None,
                Err(_) => Some(format!(
                    "the image {DEFAULT_IMAGE} is missing; build it with deploy/base-image.sh"
                )),
            }
        }
    };
    if let Some(missing) = missing {
        assert!(
            std::env::var("CADUCEUS_REQUIRE_ALL").ok().as_deref() != Some("1"),
            "CADUCEUS_REQUIRE_ALL=1 but {missing}"
        );
        eprintln!("SKIPPED docker engine test: {missing}");
        return None;
    }
    Some(provider)
}

fn request(task: &str) -> CreateRequest {
    CreateRequest {
        task_id: task.to_owned(),
        owner: "coord-test".to_owned(),
        worker: "w-test".to_owned(),
        worker_instance: "instance-test".to_owned(),
        settings: json!({}),
    }
}

fn shell_for(sandbox: Arc<dyn Sandbox>) -> PersistentShell {
    let cwd = sandbox.initial_cwd();
    PersistentShell::new(
        sandbox,
        ShellConfig {
            cwd,
            ..ShellConfig::default()
        },
    )
}

async fn run(
    shell: &PersistentShell,
    command: &str,
    timeout: Duration,
) -> crate::shell::ExecOutcome {
    shell
        .exec(ExecRequest {
            command,
            timeout,
            workdir: None,
            max_output_chars: 50_000,
            cancel: None,
        })
        .await
        .unwrap()
}

/// A file server the engine cannot mount (its host has no such path: a
/// remote engine, a worker in a container) is refused by the engine, not
/// created there as an empty directory; the provider learns it, makes the
/// container without it, and the file tools run their scripts instead.
#[tokio::test]
async fn a_file_server_the_engine_cannot_mount_leaves_file_tools_working() {
    let Some(base) = provider().await else {
        return;
    };
    let missing = format!("/nonexistent-{}/caduceus", std::process::id());
    let provider = DockerProvider::new(
        DockerSettings {
            file_server: Some(missing.clone()),
            ..base.settings.clone()
        },
        LeasePolicy::new(Duration::from_secs(3), Duration::from_secs(1)),
    );
    let sandbox = provider.create(&request("unit-no-server")).await.unwrap();
    assert!(!provider.support.lock().unwrap().file_server);
    assert!(
        !std::path::Path::new(&missing).exists(),
        "the engine made {missing}"
    );
    let files = sandbox.files();
    files
        .write_atomic("/tmp/by-script.txt", b"scripted\n")
        .await
        .unwrap();
    let read = files
        .read_range("/tmp/by-script.txt", 0, None)
        .await
        .unwrap()
        .expect("the file exists");
    assert_eq!(read.data, b"scripted\n");
    sandbox.destroy().await.unwrap();
}

#[tokio::test]
async fn shell_runs_in_the_container_and_keeps_state() {
    let Some(provider) = provider().await else {
        return;
    };
    let sandbox = provider.create(&request("unit-shell")).await.unwrap();
    let shell = shell_for(sandbox.clone());
    let first = run(
        &shell,
        "cd /tmp && X=41; echo $((X+1)) in $(pwd) as $(id -un); echo err >&2",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(first.output.trim(), "42 in /tmp as root\nerr");
    assert_eq!(first.exit_code, 0);
    let second = run(
        &shell,
        "echo $X $PWD; exit_code_probe() { return 3; }; exit_code_probe",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(second.output.trim(), "41 /tmp");
    assert_eq!(second.exit_code, 3);
    // The host's environment does not leak in; the image's PATH is used.
    let env = run(&shell, "echo $HOME; command -v rg", Duration::from_secs(20)).await;
    assert_eq!(env.output.trim(), "/root\n/usr/bin/rg");
    shell.close().await;
    sandbox.destroy().await.unwrap();
    assert!(!sandbox.alive().await);
}

#[tokio::test]
async fn timeout_stops_the_whole_tree_and_the_shell_survives() {
    let Some(provider) = provider().await else {
        return;
    };
    let sandbox = provider.create(&request("unit-timeout")).await.unwrap();
    let shell = shell_for(sandbox.clone());
    let outcome = run(
        &shell,
        "(sleep 300; echo never) & sleep 301",
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(outcome.end, ExecEnd::TimedOut);
    assert_eq!(outcome.exit_code, 124);
    let after = run(
        &shell,
        "ps -eo args= | grep -c '^sleep 30[01]' || true",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(after.output.trim(), "0", "sleeps survived the timeout");
    assert_eq!(
        shell.starts(),
        1,
        "the shell was replaced instead of surviving"
    );
    sandbox.destroy().await.unwrap();
}

#[tokio::test]
async fn a_killed_container_is_noticed() {
    let Some(provider) = provider().await else {
        return;
    };
    let sandbox = provider.create(&request("unit-gone")).await.unwrap();
    assert!(sandbox.alive().await);
    let docker = provider.engine.client().await.unwrap();
    docker
        .kill_container(
            sandbox.id(),
            None::<bollard::query_parameters::KillContainerOptions>,
        )
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sandbox.alive().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "alive() still true 10 s after the kill"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let spawn = sandbox
        .spawn(crate::sandbox::SpawnSpec {
            program: "true".into(),
            ..Default::default()
        })
        .await;
    assert!(matches!(spawn, Err(crate::sandbox::SandboxError::Gone(_))));
    sandbox.destroy().await.unwrap();
}

#[tokio::test]
async fn leases_are_renewed_read_back_and_expired_ones_swept() {
    let Some(provider) = provider().await else {
        return;
    };
    let docker = provider.engine.client().await.unwrap();
    let kept = provider.create(&request("unit-lease-kept")).await.unwrap();
    let mut stale_request = request("unit-lease-stale");
    stale_request.worker_instance = "someone-else".to_owned();
    let stale = provider.create(&stale_request).await.unwrap();

    let record = LeaseRecord {
        owner: "coord-test".into(),
        worker: "w-test".into(),
        worker_instance: "someone-else".into(),
        task: "unit-lease-kept".into(),
        renewed_at: 0,
        ttl_secs: 3,
    };
    kept.renew_lease(&record.renewed(SystemTime::now()))
        .await
        .unwrap();
    let read = sandbox::read_lease(&docker, kept.id()).await.unwrap();
    assert_eq!(read.task, "unit-lease-kept");

    // A sweep now removes neither: both leases are fresh.
    let context = SweepContext {
        worker_instance: "sweeper".into(),
        live: Default::default(),
    };
    let removed = provider.sweep(&context).await;
    assert!(!removed.contains(&kept.id().to_owned()) && !removed.contains(&stale.id().to_owned()));

    // Renew one for 5 s while the other's 3 s lease runs out.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        kept.renew_lease(&record.renewed(SystemTime::now()))
            .await
            .unwrap();
    }
    let removed = provider.sweep(&context).await;
    assert!(
        removed.contains(&stale.id().to_owned()),
        "expired lease not swept: {removed:?}"
    );
    assert!(
        !removed.contains(&kept.id().to_owned()),
        "renewed lease swept"
    );
    kept.destroy().await.unwrap();
}

#[tokio::test]
async fn docker_is_offered_only_once_the_engine_answers() {
    use crate::backends::{BackendOptions, Backends};
    let requested = vec!["local".to_owned(), "docker".to_owned()];
    let nowhere = BackendOptions {
        docker: DockerSettings {
            host: Some("unix:///nonexistent/caduceus-test.sock".into()),
            ..DockerSettings::default()
        },
        ..BackendOptions::default()
    };
    let (backends, refused) = Backends::with_options(&requested, "/", &nowhere);
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(backends.available(), vec!["local".to_owned()]);
    assert!(!backends.refresh().await, "nothing changed");
    assert_eq!(backends.available(), vec!["local".to_owned()]);
    let err = backends
        .create("docker", &request("unit-nowhere"))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "the 'docker' backend is not available on this worker"
    );

    if provider().await.is_none() {
        return;
    }
    let (backends, _) = Backends::with_options(&requested, "/", &BackendOptions::default());
    assert!(backends.refresh().await, "the probe found the engine");
    assert_eq!(
        backends.available(),
        vec!["local".to_owned(), "docker".to_owned()]
    );
}

#[test]
fn engine_timestamps_parse() {
    use super::sandbox::parse_rfc3339;
    use std::time::UNIX_EPOCH;
    let at = |t: &str| {
        parse_rfc3339(t)
            .unwrap()
            .duration_since(UNIX_EPOCH)
            .unwrap()
    };
    assert_eq!(at("1970-01-01T00:00:00Z").as_nanos(), 0);
    assert_eq!(
        at("2026-11-30T01:55:12.5Z"),
        Duration::new(1_796_003_712, 500_000_000)
    );
    assert_eq!(
        at("2026-11-30T03:55:12.5+02:00"),
        Duration::new(1_796_003_712, 500_000_000)
    );
    assert_eq!(
        at("2000-02-29T12:00:00.000000001Z"),
        Duration::new(951_825_600, 1)
    );
    assert!(
        parse_rfc3339("0001-01-01T00:00:00Z").is_none(),
        "the engine's zero time is not a time"
    );
    assert!(parse_rfc3339("garbage").is_none());
}

#[tokio::test]
async fn persistent_directories_outlive_the_container() {
    let Some(plain) = provider().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let settings = DockerSettings {
        persistent: true,
        sandbox_dir: dir.path().to_path_buf(),
        ..plain.settings().clone()
    };
    let provider = DockerProvider::new(settings, LeasePolicy::default());
    assert_eq!(
        provider.pool_key(&request("unit-persist")),
        None,
        "per-task mounts cannot be pooled"
    );
    let first = provider.create(&request("unit-persist")).await.unwrap();
    assert_eq!(first.persistent_paths(), ["/root", "/workspace"]);
    let shell = shell_for(first.clone());
    let wrote = run(
        &shell,
        "echo kept > /workspace/a; echo home > /root/b; echo gone > /tmp/c",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(wrote.exit_code, 0, "{}", wrote.output);
    shell.close().await;
    first.destroy().await.unwrap();

    let second = provider.create(&request("unit-persist")).await.unwrap();
    let shell = shell_for(second.clone());
    let read = run(
        &shell,
        "cat /workspace/a /root/b; ls /tmp/c 2>&1 | grep -c 'No such'",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(read.output.trim(), "kept\nhome\n1");
    assert!(dir.path().join("docker/unit-persist/workspace/a").exists());
    shell.close().await;
    second.destroy().await.unwrap();
}
