//! The coordinator at fleet scale: the real coordinator against N simulated
//! workers that speak the real worker protocol and answer every call at once,
//! driven by M concurrent client tasks (distinct tasks, so every worker gets
//! some).
//!
//! ```text
//! cargo build --release -p caduceus-tests --bins
//! target/release/caduceus-scale-bench [--workers 10,100,1000] [--clients 1,100,1000,10000]
//!     [--seconds 2] [--sessions 1000] [--modes inproc,loopback]
//! ```
//!
//! Modes:
//! - `inproc`: the coordinator library in this process, the simulated workers
//!   attached over in-process channels, clients calling `Coordinator::call_tool`:
//!   the coordinator's own cost (pipeline, guard, placement, call table).
//! - `loopback`: `caduceus serve` as a child process (the binary under test),
//!   the simulated workers in child processes of this binary (`sim-workers`,
//!   one gRPC connection each), clients over gRPC from this process.
//!
//! Reports per (mode, N, M): calls/s, p50/p99 of the call's latency as the
//! client sees it (at M = 1 that is the coordinator's own overhead: the
//! simulated worker answers at once), and CPU µs per call (the coordinator
//! process's, loopback; the whole process's, inproc). Per N: coordinator RSS
//! per attached worker; loopback: time to detect and re-place after 10 % of
//! the workers are killed (SIGKILL of one of ten worker processes) or frozen
//! (SIGSTOP). Once: RSS per idle session (sessions waiting on a `clarify`
//! answer). One JSON object per measurement on stdout, then a Markdown table.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Request;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;

use caduceus_coordinator::dispatch::RawArguments;
use caduceus_coordinator::gate::{ApprovalSettings, CommandGate};
use caduceus_coordinator::{Coordinator, CoordinatorConfig};
use caduceus_proto::control_client::ControlClient;
use caduceus_proto::worker_gateway_client::WorkerGatewayClient;
use caduceus_proto::{
    CallResult, CallStatus, CallToolRequest, EnvironmentReleased, Heartbeat, Hello, WorkerCommand,
    WorkerEvent, worker_command, worker_event,
};

const TOKEN: &str = "scale-bench-token-0123456789";
const ARGS: &str = r#"{"command":"echo hi"}"#;
/// What every simulated call answers: a warm `echo hi`.
const BODY: &str = r#"{"output": "hi", "exit_code": 0, "error": null}"#;

struct Options {
    workers: Vec<usize>,
    clients: Vec<usize>,
    seconds: f64,
    sessions: usize,
    modes: Vec<String>,
}

fn list(text: &str) -> Vec<usize> {
    text.split(',').map(|n| n.trim().parse().unwrap()).collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let _ = rustls::crypto::ring::default_provider().install_default();
    if args.get(1).map(String::as_str) == Some("sim-workers") {
        // A child: COUNT simulated workers on one thread.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let url = args[2].clone();
        let prefix = args[3].clone();
        let count: usize = args[4].parse().unwrap();
        runtime.block_on(sim_workers(url, prefix, count));
        return;
    }
    let mut options = Options {
        workers: vec![10, 100, 1000],
        clients: vec![1, 100, 1000, 10_000],
        seconds: 2.0,
        sessions: 1000,
        modes: vec!["inproc".into(), "loopback".into()],
    };
    let mut i = 1;
    while i < args.len() {
        let value = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--workers" => options.workers = list(&value),
            "--clients" => options.clients = list(&value),
            "--seconds" => options.seconds = value.parse().unwrap(),
            "--sessions" => options.sessions = value.parse().unwrap(),
            "--modes" => options.modes = value.split(',').map(str::to_owned).collect(),
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let rows = runtime.block_on(run(&options));
    print_table(&rows);
}

async fn run(options: &Options) -> Vec<Value> {
    let mut rows = Vec::new();
    if options.modes.iter().any(|m| m == "inproc") {
        for &n in &options.workers {
            rows.extend(inproc(n, &options.clients, options.seconds).await);
        }
        if options.sessions > 0 {
            rows.push(report(idle_sessions_inproc(options.sessions).await));
        }
    }
    if options.modes.iter().any(|m| m == "loopback") {
        for &n in &options.workers {
            rows.extend(loopback(n, &options.clients, options.seconds, options.sessions).await);
        }
    }
    rows
}

fn report(row: Value) -> Value {
    println!("{row}");
    row
}

// ---------------------------------------------------------------- measuring

/// Latencies (µs) and how many calls finished in the measured window.
#[derive(Default)]
struct Load {
    latencies: Vec<u32>,
    calls: usize,
    errors: usize,
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    f64::from(sorted[rank]) / 1000.0
}

/// Runs `m` client tasks: each makes one untimed call (its task is placed),
/// then calls as fast as it can for `seconds`. `call(i)` makes one call of
/// client `i` and says whether it succeeded.
async fn drive<F, Fut>(m: usize, seconds: f64, call: F) -> (Load, Duration)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let call = Arc::new(call);
    let (ready_tx, mut ready_rx) = mpsc::channel::<()>(m.max(1));
    let go = Arc::new(tokio::sync::Notify::new());
    let start = Arc::new(std::sync::OnceLock::<Instant>::new());
    let window = Duration::from_secs_f64(seconds);
    let mut handles = Vec::with_capacity(m);
    for i in 0..m {
        let call = call.clone();
        let ready = ready_tx.clone();
        let go = go.clone();
        let start = start.clone();
        handles.push(tokio::spawn(async move {
            let notified = go.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            call(i).await;
            let _ = ready.send(()).await;
            notified.await;
            let start = *start.get().unwrap();
            let mut load = Load::default();
            loop {
                let t = Instant::now();
                if t.duration_since(start) >= window {
                    break;
                }
                let ok = call(i).await;
                let done = Instant::now();
                if done.duration_since(start) > window {
                    break;
                }
                load.calls += 1;
                if !ok {
                    load.errors += 1;
                }
                load.latencies
                    .push(u32::try_from(done.duration_since(t).as_micros()).unwrap_or(u32::MAX));
            }
            load
        }));
    }
    drop(ready_tx);
    for _ in 0..m {
        ready_rx.recv().await;
    }
    let _ = start.set(Instant::now());
    go.notify_waiters();
    let mut total = Load::default();
    for handle in handles {
        let load = handle.await.unwrap();
        total.calls += load.calls;
        total.errors += load.errors;
        total.latencies.extend(load.latencies);
    }
    total.latencies.sort_unstable();
    (total, window)
}

/// User + system CPU time of a process (clock ticks of 10 ms).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_millis(ticks * 10)
}

/// Resident memory of a process, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn load_row(mode: &str, n: usize, m: usize, load: &Load, window: Duration, cpu: Duration) -> Value {
    let calls = load.calls.max(1);
    report(json!({
        "kind": "load",
        "mode": mode,
        "workers": n,
        "clients": m,
        "calls": load.calls,
        "errors": load.errors,
        "calls_per_s": (load.calls as f64 / window.as_secs_f64()).round(),
        "p50_ms": percentile(&load.latencies, 0.50),
        "p99_ms": percentile(&load.latencies, 0.99),
        "cpu_us_per_call": (cpu.as_secs_f64() * 1e6 / calls as f64).round(),
    }))
}

// ---------------------------------------------------------------- in-process

async fn start_inproc() -> Arc<Coordinator> {
    Coordinator::start(
        CoordinatorConfig {
            token: TOKEN.to_owned(),
            ..CoordinatorConfig::default()
        },
        Arc::new(CommandGate::new(ApprovalSettings::default())),
    )
    .await
    .unwrap()
}

/// Attaches a simulated worker over in-process channels; it answers every
/// call at once and heartbeats every second until `stop`.
async fn attach_sim_inproc(
    coordinator: &Arc<Coordinator>,
    name: String,
    stop: tokio_util::sync::CancellationToken,
) {
    let (events, events_rx) = mpsc::channel::<WorkerEvent>(256);
    let (commands, commands_rx) = mpsc::unbounded_channel();
    events
        .send(event(worker_event::Event::Hello(hello(&name))))
        .await
        .unwrap();
    let stream = Box::pin(ReceiverStream::new(events_rx).map(Ok));
    coordinator
        .attach_worker(stream, commands, "sim".to_owned())
        .await
        .unwrap();
    tokio::spawn(async move {
        let commands = tokio_stream::wrappers::UnboundedReceiverStream::new(commands_rx)
            .map(|c| c.map_err(|s| s.to_string()));
        serve_sim(commands, events, stop).await;
    });
}

async fn inproc(n: usize, clients: &[usize], seconds: f64) -> Vec<Value> {
    let me = std::process::id();
    let coordinator = start_inproc().await;
    let stop = tokio_util::sync::CancellationToken::new();
    let before = rss_kib(me);
    for i in 0..n {
        attach_sim_inproc(&coordinator, format!("sim-{i}"), stop.clone()).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(me);
    let mut rows = vec![report(json!({
        "kind": "worker_memory",
        "mode": "inproc",
        "workers": n,
        "kib_per_worker": ((after.saturating_sub(before)) as f64 / n as f64 * 10.0).round() / 10.0,
    }))];
    for &m in clients {
        let c = coordinator.clone();
        let tag = format!("n{n}m{m}");
        let cpu = cpu_time(me);
        let (load, window) = drive(m, seconds, move |i| {
            let c = c.clone();
            let task = format!("{tag}-{i}");
            async move {
                let done = c
                    .call_tool(caduceus_coordinator::ClientCall::new(
                        "terminal",
                        RawArguments::Text(ARGS.to_owned()),
                        &task,
                    ))
                    .await;
                done.status == caduceus_common::result::CallStatus::Ok
            }
        })
        .await;
        let cpu = cpu_time(me).saturating_sub(cpu);
        rows.push(load_row("inproc", n, m, &load, window, cpu));
        // Each round starts from an empty placement table.
        for i in 0..m {
            coordinator
                .release_environment(&format!("n{n}m{m}-{i}"))
                .await;
        }
    }
    stop.cancel();
    coordinator.shutdown();
    tokio::time::sleep(Duration::from_millis(200)).await;
    rows
}

/// RSS per idle session: sessions whose model asked a `clarify` question and
/// wait for the answer.
async fn idle_sessions_inproc(count: usize) -> Value {
    let me = std::process::id();
    let dir = tempfile::tempdir().unwrap();
    let replay = dir.path().join("clarify.jsonl");
    std::fs::write(&replay, clarify_replay()).unwrap();
    let coordinator = start_inproc().await;
    let hub = coordinator.sessions().clone();
    let mut streams = Vec::with_capacity(count);
    // One first, so that what every session shares is loaded before counting.
    let first = start_waiting(&hub, &replay).await;
    let before = rss_kib(me);
    for _ in 0..count {
        streams.push(start_waiting(&hub, &replay).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(me);
    drop((first, streams));
    coordinator.shutdown();
    json!({
        "kind": "session_memory",
        "mode": "inproc",
        "sessions": count,
        "kib_per_session": ((after.saturating_sub(before)) as f64 / count as f64 * 10.0).round() / 10.0,
    })
}

/// A replay model whose first turn asks the user a question.
fn clarify_replay() -> String {
    let arguments = json!({"question": "Which branch?"}).to_string();
    format!(
        "{}\n{}\n",
        json!({"content": "I need to ask first.", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "clarify", "arguments": arguments}}]}),
        json!({"content": "Done."})
    )
}

/// Starts a session and waits until it asks its question.
async fn start_waiting(
    hub: &caduceus_coordinator::agent::SessionHub,
    replay: &Path,
) -> caduceus_coordinator::agent::SessionStream {
    let mut stream = hub
        .start(caduceus_coordinator::agent::StartRequest {
            prompt: "Deploy the branch.".into(),
            model: format!("replay:{}", replay.display()),
            enabled_toolsets: Vec::new(),
            disabled_toolsets: Vec::new(),
            max_iterations: 0,
            task_id: String::new(),
            interactive: true,
            caller: None,
            labels: Default::default(),
            session_id: String::new(),
            workdir: None,
        })
        .await
        .unwrap();
    loop {
        let event = stream.events.recv().await.expect("the session ended early");
        if event.kind == "clarify" {
            return stream;
        }
    }
}

// ---------------------------------------------------------------- simulated workers

fn event(e: worker_event::Event) -> WorkerEvent {
    WorkerEvent { event: Some(e) }
}

fn hello(name: &str) -> Hello {
    Hello {
        name: name.to_owned(),
        version: "sim".to_owned(),
        backends: vec!["local".to_owned()],
        capacity: 64,
        instance_id: uuid::Uuid::new_v4().simple().to_string(),
        ..Hello::default()
    }
}

/// A simulated worker's side of an attached stream: welcome first, then every
/// run answered at once; heartbeats at the interval the welcome asks for.
async fn serve_sim<S>(
    mut commands: S,
    events: mpsc::Sender<WorkerEvent>,
    stop: tokio_util::sync::CancellationToken,
) where
    S: futures::Stream<Item = Result<WorkerCommand, String>> + Unpin,
{
    let Some(Ok(WorkerCommand {
        command: Some(worker_command::Command::Welcome(welcome)),
    })) = commands.next().await
    else {
        eprintln!("simulated worker: no welcome");
        return;
    };
    let interval = Duration::from_millis(u64::from(welcome.heartbeat_interval_ms.max(100)));
    let beats = events.clone();
    let beat_stop = stop.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = beat_stop.cancelled() => return,
            }
            let beat = event(worker_event::Event::Heartbeat(Heartbeat {
                environments: Vec::new(),
                backends: vec!["local".to_owned()],
            }));
            if beats.send(beat).await.is_err() {
                return;
            }
        }
    });
    loop {
        let command = tokio::select! {
            command = commands.next() => command,
            () = stop.cancelled() => return,
        };
        let Some(Ok(WorkerCommand {
            command: Some(command),
        })) = command
        else {
            // A detach the bench did not ask for (the coordinator declared
            // this worker lost, or the link broke): say so, since the
            // attached count the bench waits for will be one short.
            eprintln!("simulated worker: command stream ended: {command:?}");
            return;
        };
        let answer = match command {
            worker_command::Command::Run(run) => event(worker_event::Event::Result(CallResult {
                call_id: run.call_id,
                body: BODY.to_owned(),
                status: CallStatus::Ok as i32,
                environment_reset: String::new(),
                duration_us: 0,
            })),
            worker_command::Command::Persist(persist) => {
                event(worker_event::Event::Result(CallResult {
                    call_id: persist.call_id,
                    body: "/tmp/persisted".to_owned(),
                    status: CallStatus::Ok as i32,
                    ..CallResult::default()
                }))
            }
            worker_command::Command::Release(release) => {
                event(worker_event::Event::Released(EnvironmentReleased {
                    task_id: release.task_id,
                    reason: "released".to_owned(),
                }))
            }
            worker_command::Command::Drain(_) => return,
            worker_command::Command::Cancel(_)
            | worker_command::Command::Welcome(_)
            | worker_command::Command::Host(_)
            | worker_command::Command::ScriptResult(_) => continue,
        };
        if events.send(answer).await.is_err() {
            return;
        }
    }
}

/// The `sim-workers` child: `count` workers, one gRPC connection each.
async fn sim_workers(url: String, prefix: String, count: usize) {
    let token: MetadataValue<_> = caduceus_proto::bearer(TOKEN).parse().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let mut running = Vec::new();
    for i in 0..count {
        let url = url.clone();
        let token = token.clone();
        let name = format!("{prefix}-{i}");
        let stop = stop.clone();
        running.push(tokio::spawn(async move {
            let channel = tonic::transport::Endpoint::from_shared(url)
                .unwrap()
                .tcp_nodelay(true)
                .connect()
                .await
                .unwrap();
            let mut client =
                WorkerGatewayClient::with_interceptor(channel, move |mut r: Request<()>| {
                    r.metadata_mut()
                        .insert(caduceus_proto::AUTHORIZATION, token.clone());
                    Ok(r)
                });
            let (events, events_rx) = mpsc::channel(256);
            events
                .send(event(worker_event::Event::Hello(hello(&name))))
                .await
                .unwrap();
            let commands = client
                .attach(ReceiverStream::new(events_rx))
                .await
                .unwrap()
                .into_inner()
                .map(|c| c.map_err(|s| s.to_string()));
            serve_sim(Box::pin(commands), events, stop).await;
        }));
        // Attaching a thousand at once is a thundering herd no real fleet
        // makes: a few at a time.
        if i % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    for handle in running {
        let _ = handle.await;
    }
}

// ---------------------------------------------------------------- loopback

struct Served {
    child: Child,
    url: String,
    _home: tempfile::TempDir,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve() -> Served {
    let home = tempfile::tempdir().unwrap();
    let mut child = Command::new(caduceus_tests::bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--token", TOKEN])
        .env("CADUCEUS_HOME", home.path())
        .env(
            "CADUCEUS_LOG",
            std::env::var("BENCH_COORDINATOR_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .env_remove("CADUCEUS_COORDINATOR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let url = loop {
        let line = lines.next().expect("serve exited").unwrap();
        if let Some(address) = line.strip_prefix("caduceus coordinator listening on ") {
            break format!("http://{}", address.trim());
        }
    };
    // Keep draining its stderr so that it never blocks on a full pipe; kept
    // in BENCH_COORDINATOR_LOG_FILE when that names a file.
    let mut keep = std::env::var_os("BENCH_COORDINATOR_LOG_FILE")
        .map(|path| std::fs::File::create(path).expect("BENCH_COORDINATOR_LOG_FILE"));
    std::thread::spawn(move || {
        for line in lines.by_ref().map_while(Result::ok) {
            if let Some(file) = keep.as_mut() {
                let _ = writeln!(file, "{line}");
            }
        }
    });
    Served {
        child,
        url,
        _home: home,
    }
}

type Client = ControlClient<
    tonic::service::interceptor::InterceptedService<Channel, caduceus_tests::BearerToken>,
>;

async fn client(url: &str) -> Client {
    caduceus_tests::control_client(url, TOKEN).await
}

async fn attached(client: &mut Client) -> Vec<String> {
    client
        .status(caduceus_proto::StatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .workers
        .into_iter()
        .map(|w| w.name)
        .collect()
}

async fn wait_attached(client: &mut Client, count: usize, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let have = attached(client).await.len();
        if have == count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{have} of {count} workers attached"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn sim_process(url: &str, prefix: &str, count: usize) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["sim-workers", url, prefix, &count.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

fn signal(pid: u32, signal: &str) {
    Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
}

async fn loopback(n: usize, clients: &[usize], seconds: f64, sessions: usize) -> Vec<Value> {
    let served = serve();
    let pid = served.child.id();
    let mut control = client(&served.url).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_kib(pid);
    let processes = n.clamp(1, 10);
    let mut sims: Vec<Child> = (0..processes)
        .map(|p| sim_process(&served.url, &format!("p{p}"), n / processes))
        .collect();
    wait_attached(
        &mut control,
        n / processes * processes,
        Duration::from_secs(120),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let after = rss_kib(pid);
    let mut rows = vec![report(json!({
        "kind": "worker_memory",
        "mode": "loopback",
        "workers": n,
        "kib_per_worker": ((after.saturating_sub(before)) as f64 / n as f64 * 10.0).round() / 10.0,
    }))];
    // Clients share connections as HTTP/2 streams, 50 to a connection.
    let max_clients = clients.iter().copied().max().unwrap_or(1);
    let mut channels = Vec::new();
    for _ in 0..max_clients.div_ceil(50).clamp(1, 200) {
        channels.push(client(&served.url).await);
    }
    let channels = Arc::new(channels);
    for &m in clients {
        let tag = format!("n{n}m{m}");
        let pool = channels.clone();
        let used = m.div_ceil(50).clamp(1, pool.len());
        let cpu = cpu_time(pid);
        let (load, window) = drive(m, seconds, move |i| {
            let mut client = pool[i % used].clone();
            let task = format!("{tag}-{i}");
            async move {
                match client
                    .call_tool(CallToolRequest {
                        tool: "terminal".into(),
                        arguments_json: ARGS.into(),
                        task_id: task,
                        session_id: String::new(),
                        labels: Default::default(),
                    })
                    .await
                {
                    Ok(r) => r.into_inner().status == CallStatus::Ok as i32,
                    Err(_) => false,
                }
            }
        })
        .await;
        let cpu = cpu_time(pid).saturating_sub(cpu);
        rows.push(load_row("loopback", n, m, &load, window, cpu));
        for i in 0..m {
            control
                .release_environment(caduceus_proto::ReleaseEnvironmentRequest {
                    task_id: format!("n{n}m{m}-{i}"),
                })
                .await
                .unwrap();
        }
    }
    if n >= 10 && processes == 10 {
        rows.push(failover(&served, &mut control, &mut sims, n, "SIGKILL").await);
        rows.push(failover(&served, &mut control, &mut sims, n, "SIGSTOP").await);
    }
    if n == 10 && sessions > 0 {
        rows.push(idle_sessions_loopback(&served, sessions).await);
    }
    for mut sim in sims {
        signal(sim.id(), "CONT");
        let _ = sim.kill();
        let _ = sim.wait();
    }
    rows
}

/// One task per live worker, then 10 % of the workers (one of the ten
/// processes) killed or frozen at once: how long until the coordinator has
/// noticed (status shows them gone) and until every task they held has had a
/// successful call on another worker.
async fn failover(
    served: &Served,
    control: &mut Client,
    sims: &mut [Child],
    n: usize,
    how: &str,
) -> Value {
    let live = attached(control).await;
    let live_count = live.len();
    // The victim: the first process whose workers are all still attached.
    let victim = (0..sims.len())
        .find(|p| {
            let prefix = format!("p{p}-");
            live.iter().filter(|w| w.starts_with(&prefix)).count() == n / sims.len()
        })
        .unwrap();
    let prefix = format!("p{victim}-");
    // Place one task per live worker (least-loaded placement spreads them).
    let mut held: HashMap<String, String> = HashMap::new();
    for i in 0..live_count {
        let task = format!("{how}-{i}");
        let response = call(control, &task).await;
        held.insert(task, response.worker);
    }
    let affected: Vec<String> = held
        .iter()
        .filter(|(_, w)| w.starts_with(&prefix))
        .map(|(t, _)| t.clone())
        .collect();
    let gone = n / sims.len();
    let t0 = Instant::now();
    signal(
        sims[victim].id(),
        if how == "SIGKILL" { "KILL" } else { "STOP" },
    );
    // Every affected task calls until a call succeeds on another worker.
    let mut pending = Vec::new();
    for task in affected.clone() {
        let url = served.url.clone();
        let prefix = prefix.clone();
        pending.push(tokio::spawn(async move {
            let mut client = client(&url).await;
            loop {
                let response = call(&mut client, &task).await;
                if response.status == CallStatus::Ok as i32 && !response.worker.starts_with(&prefix)
                {
                    return Instant::now();
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }));
    }
    let mut detected = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    while detected.is_none() && Instant::now() < deadline {
        if attached(control).await.len() == live_count - gone {
            detected = Some(t0.elapsed());
        } else {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let mut replaced = Duration::ZERO;
    for done in pending {
        replaced = replaced.max(done.await.unwrap().duration_since(t0));
    }
    if how == "SIGSTOP" {
        signal(sims[victim].id(), "KILL");
    }
    report(json!({
        "kind": "failover",
        "how": how,
        "workers": n,
        "killed": gone,
        "tasks_moved": affected.len(),
        "detect_ms": detected.map(|d| d.as_millis()),
        "replaced_ms": replaced.as_millis(),
    }))
}

async fn call(client: &mut Client, task: &str) -> caduceus_proto::CallToolResponse {
    client
        .call_tool(CallToolRequest {
            tool: "terminal".into(),
            arguments_json: ARGS.into(),
            task_id: task.into(),
            session_id: String::new(),
            labels: Default::default(),
        })
        .await
        .unwrap()
        .into_inner()
}

/// RSS of the served coordinator per idle session (waiting on `clarify`).
async fn idle_sessions_loopback(served: &Served, count: usize) -> Value {
    let pid = served.child.id();
    let dir = tempfile::tempdir().unwrap();
    let replay = dir.path().join("clarify.jsonl");
    std::fs::write(&replay, clarify_replay()).unwrap();
    let control = client(&served.url).await;
    let start = |control: &Client| {
        let mut control = control.clone();
        let model = format!("replay:{}", replay.display());
        async move {
            let mut events = control
                .start_session(caduceus_proto::StartSessionRequest {
                    prompt: "Deploy the branch.".into(),
                    model,
                    interactive: true,
                    ..caduceus_proto::StartSessionRequest::default()
                })
                .await
                .unwrap()
                .into_inner();
            while let Some(event) = events.next().await {
                if event.unwrap().kind == "clarify" {
                    return events;
                }
            }
            panic!("the session ended early");
        }
    };
    let first = start(&control).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_kib(pid);
    let mut streams = Vec::with_capacity(count);
    for _ in 0..count {
        streams.push(start(&control).await);
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let after = rss_kib(pid);
    drop((first, streams));
    report(json!({
        "kind": "session_memory",
        "mode": "loopback",
        "sessions": count,
        "kib_per_session": ((after.saturating_sub(before)) as f64 / count as f64 * 10.0).round() / 10.0,
    }))
}

// ---------------------------------------------------------------- the table

fn print_table(rows: &[Value]) {
    println!();
    println!("| mode | workers | clients | calls/s | p50 ms | p99 ms | CPU µs/call | errors |");
    println!("|---|---|---|---|---|---|---|---|");
    for row in rows.iter().filter(|r| r["kind"] == "load") {
        println!(
            "| {} | {} | {} | {} | {:.3} | {:.3} | {} | {} |",
            row["mode"].as_str().unwrap(),
            row["workers"],
            row["clients"],
            row["calls_per_s"],
            row["p50_ms"].as_f64().unwrap(),
            row["p99_ms"].as_f64().unwrap(),
            row["cpu_us_per_call"],
            row["errors"],
        );
    }
    println!();
    for row in rows.iter().filter(|r| r["kind"] != "load") {
        match row["kind"].as_str().unwrap() {
            "worker_memory" => println!(
                "- {}: {} KiB per attached worker (N = {})",
                row["mode"].as_str().unwrap(),
                row["kib_per_worker"],
                row["workers"]
            ),
            "session_memory" => println!(
                "- {}: {} KiB per idle session ({} sessions waiting on clarify)",
                row["mode"].as_str().unwrap(),
                row["kib_per_session"],
                row["sessions"]
            ),
            "failover" => println!(
                "- {} of {} of {} workers: detected after {} ms, {} tasks re-placed after {} ms",
                row["how"].as_str().unwrap(),
                row["killed"],
                row["workers"],
                row["detect_ms"],
                row["tasks_moved"],
                row["replaced_ms"]
            ),
            _ => {}
        }
    }
}
