//! One background process: its output window, watch patterns, stdin, exit,
//! and the task that supervises it until it ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Notify, watch};

use caduceus_common::text::strip_ansi;

use super::clean::OutputCleaner;
use super::notice::{self, Completion, NoticeHub, Origin};
use super::watch::{Watch, WatchEvent};
use crate::sandbox::{BoxedReader, BoxedWriter, ProcessHandle, Sandbox, StopSignal};
use crate::shell::marker::MarkerScanner;
use crate::shell::signal_tree;
use caduceus_common::text::{TailWindow, Utf8Stream};

/// Characters of output kept per process (hermes: 200,000, tail kept).
pub const MAX_OUTPUT_CHARS: usize = 200_000;
/// After TERM, how long before KILL (hermes `daemon_term_grace_seconds`: 2).
pub const TERM_GRACE: Duration = Duration::from_secs(2);
/// After the command exits, how long its output pipe may stay quiet before
/// we stop reading (leftover children can hold it open).
const DRAIN_IDLE: Duration = Duration::from_millis(300);

/// Why a process is no longer running (hermes' `completion_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    Exited,
    Killed,
    Lost,
}

impl EndReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EndReason::Exited => "exited",
            EndReason::Killed => "killed",
            EndReason::Lost => "lost",
        }
    }
}

/// A snapshot of a process's state for replies.
#[derive(Debug, Clone)]
pub struct Status {
    pub exited: bool,
    pub exit_code: Option<i32>,
    pub completion_reason: &'static str,
    pub termination_source: String,
    pub notify_on_complete: bool,
    pub watch_patterns: Vec<String>,
    pub watch_hits: u64,
}

struct State {
    output: TailWindow,
    exited: bool,
    exit_code: Option<i32>,
    reason: EndReason,
    termination_source: String,
    notify_on_complete: bool,
    watch: Watch,
    finished_at: Option<Instant>,
    /// Someone already has the exit in hand (a `wait` that saw it, a `kill`):
    /// no exit notice.
    consumed: bool,
}

pub struct BackgroundProcess {
    pub id: String,
    /// As given (shown redacted).
    pub command: String,
    pub cwd: String,
    pub task_id: String,
    pub session_id: String,
    /// pid inside the sandbox.
    pub pid: u32,
    pub pty: bool,
    pub started_at: SystemTime,
    started: Instant,
    state: std::sync::Mutex<State>,
    exited: watch::Sender<bool>,
    stdin: tokio::sync::Mutex<Option<BoxedWriter>>,
    /// `wait` calls in progress.
    waiters: AtomicUsize,
    /// Ask the supervisor to kill through the backend's handle.
    kill_now: Notify,
    killing: AtomicBool,
}

impl std::fmt::Debug for BackgroundProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundProcess")
            .field("id", &self.id)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

/// What a new process is.
pub struct Identity {
    pub id: String,
    pub command: String,
    pub cwd: String,
    pub task_id: String,
    pub session_id: String,
    pub pid: u32,
    pub pty: bool,
    pub notify_on_complete: bool,
    pub watch_patterns: Vec<String>,
}

impl BackgroundProcess {
    pub fn new(identity: Identity, stdin: BoxedWriter) -> Arc<Self> {
        Arc::new(BackgroundProcess {
            id: identity.id,
            command: identity.command,
            cwd: identity.cwd,
            task_id: identity.task_id,
            session_id: identity.session_id,
            pid: identity.pid,
            pty: identity.pty,
            started_at: SystemTime::now(),
            started: Instant::now(),
            state: std::sync::Mutex::new(State {
                output: TailWindow::new(MAX_OUTPUT_CHARS),
                exited: false,
                exit_code: None,
                reason: EndReason::Exited,
                termination_source: String::new(),
                notify_on_complete: identity.notify_on_complete,
                watch: Watch::new(identity.watch_patterns),
                finished_at: None,
                consumed: false,
            }),
            exited: watch::Sender::new(false),
            stdin: tokio::sync::Mutex::new(Some(stdin)),
            waiters: AtomicUsize::new(0),
            kill_now: Notify::new(),
            killing: AtomicBool::new(false),
        })
    }

    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn is_running(&self) -> bool {
        !*self.exited.borrow()
    }

    pub fn status(&self) -> Status {
        match self.state.lock() {
            Ok(s) => Status {
                exited: s.exited,
                exit_code: s.exit_code,
                completion_reason: s.reason.as_str(),
                termination_source: s.termination_source.clone(),
                notify_on_complete: s.notify_on_complete,
                watch_patterns: s.watch.active_patterns().to_vec(),
                watch_hits: s.watch.hits(),
            },
            Err(_) => Status {
                exited: true,
                exit_code: None,
                completion_reason: "lost",
                termination_source: String::new(),
                notify_on_complete: false,
                watch_patterns: Vec::new(),
                watch_hits: 0,
            },
        }
    }

    /// The last `n` characters of the output (raw).
    pub fn output_tail(&self, n: usize) -> String {
        self.state
            .lock()
            .map(|s| s.output.last(n).to_owned())
            .unwrap_or_default()
    }

    /// The whole retained output window (raw).
    pub fn output(&self) -> String {
        self.state
            .lock()
            .map(|s| s.output.text().to_owned())
            .unwrap_or_default()
    }

    /// When it finished, for pruning.
    pub fn finished_at(&self) -> Option<Instant> {
        self.state.lock().ok().and_then(|s| s.finished_at)
    }

    /// Marks the exit as seen by the caller (no exit notice will be sent).
    pub fn consume(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.consumed = true;
        }
    }

    /// Waits until the process has exited or `timeout` passed; true if it
    /// exited. While waiting, an exit is delivered here rather than as a
    /// notice.
    pub async fn wait_exit(
        &self,
        timeout: Duration,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> WaitEnd {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut rx = self.exited.subscribe();
        let end = tokio::select! {
            done = tokio::time::timeout(timeout, rx.wait_for(|exited| *exited)) => {
                if matches!(done, Ok(Ok(_))) { WaitEnd::Exited } else { WaitEnd::TimedOut }
            }
            () = cancel.cancelled() => WaitEnd::Interrupted,
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        if end == WaitEnd::Exited {
            self.consume();
        }
        end
    }

    /// Writes to the process's stdin. `Ok(chars)` or an error text.
    pub async fn write_stdin(&self, data: &str) -> Result<usize, String> {
        let mut stdin = self.stdin.lock().await;
        let Some(pipe) = stdin.as_mut() else {
            return Err("Process stdin not available (stdin closed)".to_owned());
        };
        let write = async {
            pipe.write_all(data.as_bytes()).await?;
            pipe.flush().await
        };
        match tokio::time::timeout(Duration::from_secs(10), write).await {
            Ok(Ok(())) => Ok(data.chars().count()),
            Ok(Err(err)) => Err(err.to_string()),
            Err(_) => Err(
                "Writing to stdin timed out after 10s: the process is not reading its input"
                    .to_owned(),
            ),
        }
    }

    /// Closes stdin (the process reads end-of-file). False if already closed.
    pub async fn close_stdin(&self) -> bool {
        match self.stdin.lock().await.take() {
            Some(mut pipe) => {
                let _ = pipe.shutdown().await;
                true
            }
            None => false,
        }
    }

    /// Stops the process and everything it started: TERM to the tree, KILL
    /// after the grace period. `consume` suppresses the exit notice (the
    /// caller shows the result itself). Returns false if it had already
    /// exited.
    pub async fn kill(&self, sandbox: &Arc<dyn Sandbox>, source: &str, consume: bool) -> bool {
        if !self.is_running() {
            return false;
        }
        if let Ok(mut s) = self.state.lock() {
            if s.exited {
                return false;
            }
            s.reason = EndReason::Killed;
            s.termination_source = source.to_owned();
            if consume {
                s.consumed = true;
            }
        }
        self.killing.store(true, Ordering::SeqCst);
        let mut rx = self.exited.subscribe();
        signal_tree(sandbox, self.pid, StopSignal::Terminate, true)
            .await
            .ok();
        if tokio::time::timeout(TERM_GRACE, rx.wait_for(|e| *e))
            .await
            .is_err()
        {
            signal_tree(sandbox, self.pid, StopSignal::Kill, true)
                .await
                .ok();
            self.kill_now.notify_one();
            if tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|e| *e))
                .await
                .is_err()
            {
                tracing::warn!(process = %self.id, "a killed background process did not report its exit");
            }
        }
        true
    }

    /// Records output; returns the watch events it caused.
    fn record(&self, text: &str, now: Instant) -> Option<WatchEvent> {
        let mut s = self.state.lock().ok()?;
        s.output.push(text);
        if s.exited {
            return None;
        }
        let stripped = strip_ansi(text);
        let event = s.watch.check(&stripped, now);
        if matches!(event, Some(WatchEvent::Disabled { .. })) {
            s.notify_on_complete = true;
        }
        event
    }

    /// Marks the exit (once) and says whether an exit notice is due.
    fn finish(&self, exit_code: Option<i32>, reason: EndReason) -> bool {
        let notify = match self.state.lock() {
            Ok(mut s) => {
                if s.exited {
                    return false;
                }
                s.exited = true;
                s.finished_at = Some(Instant::now());
                if s.reason == EndReason::Killed {
                    // hermes reports a kill as exit -15 whatever the signal.
                    s.exit_code = Some(-15);
                } else {
                    s.reason = reason;
                    s.exit_code = exit_code;
                }
                if self.waiters.load(Ordering::SeqCst) > 0 {
                    s.consumed = true;
                }
                s.notify_on_complete && !s.consumed
            }
            Err(_) => false,
        };
        self.exited.send_replace(true);
        notify
    }
}

/// How a `wait` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEnd {
    Exited,
    TimedOut,
    Interrupted,
}

/// Runs until the process has ended: reads its output, applies watch
/// patterns, waits for its exit, stops anything it left running, and sends
/// the exit notice.
pub async fn supervise(
    process: Arc<BackgroundProcess>,
    mut output: BoxedReader,
    mut handle: Box<dyn ProcessHandle>,
    start: Start,
    sandbox: Arc<dyn Sandbox>,
    hub: Arc<NoticeHub>,
    cleaner: Arc<OutputCleaner>,
) {
    let shown_command = cleaner.command(&process.command);
    let origin = Origin {
        task_id: &process.task_id,
        session_id: &process.session_id,
        process_id: &process.id,
        command: &shown_command,
    };
    let mut intake = Intake {
        process: &process,
        decoder: Utf8Stream::default(),
        scanner: Some(MarkerScanner::bare(&start.exit_token)),
        exit_code: None,
        hub: &hub,
        origin: &origin,
        cleaner: &cleaner,
    };
    if !start.early_output.is_empty() {
        intake.push(&start.early_output);
    }

    let mut buf = vec![0u8; 16 * 1024];
    let mut eof = false;
    let handle_code = loop {
        tokio::select! {
            read = output.read(&mut buf), if !eof => match read {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => intake.push(&buf[..n]),
            },
            code = handle.wait() => break code,
            () = process.kill_now.notified() => handle.kill().await,
        }
    };

    // The command is over; what it left behind in its session goes too, so
    // that an exited process means nothing of it still runs.
    if !process.killing.load(Ordering::SeqCst) {
        signal_tree(&sandbox, process.pid, StopSignal::Terminate, false)
            .await
            .ok();
    }
    let drained = drain(&mut output, &mut buf, eof, TERM_GRACE, &mut |bytes| {
        intake.push(bytes)
    })
    .await;
    if !drained {
        signal_tree(&sandbox, process.pid, StopSignal::Kill, false)
            .await
            .ok();
        drain(
            &mut output,
            &mut buf,
            false,
            Duration::from_secs(1),
            &mut |bytes| intake.push(bytes),
        )
        .await;
    }
    // The launcher's exit line knows the code on every backend; the handle's
    // code is the fallback (a command that replaced the EXIT trap).
    let exit_code = intake.finish().or(handle_code);

    if process.finish(exit_code, EndReason::Exited) {
        let status = process.status();
        let output = cleaner.output(&process.output_tail(2000), &process.command);
        let started_at = process
            .started_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        hub.send(notice::exited(
            &origin,
            &Completion {
                exit_code: status.exit_code,
                completion_reason: status.completion_reason,
                termination_source: &status.termination_source,
                output: &output,
                started_at,
            },
        ));
    }
}

/// What the launcher handed over besides the pipes.
pub struct Start {
    /// Output that arrived with the pid line.
    pub early_output: Vec<u8>,
    /// Token of the launcher's exit line.
    pub exit_token: String,
}

/// Output on its way into a process: the launcher's exit line taken out,
/// decoded, recorded, watched.
struct Intake<'a> {
    process: &'a BackgroundProcess,
    decoder: Utf8Stream,
    /// Until the exit line has been seen.
    scanner: Option<MarkerScanner>,
    exit_code: Option<i32>,
    hub: &'a NoticeHub,
    origin: &'a Origin<'a>,
    cleaner: &'a OutputCleaner,
}

impl Intake<'_> {
    fn push(&mut self, bytes: &[u8]) {
        let Intake {
            process,
            decoder,
            scanner,
            exit_code,
            hub,
            origin,
            cleaner,
        } = self;
        let mut record = |chunk: &[u8]| {
            let text = decoder.decode(chunk);
            if let Some(event) = process.record(&text, Instant::now()) {
                emit_watch_event(hub, origin, cleaner, event);
            }
        };
        match scanner.as_mut() {
            Some(found) => {
                if let Some((code, _)) = found.feed(bytes, &mut record) {
                    *exit_code = Some(code);
                    *scanner = None;
                }
            }
            // Output of leftovers after the exit line.
            None => record(bytes),
        }
    }

    /// Flushes what was held back; the exit code from the exit line.
    fn finish(&mut self) -> Option<i32> {
        if let Some(mut scanner) = self.scanner.take() {
            let mut held = Vec::new();
            scanner.flush(&mut |chunk| held.extend_from_slice(chunk));
            if !held.is_empty() {
                self.push(&held);
            }
        }
        let tail = self.decoder.finish();
        if !tail.is_empty() {
            self.process.record(tail, Instant::now());
        }
        self.exit_code
    }
}

/// Reads until end of file, or until the pipe has been quiet for
/// [`DRAIN_IDLE`], or `limit` passed. True when it reached end of file.
async fn drain(
    output: &mut BoxedReader,
    buf: &mut [u8],
    eof: bool,
    limit: Duration,
    sink: &mut (dyn FnMut(&[u8]) + Send),
) -> bool {
    if eof {
        return true;
    }
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let idle = tokio::time::sleep(DRAIN_IDLE);
        let stop = tokio::time::sleep_until(deadline);
        tokio::select! {
            read = output.read(buf) => match read {
                Ok(0) | Err(_) => return true,
                Ok(n) => sink(&buf[..n]),
            },
            () = idle => return false,
            () = stop => return false,
        }
    }
}

fn emit_watch_event(
    hub: &NoticeHub,
    origin: &Origin<'_>,
    cleaner: &OutputCleaner,
    event: WatchEvent,
) {
    match event {
        WatchEvent::Matched {
            pattern,
            output,
            suppressed,
        } => {
            let admission = hub.breaker.admit(Instant::now());
            if let Some(dropped) = admission.released_after {
                hub.send(notice::overflow_released(origin, dropped));
            }
            if admission.tripped {
                hub.send(notice::overflow_tripped(origin));
            }
            if admission.admit {
                let output = cleaner.output(&output, origin.command);
                hub.send(notice::watch_match(origin, &pattern, &output, suppressed));
            }
        }
        WatchEvent::Disabled { suppressed } => hub.send(notice::watch_disabled(origin, suppressed)),
    }
}
