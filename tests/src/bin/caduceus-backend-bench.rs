//! Environment start (cold and from a warm pool) and warm `terminal echo` per
//! backend, beside the same operation done with the engine's own CLI, in one
//! interleaved run.
//!
//! `caduceus-backend-bench [rounds] [backend,…]` (release build recommended)
//! prints a markdown table. Backends: local; Docker (needs the engine and
//! `caduceus-base:bookworm` from `deploy/base-image.sh`); SSH (starts its own
//! sshd on 127.0.0.1, needs root and openssh-server); Singularity (the
//! Apptainer stand-in, `tests/fake-apptainer`, needs root and its rootfs);
//! Daytona (the stand-in `tests/fake-daytona`, with `curl` for the raw
//! toolbox call), which also gets a table of its file primitives through a
//! process per primitive and through one `execute` each; Modal (the stand-in
//! `tests/fake-modal`), beside one raw router exec. A backend this
//! machine lacks is reported and left out; the second argument keeps only
//! the backends it names.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use caduceus_files::FileSystem;
use caduceus_proto::{EnvironmentSpec, RunCall};
use caduceus_tests::standins::{FakeApptainer, FakeDaytona, Sshd};
use caduceus_worker::backends::BackendOptions;
use caduceus_worker::backends::daytona::{DaytonaProvider, DaytonaSettings};
use caduceus_worker::backends::docker::settings::DockerSettings;
use caduceus_worker::backends::pool::PoolSpec;
use caduceus_worker::backends::shell_fs::ShellFs;
use caduceus_worker::backends::singularity::SingularitySettings;
use caduceus_worker::backends::ssh::SshSettings;
use caduceus_worker::backends::{CreateRequest, Provider};
use caduceus_worker::{Worker, WorkerConfig};
use serde_json::{Value, json};

const WARM_CALLS: usize = 50;

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let only: Vec<String> = std::env::args()
        .nth(2)
        .map(|list| list.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(rounds, &only));
}

struct Row {
    /// The backend's name (what environments are created on).
    backend: &'static str,
    /// How the table names it.
    label: &'static str,
    cold: Vec<f64>,
    pool: Vec<f64>,
    warm: Vec<f64>,
    cli_label: &'static str,
    cli: Vec<f64>,
}

fn worker(name: &str, backend: &str, options: BackendOptions) -> Arc<Worker> {
    let env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k == "PATH" || k == "HOME")
        .collect();
    Worker::new(WorkerConfig {
        name: name.to_owned(),
        backends: vec![backend.to_owned()],
        backend_options: options,
        shell_env: env,
        ..WorkerConfig::default()
    })
}

async fn echo(worker: &Worker, backend: &str, task: &str) -> f64 {
    let started = Instant::now();
    let done = worker
        .run_call(
            RunCall {
                call_id: format!("{task}-{}", uuid_like()),
                task_id: task.to_owned(),
                tool: "terminal".to_owned(),
                arguments_json: json!({"command": "echo hi"}).to_string(),
                environment: Some(EnvironmentSpec {
                    backend: backend.to_owned(),
                    settings_json: "{}".to_owned(),
                    owner: "bench".to_owned(),
                }),
                result_cap_chars: 0,
                session_id: String::new(),
                timeout_ms: 30_000,
                ..RunCall::default()
            },
            None,
        )
        .await;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let result: Value = serde_json::from_str(&done.body).unwrap();
    assert_eq!(result["output"], "hi", "{backend}: {}", done.body);
    ms
}

fn uuid_like() -> u128 {
    Instant::now().elapsed().as_nanos() ^ u128::from(std::process::id())
}

fn time_cli(command: &mut Command) -> f64 {
    let started = Instant::now();
    let out = command.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}",
        command,
        String::from_utf8_lossy(&out.stderr)
    );
    started.elapsed().as_secs_f64() * 1e3
}

async fn wait_available(worker: &Worker, backend: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        worker.environments().backends().refresh().await;
        if worker
            .environments()
            .backends()
            .available()
            .iter()
            .any(|b| b == backend)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// One backend: `rounds` cold starts, warm calls, and the CLI beside them.
async fn measure(
    row: &mut Row,
    rounds: usize,
    worker: &Worker,
    pooled: Option<&Worker>,
    mut cli: impl FnMut() -> f64,
) {
    let backend = row.backend;
    echo(worker, backend, "warm").await;
    for round in 0..rounds {
        let task = format!("cold-{round}");
        row.cold.push(echo(worker, backend, &task).await);
        worker.environments().release(&task).await;
        if let Some(pooled) = pooled {
            // Hand out only from a full pool (it refills in the background).
            let deadline = Instant::now() + Duration::from_secs(30);
            while pooled
                .environments()
                .backends()
                .pools()
                .sizes()
                .iter()
                .map(|s| s.2)
                .sum::<usize>()
                < 1
            {
                assert!(Instant::now() < deadline, "the pool did not refill");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let task = format!("pool-{round}");
            row.pool.push(echo(pooled, backend, &task).await);
            pooled.environments().release(&task).await;
        }
        for _ in 0..WARM_CALLS / rounds.max(1) {
            row.warm.push(echo(worker, backend, "warm").await);
            row.cli.push(cli());
        }
    }
    worker.environments().release("warm").await;
}

async fn run(rounds: usize, only: &[String]) {
    let mut rows = Vec::new();
    let wanted = |backend: &str| only.is_empty() || only.iter().any(|b| b == backend);
    let mut file_rows = Vec::new();

    // local
    if wanted("local") {
        let local = worker("bench-local", "local", BackendOptions::default());
        let mut row = Row {
            backend: "local",
            label: "local",
            cold: vec![],
            pool: vec![],
            warm: vec![],
            cli_label: "`bash -c 'echo hi'`",
            cli: vec![],
        };
        measure(&mut row, rounds, &local, None, || {
            time_cli(Command::new("bash").args(["-c", "echo hi"]))
        })
        .await;
        rows.push(row);
    }

    // docker
    let docker_options = |pool: usize| BackendOptions {
        docker: DockerSettings {
            persistent: false,
            ..DockerSettings::default()
        },
        warm_pools: if pool > 0 {
            vec![PoolSpec {
                backend: "docker".to_owned(),
                settings: json!({}),
                size: pool,
            }]
        } else {
            Vec::new()
        },
        ..BackendOptions::default()
    };
    let docker = worker("bench-docker", "docker", docker_options(0));
    if !wanted("docker") {
    } else if wait_available(&docker, "docker").await {
        let pooled = worker("bench-docker-pool", "docker", docker_options(1));
        wait_available(&pooled, "docker").await;
        let housekeeping = tokio_util::sync::CancellationToken::new();
        pooled.start_housekeeping(housekeeping.clone()).await;
        // A long-lived container for the CLI to exec into.
        let id = String::from_utf8(
            Command::new("docker")
                .args([
                    "run",
                    "-d",
                    "--rm",
                    "caduceus-base:bookworm",
                    "sleep",
                    "600",
                ])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
        .trim()
        .to_owned();
        let mut row = Row {
            backend: "docker",
            label: "docker",
            cold: vec![],
            pool: vec![],
            warm: vec![],
            cli_label: "`docker exec <ctr> echo hi`",
            cli: vec![],
        };
        measure(&mut row, rounds, &docker, Some(&pooled), || {
            time_cli(Command::new("docker").args(["exec", &id, "echo", "hi"]))
        })
        .await;
        let _ = Command::new("docker").args(["rm", "-f", &id]).output();
        // Stop the refills before the drain.
        housekeeping.cancel();
        pooled.shutdown().await;
        rows.push(row);
    } else {
        eprintln!("docker: the engine is not reachable; left out");
    }

    // ssh
    if !wanted("ssh") {
    } else if let Some(sshd) = Sshd::start("backend-bench") {
        let mut settings = SshSettings::new("127.0.0.1");
        settings.user = Some("root".to_owned());
        settings.port = sshd.port;
        settings.key = Some(sshd.key.clone());
        settings.known_hosts = Some(sshd.known_hosts.clone());
        settings.control_dir = sshd.control_dir.clone();
        let ssh = worker(
            "bench-ssh",
            "ssh",
            BackendOptions {
                ssh: Some(settings),
                ..BackendOptions::default()
            },
        );
        if wait_available(&ssh, "ssh").await {
            let mut row = Row {
                backend: "ssh",
                label: "ssh",
                cold: vec![],
                pool: vec![],
                warm: vec![],
                cli_label: "`ssh host echo hi` (new connection)",
                cli: vec![],
            };
            measure(&mut row, rounds, &ssh, None, || {
                let started = Instant::now();
                let out = sshd.plain_ssh("echo hi");
                assert!(out.status.success());
                started.elapsed().as_secs_f64() * 1e3
            })
            .await;
            rows.push(row);
        }
        ssh.shutdown().await;
    }

    // singularity (stand-in)
    if !wanted("singularity") {
    } else if let Some(fake) = FakeApptainer::find("backend-bench") {
        let settings = SingularitySettings {
            executable: Some(fake.exe.clone()),
            image: "docker://debian:bookworm-slim".to_owned(),
            scratch_dir: fake.state.path().join("scratch"),
            persistent: false,
            ..SingularitySettings::default()
        };
        let sing = worker(
            "bench-sing",
            "singularity",
            BackendOptions {
                singularity: settings,
                ..BackendOptions::default()
            },
        );
        if wait_available(&sing, "singularity").await {
            // The stand-in's own `exec` of a started instance, as the CLI comparison.
            let out = Command::new(&fake.exe)
                .args([
                    "instance",
                    "start",
                    "docker://debian:bookworm-slim",
                    "benchcli",
                ])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let mut row = Row {
                backend: "singularity",
                label: "singularity (stand-in)",
                cold: vec![],
                pool: vec![],
                warm: vec![],
                cli_label: "stand-in `exec instance://… echo hi`",
                cli: vec![],
            };
            let exe = fake.exe.clone();
            measure(&mut row, rounds, &sing, None, || {
                time_cli(Command::new(&exe).args(["exec", "instance://benchcli", "echo", "hi"]))
            })
            .await;
            let _ = Command::new(&fake.exe)
                .args(["instance", "stop", "benchcli"])
                .output();
            rows.push(row);
        }
        sing.shutdown().await;
    }

    // daytona (stand-in)
    if wanted("daytona") {
        daytona(rounds, &mut rows, &mut file_rows).await;
    }

    // modal (stand-in)
    if wanted("modal") {
        modal(rounds, &mut rows).await;
    }

    println!(
        "| backend | new environment, first `echo` (p50 ms) | from warm pool (p50 ms) | warm `terminal echo` (p50 ms) | engine CLI | CLI p50 ms | CLI / warm |"
    );
    println!("|---|---|---|---|---|---|---|");
    for row in &rows {
        let pool = if row.pool.is_empty() {
            "—".to_owned()
        } else {
            format!("{:.1}", p50(&row.pool))
        };
        println!(
            "| {} | {:.1} | {} | {:.3} | {} | {:.2} | {:.0}x |",
            row.label,
            p50(&row.cold),
            pool,
            p50(&row.warm),
            row.cli_label,
            p50(&row.cli),
            p50(&row.cli) / p50(&row.warm)
        );
    }
    if !file_rows.is_empty() {
        println!();
        println!(
            "| Daytona file primitive (stand-in) | a process per primitive (p50 ms) | one `execute` per primitive (p50 ms) | speed-up |"
        );
        println!("|---|---|---|---|");
        for (name, old, new) in &file_rows {
            println!("| {name} | {old:.2} | {new:.2} | {:.1}x |", old / new);
        }
    }
}

/// The Daytona row (against the stand-in, one Daytona "minute" a minute),
/// and its file primitives: `ShellFs` over a process per primitive (a
/// toolbox session, its command, stdin, output polls, clean-up) beside the
/// backend's own `ShellFs` (one `execute` per primitive, an upload first for
/// big input).
async fn daytona(rounds: usize, rows: &mut Vec<Row>, file_rows: &mut Vec<(String, f64, f64)>) {
    let fake = FakeDaytona::start(60.0);
    let settings = DaytonaSettings::from_env(|name| match name {
        "DAYTONA_API_KEY" => Some(FakeDaytona::API_KEY.to_owned()),
        "DAYTONA_API_URL" => Some(fake.api_url()),
        _ => None,
    })
    .unwrap();
    let options = |pool: usize| BackendOptions {
        daytona: Some(settings.clone()),
        warm_pools: if pool > 0 {
            vec![PoolSpec {
                backend: "daytona".to_owned(),
                settings: json!({}),
                size: pool,
            }]
        } else {
            Vec::new()
        },
        ..BackendOptions::default()
    };
    let plain = worker("bench-daytona", "daytona", options(0));
    if !wait_available(&plain, "daytona").await {
        eprintln!("daytona: the stand-in is not answering; left out");
        return;
    }
    let pooled = worker("bench-daytona-pool", "daytona", options(1));
    wait_available(&pooled, "daytona").await;
    let housekeeping = tokio_util::sync::CancellationToken::new();
    pooled.start_housekeeping(housekeeping.clone()).await;

    // A sandbox of its own for the raw toolbox call and the file primitives.
    let provider = DaytonaProvider::new(settings.clone());
    let sandbox = provider
        .create(&CreateRequest {
            task_id: "bench-files".to_owned(),
            owner: "bench".to_owned(),
            worker: "bench-daytona-files".to_owned(),
            worker_instance: "bench".to_owned(),
            settings: json!({}),
        })
        .await
        .unwrap();
    let execute = format!(
        "http://127.0.0.1:{}/toolbox/{}/process/execute",
        fake.port,
        sandbox.id()
    );
    let auth = format!("Authorization: Bearer {}", FakeDaytona::API_KEY);
    let mut row = Row {
        backend: "daytona",
        label: "daytona (stand-in)",
        cold: vec![],
        pool: vec![],
        warm: vec![],
        cli_label: "`curl` toolbox `/process/execute` of `echo hi`",
        cli: vec![],
    };
    measure(&mut row, rounds, &plain, Some(&pooled), || {
        time_cli(Command::new("curl").args([
            "-sf",
            "-X",
            "POST",
            "-H",
            &auth,
            "-H",
            "Content-Type: application/json",
            "-d",
            r#"{"command":"echo hi","timeout":10}"#,
            &execute,
        ]))
    })
    .await;
    housekeeping.cancel();
    pooled.shutdown().await;
    plain.shutdown().await;
    rows.push(row);

    let by_process = ShellFs::new(Arc::downgrade(&sandbox));
    let by_execute = sandbox.files();
    let dir = format!("{}/bench", sandbox.home_dir());
    let lines: String = (1..=1000)
        .map(|i| format!("line {i:04}: lorem ipsum\n"))
        .collect();
    let big: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    by_execute
        .write_atomic(&format!("{dir}/lines.txt"), lines.as_bytes())
        .await
        .unwrap();
    for (index, name) in FILE_OPS.iter().enumerate() {
        let (mut old, mut new) = (Vec::new(), Vec::new());
        for _ in 0..WARM_CALLS / 2 {
            let started = Instant::now();
            file_op(index, &by_process, &dir, &lines, &big).await;
            old.push(started.elapsed().as_secs_f64() * 1e3);
            let started = Instant::now();
            file_op(index, by_execute.as_ref(), &dir, &lines, &big).await;
            new.push(started.elapsed().as_secs_f64() * 1e3);
        }
        file_rows.push(((*name).to_owned(), p50(&old), p50(&new)));
    }
    let _ = sandbox.destroy().await;
}

/// The Modal row, against the stand-in (`tests/fake-modal`): no warm pool
/// (not built for Modal); the comparison is one raw router exec of
/// `echo hi` (`TaskExecStart`, the output stream, `TaskExecWait`) through
/// `Sandbox::spawn`, beside a warm `terminal` call in the live shell.
async fn modal(rounds: usize, rows: &mut Vec<Row>) {
    use caduceus_tests::standins::FakeModal;
    use caduceus_worker::backends::modal::{ModalProvider, ModalSettings};
    use caduceus_worker::sandbox::SpawnSpec;
    let fake = FakeModal::start();
    let settings = ModalSettings::from_env(|name| match name {
        "MODAL_TOKEN_ID" => Some(FakeModal::TOKEN_ID.to_owned()),
        "MODAL_TOKEN_SECRET" => Some(FakeModal::TOKEN_SECRET.to_owned()),
        "MODAL_SERVER_URL" => Some(fake.url()),
        "MODAL_CONFIG_PATH" => Some("/nonexistent/modal.toml".to_owned()),
        _ => None,
    })
    .unwrap();
    let plain = worker(
        "bench-modal",
        "modal",
        BackendOptions {
            modal: Some(settings.clone()),
            ..BackendOptions::default()
        },
    );
    if !wait_available(&plain, "modal").await {
        eprintln!("modal: the stand-in is not answering; left out");
        return;
    }
    let sandbox = ModalProvider::new(settings)
        .create(&CreateRequest {
            task_id: "bench-raw".to_owned(),
            owner: "bench".to_owned(),
            worker: "bench-modal-raw".to_owned(),
            worker_instance: "bench".to_owned(),
            settings: json!({}),
        })
        .await
        .unwrap();
    let mut row = Row {
        backend: "modal",
        label: "modal (stand-in)",
        cold: vec![],
        pool: vec![],
        warm: vec![],
        cli_label: "one router exec of `echo hi` (`Sandbox::spawn`, output, wait)",
        cli: vec![],
    };
    // `measure`'s loop, with the comparison awaited in place (it needs this
    // runtime, which a blocking closure would stall).
    echo(&plain, "modal", "warm").await;
    for round in 0..rounds {
        let task = format!("cold-{round}");
        row.cold.push(echo(&plain, "modal", &task).await);
        plain.environments().release(&task).await;
        for _ in 0..WARM_CALLS / rounds.max(1) {
            row.warm.push(echo(&plain, "modal", "warm").await);
            let started = Instant::now();
            let mut process = sandbox
                .spawn(SpawnSpec {
                    program: "echo".to_owned(),
                    args: vec!["hi".to_owned()],
                    cwd: None,
                    env: vec![],
                })
                .await
                .unwrap();
            drop(process.stdin);
            let mut out = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut process.output, &mut out)
                .await
                .unwrap();
            assert_eq!(process.handle.wait().await, Some(0));
            assert_eq!(out, b"hi\n");
            row.cli.push(started.elapsed().as_secs_f64() * 1e3);
        }
    }
    plain.environments().release("warm").await;
    plain.shutdown().await;
    let _ = sandbox.destroy().await;
    rows.push(row);
}

const FILE_OPS: [&str; 4] = [
    "stat",
    "read 1,000 lines (25 KB)",
    "write 100 B",
    "write 100 KB",
];

/// File primitive `index` of [`FILE_OPS`] on `fs`, checked.
async fn file_op(index: usize, fs: &dyn FileSystem, dir: &str, lines: &str, big: &[u8]) {
    let text = format!("{dir}/lines.txt");
    match index {
        0 => assert!(fs.stat(&text).await.unwrap().is_some()),
        1 => {
            let read = fs.read_range(&text, 0, None).await.unwrap().unwrap();
            assert_eq!(read.data, lines.as_bytes());
        }
        2 => {
            fs.write_atomic(&format!("{dir}/small.txt"), b"hello")
                .await
                .unwrap();
        }
        _ => {
            fs.write_atomic(&format!("{dir}/big.bin"), big)
                .await
                .unwrap();
        }
    }
}

fn p50(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}
