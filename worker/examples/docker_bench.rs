//! Measures the Docker backend on this machine's engine:
//!
//! - a new environment answering its first `terminal echo`, cold (container
//!   created on demand) and from a warm pool;
//! - a warm `terminal echo` through the worker (tool, live shell, exec stream)
//!   next to `docker exec <container> echo` (the CLI, a new exec each time).
//!
//! Run: `cargo run --release -p caduceus-worker --example docker_bench [rounds]`
//! (needs `caduceus-base:bookworm`, see `deploy/base-image.sh`).

#![allow(
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use caduceus_proto::{EnvironmentSpec, RunCall};
use caduceus_worker::backends::BackendOptions;
use caduceus_worker::backends::docker::settings::DockerSettings;
use caduceus_worker::backends::pool::PoolSpec;
use caduceus_worker::{Worker, WorkerConfig};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn worker(name: &str, pool: usize) -> Arc<Worker> {
    Worker::new(WorkerConfig {
        name: name.to_owned(),
        backends: vec!["docker".to_owned()],
        backend_options: BackendOptions {
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
        },
        ..WorkerConfig::default()
    })
}

async fn echo(worker: &Worker, task: &str, n: usize) -> Duration {
    let started = Instant::now();
    let result = worker
        .run_call(
            RunCall {
                call_id: format!("{task}-{n}"),
                task_id: task.to_owned(),
                tool: "terminal".to_owned(),
                arguments_json: json!({"command": "echo hi"}).to_string(),
                environment: Some(EnvironmentSpec {
                    backend: "docker".to_owned(),
                    settings_json: "{}".to_owned(),
                    owner: "bench".to_owned(),
                }),
                result_cap_chars: 0,
                stream_output: false,
                session_id: String::new(),
            },
            None,
        )
        .await;
    let elapsed = started.elapsed();
    assert!(
        result.result.contains("\"output\":\"hi\""),
        "{}",
        result.result
    );
    elapsed
}

fn summary(label: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let pick = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{label:<44} n={:<4} median {:>8.2} ms   p90 {:>8.2} ms   min {:>8.2} ms",
        samples.len(),
        pick(0.5).as_secs_f64() * 1e3,
        pick(0.9).as_secs_f64() * 1e3,
        samples[0].as_secs_f64() * 1e3
    );
}

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10);
    let shutdown = CancellationToken::new();

    // Cold: every new task creates its container.
    let cold = worker("bench-cold", 0);
    cold.start_housekeeping(shutdown.clone()).await;
    let mut cold_starts = Vec::new();
    for i in 0..rounds {
        let task = format!("cold-{i}");
        cold_starts.push(echo(&cold, &task, 0).await);
        cold.environments().release(&task).await;
    }
    summary("new environment, cold: first terminal echo", cold_starts);

    // Warm pool: the pool keeps 2 ready; give it time to refill between tasks.
    let pooled = worker("bench-pool", 2);
    pooled.start_housekeeping(shutdown.clone()).await;
    let mut pool_starts = Vec::new();
    for i in 0..rounds {
        let deadline = Instant::now() + Duration::from_secs(30);
        while pooled
            .environments()
            .backends()
            .pools()
            .sizes()
            .iter()
            .map(|s| s.2)
            .sum::<usize>()
            < 2
        {
            assert!(Instant::now() < deadline, "the pool did not refill");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let task = format!("pool-{i}");
        pool_starts.push(echo(&pooled, &task, 0).await);
        pooled.environments().release(&task).await;
    }
    summary(
        "new environment, warm pool: first terminal echo",
        pool_starts,
    );

    // Warm: one environment, many calls.
    let task = "warm";
    echo(&cold, task, 0).await;
    let mut warm = Vec::new();
    for n in 0..rounds * 20 {
        warm.push(echo(&cold, task, n + 1).await);
    }
    summary("warm terminal echo (worker.run_call)", warm);

    let container = cold
        .environments()
        .get(task)
        .unwrap()
        .sandbox
        .id()
        .to_owned();
    let mut cli = Vec::new();
    for _ in 0..rounds * 5 {
        let started = Instant::now();
        let out = tokio::process::Command::new("docker")
            .args(["exec", &container, "echo", "hi"])
            .output()
            .await
            .unwrap();
        cli.push(started.elapsed());
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "hi");
    }
    summary("docker exec <container> echo hi (CLI)", cli);

    shutdown.cancel();
    cold.shutdown().await;
    pooled.shutdown().await;
}
