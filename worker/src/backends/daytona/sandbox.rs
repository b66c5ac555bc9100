//! One Daytona sandbox and the processes started in it through the toolbox.
//!
//! The toolbox has no streamed process with stdio, so a process is built
//! from its pieces (README "Daytona"):
//!
//! - **start**: a process session of its own (`POST /process/session`) runs
//!   one async command (`runAsync`): a bash wrapper that prints the pid
//!   preamble, appends the program's output (stderr merged) to
//!   `/tmp/.caduceus-daytona/<session>/out` and writes its exit code to `rc`;
//! - **stdin**: `POST …/command/{cid}/input` with base64 lines, decoded in
//!   the sandbox by the wrapper (binary-safe; a `.` line is end of file);
//! - **output**: one `POST /process/execute` per poll returns the bytes of
//!   `out` past what was read, base64 (binary-safe, O(new bytes)), and `rc`
//!   once written; polls back off from 10 ms to 500 ms while nothing comes
//!   and start fast again after every stdin write;
//! - **signals**: `kill` through `execute`; a kill the toolbox did not take
//!   (it was not answering) is sent again after the process's next poll.
//!
//! Every request goes through the sandbox's [`Toolbox`], which tells a
//! vanished sandbox, one that cannot have run a call, and a toolbox that has
//! stopped answering (see `toolbox.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use std::time::SystemTime;

use async_trait::async_trait;
use base64::Engine as _;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc, watch};

use super::api::{DaytonaError, Payload};
use super::toolbox::{Kind, STALL, Toolbox};
use crate::backends::lease::{LeaseRecord, label};
use crate::backends::preamble;
use crate::backends::shell_fs::ShellFs;
use crate::sandbox::{
    ProcessHandle, SIGNAL_TREE_SCRIPT, Sandbox, SandboxError, SpawnSpec, SpawnedProcess, StopSignal,
};
use crate::shell::shell_quote;

/// Label of the last lease renewal (seconds since the epoch): Daytona labels
/// can be replaced, so the renewable part of the lease lives there.
pub const RENEWED_LABEL: &str = "caduceus.renewed-at";
/// Where processes keep their output and exit code inside the sandbox.
const PROC_DIR: &str = "/tmp/.caduceus-daytona";
/// How long a process may take to report its pid.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest output chunk one poll fetches.
const CHUNK: usize = 256 * 1024;
/// Largest stdin chunk one input call carries (before base64).
const STDIN_CHUNK: usize = 48 * 1024;
const POLL_MIN: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(500);
/// How often the watcher asks whether the sandbox is still started.
const WATCH_EVERY: Duration = Duration::from_secs(2);

pub struct DaytonaSandbox {
    pub(super) id: String,
    /// Stopped, not deleted, at its end (persistent environments).
    pub(super) persistent: bool,
    pub(super) toolbox: Toolbox,
    pub(super) home: String,
    pub(super) cwd: String,
    /// The labels it was created with (renewals replace the whole set).
    pub(super) labels: std::sync::Mutex<serde_json::Map<String, Value>>,
    pub(super) watcher: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    pub(super) files: Arc<ShellFs>,
}

impl std::fmt::Debug for DaytonaSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaytonaSandbox")
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for DaytonaSandbox {
    fn drop(&mut self) {
        if let Ok(mut watcher) = self.watcher.lock()
            && let Some(task) = watcher.take()
        {
            task.abort();
        }
    }
}

fn other(err: &DaytonaError) -> SandboxError {
    SandboxError::Other(err.to_string())
}

impl DaytonaSandbox {
    /// Watches the sandbox's state: anything but `started` (stopped by
    /// auto-stop, deleted, errored) marks it vanished.
    pub(super) fn start_watcher(self: &Arc<Self>) {
        let toolbox = self.toolbox.clone();
        let id = self.id.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(WATCH_EVERY).await;
                if toolbox.vanished() || toolbox.confirm_gone().await {
                    tracing::info!(sandbox = %id, "the Daytona sandbox is no longer started");
                    return;
                }
            }
        });
        if let Ok(mut watcher) = self.watcher.lock() {
            *watcher = Some(task);
        }
    }

    /// A control command (a signal): quick, refused while the toolbox is
    /// not answering.
    async fn control(&self, command: &str) -> Result<(i64, String), SandboxError> {
        self.toolbox
            .execute(Kind::Quick, command, STALL.as_secs())
            .await
            .map_err(|err| self.classify(&err))
    }

    /// Gone when the toolbox found it gone.
    fn classify(&self, err: &DaytonaError) -> SandboxError {
        if self.toolbox.vanished() {
            SandboxError::Gone(format!("Daytona sandbox {}: {err}", self.id))
        } else {
            other(err)
        }
    }
}

/// The session command that runs one process (see the module doc).
pub fn wrapper(dir: &str, cwd: &str, spec: &SpawnSpec) -> String {
    let exec = preamble::exec_with_env(&spec.env, &spec.program, &spec.args);
    let inner = format!("cd -- \"$1\" 2>/dev/null || cd\nprintf '\\036PID %d\\036\\n' $$\n{exec}");
    let outer = format!(
        "d={dir}\nmkdir -p \"$d\" && : > \"$d/out\" || exit 125\n\
         bash -c {inner} caduceus-spawn {cwd} \
         < <(while IFS= read -r l; do [ \"$l\" = . ] && break; printf %s \"$l\" | base64 -d; done) \
         >> \"$d/out\" 2>&1\n\
         echo $? > \"$d/rc.tmp\"; mv \"$d/rc.tmp\" \"$d/rc\"\n",
        dir = shell_quote(dir),
        inner = shell_quote(&inner),
        cwd = shell_quote(cwd),
    );
    format!("bash -c {}", shell_quote(&outer))
}

/// The poll: bytes of `out` from `offset` on (base64), `\x1e`, then `rc`
/// when written. `rc` is read *before* `out`: it is written after the
/// process's output is complete, so a poll that saw it and then no new bytes
/// has seen everything. Read after, a process ending between the two reads
/// lost its last output (a file script answered with nothing).
pub fn poll_script(dir: &str, offset: u64) -> String {
    format!(
        "d={dir}; rc=$(cat \"$d/rc\" 2>/dev/null); tail -c +{start} \"$d/out\" 2>/dev/null | head -c {CHUNK} | base64 -w0; printf '\\036%s' \"$rc\"",
        dir = shell_quote(dir),
        start = offset + 1,
    )
}

/// The `execute` command that sends `signal` to `pid`'s tree.
fn signal_tree_command(pid: u32, signal: StopSignal, include_root: bool) -> String {
    format!(
        "bash -c {} caduceus-signal {pid} {} {}",
        shell_quote(SIGNAL_TREE_SCRIPT),
        signal.number(),
        u8::from(include_root)
    )
}

/// Parses a poll's result: the new bytes and the exit code once known.
pub fn parse_poll(result: &str) -> Option<(Vec<u8>, Option<i32>)> {
    let (data, rc) = result.rsplit_once('\x1e')?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .ok()?;
    let rc = rc.trim();
    let code = if rc.is_empty() { None } else { rc.parse().ok() };
    Some((bytes, code))
}

#[async_trait]
impl Sandbox for DaytonaSandbox {
    fn backend(&self) -> &str {
        "daytona"
    }

    fn id(&self) -> &str {
        &self.id
    }

    async fn spawn(&self, spec: SpawnSpec) -> Result<SpawnedProcess, SandboxError> {
        let fail = |reason: String| SandboxError::Spawn {
            program: spec.program.clone(),
            reason,
        };
        if self.vanished() {
            return Err(SandboxError::Gone(format!(
                "Daytona sandbox {} is no longer started",
                self.id
            )));
        }
        let simple = uuid::Uuid::new_v4().simple().to_string();
        let session = format!("caduceus-{}", &simple[..16]);
        let dir = format!("{PROC_DIR}/{session}");
        let cwd = spec.cwd.clone().unwrap_or_else(|| self.cwd.clone());
        let sessions = "/process/session";
        self.toolbox
            .send(
                Kind::Quick,
                Method::POST,
                sessions,
                Payload::Json(&json!({"sessionId": session})),
                STALL,
            )
            .await
            .map_err(|e| match self.classify(&e) {
                SandboxError::Other(reason) => fail(reason),
                gone => gone,
            })?;
        let started = self
            .toolbox
            .json(
                Kind::Quick,
                Method::POST,
                &format!("{sessions}/{session}/exec"),
                Some(&json!({"command": wrapper(&dir, &cwd, &spec), "runAsync": true})),
                STALL,
            )
            .await;
        let command = match started
            .as_ref()
            .ok()
            .and_then(|a| a.get("cmdId"))
            .and_then(Value::as_str)
        {
            Some(id) => id.to_owned(),
            None => {
                let _ = self
                    .toolbox
                    .send(
                        Kind::Quick,
                        Method::DELETE,
                        &format!("{sessions}/{session}"),
                        Payload::None,
                        STALL,
                    )
                    .await;
                return Err(match started {
                    Err(err) => fail(err.to_string()),
                    Ok(answer) => fail(format!(
                        "Daytona: session exec answered {answer} without a cmdId"
                    )),
                });
            }
        };
        let process = Arc::new(RemoteProcess {
            toolbox: self.toolbox.clone(),
            session,
            command,
            dir,
            wake: Notify::new(),
            pid: std::sync::atomic::AtomicU32::new(0),
            kill_pending: AtomicBool::new(false),
        });
        let (output_tx, mut output) = tokio::io::duplex(CHUNK * 2);
        let (exit_tx, exit_rx) = watch::channel(None);
        tokio::spawn(process.clone().pump_output(output_tx, exit_tx));
        let (stdin_tx, stdin_rx) = mpsc::unbounded_channel();
        tokio::spawn(process.clone().pump_stdin(stdin_rx));

        let Some((pid, rest)) = preamble::read_pid(&mut output, START_TIMEOUT).await else {
            // Nothing of it may run on after a poll answers.
            process.kill_pending.store(true, Ordering::SeqCst);
            process.cleanup().await;
            if self.vanished() {
                return Err(SandboxError::Gone(format!(
                    "Daytona sandbox {} stopped while a process started",
                    self.id
                )));
            }
            let code = *exit_rx.borrow();
            return Err(fail(format!(
                "in Daytona sandbox {}: the process ended before it started (exit {code:?})",
                self.id
            )));
        };
        process.pid.store(pid, Ordering::SeqCst);
        Ok(SpawnedProcess {
            stdin: Box::pin(StdinWriter { tx: Some(stdin_tx) }),
            output: Box::pin(tokio::io::AsyncReadExt::chain(rest, output)),
            pid: Some(pid),
            handle: Box::new(DaytonaProcess {
                process,
                exit: exit_rx,
            }),
        })
    }

    async fn signal_tree(
        &self,
        pid: u32,
        signal: StopSignal,
        include_root: bool,
    ) -> Result<(), SandboxError> {
        let command = signal_tree_command(pid, signal, include_root);
        let (code, output) = self.control(&command).await?;
        if code == 0 {
            Ok(())
        } else {
            Err(SandboxError::Other(format!(
                "signalling process {pid} in Daytona sandbox {} failed ({code}): {output}",
                self.id
            )))
        }
    }

    async fn signal_process(&self, pid: u32, signal: StopSignal) -> Result<(), SandboxError> {
        self.control(&format!("kill -{} {pid}", signal.number()))
            .await
            .map(|_| ())
    }

    fn files(&self) -> Arc<dyn caduceus_files::FileSystem> {
        self.files.clone()
    }

    fn temp_dir(&self) -> String {
        "/tmp".to_owned()
    }

    fn home_dir(&self) -> String {
        self.home.clone()
    }

    fn initial_cwd(&self) -> String {
        self.cwd.clone()
    }

    async fn alive(&self) -> bool {
        if self.vanished() {
            return false;
        }
        !self.toolbox.confirm_gone().await && !self.vanished()
    }

    async fn destroy(&self) -> Result<(), SandboxError> {
        self.toolbox.mark_vanished();
        if let Ok(mut watcher) = self.watcher.lock()
            && let Some(task) = watcher.take()
        {
            task.abort();
        }
        if self.persistent {
            let labels = match self.labels.lock() {
                Ok(labels) => labels.clone(),
                Err(poisoned) => poisoned.into_inner().clone(),
            };
            let item = json!({"labels": labels});
            return match super::stop_kept(self.toolbox.api(), &self.id, &item).await {
                Ok(()) => Ok(()),
                Err(err) if err.status().is_some_and(|s| s.as_u16() == 404) => Ok(()),
                Err(err) => Err(other(&err)),
            };
        }
        match self
            .toolbox
            .api()
            .call(
                Method::DELETE,
                &format!("/sandbox/{}", self.id),
                None,
                Duration::from_secs(60),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(err) if err.status().is_some_and(|s| s.as_u16() == 404) => Ok(()),
            Err(err) => Err(other(&err)),
        }
    }

    /// The worker's variables do not cross: the sandbox keeps its own
    /// PATH, HOME and the rest (as Docker does without `docker_forward_env`).
    fn shell_env(&self, _worker_env: &[(String, String)]) -> Vec<(String, String)> {
        Vec::new()
    }

    async fn renew_lease(&self, record: &LeaseRecord) -> Result<(), SandboxError> {
        let labels = {
            let mut labels = match self.labels.lock() {
                Ok(labels) => labels,
                Err(poisoned) => poisoned.into_inner(),
            };
            labels.insert(
                RENEWED_LABEL.to_owned(),
                json!(record.renewed_at.to_string()),
            );
            labels.insert(label::TASK.to_owned(), json!(record.task));
            labels.clone()
        };
        self.toolbox
            .api()
            .call(
                Method::PUT,
                &format!("/sandbox/{}/labels", self.id),
                Some(&json!({"labels": labels})),
                Duration::from_secs(30),
            )
            .await
            .map_err(|err| self.classify(&err))?;
        // A held sandbox with nothing running (a warm-pool entry, an
        // environment between shells) makes no toolbox request of its own,
        // and Daytona's auto-stop counts only activity: one touch per renewal
        // keeps it started while its worker lives.
        self.control("true").await.map(|_| ())
    }

    fn vanished(&self) -> bool {
        self.toolbox.vanished()
    }

    async fn gone_before(&self, at: SystemTime) -> bool {
        self.toolbox.gone_before(at)
    }

    fn unreachable(&self) -> Option<String> {
        self.toolbox.unreachable()
    }
}

/// The toolbox side of one process.
struct RemoteProcess {
    toolbox: Toolbox,
    session: String,
    command: String,
    dir: String,
    /// Poll again now (stdin was written).
    wake: Notify,
    /// Its pid, once it reported it (0 before).
    pid: std::sync::atomic::AtomicU32,
    /// A kill the toolbox did not take: sent again after the next poll.
    kill_pending: AtomicBool,
}

impl RemoteProcess {
    /// Polls the output file into `output` until the exit code is known and
    /// every byte was read; then publishes the code and cleans up.
    async fn pump_output(
        self: Arc<Self>,
        mut output: tokio::io::DuplexStream,
        exit: watch::Sender<Option<Option<i32>>>,
    ) {
        let mut offset = 0u64;
        let mut pause = POLL_MIN;
        let mut failures = 0;
        let code = loop {
            let answer = self
                .toolbox
                .execute(Kind::Poll, &poll_script(&self.dir, offset), 30)
                .await;
            match answer.as_ref().ok().and_then(|(_, r)| parse_poll(r)) {
                Some((bytes, code)) => {
                    failures = 0;
                    if code.is_none() && self.kill_pending.swap(false, Ordering::SeqCst) {
                        self.kill().await;
                    }
                    if !bytes.is_empty() {
                        offset += bytes.len() as u64;
                        // A reader that went away only stops the copy.
                        let _ = output.write_all(&bytes).await;
                        pause = POLL_MIN;
                        continue;
                    }
                    if let Some(code) = code {
                        break Some(code);
                    }
                }
                None => {
                    failures += 1;
                    // Said loudly: a process whose output ends here looks
                    // like one that printed nothing.
                    match &answer {
                        Err(err) => {
                            tracing::warn!(session = %self.session, "output poll failed: {err}")
                        }
                        Ok((code, result)) => {
                            tracing::warn!(session = %self.session, "unreadable output poll ({code}): {}", result.chars().take(200).collect::<String>())
                        }
                    }
                    // The sandbox is gone: the process with it.
                    if self.toolbox.vanished() || failures >= 5 {
                        break None;
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = self.wake.notified() => pause = POLL_MIN,
            }
            pause = (pause * 2).min(POLL_MAX);
        };
        drop(output);
        let _ = exit.send(Some(code));
        self.cleanup().await;
    }

    /// Sends what is written to stdin as base64 lines; a `.` line at the
    /// end (the writer shut down or dropped) is end of file.
    async fn pump_stdin(self: Arc<Self>, mut chunks: mpsc::UnboundedReceiver<Vec<u8>>) {
        let url = format!(
            "/process/session/{}/command/{}/input",
            self.session, self.command
        );
        let engine = base64::engine::general_purpose::STANDARD;
        while let Some(chunk) = chunks.recv().await {
            let mut data = String::new();
            for piece in chunk.chunks(STDIN_CHUNK) {
                data.push_str(&engine.encode(piece));
                data.push('\n');
            }
            if self
                .toolbox
                .send(
                    Kind::Quick,
                    Method::POST,
                    &url,
                    Payload::Json(&json!({"data": data})),
                    STALL,
                )
                .await
                .is_err()
            {
                return;
            }
            self.wake.notify_one();
        }
        let _ = self
            .toolbox
            .send(
                Kind::Quick,
                Method::POST,
                &url,
                Payload::Json(&json!({"data": ".\n"})),
                STALL,
            )
            .await;
        self.wake.notify_one();
    }

    async fn cleanup(&self) {
        let _ = self
            .toolbox
            .send(
                Kind::Quick,
                Method::DELETE,
                &format!("/process/session/{}", self.session),
                Payload::None,
                STALL,
            )
            .await;
        let _ = self
            .toolbox
            .execute(
                Kind::Quick,
                &format!("rm -rf {}", shell_quote(&self.dir)),
                STALL.as_secs(),
            )
            .await;
    }

    /// SIGKILL to the process's tree; remembered for the next poll when the
    /// toolbox does not take it.
    async fn kill(&self) {
        let pid = self.pid.load(Ordering::SeqCst);
        if pid == 0 {
            self.kill_pending.store(true, Ordering::SeqCst);
            return;
        }
        let script = signal_tree_command(pid, StopSignal::Kill, true);
        if self
            .toolbox
            .execute(Kind::Quick, &script, STALL.as_secs())
            .await
            .is_err()
        {
            self.kill_pending.store(true, Ordering::SeqCst);
        }
        self.wake.notify_one();
    }
}

struct StdinWriter {
    tx: Option<mpsc::UnboundedSender<Vec<u8>>>,
}

impl AsyncWrite for StdinWriter {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match &self.tx {
            Some(tx) if tx.send(buf.to_vec()).is_ok() => Poll::Ready(Ok(buf.len())),
            _ => {
                self.tx = None;
                Poll::Ready(Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe)))
            }
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        // Closing the channel makes the pump send end of file.
        self.tx = None;
        Poll::Ready(Ok(()))
    }
}

struct DaytonaProcess {
    process: Arc<RemoteProcess>,
    exit: watch::Receiver<Option<Option<i32>>>,
}

#[async_trait]
impl ProcessHandle for DaytonaProcess {
    async fn wait(&mut self) -> Option<i32> {
        match self.exit.wait_for(Option::is_some).await {
            Ok(code) => (*code).flatten(),
            Err(_) => None,
        }
    }

    async fn kill(&mut self) {
        self.process.kill().await;
        let _ =
            tokio::time::timeout(Duration::from_secs(5), self.exit.wait_for(Option::is_some)).await;
    }
}
