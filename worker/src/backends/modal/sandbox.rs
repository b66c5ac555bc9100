//! One Modal sandbox and the processes started in it through its task
//! command router (README "Modal"):
//!
//! - **start**: `TaskExecStart` with a client-chosen `exec_id` (a retried
//!   start is the same exec), stderr merged into stdout at the descriptor
//!   (`stderr_config = STDOUT`), a bash wrapper that prints the pid preamble
//!   and `exec`s the program;
//! - **output**: one `TaskExecStdioRead` stream from byte offset 0, reopened
//!   at the offset reached when it breaks; its normal end is end of output;
//! - **stdin**: `TaskExecStdinWrite` with the byte offset already sent (a
//!   retried write is not doubled), `eof` when the writer is dropped;
//! - **exit**: `TaskExecWait` (a blocking call, one minute a try): `code`,
//!   or `signal` → 128 + n;
//! - **signals**: `kill` through a short exec.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use caduceus_modal_proto::client as pb;
use caduceus_modal_proto::task_command_router as tcr;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;

use super::api::{Api, ModalError, Router};
use crate::backends::lease::{LeaseRecord, label};
use crate::backends::preamble;
use crate::backends::shell_fs::ShellFs;
use crate::sandbox::{
    ProcessHandle, SIGNAL_TREE_SCRIPT, Sandbox, SandboxError, SpawnSpec, SpawnedProcess, StopSignal,
};

/// Tag of the last lease renewal (seconds since the epoch): tags can be
/// replaced, so the renewable part of the lease lives there.
pub const RENEWED_TAG: &str = "caduceus.renewed-at";
/// How long a process may take to report its pid.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest stdin chunk one write carries (the SDK's buffer size is 16 MiB;
/// smaller keeps one call short).
const STDIN_CHUNK: usize = 1 << 20;
/// `TaskExecWait` blocks on the router; each try gets this long (the SDK's).
const WAIT_TRY: Duration = Duration::from_secs(60);
/// Longest a control exec ([`ModalSandbox::run`]) may take end to end.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(10);
/// The variable that marks a spawned exec's processes (to find them when
/// the pid never arrived).
const EXEC_MARK: &str = "CADUCEUS_MODAL_EXEC";
/// `SandboxWaitV2`'s own timeout per call of the watcher (the SDK's 10 s).
const WATCH_WAIT: f32 = 10.0;

pub struct ModalSandbox {
    pub(super) api: Api,
    pub(super) router: Router,
    pub(super) id: String,
    pub(super) task_id: String,
    pub(super) home: std::sync::Mutex<String>,
    pub(super) cwd: std::sync::Mutex<Option<String>>,
    /// The tags it was created with (renewals replace the whole set).
    pub(super) tags: std::sync::Mutex<Vec<(String, String)>>,
    /// The file the entrypoint's lease watchdog watches (touched at renewal).
    pub(super) lease_file: String,
    pub(super) vanished: Arc<AtomicBool>,
    pub(super) watcher: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    pub(super) files: Arc<ShellFs>,
}

impl std::fmt::Debug for ModalSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModalSandbox")
            .field("id", &self.id)
            .finish()
    }
}

impl Drop for ModalSandbox {
    fn drop(&mut self) {
        if let Ok(mut watcher) = self.watcher.lock()
            && let Some(task) = watcher.take()
        {
            task.abort();
        }
    }
}

fn other(err: &ModalError) -> SandboxError {
    SandboxError::Other(err.to_string())
}

/// `SandboxWaitV2`'s answer: `Some(result)` once the sandbox ended.
pub fn finished(result: Option<&pb::GenericResult>) -> Option<&pb::GenericResult> {
    result.filter(|r| r.status != 0)
}

/// The exit code Modal's SDK gives a finished sandbox: TIMEOUT → 124,
/// TERMINATED → 137, else its `exitcode`.
pub fn returncode(result: &pb::GenericResult) -> i32 {
    use pb::generic_result::GenericStatus;
    match GenericStatus::try_from(result.status) {
        Ok(GenericStatus::Timeout) => 124,
        Ok(GenericStatus::Terminated) => 137,
        _ => result.exitcode,
    }
}

pub fn tags_of(tags: &[(String, String)]) -> Vec<pb::SandboxTag> {
    tags.iter()
        .map(|(k, v)| pb::SandboxTag {
            tag_name: k.clone(),
            tag_value: v.clone(),
        })
        .collect()
}

/// The exec's argv: bash prints the pid preamble, changes to `cwd` and
/// `exec`s the program with its environment.
pub fn wrapper_args(cwd: &str, spec: &SpawnSpec) -> Vec<String> {
    let exec = preamble::exec_with_env(&spec.env, &spec.program, &spec.args);
    vec![
        "bash".to_owned(),
        "-c".to_owned(),
        format!("cd -- \"$1\" 2>/dev/null || cd\nprintf '\\036PID %d\\036\\n' $$\n{exec}"),
        "caduceus-spawn".to_owned(),
        cwd.to_owned(),
    ]
}

impl ModalSandbox {
    /// Watches the sandbox with long `SandboxWaitV2` polls: once it has a
    /// result (terminated, timed out, its entrypoint ended) it is vanished.
    pub(super) fn start_watcher(self: &Arc<Self>) {
        let api = self.api.clone();
        let id = self.id.clone();
        let flag = self.vanished.clone();
        let task = tokio::spawn(async move {
            loop {
                let answer = api
                    .call(
                        "SandboxWaitV2",
                        pb::SandboxWaitRequest {
                            sandbox_id: id.clone(),
                            timeout: WATCH_WAIT,
                        },
                        true,
                        Duration::from_secs_f32(WATCH_WAIT + 5.0),
                        |mut c, r| async move { c.sandbox_wait_v2(r).await },
                    )
                    .await;
                match answer {
                    Ok(answer) => {
                        if let Some(result) = finished(answer.result.as_ref()) {
                            tracing::info!(sandbox = %id, status = result.status, "the Modal sandbox ended (returncode {})", returncode(result));
                            flag.store(true, Ordering::SeqCst);
                            return;
                        }
                    }
                    Err(err) if err.is_not_found() => {
                        tracing::info!(sandbox = %id, "the Modal sandbox is gone");
                        flag.store(true, Ordering::SeqCst);
                        return;
                    }
                    Err(err) => {
                        tracing::debug!(sandbox = %id, "watching the Modal sandbox: {err}");
                        tokio::time::sleep(Duration::from_secs(2)).await;
                    }
                }
            }
        });
        if let Ok(mut watcher) = self.watcher.lock() {
            *watcher = Some(task);
        }
    }

    /// NOT_FOUND from the router means the task (the sandbox) is gone.
    fn classify(&self, err: &ModalError) -> SandboxError {
        if err.is_not_found() {
            self.vanished.store(true, Ordering::SeqCst);
            SandboxError::Gone(format!("Modal sandbox {}: {err}", self.id))
        } else {
            other(err)
        }
    }

    /// Runs `args` to the end: exit code and stdout+stderr (short helpers:
    /// signals, probes). Bounded by [`CONTROL_TIMEOUT`], and refused at
    /// once while the router is stalled ([`Router::stalled`]): a router
    /// that stops answering must not hold the call that needed the signal.
    pub async fn run(&self, args: Vec<String>) -> Result<(i32, Vec<u8>), SandboxError> {
        self.refuse_if_stalled()?;
        match tokio::time::timeout(CONTROL_TIMEOUT, self.run_unbounded(args)).await {
            Ok(done) => done,
            Err(_) => {
                self.router.mark_stalled();
                Err(SandboxError::Other(format!(
                    "Modal sandbox {}: its task router did not finish a control command within {}s",
                    self.id,
                    CONTROL_TIMEOUT.as_secs()
                )))
            }
        }
    }

    /// Refuses what needs the router while it is stalled (and asks it for
    /// an answer, which ends the stall).
    fn refuse_if_stalled(&self) -> Result<(), SandboxError> {
        match self.unreachable() {
            Some(reason) => {
                self.router.probe(&self.task_id);
                Err(SandboxError::Other(format!("not sent: {reason}")))
            }
            None => Ok(()),
        }
    }

    async fn run_unbounded(&self, args: Vec<String>) -> Result<(i32, Vec<u8>), SandboxError> {
        let exec = Exec::start(&self.router, &self.task_id, args, None)
            .await
            .map_err(|e| self.classify(&e))?;
        let (tx, mut rx) = tokio::io::duplex(1 << 16);
        let reader = tokio::spawn(async move {
            let mut out = Vec::new();
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut rx, &mut out).await;
            out
        });
        // Nothing to say on stdin: end of file first, so a reader ends.
        let _ = exec.stdin_eof().await;
        exec.clone().pump_output(tx).await;
        let code = exec.wait().await.unwrap_or(-1);
        let out = reader.await.unwrap_or_default();
        Ok((code, out))
    }

    pub(super) fn set_home(&self, home: String, cwd: Option<String>) {
        if let Ok(mut slot) = self.home.lock() {
            *slot = home.clone();
        }
        if let Ok(mut slot) = self.cwd.lock() {
            *slot = Some(cwd.unwrap_or(home));
        }
    }
}

/// One exec on the router.
struct Exec {
    router: Router,
    task_id: String,
    exec_id: String,
}

impl Exec {
    async fn start(
        router: &Router,
        task_id: &str,
        args: Vec<String>,
        exec_id: Option<String>,
    ) -> Result<Arc<Exec>, ModalError> {
        let exec_id = exec_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        router
            .call(
                tcr::TaskExecStartRequest {
                    task_id: task_id.to_owned(),
                    exec_id: exec_id.clone(),
                    command_args: args,
                    stdout_config: tcr::TaskExecStdoutConfig::Pipe as i32,
                    stderr_config: tcr::TaskExecStderrConfig::Stdout as i32,
                    env: [(EXEC_MARK.to_owned(), exec_id.clone())].into(),
                    ..Default::default()
                },
                Duration::from_secs(60),
                |mut c, r| async move { c.task_exec_start(r).await },
            )
            .await?;
        Ok(Arc::new(Exec {
            router: router.clone(),
            task_id: task_id.to_owned(),
            exec_id,
        }))
    }

    /// Copies the exec's stdout into `output` until its stream ends,
    /// reopening a broken stream at the offset reached.
    async fn pump_output(self: Arc<Self>, mut output: tokio::io::DuplexStream) {
        let mut offset = 0u64;
        let mut failures = 0u32;
        loop {
            let request = match self.router.request(tcr::TaskExecStdioReadRequest {
                task_id: self.task_id.clone(),
                exec_id: self.exec_id.clone(),
                offset,
                file_descriptor: tcr::TaskExecStdioFileDescriptor::Stdout as i32,
            }) {
                Ok(request) => request,
                Err(err) => {
                    tracing::warn!(exec = %self.exec_id, "output: {err}");
                    return;
                }
            };
            let broken = match self.router.client().task_exec_stdio_read(request).await {
                Ok(stream) => {
                    let mut stream = stream.into_inner();
                    let mut broken = None;
                    while let Some(item) = stream.next().await {
                        match item {
                            Ok(chunk) => {
                                failures = 0;
                                self.router.answered();
                                offset += chunk.data.len() as u64;
                                // A reader that went away only stops the copy.
                                let _ = output.write_all(&chunk.data).await;
                            }
                            Err(status) => {
                                broken = Some(status);
                                break;
                            }
                        }
                    }
                    match broken {
                        None => return,
                        Some(status) => status,
                    }
                }
                Err(status) => status,
            };
            failures += 1;
            let code = broken.code();
            if code == tonic::Code::Unauthenticated && failures <= 1 {
                let _ = self.router.reauthenticate().await;
                continue;
            }
            if !super::api::retryable(code) || failures > 10 {
                if code != tonic::Code::NotFound {
                    // Said loudly: output ending here looks like a process
                    // that printed nothing more.
                    tracing::warn!(exec = %self.exec_id, "output stream failed: {}", self.router.error(&broken));
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(50 * u64::from(failures))).await;
        }
    }

    async fn write(&self, offset: u64, data: Vec<u8>, eof: bool) -> Result<(), ModalError> {
        self.router
            .call(
                tcr::TaskExecStdinWriteRequest {
                    task_id: self.task_id.clone(),
                    exec_id: self.exec_id.clone(),
                    offset,
                    data,
                    eof,
                },
                Duration::from_secs(60),
                |mut c, r| async move { c.task_exec_stdin_write(r).await },
            )
            .await
            .map(|_| ())
    }

    async fn stdin_eof(&self) -> Result<(), ModalError> {
        self.write(0, Vec::new(), true).await
    }

    /// Sends what is written to stdin; end of file when the writer is
    /// dropped or shut down.
    async fn pump_stdin(self: Arc<Self>, mut chunks: mpsc::UnboundedReceiver<Vec<u8>>) {
        let mut offset = 0u64;
        while let Some(chunk) = chunks.recv().await {
            for piece in chunk.chunks(STDIN_CHUNK) {
                if let Err(err) = self.write(offset, piece.to_vec(), false).await {
                    tracing::debug!(exec = %self.exec_id, "stdin: {err}");
                    return;
                }
                offset += piece.len() as u64;
            }
        }
        let _ = self.write(offset, Vec::new(), true).await;
    }

    /// The exit code (128 + n for a signal); `None` when the task is gone.
    async fn wait(&self) -> Option<i32> {
        use tcr::task_exec_wait_response::ExitStatus;
        loop {
            let answer = self
                .router
                .call_blocking(
                    tcr::TaskExecWaitRequest {
                        task_id: self.task_id.clone(),
                        exec_id: self.exec_id.clone(),
                    },
                    WAIT_TRY,
                    |mut c, r| async move { c.task_exec_wait(r).await },
                )
                .await;
            match answer {
                Ok(answer) => {
                    return match answer.exit_status {
                        Some(ExitStatus::Code(code)) => Some(code),
                        Some(ExitStatus::Signal(signal)) => Some(128 + signal),
                        None => None,
                    };
                }
                // The wait outlived its try: ask again.
                Err(err) if err.code() == Some(tonic::Code::DeadlineExceeded) => {}
                Err(err) if err.is_not_found() => return None,
                Err(err) => {
                    tracing::debug!(exec = %self.exec_id, "wait: {err}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if matches!(err, ModalError::Protocol(_)) {
                        return None;
                    }
                }
            }
        }
    }
}

#[async_trait]
impl Sandbox for ModalSandbox {
    fn backend(&self) -> &str {
        "modal"
    }

    fn id(&self) -> &str {
        &self.id
    }

    async fn spawn(&self, spec: SpawnSpec) -> Result<SpawnedProcess, SandboxError> {
        if self.vanished() {
            return Err(SandboxError::Gone(format!(
                "Modal sandbox {} has ended",
                self.id
            )));
        }
        // A new process (a shell replacing one lost in a stall) asks the
        // router first: one probe, not a 60 s start against a frozen one.
        if self.router.stalled()
            && !self.router.probe_now(&self.task_id).await
            && let Some(reason) = self.unreachable()
        {
            return Err(SandboxError::Spawn {
                program: spec.program.clone(),
                reason: format!("not sent: {reason}"),
            });
        }
        let cwd = spec.cwd.clone().unwrap_or_else(|| self.initial_cwd());
        let exec_id = uuid::Uuid::new_v4().to_string();
        let exec = Exec::start(
            &self.router,
            &self.task_id,
            wrapper_args(&cwd, &spec),
            Some(exec_id.clone()),
        )
        .await
        .map_err(|e| match self.classify(&e) {
            SandboxError::Other(reason) => SandboxError::Spawn {
                program: spec.program.clone(),
                reason,
            },
            gone => gone,
        })?;
        let (output_tx, mut output) = tokio::io::duplex(1 << 20);
        tokio::spawn(exec.clone().pump_output(output_tx));
        let (exit_tx, exit_rx) = watch::channel(None);
        {
            let exec = exec.clone();
            tokio::spawn(async move {
                let code = exec.wait().await;
                let _ = exit_tx.send(Some(code));
            });
        }
        let (stdin_tx, stdin_rx) = mpsc::unbounded_channel();
        tokio::spawn(exec.clone().pump_stdin(stdin_rx));
        let Some((pid, rest)) = preamble::read_pid(&mut output, START_TIMEOUT).await else {
            if self.vanished() {
                return Err(SandboxError::Gone(format!(
                    "Modal sandbox {} ended while a process started",
                    self.id
                )));
            }
            let code = *exit_rx.borrow();
            if code.is_none() {
                // No pid to signal, and an exec left running would start
                // the program later, unseen: its processes go by their mark.
                if let Err(err) = self.run(kill_marked(&exec_id)).await {
                    tracing::warn!(exec = %exec_id, "stopping an exec that never reported its pid: {err}");
                }
            }
            return Err(SandboxError::Spawn {
                program: spec.program.clone(),
                reason: format!(
                    "in Modal sandbox {}: the process ended before it started (exit {code:?})",
                    self.id
                ),
            });
        };
        Ok(SpawnedProcess {
            stdin: Box::pin(StdinWriter { tx: Some(stdin_tx) }),
            output: Box::pin(tokio::io::AsyncReadExt::chain(rest, output)),
            pid: Some(pid),
            handle: Box::new(ModalProcess {
                sandbox_router: self.router.clone(),
                task_id: self.task_id.clone(),
                exit: exit_rx,
                pid,
            }),
        })
    }

    async fn signal_tree(
        &self,
        pid: u32,
        signal: StopSignal,
        include_root: bool,
    ) -> Result<(), SandboxError> {
        let args = vec![
            "bash".to_owned(),
            "-c".to_owned(),
            SIGNAL_TREE_SCRIPT.to_owned(),
            "caduceus-signal".to_owned(),
            pid.to_string(),
            signal.number().to_string(),
            u8::from(include_root).to_string(),
        ];
        let (code, output) = self.run(args).await?;
        if code == 0 {
            Ok(())
        } else {
            Err(SandboxError::Other(format!(
                "signalling process {pid} in Modal sandbox {} failed ({code}): {}",
                self.id,
                String::from_utf8_lossy(&output)
            )))
        }
    }

    async fn signal_process(&self, pid: u32, signal: StopSignal) -> Result<(), SandboxError> {
        self.run(vec![
            "kill".to_owned(),
            format!("-{}", signal.number()),
            pid.to_string(),
        ])
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
        self.home
            .lock()
            .map(|h| h.clone())
            .unwrap_or_else(|_| "/root".to_owned())
    }

    fn initial_cwd(&self) -> String {
        self.cwd
            .lock()
            .ok()
            .and_then(|c| c.clone())
            .unwrap_or_else(|| self.home_dir())
    }

    async fn alive(&self) -> bool {
        if self.vanished() {
            return false;
        }
        let answer = self
            .api
            .call(
                "SandboxWaitV2",
                pb::SandboxWaitRequest {
                    sandbox_id: self.id.clone(),
                    timeout: 0.0,
                },
                true,
                Duration::from_secs(15),
                |mut c, r| async move { c.sandbox_wait_v2(r).await },
            )
            .await;
        matches!(answer, Ok(answer) if finished(answer.result.as_ref()).is_none())
    }

    async fn destroy(&self) -> Result<(), SandboxError> {
        self.vanished.store(true, Ordering::SeqCst);
        if let Ok(mut watcher) = self.watcher.lock()
            && let Some(task) = watcher.take()
        {
            task.abort();
        }
        match self
            .api
            .call(
                "SandboxTerminateV2",
                pb::SandboxTerminateRequest {
                    sandbox_id: self.id.clone(),
                },
                true,
                Duration::from_secs(60),
                |mut c, r| async move { c.sandbox_terminate_v2(r).await },
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(err) if err.is_not_found() => Ok(()),
            Err(err) => Err(other(&err)),
        }
    }

    /// The worker's variables do not cross: the sandbox keeps its own
    /// PATH, HOME and the rest (as Docker does without `docker_forward_env`).
    fn shell_env(&self, _worker_env: &[(String, String)]) -> Vec<(String, String)> {
        Vec::new()
    }

    async fn renew_lease(&self, record: &LeaseRecord) -> Result<(), SandboxError> {
        let tags = {
            let mut tags = match self.tags.lock() {
                Ok(tags) => tags,
                Err(poisoned) => poisoned.into_inner(),
            };
            set_tag(&mut tags, RENEWED_TAG, &record.renewed_at.to_string());
            set_tag(&mut tags, label::TASK, &record.task);
            tags.clone()
        };
        // The watchdog's file first: it is what ends the sandbox when
        // renewals stop. A stalled router refuses this at once; the tags
        // below still record the renewal for the sweep.
        match self
            .run(vec![
                "touch".to_owned(),
                "--".to_owned(),
                self.lease_file.clone(),
            ])
            .await
        {
            Ok((0, _)) => {}
            Ok((code, out)) => tracing::warn!(
                sandbox = %self.id,
                "renewing the lease file failed ({code}): {}",
                String::from_utf8_lossy(&out)
            ),
            Err(err) => tracing::warn!(sandbox = %self.id, "renewing the lease file: {err}"),
        }
        self.api
            .call(
                "SandboxTagsSetV2",
                pb::SandboxTagsSetRequest {
                    environment_name: String::new(),
                    sandbox_id: self.id.clone(),
                    tags: tags_of(&tags),
                },
                true,
                Duration::from_secs(30),
                |mut c, r| async move { c.sandbox_tags_set_v2(r).await },
            )
            .await
            .map(|_| ())
            .map_err(|err| self.classify(&err))
    }

    fn vanished(&self) -> bool {
        self.vanished.load(Ordering::SeqCst)
    }

    fn unreachable(&self) -> Option<String> {
        self.router.stalled_for().map(|waited| {
            let waited = if waited.is_zero() {
                String::new()
            } else {
                format!(" for {}s", waited.as_secs())
            };
            format!(
                "Modal: the task router of sandbox {} is not answering{waited} ({})",
                self.id,
                self.router.url()
            )
        })
    }
}

pub fn set_tag(tags: &mut Vec<(String, String)>, key: &str, value: &str) {
    match tags.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value.to_owned(),
        None => tags.push((key.to_owned(), value.to_owned())),
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

struct ModalProcess {
    sandbox_router: Router,
    task_id: String,
    exit: watch::Receiver<Option<Option<i32>>>,
    pid: u32,
}

#[async_trait]
impl ProcessHandle for ModalProcess {
    async fn wait(&mut self) -> Option<i32> {
        match self.exit.wait_for(Option::is_some).await {
            Ok(code) => (*code).flatten(),
            Err(_) => None,
        }
    }

    async fn kill(&mut self) {
        if self.sandbox_router.stalled() {
            // Nothing would carry the kill; the process goes with the
            // sandbox, or reads end of file once its stdin pump gets through.
            self.sandbox_router.probe(&self.task_id);
            tracing::debug!(
                pid = self.pid,
                "not killed: the Modal task router is stalled"
            );
            return;
        }
        let args = vec![
            "bash".to_owned(),
            "-c".to_owned(),
            SIGNAL_TREE_SCRIPT.to_owned(),
            "caduceus-signal".to_owned(),
            self.pid.to_string(),
            "9".to_owned(),
            "1".to_owned(),
        ];
        if let Ok(exec) = Exec::start(&self.sandbox_router, &self.task_id, args, None).await {
            let _ = exec.stdin_eof().await;
            let _ = tokio::time::timeout(Duration::from_secs(30), exec.wait()).await;
        }
        let _ =
            tokio::time::timeout(Duration::from_secs(5), self.exit.wait_for(Option::is_some)).await;
    }
}

/// SIGKILLs every process whose environment carries `exec_id`'s mark.
pub fn kill_marked(exec_id: &str) -> Vec<String> {
    vec![
        "bash".to_owned(),
        "-c".to_owned(),
        format!(
            "for e in /proc/[0-9]*/environ; do tr '\\0' '\\n' < \"$e\" 2>/dev/null | grep -qx \"$1=$2\" || continue; p=${{e#/proc/}}; kill -9 \"${{p%/environ}}\" 2>/dev/null; done; exit 0"
        ),
        "caduceus-kill-exec".to_owned(),
        EXEC_MARK.to_owned(),
        exec_id.to_owned(),
    ]
}

/// Prints `$HOME` (the first exec of a new sandbox).
pub fn home_probe() -> Vec<String> {
    vec![
        "bash".to_owned(),
        "-c".to_owned(),
        "printf %s \"$HOME\"".to_owned(),
    ]
}
