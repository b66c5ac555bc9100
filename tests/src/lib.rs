//! Helpers for the integration tests: start real `caduceus` processes
//! (coordinator, workers, client commands) with an isolated `CADUCEUS_HOME`,
//! and stop them when dropped.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

pub mod conformance;
pub mod standins;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The program under test: the `caduceus` binary built in this crate as
/// `caduceus-under-test`, next to the test executables' `deps/` directory.
pub fn bin() -> PathBuf {
    if let Some(path) = std::env::var_os("CARGO_BIN_EXE_caduceus-under-test") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().unwrap();
    // A bench binary of this crate sits beside it.
    let beside = exe.with_file_name("caduceus-under-test");
    if beside.exists() {
        return beside;
    }
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let path = dir.join("caduceus-under-test");
    assert!(
        path.exists(),
        "{} is missing: run the tests through cargo (it builds the binary)",
        path.display()
    );
    path
}

/// Heartbeat settings of test fleets: the product's 1 s heartbeat, but a
/// worker is suspect only after 5 s and lost only after 15 s of silence, so a
/// loaded test machine (2 cores, parallel builds) never loses a live worker.
/// Killed workers are noticed at once anyway (their stream closes); tests of
/// hung workers pass their own settings ([`PRODUCT_LIVENESS`]).
pub const TEST_LIVENESS: [(&str, &str); 3] = [
    ("--heartbeat-ms", "1000"),
    ("--suspect-after-ms", "5000"),
    ("--lost-after-ms", "15000"),
];

/// The product defaults (heartbeat 1 s, suspect after 1.5 s, lost after 3 s),
/// for tests of hung-worker detection.
pub const PRODUCT_LIVENESS: [&str; 6] = [
    "--heartbeat-ms",
    "1000",
    "--suspect-after-ms",
    "1500",
    "--lost-after-ms",
    "3000",
];

/// A temporary `CADUCEUS_HOME` and a token shared by a test's processes.
pub struct Fleet {
    pub home: tempfile::TempDir,
    /// The processes' working directory, so that a local environment (which
    /// starts in its worker's cwd) writes its relative paths here and never
    /// into the checkout.
    pub work: tempfile::TempDir,
    pub token: String,
}

impl Default for Fleet {
    fn default() -> Self {
        Self::new()
    }
}

impl Fleet {
    pub fn new() -> Self {
        Fleet {
            home: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
            token: format!("tok-{}", std::process::id()),
        }
    }

    /// A `caduceus` command with this fleet's home and no inherited coordinator.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(bin());
        cmd.current_dir(self.work.path())
            .env("CADUCEUS_HOME", self.home.path())
            .env_remove("CADUCEUS_COORDINATOR")
            .env_remove("CADUCEUS_TOKEN")
            .env_remove("CADUCEUS_TOKEN_FILE")
            .env_remove("CADUCEUS_CONFIG")
            // The model comes from the fleet's config.yaml, never from the host.
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_API_KEY")
            .env_remove("CADUCEUS_MODEL")
            // Test machines often run as root, and the tests' local sandboxes
            // work in root-owned temporary folders; `secrets.rs` tests the
            // default (a root worker's sandboxes run as nobody).
            .env("CADUCEUS_ALLOW_ROOT_SANDBOX", "1")
            .env("CADUCEUS_LOG", "info");
        cmd
    }

    /// Starts `caduceus serve` on a free port and waits until it listens.
    /// Heartbeat settings not given in `extra` are [`TEST_LIVENESS`].
    pub fn serve(&self, extra: &[&str]) -> Proc {
        self.serve_with_env(extra, &[])
    }

    /// [`serve`](Self::serve) with extra environment variables (e.g.
    /// `TERMINAL_ENV`, the backend of new environments).
    pub fn serve_with_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Proc {
        let mut cmd = self.command();
        cmd.envs(env.iter().copied());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--token", &self.token]);
        for (flag, value) in TEST_LIVENESS {
            if !extra.contains(&flag) {
                cmd.args([flag, value]);
            }
        }
        cmd.args(extra);
        let mut proc = Proc::spawn(cmd, "coordinator");
        let line = proc.wait_for_stderr(
            "caduceus coordinator listening on ",
            Duration::from_secs(30),
        );
        let address = line.rsplit(' ').next().unwrap().trim().to_owned();
        proc.address = Some(address);
        proc
    }

    /// Starts `caduceus worker` attached to `coordinator`.
    pub fn worker(&self, coordinator: &Proc, name: &str, token: &str, extra: &[&str]) -> Proc {
        let mut cmd = self.command();
        cmd.args([
            "worker",
            "--coordinator",
            &coordinator.url(),
            "--token",
            token,
            "--name",
            name,
        ])
        .args(extra);
        Proc::spawn(cmd, name)
    }

    /// Starts `caduceus worker` with extra environment variables (the worker's
    /// own environment, as an operator's shell would give it).
    pub fn worker_with_env(
        &self,
        coordinator: &Proc,
        name: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Proc {
        let mut cmd = self.command();
        cmd.args([
            "worker",
            "--coordinator",
            &coordinator.url(),
            "--token",
            &self.token,
            "--name",
            name,
        ])
        .args(extra);
        for (key, value) in env {
            cmd.env(key, value);
        }
        Proc::spawn(cmd, name)
    }

    /// Writes `$CADUCEUS_HOME/config.yaml` (read by every process started after).
    pub fn write_config(&self, yaml: &str) {
        std::fs::write(self.home.path().join("config.yaml"), yaml).unwrap();
    }

    /// `caduceus call TOOL ARGS --task TASK` through `coordinator`; the parsed result.
    pub fn call(&self, coordinator: &Proc, tool: &str, args: &Value, task: &str) -> Value {
        self.call_at(&coordinator.url(), tool, args, task)
    }

    /// [`call`](Self::call) by the coordinator's URL (usable from other threads).
    pub fn call_at(&self, url: &str, tool: &str, args: &Value, task: &str) -> Value {
        let out = self
            .command()
            .args(["call", tool, &args.to_string(), "--task", task])
            .env("CADUCEUS_COORDINATOR", url)
            .env("CADUCEUS_TOKEN", &self.token)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "call {tool} {args} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        parse_result(&out.stdout)
    }

    /// The environments a worker reported in its last heartbeat.
    pub fn environments(&self, coordinator: &Proc, worker: &str) -> Vec<Value> {
        let status = self.status(coordinator);
        status["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["name"] == worker)
            .map(|w| w["environments"].as_array().unwrap().clone())
            .unwrap_or_default()
    }

    /// Runs a client command against `coordinator` and returns its output.
    pub fn client(&self, coordinator: &Proc, args: &[&str]) -> Output {
        let mut cmd = self.command();
        cmd.args(args)
            .env("CADUCEUS_COORDINATOR", coordinator.url())
            .env("CADUCEUS_TOKEN", &self.token);
        cmd.output().unwrap()
    }

    /// `caduceus status --json` against `coordinator`.
    pub fn status(&self, coordinator: &Proc) -> Value {
        let out = self.client(coordinator, &["status", "--json"]);
        assert!(
            out.status.success(),
            "status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Names of the attached workers.
    pub fn worker_names(&self, coordinator: &Proc) -> Vec<String> {
        let status = self.status(coordinator);
        let mut names: Vec<String> = status["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    }

    /// Waits until worker `name` offers `backend` (Docker is offered once its
    /// engine was probed).
    pub fn wait_for_backend(
        &self,
        coordinator: &Proc,
        name: &str,
        backend: &str,
        within: Duration,
    ) {
        let deadline = Instant::now() + within;
        loop {
            let status = self.status(coordinator);
            let ready = status["workers"].as_array().unwrap().iter().any(|w| {
                w["name"] == name
                    && w["backends"]
                        .as_array()
                        .is_some_and(|b| b.iter().any(|b| b == backend))
            });
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "worker {name} never offered {backend}: {status}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the attached workers are exactly `names`.
    pub fn wait_for_workers(&self, coordinator: &Proc, names: &[&str], within: Duration) {
        let mut want: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
        want.sort();
        let deadline = Instant::now() + within;
        loop {
            let have = self.worker_names(coordinator);
            if have == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "workers {have:?}, expected {want:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A child process that is killed when dropped; its stderr is collected.
pub struct Proc {
    pub child: Child,
    pub label: String,
    pub address: Option<String>,
    lines: mpsc::Receiver<String>,
    pub stderr: Vec<String>,
}

impl Proc {
    pub fn spawn(mut cmd: Command, label: &str) -> Proc {
        cmd.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .stdin(Stdio::null());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {label}: {e}"));
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc {
            child,
            label: label.to_owned(),
            address: None,
            lines,
            stderr: Vec::new(),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.address.as_deref().unwrap())
    }

    /// Waits for a stderr line containing `needle` and returns it.
    pub fn wait_for_stderr(&mut self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.stderr.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "{}: no '{needle}' within {within:?}; stderr so far:\n{}",
                    self.label,
                    self.stderr.join("\n")
                ),
            }
        }
    }

    /// Everything the process printed to stderr, read to the end of the pipe.
    /// For a process that has exited: its last lines may still be in flight
    /// from the reader thread when the exit is seen, so this waits (a bounded
    /// time) for the pipe to close instead of taking only what has arrived.
    pub fn stderr_to_end(&mut self) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.stderr.push(line),
                Err(_) => return self.stderr.join("\n"),
            }
        }
    }

    /// Waits for the process to exit on its own.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // A polite stop first so that workers end their environments.
            let _ = Command::new("kill")
                .args(["-INT", &self.child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if self.child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What workers left in `tmp`: the shells' private directories
/// (`caduceus-<id>`, `caduceus-login-<id>`) and the workers' ledgers
/// (`caduceus-ledger-<uid>/<instance>.lease`).
pub fn leftovers(tmp: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(tmp).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("caduceus-ledger-") {
            for lease in std::fs::read_dir(entry.path()).unwrap().flatten() {
                found.push(format!("{name}/{}", lease.file_name().to_string_lossy()));
            }
        } else if name.starts_with("caduceus-") {
            found.push(name);
        }
    }
    found
}

/// Is any process whose command line contains `needle` alive?
pub fn process_alive_with(needle: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|e| {
        let path: &Path = &e.path();
        std::fs::read(path.join("cmdline"))
            .map(|raw| {
                String::from_utf8_lossy(&raw)
                    .replace('\0', " ")
                    .contains(needle)
            })
            .unwrap_or(false)
    })
}

/// Waits until no process whose command line contains `needle` is alive.
pub fn wait_gone(needle: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if !process_alive_with(needle) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// Peak resident memory of a process, in KiB (`VmHWM`).
pub fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// The events `caduceus run --json` printed, one JSON object a line.
pub fn json_lines(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"))
        })
        .collect()
}

/// The `tool_finished` events of the sessions under `root` (its subagents').
pub fn subagent_calls<'a>(events: &'a [Value], root: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["kind"] == "tool_finished" && e["session_id"] != root)
        .collect()
}

/// Whether finished calls all ran at one moment: the latest start came
/// before the earliest finish.
pub fn calls_overlapped(calls: &[&Value]) -> bool {
    let at = |key: &'static str| calls.iter().map(move |e| e["data"][key].as_u64().unwrap());
    at("started_at_ms").max() < at("finished_at_ms").min()
}

/// The workers that ran finished calls.
pub fn call_workers(calls: &[&Value]) -> BTreeSet<String> {
    calls
        .iter()
        .map(|e| e["data"]["worker"].as_str().unwrap().to_owned())
        .collect()
}

/// Parses a tool result printed by `caduceus call`.
pub fn parse_result(stdout: &[u8]) -> Value {
    serde_json::from_slice(stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(stdout)))
}

/// Whether a component a test needs is present. When it is missing the test
/// says so loudly and is skipped — unless `CADUCEUS_REQUIRE_ALL=1` (CI), where
/// a missing component fails the test.
pub fn require(component: &str, how: &str, present: impl FnOnce() -> bool) -> bool {
    if present() {
        return true;
    }
    let message = format!("MISSING COMPONENT: {component} is not available here; needs {how}");
    if std::env::var("CADUCEUS_REQUIRE_ALL").is_ok_and(|v| v == "1") {
        panic!("{message} (CADUCEUS_REQUIRE_ALL=1: failing instead of skipping)");
    }
    eprintln!("\n*** SKIPPED: {message} ***\n");
    false
}

/// A Control client of a coordinator, presenting `token`.
pub type ControlClient = caduceus_proto::control_client::ControlClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, BearerToken>,
>;

/// Adds `authorization: Bearer <token>` to every request.
#[derive(Clone)]
pub struct BearerToken(tonic::metadata::MetadataValue<tonic::metadata::Ascii>);

impl tonic::service::Interceptor for BearerToken {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        request
            .metadata_mut()
            .insert(caduceus_proto::AUTHORIZATION, self.0.clone());
        Ok(request)
    }
}

/// Connects a Control client to `url`.
pub async fn control_client(url: &str, token: &str) -> ControlClient {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let value = caduceus_proto::bearer(token).parse().unwrap();
    caduceus_proto::control_client::ControlClient::with_interceptor(channel, BearerToken(value))
}

/// One call of `tool` through `client`: the parsed result and the worker
/// that ran it.
pub async fn tool_call(
    client: &mut ControlClient,
    tool: &str,
    args: &Value,
    task: &str,
) -> (Value, String) {
    let response = client
        .call_tool(caduceus_proto::CallToolRequest {
            tool: tool.into(),
            arguments_json: args.to_string(),
            task_id: task.into(),
            session_id: String::new(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    (
        serde_json::from_str(&response.result).unwrap(),
        response.worker,
    )
}

/// One `terminal` call through `client`: the parsed result and the worker
/// that ran it.
pub async fn terminal_call(
    client: &mut ControlClient,
    task: &str,
    command: &str,
) -> (Value, String) {
    tool_call(
        client,
        "terminal",
        &serde_json::json!({ "command": command }),
        task,
    )
    .await
}

/// Sends `signal` (`STOP`, `CONT`, `TERM`, `INT`, ...) to a process.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// A `GET` of `path` on `address` (`host:port`) over plain HTTP/1.1, with
/// `Authorization: Bearer <token>` when given: the status code and the body.
pub fn http_get(address: &str, path: &str, token: Option<&str>) -> (u16, String) {
    http_request(address, "GET", path, token)
}

/// [`http_get`] with any method and no body (`DELETE`, a bodiless `POST`).
pub fn http_request(address: &str, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {raw}"));
    (status, body.to_owned())
}

/// The value of the sample `series` (`name{label="v",…}` exactly as the
/// exposition writes it, or a bare name) in OpenMetrics text; 0 when absent
/// (a counter nothing has incremented yet is not written).
pub fn sample(exposition: &str, series: &str) -> f64 {
    exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}
