//! caduceus' side of the hermes peer benchmark (`bench/hermes-peer/run_all.sh`).
//!
//! `caduceus-bench <mode> <n> [workdir]` prints one JSON object
//! `{"mode": "...", "samples_ms": [...], ...}` like the peer's `rawbench`, so the
//! peer harness interleaves it with hermes and the raw limits in one run.
//!
//! Modes:
//! - `embedded_echo`      terminal `echo hi` through an in-process coordinator and worker
//! - `loopback_echo`      the same through `caduceus serve` + `caduceus worker` processes
//!   on 127.0.0.1 (gRPC both ways), called with a gRPC client
//! - `loopback_clients_K` K concurrent clients (distinct tasks) on the loopback fleet;
//!   samples are per-call latencies, `calls_per_s` the aggregate throughput
//! - `spawn_bash`, `persistent_bash` the raw limits, measured in this process
//! - `loopback_read_1000`, `loopback_write_small`, `loopback_patch_small`,
//!   `loopback_search_500`: the file tools on the peer's fixtures (`<workdir>/data`)
//! - `embedded_*` variants of the file modes.
//! - `agent_batch8_sleep`: one agent turn with 8 × `terminal sleep 0.2` (same task,
//!   so hermes' planner runs them in order), embedded, replayed model; one sample =
//!   the whole session
//! - `agent_fanout3`: a parent delegating 3 children that each run `sleep 1`, on two
//!   embedded workers, in a fresh process (the workers' first shells run the login
//!   files); one sample = the whole session. `agent_fanout3_warm`: the same after one
//!   untimed fan-out (login state cached)
//! - `docker_execute_code_read50`: one `execute_code` script making 50 `read_file`
//!   calls, in a Docker environment on a worker process (loopback gRPC); one
//!   sample = the whole script (`CADBENCH_DOCKER_IMAGE`, default `caduceus-base:bookworm`)
//! - `loopback_rpc_floor`: one gRPC round trip to the coordinator that reaches no worker
//! - `sigstop_answer`: a loopback fleet with the product's heartbeat settings
//!   (1 s; suspect 1.5 s; lost 3 s); one sample = from SIGSTOP of the worker
//!   running a `sleep 60` call to that call's answer (an error naming the
//!   worker); the worker is resumed and reattaches before the next sample
//! - `state_write_ahead`: what durability adds to each agent-loop call: the
//!   write-ahead record of a call (on disk before it is dispatched) in a fresh
//!   session database under `workdir`
//! - `audit_record`: what one tool call pays for its audit line (`AuditLog::tool_call`:
//!   serialise and hand to the writer thread), with the writer syncing behind it;
//!   `audit_sync_write`: the same line written and `fsync`ed by the caller, as a
//!   writer without its own thread would make every call wait

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use caduceus_coordinator::dispatch::RawArguments;
use caduceus_coordinator::gate::OpenGate;
use caduceus_proto::control_client::ControlClient;
use caduceus_proto::{CallToolRequest, bearer};
use serde_json::{Value, json};
use tonic::Request;
use tonic::metadata::MetadataValue;

fn main() {
    if let Some(code) = caduceus::file_server::run_if_asked() {
        std::process::exit(if code == std::process::ExitCode::SUCCESS {
            0
        } else {
            1
        });
    }
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).cloned().unwrap_or_default();
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100);
    let work = PathBuf::from(
        args.get(3)
            .cloned()
            .unwrap_or_else(|| "/tmp/peer/work".to_owned()),
    );
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let report = runtime.block_on(run(&mode, n, &work));
    println!("{report}");
}

async fn run(mode: &str, n: usize, work: &Path) -> Value {
    match mode {
        "spawn_bash" => samples(
            mode,
            &time_n(n, || {
                let out = Command::new("bash")
                    .args(["-c", "echo hi"])
                    .stdin(Stdio::null())
                    .output()
                    .unwrap();
                assert_eq!(out.stdout, b"hi\n");
            }),
        ),
        "persistent_bash" => samples(mode, &persistent_bash(n)),
        "agent_batch8_sleep" => samples(mode, &agent_batch8(n).await),
        "state_write_ahead" => samples(mode, &state_write_ahead(n, work).await),
        "agent_fanout3" => samples(mode, &agent_fanout3(n, false).await),
        "agent_fanout3_warm" => samples(mode, &agent_fanout3(n, true).await),
        m if m.starts_with("embedded_") => {
            let fleet = embedded_with(1).await;
            let op = &m["embedded_".len()..];
            let xs = measure(op, n, work, |tool, args, task| {
                let fleet = fleet.clone();
                async move {
                    fleet
                        .call_tool(caduceus_coordinator::ClientCall::new(
                            &tool,
                            RawArguments::Text(args),
                            &task,
                        ))
                        .await
                        .render()
                }
            })
            .await;
            samples(mode, &xs)
        }
        "audit_record" | "audit_sync_write" => samples(mode, &audit(mode, n)),
        "loopback_rpc_floor" => {
            // One gRPC round trip to the coordinator that touches no worker:
            // the floor every loopback call pays once per hop.
            let fleet = Loopback::start(1);
            let mut client = fleet.client().await;
            let mut xs = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                client
                    .list_tools(caduceus_proto::ListToolsRequest {
                        enabled_toolsets: vec!["todo".into()],
                        disabled_toolsets: vec![],
                    })
                    .await
                    .unwrap();
                xs.push(t.elapsed().as_secs_f64() * 1e3);
            }
            samples(mode, &xs)
        }
        "sigstop_answer" => samples(mode, &sigstop_answer(n).await),
        "docker_execute_code_read50" => samples(mode, &docker_execute_code_read50(n).await),
        m if m.starts_with("loopback_clients_") => {
            let k: usize = m["loopback_clients_".len()..].parse().unwrap();
            let fleet = Loopback::start(1);
            let (xs, per_s) = concurrent(&fleet, k, n).await;
            let mut v = samples(mode, &xs);
            v["calls_per_s"] = json!(per_s);
            v
        }
        m if m.starts_with("loopback_") => {
            let fleet = Loopback::start(1);
            let client = fleet.client().await;
            let op = &m["loopback_".len()..];
            let xs = measure(op, n, work, |tool, args, task| {
                let mut client = client.clone();
                async move {
                    client
                        .call_tool(CallToolRequest {
                            tool,
                            arguments_json: args,
                            task_id: task,
                            session_id: String::new(),
                            ..Default::default()
                        })
                        .await
                        .unwrap()
                        .into_inner()
                        .result
                }
            })
            .await;
            samples(mode, &xs)
        }
        other => panic!("unknown mode {other}"),
    }
}

/// One sample: `call_started` (which returns once the record is on disk),
/// then the result record, as the agent loop writes them around every call.
async fn state_write_ahead(n: usize, work: &Path) -> Vec<f64> {
    use caduceus_coordinator::agent::store::{CallResult, CallStart, SessionStore};
    std::fs::create_dir_all(work).unwrap();
    let dir = tempfile::tempdir_in(work).unwrap();
    let store = SessionStore::open(dir.path().join("state.db"), true).unwrap();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        store
            .call_started(CallStart {
                session_id: "bench".into(),
                turn: i,
                call_id: format!("c{i}"),
                tool: "terminal".into(),
                arguments: r#"{"command":"echo hi"}"#.into(),
                task_id: "bench".into(),
            })
            .await;
        out.push(t.elapsed().as_secs_f64() * 1000.0);
        store.call_finished(CallResult {
            session_id: "bench".into(),
            turn: i,
            call_id: format!("c{i}"),
            result: r#"{"output": "hi", "exit_code": 0, "error": null}"#.into(),
            status: "ok".into(),
            worker: Some("w1".into()),
        });
    }
    store.flush().await;
    out
}

fn samples(mode: &str, xs: &[f64]) -> Value {
    json!({"mode": mode, "samples_ms": xs.iter().map(|x| (x * 10_000.0).round() / 10_000.0).collect::<Vec<_>>()})
}

fn time_n(n: usize, mut f: impl FnMut()) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect()
}

fn persistent_bash(n: usize) -> Vec<f64> {
    let mut child = Command::new("bash")
        .args(["--noprofile", "--norc"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let xs = time_n(n, || {
        stdin.write_all(b"echo hi; echo __END__\n").unwrap();
        stdin.flush().unwrap();
        loop {
            line.clear();
            out.read_line(&mut line).unwrap();
            if line == "__END__\n" {
                break;
            }
        }
    });
    drop(stdin);
    let _ = child.wait();
    xs
}

/// Runs `n` timed calls of operation `op` through `call(tool, args, task)`,
/// after one untimed warm-up call (the environment's creation is not measured).
/// A root host's local sandboxes run as nobody (README "Secrets and
/// sandboxes"): the bench's files are made theirs to read and write, as a
/// project shared with the sandbox user would be.
fn open_to_the_sandbox_user(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::Uid::effective().is_root() {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            open_to_the_sandbox_user(&path);
        } else {
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666));
        }
    }
}

async fn measure<F, Fut>(op: &str, n: usize, work: &Path, call: F) -> Vec<f64>
where
    F: Fn(String, String, String) -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let data = work.join("data");
    open_to_the_sandbox_user(&data);
    let task = "bench".to_owned();
    let (tool, make_args): (&str, Box<dyn Fn(usize) -> Value>) = match op {
        "echo" => ("terminal", Box::new(|_| json!({"command": "echo hi"}))),
        "big_output" => (
            "terminal",
            Box::new(|_| json!({"command": "head -c 10000000 /dev/zero | tr '\\0' a"})),
        ),
        "read_1000" => {
            let path = data.join("file1000.txt").display().to_string();
            // The same read as hermes' bench; the untimed `touch` below keeps
            // the dedup stub from answering.
            (
                "read_file",
                Box::new(move |_| json!({"path": path, "limit": 1000})),
            )
        }
        "write_small" => {
            let path = data.join("cad_out_small.txt").display().to_string();
            (
                "write_file",
                Box::new(
                    move |i| json!({"path": path, "content": format!("hello world {i}\nsecond line\n")}),
                ),
            )
        }
        "patch_small" => {
            let path = data.join("cad_patch_target.txt");
            std::fs::write(&path, "alpha\nbeta\ngamma\n").unwrap();
            let path = path.display().to_string();
            (
                "patch",
                Box::new(move |i| {
                    let (a, b) = if i % 2 == 0 {
                        ("beta", "BETA")
                    } else {
                        ("BETA", "beta")
                    };
                    json!({"path": path, "old_string": a, "new_string": b})
                }),
            )
        }
        "search_500" => {
            let path = data.join("tree500").display().to_string();
            // Alternate two equivalent patterns so the repeat guard never answers.
            (
                "search_files",
                Box::new(
                    move |i| json!({"pattern": if i % 2 == 0 { "TODO_FIXME" } else { "TODO_FIXM[E]" }, "path": path}),
                ),
            )
        }
        other => panic!("unknown operation {other}"),
    };
    let check = |result: &str| {
        let v: Value = serde_json::from_str(result).unwrap_or(Value::Null);
        assert!(v.get("error").is_none_or(Value::is_null), "{op}: {result}");
    };
    // Untimed, before each timed call: what hermes' bench does with
    // reset_file_dedup + notify_other_tool_call — an unchanged re-read or a
    // repeated search would otherwise be answered by the loop guard's stub.
    let reset = match op {
        "read_1000" => {
            Some(json!({"command": format!("touch {}", data.join("file1000.txt").display())}))
        }
        "search_500" => Some(json!({"command": "true"})),
        _ => None,
    };
    check(&call(tool.to_owned(), make_args(0).to_string(), task.clone()).await);
    let mut xs = Vec::with_capacity(n);
    for i in 1..=n {
        if let Some(reset) = &reset {
            call("terminal".to_owned(), reset.to_string(), task.clone()).await;
        }
        let args = make_args(i).to_string();
        let t = Instant::now();
        let result = call(tool.to_owned(), args, task.clone()).await;
        xs.push(t.elapsed().as_secs_f64() * 1e3);
        check(&result);
    }
    xs
}

type Client =
    ControlClient<tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Auth>>;

/// Presents the token.
#[derive(Clone)]
struct Auth(MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, tonic::Status> {
        req.metadata_mut().insert("authorization", self.0.clone());
        Ok(req)
    }
}

/// `caduceus serve` + workers as processes on loopback.
struct Loopback {
    coordinator: Child,
    workers: Vec<Child>,
    url: String,
    token: String,
    _home: tempfile::TempDir,
}

impl Loopback {
    fn start(workers: usize) -> Loopback {
        Loopback::start_with(workers, None, &[])
    }

    /// [`start`](Self::start) with a `config.yaml` and extra worker flags.
    fn start_with(workers: usize, config: Option<&str>, worker_args: &[&str]) -> Loopback {
        let bin = std::env::current_exe().unwrap().with_file_name("caduceus");
        assert!(
            bin.exists(),
            "{} missing: build it (cargo build --release -p caduceus)",
            bin.display()
        );
        let home = tempfile::tempdir().unwrap();
        if let Some(config) = config {
            std::fs::write(home.path().join("config.yaml"), config).unwrap();
        }
        let token = "bench-token".to_owned();
        let mut coordinator = Command::new(&bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--token", &token])
            .env("CADUCEUS_HOME", home.path())
            .env("CADUCEUS_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(coordinator.stderr.take().unwrap()).lines();
        let address = loop {
            let line = lines.next().unwrap().unwrap();
            if let Some(addr) = line.strip_prefix("caduceus coordinator listening on ") {
                break addr.trim().to_owned();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        let url = format!("http://{address}");
        let workers = (0..workers)
            .map(|i| {
                Command::new(&bin)
                    .args([
                        "worker",
                        "--coordinator",
                        &url,
                        "--token",
                        &token,
                        "--name",
                        &format!("bench-{i}"),
                    ])
                    .args(worker_args)
                    .env("CADUCEUS_HOME", home.path())
                    .env("CADUCEUS_LOG", "warn")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        Loopback {
            coordinator,
            workers,
            url,
            token,
            _home: home,
        }
    }

    async fn client(&self) -> Client {
        let channel = tonic::transport::Endpoint::from_shared(self.url.clone())
            .unwrap()
            .tcp_nodelay(true)
            .connect()
            .await
            .unwrap();
        let mut client =
            ControlClient::with_interceptor(channel, Auth(bearer(&self.token).parse().unwrap()));
        // Wait for a worker to offer the terminal.
        wait_status(&mut client, "no worker attached", |s| !s.workers.is_empty()).await;
        client
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        for w in &mut self.workers {
            let _ = Command::new("kill")
                .args(["-INT", &w.id().to_string()])
                .status();
            let _ = w.wait();
        }
        let _ = self.coordinator.kill();
        let _ = self.coordinator.wait();
    }
}

/// Polls the coordinator's status until `done` holds (30 s at most).
async fn wait_status(
    client: &mut Client,
    what: &str,
    done: impl Fn(&caduceus_proto::StatusResponse) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = client
            .status(caduceus_proto::StatusRequest {})
            .await
            .unwrap()
            .into_inner();
        if done(&status) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The script of `docker_execute_code_read50`: 50 `read_file` calls of 50
/// files, each a round trip from the script to the coordinator's pipeline.
const READ50: &str = r#"
from hermes_tools import read_file
for i in range(50):
    r = read_file(f"/tmp/bench50/f{i}.txt")
    assert "content" in r, r
print("read 50")
"#;

/// One sample: one `execute_code` run of [`READ50`] in a Docker environment
/// on a worker process (loopback gRPC), from the client's call to its
/// answer. Untimed before each: a `touch` of the files, so that read_file's
/// dedup (hermes') answers no read with its stub.
async fn docker_execute_code_read50(n: usize) -> Vec<f64> {
    let image = std::env::var("CADBENCH_DOCKER_IMAGE")
        .unwrap_or_else(|_| "caduceus-base:bookworm".to_owned());
    let config = format!("terminal:\n  backend: docker\n  docker_image: {image}\n");
    let fleet = Loopback::start_with(1, Some(&config), &["--backends", "docker"]);
    let mut client = fleet.client().await;
    wait_status(&mut client, "no worker offers docker", |s| {
        s.workers
            .iter()
            .any(|w| w.backends.iter().any(|b| b == "docker"))
    })
    .await;
    let call = |tool: &str, args: Value| {
        let mut client = client.clone();
        let tool = tool.to_owned();
        async move {
            let result = client
                .call_tool(CallToolRequest {
                    tool,
                    arguments_json: args.to_string(),
                    task_id: "bench".to_owned(),
                    session_id: String::new(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .result;
            serde_json::from_str::<Value>(&result).unwrap_or(Value::Null)
        }
    };
    let setup = call(
        "terminal",
        json!({"command": "mkdir -p /tmp/bench50 && for i in $(seq 0 49); do seq 1 20 | sed \"s/^/line $i /\" > /tmp/bench50/f$i.txt; done && echo ok"}),
    )
    .await;
    assert_eq!(setup["output"], "ok", "{setup}");
    let touch = json!({"command": "touch /tmp/bench50/*"});
    let script = json!({"code": READ50});
    let check = |result: &Value| {
        assert_eq!(result["output"], "read 50\n", "{result}");
        assert_eq!(result["tool_calls_made"], 50, "{result}");
    };
    // Warm: the first script pays the interpreter's first start in the image.
    check(&call("execute_code", script.clone()).await);
    let mut xs = Vec::with_capacity(n);
    for _ in 0..n {
        call("terminal", touch.clone()).await;
        let t = Instant::now();
        let result = call("execute_code", script.clone()).await;
        xs.push(t.elapsed().as_secs_f64() * 1e3);
        check(&result);
    }
    xs
}

/// From SIGSTOP of the worker running a call to the call's answer, `n` times.
async fn sigstop_answer(n: usize) -> Vec<f64> {
    let fleet = Loopback::start(1);
    let mut client = fleet.client().await;
    let worker = fleet.workers[0].id().to_string();
    let kill = |signal: &str| {
        let status = Command::new("kill")
            .args([signal, &worker])
            .status()
            .unwrap();
        assert!(status.success());
    };
    let mut xs = Vec::with_capacity(n);
    for i in 0..n {
        // The task's shell is up before the timed call starts.
        let warm = client
            .call_tool(CallToolRequest {
                tool: "terminal".into(),
                arguments_json: json!({"command": "echo warm"}).to_string(),
                task_id: format!("stopped-{i}"),
                session_id: String::new(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .result;
        assert!(warm.contains("warm"), "{warm}");
        let mut caller = client.clone();
        let call = tokio::spawn(async move {
            caller
                .call_tool(CallToolRequest {
                    tool: "terminal".into(),
                    arguments_json: json!({"command": "sleep 60"}).to_string(),
                    task_id: format!("stopped-{i}"),
                    session_id: String::new(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .result
        });
        // Wait until the call runs on the worker.
        wait_status(&mut client, "the call never ran", |s| {
            s.workers.iter().any(|w| w.running_calls > 0)
        })
        .await;
        // Let the call reach its shell.
        tokio::time::sleep(Duration::from_millis(200)).await;
        kill("-STOP");
        let t = Instant::now();
        let result = call.await.unwrap();
        xs.push(t.elapsed().as_secs_f64() * 1e3);
        assert!(result.contains("was lost"), "{result}");
        kill("-CONT");
        // The resumed worker reattaches before the next sample.
        wait_status(&mut client, "the worker never came back", |s| {
            s.workers.iter().any(|w| w.state == "ready")
        })
        .await;
    }
    xs
}

/// `k` clients, each on its own connection and task, `n` calls each.
async fn concurrent(fleet: &Loopback, k: usize, n: usize) -> (Vec<f64>, f64) {
    let mut clients = Vec::new();
    for i in 0..k {
        let mut client = fleet.client().await;
        let task = format!("client-{i}");
        // Warm each task's environment.
        client
            .call_tool(CallToolRequest {
                tool: "terminal".into(),
                arguments_json: json!({"command": "true"}).to_string(),
                task_id: task.clone(),
                session_id: String::new(),
                ..Default::default()
            })
            .await
            .unwrap();
        clients.push((client, task));
    }
    let started = Instant::now();
    let handles: Vec<_> = clients
        .into_iter()
        .map(|(mut client, task)| {
            tokio::spawn(async move {
                let mut xs = Vec::with_capacity(n);
                for _ in 0..n {
                    let t = Instant::now();
                    let r = client
                        .call_tool(CallToolRequest {
                            tool: "terminal".into(),
                            arguments_json: json!({"command": "echo hi"}).to_string(),
                            task_id: task.clone(),
                            session_id: String::new(),
                            ..Default::default()
                        })
                        .await
                        .unwrap()
                        .into_inner();
                    xs.push(t.elapsed().as_secs_f64() * 1e3);
                    assert!(r.result.contains("\"hi\""), "{}", r.result);
                }
                xs
            })
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    let secs = started.elapsed().as_secs_f64();
    let per_s = (k * n) as f64 / secs;
    (all, per_s)
}

/// Runs one replayed session to its final event and returns its wall time.
async fn run_session(
    coordinator: &Arc<caduceus_coordinator::Coordinator>,
    script: &str,
    prompt: &str,
    task_id: &str,
) -> f64 {
    let model = caduceus_llm::ReplayModel::from_jsonl("bench", script).unwrap();
    let started = Instant::now();
    let mut stream = coordinator
        .sessions()
        .start_with_model(
            caduceus_coordinator::agent::StartRequest {
                prompt: prompt.to_owned(),
                task_id: task_id.to_owned(),
                ..Default::default()
            },
            Arc::new(model),
            "replay".to_owned(),
        )
        .await
        .unwrap();
    while let Some(event) = stream.events.recv().await {
        if event.kind == "final" && event.session_id == stream.session_id {
            let data: Value = serde_json::from_str(&event.json).unwrap();
            assert_eq!(data["status"], "completed", "{data}");
            break;
        }
    }
    started.elapsed().as_secs_f64() * 1e3
}

fn tool_turn(calls: &[(&str, Value)]) -> String {
    let calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| json!({"id": format!("c{i}"), "type": "function", "function": {"name": name, "arguments": args.to_string()}}))
        .collect();
    json!({"tool_calls": calls}).to_string()
}

async fn agent_batch8(n: usize) -> Vec<f64> {
    let fleet = embedded_with(1).await;
    let turn = tool_turn(&vec![("terminal", json!({"command": "sleep 0.2"})); 8]);
    let script = format!("{turn}\n{}\n", json!({"content": "done"}));
    // A warm environment, as in hermes' bench (its environment exists before
    // the batch): one untimed session creates it.
    run_session(&fleet, &script, "sleep eight times", "bench-batch").await;
    let mut xs = Vec::new();
    for _ in 0..n.max(1) {
        xs.push(run_session(&fleet, &script, "sleep eight times", "bench-batch").await);
    }
    xs
}

/// `warm`: one untimed fan-out first, so the worker's login state is cached
/// and only the delegation itself is measured.
async fn agent_fanout3(n: usize, warm: bool) -> Vec<f64> {
    let fleet = embedded_with(2).await;
    let tasks: Vec<Value> = (0..3)
        .map(|i| json!({"goal": format!("child {i}: sleep for a second")}))
        .collect();
    let parent = tool_turn(&[("delegate_task", json!({"tasks": tasks}))]);
    let mut script = format!("{parent}\n{}\n", json!({"content": "all three done"}));
    for i in 0..3 {
        let child = tool_turn(&[("terminal", json!({"command": "sleep 1"}))]);
        script.push_str(&format!("{}\n", with_match(&child, &format!("child {i}:"))));
        script.push_str(&format!(
            "{}\n",
            with_match(
                &json!({"content": "slept"}).to_string(),
                &format!("child {i}:")
            )
        ));
    }
    if warm {
        run_session(&fleet, &script, "fan out", "").await;
    }
    let mut xs = Vec::new();
    for _ in 0..n.max(1) {
        xs.push(run_session(&fleet, &script, "fan out", "").await);
    }
    xs
}

fn with_match(line: &str, key: &str) -> String {
    let mut v: Value = serde_json::from_str(line).unwrap();
    v["match"] = json!(key);
    v.to_string()
}

/// An embedded coordinator with `workers` local workers, configured from
/// `$CADUCEUS_HOME` (run_all.sh points it at the bench dir, so sessions record
/// there). The fleet is leaked: it lives until the process exits.
async fn embedded_with(workers: usize) -> Arc<caduceus_coordinator::Coordinator> {
    let config = caduceus::config::Config::load(None).unwrap();
    let fleet = caduceus::target::Embedded::start(&config, Arc::new(OpenGate), workers)
        .await
        .unwrap();
    let coordinator = fleet.coordinator.clone();
    std::mem::forget(fleet);
    coordinator
}

/// Per-line cost of the audit log to the caller (see the module docs).
fn audit(mode: &str, n: usize) -> Vec<f64> {
    use caduceus_coordinator::audit::{AuditConfig, AuditLog};
    use caduceus_coordinator::call::{CallContext, CallStatus};
    let dir = std::env::temp_dir().join(format!("caduceus-bench-audit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ctx = CallContext {
        task_id: "bench".to_owned(),
        session_id: Some("sess_bench".to_owned()),
        caller: Some("ci".to_owned()),
        ..CallContext::default()
    };
    let args = json!({"command": "git status --short && cargo build -p caduceus", "timeout": 60});
    let xs = if mode == "audit_record" {
        let log = AuditLog::open(AuditConfig::in_home(&dir)).unwrap();
        let done = caduceus_coordinator::call::ToolResult {
            worker: Some("w1".to_owned()),
            duration: Duration::from_millis(12),
            arguments: args.as_object().cloned(),
            ..caduceus_coordinator::call::ToolResult::new(
                "terminal".to_owned(),
                caduceus_coordinator::call::ToolReply::new(CallStatus::Ok, "{}".to_owned()),
            )
        };
        let xs = time_n(n, || log.tool_call(&ctx, &done, Some("allowed")));
        log.flush();
        xs
    } else {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("audit.jsonl"))
            .unwrap();
        time_n(n, || {
            let line = json!({"event": "tool_call", "arguments": args, "task": "bench"});
            writeln!(file, "{line}").unwrap();
            file.sync_data().unwrap();
        })
    };
    let _ = std::fs::remove_dir_all(&dir);
    xs
}
