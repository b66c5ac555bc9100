//! Time from SIGTERM to a worker's clean exit with 20 environments, each with
//! a live shell and a background process (local and Docker), over N runs.
//!
//! `cargo build --release -p caduceus-tests --bins && target/release/caduceus-lifecycle-bench [runs]`
//! (default 10) prints a markdown table. Every run starts a coordinator and a
//! worker (real processes), creates the environments through `caduceus call`,
//! sends SIGTERM and waits for the exit, then checks the exit status and that
//! nothing was left (background processes, containers). Docker needs the
//! engine and `caduceus-base:bookworm` (`deploy/base-image.sh`); without them
//! its row is left out and the reason printed.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::process::Command;
use std::time::{Duration, Instant};

use caduceus_tests::conformance::{BackendUnderTest, DOCKER_IMAGE, containers_with_label};
use caduceus_tests::{Fleet, process_alive_with};
use serde_json::json;

const ENVIRONMENTS: usize = 20;
/// Calls creating environments at once.
const PARALLEL: usize = 4;

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let mut rows = vec![("local", measure("local", runs))];
    match BackendUnderTest::docker().missing() {
        None => rows.push(("docker", measure("docker", runs))),
        Some(missing) => eprintln!("docker left out: {missing}"),
    }
    println!(
        "| backend | environments | runs | SIGTERM → exit, p50 | min | max |\n|---|---|---|---|---|---|"
    );
    for (backend, mut times) in rows {
        times.sort_by(f64::total_cmp);
        println!(
            "| {backend} | {ENVIRONMENTS} | {} | {:.0} ms | {:.0} ms | {:.0} ms |",
            times.len(),
            times[times.len() / 2],
            times[0],
            times[times.len() - 1]
        );
    }
}

fn measure(backend: &str, runs: usize) -> Vec<f64> {
    (0..runs)
        .map(|run| {
            let ms = once(backend, run);
            eprintln!("{backend} run {run}: {ms:.0} ms");
            ms
        })
        .collect()
}

fn once(backend: &str, run: usize) -> f64 {
    let fleet = Fleet::new();
    let config = match backend {
        "docker" => format!(
            "terminal:\n  backend: docker\n  docker_image: {DOCKER_IMAGE}\n  container_persistent: false\n  container_memory: 512\n  backend_probe_seconds: 1\n"
        ),
        _ => "terminal:\n  backend: local\n".to_owned(),
    };
    fleet.write_config(&config);
    let coordinator = fleet.serve(&[]);
    let name = format!("bench-{backend}-{}-{run}", std::process::id());
    let mut worker = fleet.worker(&coordinator, &name, &fleet.token, &["--backends", backend]);
    fleet.wait_for_backend(&coordinator, &name, backend, Duration::from_secs(60));
    let mark = format!("caduceus-lcbench-{}-{run}", std::process::id());
    let url = coordinator.url();
    std::thread::scope(|scope| {
        for lane in 0..PARALLEL {
            let (fleet, url, mark) = (&fleet, &url, &mark);
            scope.spawn(move || {
                for env in (lane..ENVIRONMENTS).step_by(PARALLEL) {
                    let task = format!("t{env}");
                    let shell = fleet.call_at(url, "terminal", &json!({"command": "echo ready"}), &task);
                    assert_eq!(shell["output"], "ready", "{shell}");
                    let background = fleet.call_at(
                        url,
                        "terminal",
                        &json!({"command": format!("exec -a {mark} sleep 300"), "background": true}),
                        &task,
                    );
                    assert_eq!(background["exit_code"], 0, "{background}");
                }
            });
        }
    });
    let started = Instant::now();
    assert!(
        Command::new("kill")
            .args(["-TERM", &worker.pid().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = worker
        .wait_exit(Duration::from_secs(60))
        .expect("the worker did not exit within 60 s");
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    assert!(status.success(), "exit status {status:?}");
    if backend == "local" {
        assert!(!process_alive_with(&mark), "a background process was left");
    } else {
        let left = containers_with_label(&format!("caduceus.worker={name}"));
        assert!(left.is_empty(), "containers left: {left:?}");
    }
    drop(coordinator);
    elapsed
}
