//! A live persistent shell over any [`Sandbox`]: one long-lived `bash` per
//! environment runs the commands one after another, so the working directory,
//! exported and plain variables, functions, aliases and shell options persist
//! (hermes re-spawns `bash -c` per call and keeps only cwd and exports).
//!
//! Start-up (see `script.rs`): `bash --noprofile --norc` in the sandbox, then
//! one script that gives it login-shell semantics once — `/etc/profile`, the
//! first of `~/.bash_profile`/`~/.bash_login`/`~/.profile`, the configured
//! init files (hermes: `terminal.shell_init_files`, or `~/.profile`,
//! `~/.bash_profile`, `~/.bashrc` with `auto_source_bashrc`) — restores PATH
//! entries the login files dropped, defines the sudo helper when a sudo
//! password is configured, restores a previous shell's state, saves a state
//! snapshot and prints a ready marker carrying `$$`. If the init files break
//! the shell (an rc file that `exit`s), it is started again without them.
//!
//! Protocol: for each command the worker writes one line,
//!
//! ```text
//! IFS= builtin read -r -d '' __cad_c;__cad_go TOKEN;builtin eval "$__cad_c" </dev/null;__cad_done [SNAPSHOT]
//! ```
//!
//! followed by the command text and a NUL byte. bash reads its input from a
//! pipe one byte at a time, so `read` consumes exactly the command, which then
//! runs at top level (not in a function: `declare` stays global). `__cad_go`
//! first prints a start acknowledgement (`\x1eTOKEN+\x1e`, not shown as
//! output): a shell that ends before it provably never read the command (an
//! SSH channel whose master had just gone), so the command is sent once more
//! to a new shell; one that ends after it ran the command, which is never
//! re-run. stdin of the
//! command is `/dev/null` (readers get EOF, never hang). The end marker carries
//! a fresh random token per call, the exit code and the new cwd. Commands that
//! may change shell state also save a snapshot (variables, functions, aliases,
//! options) before the marker, written atomically: background processes start
//! from it, and a replacement shell restores it.
//!
//! A timeout or cancel ends the whole command: SIGUSR2 to the shell (its trap,
//! armed only while a command runs, abandons the rest of the line: it saves the
//! state reached, prints the marker and `exec`s a fresh bash on the same pipes,
//! which the worker then restores), then INT, TERM, KILL to the shell's
//! descendants and its session. If the shell does not come back or died, it is
//! replaced; the new shell gets the last state snapshot and the last cwd, and
//! the caller is told.
//!
//! Each shell owns a private directory (`<tmp>/caduceus-<id>`, mode 0700) for
//! its snapshot and the sudo helper; [`PersistentShell::close`] removes it.

#[cfg(test)]
#[path = "shell_tests.rs"]
mod tests;

pub(crate) mod marker;
mod script;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use caduceus_common::text::HeadTailBuffer;

use crate::sandbox::{
    BoxedReader, BoxedWriter, ProcessHandle, Sandbox, SandboxError, SpawnSpec, StopSignal,
};

use marker::{AckScanner, MarkerScanner, find};
use script::{ABORT_CODE, Startup, frame_for, may_change_state, start_ack, startup_script};
pub use script::{SNAPSHOT_END, shell_quote};

/// A secret that must never show up in logs or `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// How to start the shell.
#[derive(Debug, Clone)]
pub struct ShellConfig {
    /// Environment of the shell (already sanitized).
    pub env: Vec<(String, String)>,
    /// Directory the first shell starts in.
    pub cwd: String,
    /// Read the login files once at start, as `bash -l` would (hermes builds
    /// its session snapshot with `bash -l`).
    pub login: bool,
    /// Files sourced once at start after the login files; `~/` is the
    /// sandbox's home. Missing files are skipped.
    pub init_files: Vec<String>,
    /// Extra commands run once when a shell starts (after the files).
    pub init: Vec<String>,
    /// Password `sudo` gets through an askpass helper (hermes `SUDO_PASSWORD`).
    pub sudo_password: Option<Secret>,
    /// How long a shell may take to start and answer.
    pub start_timeout: Duration,
    /// After TERM, how long to wait for the command's tree before KILL.
    pub kill_grace: Duration,
    /// The state the login and init files produce, shared by the shells of
    /// one host (local backend): the first shell runs the files and saves the
    /// result, later ones restore it instead of running them again (a
    /// `.bashrc` with `pyenv init` costs ~200 ms per shell; concurrent children
    /// of a delegation each paid it). hermes snapshots the same way.
    pub login_cache: Option<Arc<LoginCache>>,
}

/// See [`ShellConfig::login_cache`].
pub struct LoginCache {
    /// A file the shells' host can read and write (mode 0600).
    path: String,
    ready: AtomicBool,
    /// Held while the first shell runs the files, so that concurrent starts
    /// wait for its result instead of all running them.
    first: Mutex<()>,
}

impl LoginCache {
    pub fn new(path: String) -> Self {
        LoginCache {
            path,
            ready: AtomicBool::new(false),
            first: Mutex::new(()),
        }
    }
}

impl std::fmt::Debug for LoginCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginCache")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Default for ShellConfig {
    fn default() -> Self {
        ShellConfig {
            env: Vec::new(),
            cwd: "/".to_owned(),
            login: false,
            init_files: Vec::new(),
            init: Vec::new(),
            sudo_password: None,
            start_timeout: Duration::from_secs(20),
            kill_grace: Duration::from_millis(500),
            login_cache: None,
        }
    }
}

/// One command to run.
pub struct ExecRequest<'a> {
    pub command: &'a str,
    pub timeout: Duration,
    /// Directory to `cd` into first (persists, as in hermes).
    pub workdir: Option<&'a str>,
    /// Characters kept of the output (head 40 % / tail 60 % beyond that).
    pub max_output_chars: usize,
    pub cancel: Option<&'a CancellationToken>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecEnd {
    Completed,
    TimedOut,
    Cancelled,
    /// The shell exited during the command (`exit`, `exec`, killed).
    ShellExited,
}

#[derive(Debug, Clone)]
pub struct ExecOutcome {
    /// Output (stdout and stderr in order), bounded to `max_output_chars` with
    /// hermes' head/tail notice; not yet ANSI-stripped or redacted.
    pub output: String,
    /// The same as hermes' terminal shows it: ending in `\n[Command timed out
    /// after Ns]` or `\n[Command interrupted]` when it did (just the status
    /// line when there was no output), still within `max_output_chars`.
    pub output_with_status: String,
    pub total_chars: u64,
    /// Bytes the output capture held at the end (bounded, whatever the
    /// command printed).
    pub retained_bytes: usize,
    pub exit_code: i32,
    pub end: ExecEnd,
    /// Working directory after the command.
    pub cwd: String,
    /// Set when the shell had to be replaced; says what state was kept.
    pub shell_replaced: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ShellError {
    #[error("the shell could not start: {0}")]
    Start(String),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("the shell's pipe failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("commands cannot contain NUL bytes")]
    NulInCommand,
}

/// Bytes read from a shell's output per `read`.
const READ_BUFFER: usize = 64 * 1024;

struct LiveShell {
    stdin: BoxedWriter,
    output: BoxedReader,
    /// pid of bash inside the sandbox (from its own `$$`).
    pid: u32,
    handle: Box<dyn ProcessHandle>,
    /// Read buffer, kept across commands (allocating 64 KiB per command
    /// showed up in profiles).
    buf: Vec<u8>,
}

/// State kept outside the shell process so that a replacement can inherit it.
struct Remembered {
    cwd: String,
    /// A snapshot file exists in the sandbox.
    snapshot_taken: bool,
    /// Said once, on the first command after the init files failed.
    init_note: Option<String>,
}

/// What a background process needs to start where the shell is.
#[derive(Debug, Clone)]
pub struct ShellState {
    pub cwd: String,
    /// The latest state snapshot, when one was saved.
    pub snapshot: Option<String>,
}

pub struct PersistentShell {
    sandbox: Arc<dyn Sandbox>,
    config: ShellConfig,
    live: Mutex<Option<LiveShell>>,
    remembered: std::sync::Mutex<Remembered>,
    /// The shell's private directory in the sandbox (mode 0700).
    dir: String,
    dir_ready: AtomicBool,
    starts: AtomicU64,
    /// Becomes true once a shell has started (background processes wait for
    /// the first start to have a snapshot to start from).
    started: tokio::sync::watch::Sender<bool>,
}

impl PersistentShell {
    pub fn new(sandbox: Arc<dyn Sandbox>, config: ShellConfig) -> Self {
        let dir = format!(
            "{}/caduceus-{}",
            sandbox.temp_dir().trim_end_matches('/'),
            uuid::Uuid::new_v4().simple()
        );
        let cwd = config.cwd.clone();
        PersistentShell {
            sandbox,
            config,
            live: Mutex::new(None),
            remembered: std::sync::Mutex::new(Remembered {
                cwd,
                snapshot_taken: false,
                init_note: None,
            }),
            dir,
            dir_ready: AtomicBool::new(false),
            starts: AtomicU64::new(0),
            started: tokio::sync::watch::Sender::new(false),
        }
    }

    /// The shell's working directory after the last command (relative paths of
    /// the file tools resolve against it).
    pub fn cwd(&self) -> String {
        self.remembered
            .lock()
            .map(|r| r.cwd.clone())
            .unwrap_or_default()
    }

    /// How many shell processes were started (1 after the first command).
    pub fn starts(&self) -> u64 {
        self.starts.load(Ordering::Relaxed)
    }

    pub fn sandbox(&self) -> &Arc<dyn Sandbox> {
        &self.sandbox
    }

    /// The shell's private directory inside the sandbox.
    pub fn private_dir(&self) -> &str {
        &self.dir
    }

    fn snapshot_path(&self) -> String {
        format!("{}/state.sh", self.dir)
    }

    fn askpass_path(&self) -> String {
        format!("{}/askpass", self.dir)
    }

    /// The cwd and state snapshot a background process starts from. Starts
    /// the shell first if none ever ran, without waiting behind a running
    /// command.
    pub async fn state_for_background(&self) -> ShellState {
        if self.starts() == 0 {
            let mut started = self.started.subscribe();
            match self.live.try_lock() {
                Ok(mut live) => {
                    if live.is_none()
                        && let Err(err) = self.start(&mut live).await
                    {
                        tracing::warn!("shell start for a background process failed: {err}");
                    }
                }
                // Someone else is starting it (the first command).
                Err(_) => {
                    let _ =
                        tokio::time::timeout(self.config.start_timeout, started.wait_for(|s| *s))
                            .await;
                }
            }
        }
        let remembered = self.remembered.lock();
        let (cwd, taken) = remembered
            .map(|r| (r.cwd.clone(), r.snapshot_taken))
            .unwrap_or_else(|_| (self.config.cwd.clone(), false));
        ShellState {
            cwd,
            snapshot: taken.then(|| self.snapshot_path()),
        }
    }

    /// Runs one command. Calls are queued: two commands never share the shell
    /// at once, so their outputs never interleave.
    pub async fn exec(&self, request: ExecRequest<'_>) -> Result<ExecOutcome, ShellError> {
        if request.command.contains('\0') {
            return Err(ShellError::NulInCommand);
        }
        let mut live = self.live.lock().await;
        let mut replaced = None;
        if live.is_none() {
            // A shell replaced after the previous command was reported there.
            self.start(&mut live).await?;
        }
        if let Ok(mut remembered) = self.remembered.lock()
            && let Some(note) = remembered.init_note.take()
        {
            replaced = Some(note);
        }
        let Some(shell) = live.as_mut() else {
            return Err(ShellError::Start("no shell".to_owned()));
        };

        let token = uuid::Uuid::new_v4().simple().to_string();
        let changes_state = may_change_state(request.command);
        let snapshot_path = self.snapshot_path();
        let frame = frame_for(
            &token,
            request.workdir,
            changes_state.then_some(snapshot_path.as_str()),
        );
        let mut bytes = Vec::with_capacity(frame.len() + request.command.len() + 1);
        bytes.extend_from_slice(frame.as_bytes());
        bytes.extend_from_slice(request.command.as_bytes());
        bytes.push(0);
        let mut capture = HeadTailBuffer::new(request.max_output_chars);
        let mut scanner = MarkerScanner::new(&token);
        let timeout = tokio::time::sleep(request.timeout);
        tokio::pin!(timeout);
        let never = CancellationToken::new();
        let cancel = request.cancel.unwrap_or(&never).clone();
        let mut buf = std::mem::take(&mut shell.buf);
        buf.resize(READ_BUFFER, 0);
        let mut end = ExecEnd::Completed;
        let mut marker: Option<(i32, String)> = None;
        // A shell found gone before it acknowledged the command is replaced
        // and the command sent once more: it provably never ran.
        let mut rerun_allowed = true;
        let mut ack = AckScanner::new(start_ack(&token));

        'attempt: loop {
            let Some(shell) = live.as_mut() else {
                return Err(ShellError::Start("no shell".to_owned()));
            };
            let written = write_all(&mut shell.stdin, &bytes).await;
            if written.is_ok() {
                // Phase 1: read until the marker, the deadline, a cancel or EOF.
                loop {
                    tokio::select! {
                        read = shell.output.read(&mut buf) => {
                            let n = read?;
                            if n == 0 {
                                end = ExecEnd::ShellExited;
                                break;
                            }
                            let mut emit = |chunk: &[u8]| capture.push(chunk);
                            let Some(after_ack) = ack.feed(&buf[..n], &mut emit) else {
                                continue;
                            };
                            if let Some(found) = scanner.feed(&after_ack, &mut emit) {
                                marker = Some(found);
                                break;
                            }
                        }
                        () = &mut timeout => { end = ExecEnd::TimedOut; break; }
                        () = cancel.cancelled() => { end = ExecEnd::Cancelled; break; }
                    }
                }
            }
            let never_ran = written.is_err() || (end == ExecEnd::ShellExited && !ack.seen());
            if !(never_ran && rerun_allowed) {
                if let Err(err) = written {
                    return Err(err.into());
                }
                break 'attempt;
            }
            rerun_allowed = false;
            end = ExecEnd::Completed;
            ack.flush(&mut |chunk| capture.push(chunk));
            ack = AckScanner::new(start_ack(&token));
            tracing::debug!("the shell ended before it took the command; replacing it");
            self.discard(&mut live).await;
            let restored = self.start(&mut live).await?;
            replaced = Some(format!(
                "The shell had exited since the last command and was replaced ({restored})."
            ));
        }
        let Some(shell) = live.as_mut() else {
            return Err(ShellError::Start("no shell".to_owned()));
        };

        // Phase 2: stop the command's tree and let the shell come back.
        if marker.is_none() && matches!(end, ExecEnd::TimedOut | ExecEnd::Cancelled) {
            marker = self
                .stop_command(shell, &mut ack, &mut scanner, &mut capture, &mut buf)
                .await;
        }

        if marker.is_none() {
            // Output held back as a possible marker start is output after all.
            ack.flush(&mut |chunk| capture.push(chunk));
            scanner.flush(&mut |chunk| capture.push(chunk));
        }
        let exit_code;
        let cwd;
        if let Some((ABORT_CODE, abort_cwd)) = marker.clone() {
            // The command was abandoned and a fresh bash took the shell's
            // place (same pid): bring it to the state the command reached.
            if let Some(shell) = live.as_mut()
                && let Err(err) = self.resume_after_abort(shell, &abort_cwd).await
            {
                tracing::debug!("the shell did not come back after an abort: {err}");
                if let Ok(mut remembered) = self.remembered.lock() {
                    remembered.cwd = abort_cwd;
                }
                marker = None;
            }
        }
        match marker {
            Some((code, new_cwd)) => {
                exit_code = match end {
                    ExecEnd::TimedOut => 124,
                    ExecEnd::Cancelled => 130,
                    _ => code,
                };
                cwd = new_cwd;
                if let Ok(mut remembered) = self.remembered.lock() {
                    remembered.cwd = cwd.clone();
                }
            }
            None => {
                // No marker: the shell exited (`exit 3`) or is stuck. Replace it
                // lazily on the next command.
                let code = if end == ExecEnd::ShellExited {
                    let mut handle_code = None;
                    if let Some(shell) = live.as_mut() {
                        handle_code =
                            tokio::time::timeout(Duration::from_secs(2), shell.handle.wait())
                                .await
                                .ok()
                                .flatten();
                    }
                    handle_code.unwrap_or(1)
                } else if end == ExecEnd::TimedOut {
                    124
                } else {
                    130
                };
                exit_code = code;
                self.discard(&mut live).await;
                cwd = self.cwd();
                // `exit` (or errexit) ends the shell as the user asked; a
                // replacement with the saved state takes over silently. A
                // shell we had to kill is worth a word.
                if end != ExecEnd::ShellExited {
                    replaced = Some(
                        "The command did not stop when signalled, so its shell was killed and replaced; the working directory and the last saved shell state (variables, functions, aliases, options) carry over."
                            .to_owned(),
                    );
                }
            }
        }

        let suffix = match end {
            ExecEnd::TimedOut => {
                format!("\n[Command timed out after {}s]", request.timeout.as_secs())
            }
            ExecEnd::Cancelled => "\n[Command interrupted]".to_owned(),
            _ => String::new(),
        };
        let total_chars = capture.total_chars();
        let retained_bytes = capture.retained_bytes();
        let mut output_with_status = capture.render(&suffix);
        if total_chars == 0 && !suffix.is_empty() {
            // hermes: `[Command timed out after 1s]` alone, without the newline.
            output_with_status = output_with_status.trim_start().to_owned();
        }
        if let Some(shell) = live.as_mut() {
            shell.buf = buf;
        }
        let output = capture.finish();
        Ok(ExecOutcome {
            total_chars: total_chars as u64,
            retained_bytes,
            output,
            output_with_status,
            exit_code,
            end,
            cwd,
            shell_replaced: replaced,
        })
    }

    /// INT, TERM, then KILL to the command's process tree, reading until the
    /// marker comes back; then sweeps what is left below the shell.
    async fn stop_command(
        &self,
        shell: &mut LiveShell,
        ack: &mut AckScanner,
        scanner: &mut MarkerScanner,
        capture: &mut HeadTailBuffer,
        buf: &mut [u8],
    ) -> Option<(i32, String)> {
        let mut marker = None;
        // INT first: most programs stop quietly on it and bash does not
        // report it; then TERM, then KILL for the stubborn.
        for signal in [
            StopSignal::Interrupt,
            StopSignal::Terminate,
            StopSignal::Kill,
        ] {
            // The shell first: its trap must be pending when the child dies,
            // or bash runs the rest of the line. Sent every round, in case
            // the first came before the command had armed the trap.
            if shell.pid > 1 {
                self.sandbox
                    .signal_process(shell.pid, StopSignal::Abort)
                    .await
                    .ok();
            }
            signal_tree(&self.sandbox, shell.pid, signal, false)
                .await
                .ok();
            let grace = tokio::time::sleep(self.config.kill_grace);
            tokio::pin!(grace);
            loop {
                tokio::select! {
                    read = shell.output.read(buf) => {
                        match read {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                let mut emit = |chunk: &[u8]| capture.push(chunk);
                                let Some(after_ack) = ack.feed(&buf[..n], &mut emit) else {
                                    continue;
                                };
                                if let Some(found) = scanner.feed(&after_ack, &mut emit) {
                                    marker = Some(found);
                                    break;
                                }
                            }
                        }
                    }
                    () = &mut grace => break,
                }
            }
            if marker.is_some() {
                break;
            }
        }
        // The shell is back at its prompt (or about to be replaced): whatever
        // still descends from it was started by the stopped command
        // (background jobs ignore SIGINT), so it goes too.
        signal_tree(&self.sandbox, shell.pid, StopSignal::Terminate, false)
            .await
            .ok();
        tokio::time::sleep(Duration::from_millis(50)).await;
        signal_tree(&self.sandbox, shell.pid, StopSignal::Kill, false)
            .await
            .ok();
        marker
    }

    /// After an abort the shell is a bare `bash --noprofile --norc` on the
    /// same pipes: restore the snapshot the trap saved (no init files: their
    /// effect is in it) and wait for it to be ready.
    async fn resume_after_abort(&self, shell: &mut LiveShell, cwd: &str) -> Result<(), ShellError> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let snapshot_path = self.snapshot_path();
        let askpass = self.askpass_path();
        let dir_ready = self.dir_ready.load(Ordering::Relaxed);
        let script = startup_script(&Startup {
            login: false,
            init_files: &[],
            init_commands: &[],
            original_path: None,
            sudo_askpass: (self.config.sudo_password.is_some() && dir_ready)
                .then_some(askpass.as_str()),
            restore_snapshot: dir_ready.then_some(snapshot_path.as_str()),
            snapshot_path: &snapshot_path,
            cwd,
            ready_token: &token,
            skip_init: true,
        });
        write_all(&mut shell.stdin, script.as_bytes()).await?;
        let pid = tokio::time::timeout(
            self.config.start_timeout,
            read_ready(&mut shell.output, &token),
        )
        .await
        .map_err(|_| {
            ShellError::Start(format!(
                "bash did not answer within {}s",
                self.config.start_timeout.as_secs()
            ))
        })??;
        shell.pid = pid;
        Ok(())
    }

    /// Kills the shell and everything it started, and removes its private
    /// directory.
    pub async fn close(&self) {
        let mut live = self.live.lock().await;
        self.discard(&mut live).await;
        if self.dir_ready.swap(false, Ordering::Relaxed) {
            let script = format!("rm -rf -- {}", shell_quote(&self.dir));
            if let Err(err) = run_helper(&self.sandbox, &script, None).await {
                tracing::debug!("removing {} failed: {err}", self.dir);
            }
        }
    }

    async fn discard(&self, live: &mut Option<LiveShell>) {
        if let Some(mut shell) = live.take() {
            signal_tree(&self.sandbox, shell.pid, StopSignal::Kill, true)
                .await
                .ok();
            shell.handle.kill().await;
        }
    }

    /// Creates the private directory (and the sudo helper) once.
    async fn prepare_dir(&self) {
        if self.dir_ready.load(Ordering::Relaxed) {
            return;
        }
        let dir = shell_quote(&self.dir);
        let mut script = format!("umask 077 && mkdir -p -- {dir} && chmod 700 -- {dir}");
        let mut stdin = None;
        if let Some(password) = &self.config.sudo_password {
            // The helper reads the password file with shell builtins only; the
            // password reaches the file through stdin, never a command line.
            let askpass = format!(
                "#!/bin/sh\nIFS= read -r __p < {}/sudo-pass\nprintf '%s\\n' \"$__p\"\n",
                shell_quote(&self.dir)
            );
            script.push_str(&format!(
                " && cat > {dir}/sudo-pass && printf '%s' {} > {dir}/askpass && chmod 700 {dir}/askpass",
                shell_quote(&askpass)
            ));
            stdin = Some(format!("{}\n", password.expose()));
        }
        match run_helper(&self.sandbox, &script, stdin.as_deref()).await {
            Ok(()) => {
                self.sandbox.record_private_dir(&self.dir);
                self.dir_ready.store(true, Ordering::Relaxed);
            }
            Err(err) => tracing::warn!("cannot create the shell directory {}: {err}", self.dir),
        }
    }

    /// Starts a shell, restoring the remembered state. Returns a description of
    /// what was restored.
    async fn start(&self, live: &mut Option<LiveShell>) -> Result<String, ShellError> {
        self.prepare_dir().await;
        let has_init =
            self.config.login || !self.config.init_files.is_empty() || !self.config.init.is_empty();
        match self.start_once(live, false).await {
            Ok(restored) => Ok(restored),
            Err(err) if has_init => {
                tracing::warn!(
                    "the shell did not start with its init files ({err}); starting it without them"
                );
                let restored = self.start_once(live, true).await?;
                if let Ok(mut remembered) = self.remembered.lock() {
                    remembered.init_note = Some(format!(
                        "The shell's init files (login files, terminal.shell_init_files) broke its start-up ({err}); it runs without them."
                    ));
                }
                Ok(restored)
            }
            Err(err) => Err(err),
        }
    }

    async fn start_once(
        &self,
        live: &mut Option<LiveShell>,
        skip_init: bool,
    ) -> Result<String, ShellError> {
        let (cwd, snapshot) = {
            let r = self
                .remembered
                .lock()
                .map_err(|_| ShellError::Start("state lock poisoned".to_owned()))?;
            (r.cwd.clone(), r.snapshot_taken)
        };
        // A shell of a host whose login state is cached restores it instead
        // of running the files; the first one runs them and fills the cache.
        let cache = self.config.login_cache.as_ref().filter(|_| !skip_init);
        let _first = match cache {
            Some(cache) if !cache.ready.load(Ordering::Acquire) => Some(cache.first.lock().await),
            _ => None,
        };
        let from_cache = cache.filter(|c| c.ready.load(Ordering::Acquire));
        let skip_init = skip_init || from_cache.is_some();
        let spec = SpawnSpec {
            program: "bash".to_owned(),
            args: vec!["-c".to_owned(), script::BOOT.to_owned()],
            cwd: Some(self.config.cwd.clone()),
            env: self.config.env.clone(),
        };
        let process = self.sandbox.spawn(spec).await?;
        let mut shell = LiveShell {
            stdin: process.stdin,
            output: process.output,
            pid: process.pid.unwrap_or(0),
            handle: process.handle,
            buf: Vec::new(),
        };
        let token = uuid::Uuid::new_v4().simple().to_string();
        let snapshot_path = self.snapshot_path();
        let askpass = self.askpass_path();
        let original_path = self
            .config
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str());
        let dir_ready = self.dir_ready.load(Ordering::Relaxed);
        let script = startup_script(&Startup {
            login: self.config.login,
            init_files: &self.config.init_files,
            init_commands: &self.config.init,
            original_path: original_path
                .filter(|_| self.config.login || !self.config.init_files.is_empty()),
            sudo_askpass: (self.config.sudo_password.is_some() && dir_ready)
                .then_some(askpass.as_str()),
            restore_snapshot: if snapshot {
                Some(snapshot_path.as_str())
            } else {
                from_cache.map(|c| c.path.as_str())
            },
            snapshot_path: &snapshot_path,
            cwd: &cwd,
            ready_token: &token,
            skip_init,
        });
        write_all(&mut shell.stdin, script.as_bytes()).await?;

        let started = tokio::time::timeout(
            self.config.start_timeout,
            read_ready(&mut shell.output, &token),
        )
        .await;
        match started {
            Ok(Ok(pid)) => {
                shell.pid = pid;
                *live = Some(shell);
                self.starts.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut remembered) = self.remembered.lock() {
                    remembered.snapshot_taken = dir_ready;
                }
                if let Some(cache) = cache
                    && from_cache.is_none()
                    && dir_ready
                    && !snapshot
                {
                    // This shell just ran the files: its start-up snapshot is
                    // the host's login state.
                    match tokio::fs::copy(&snapshot_path, &cache.path).await {
                        Ok(_) => cache.ready.store(true, Ordering::Release),
                        Err(err) => tracing::debug!("login state not cached: {err}"),
                    }
                }
                self.started.send_replace(true);
                Ok(if snapshot {
                    format!("restored saved state, cwd {cwd}")
                } else {
                    format!("cwd {cwd}")
                })
            }
            Ok(Err(err)) => {
                signal_tree(&self.sandbox, shell.pid, StopSignal::Kill, true)
                    .await
                    .ok();
                shell.handle.kill().await;
                Err(err)
            }
            Err(_) => {
                signal_tree(&self.sandbox, shell.pid, StopSignal::Kill, true)
                    .await
                    .ok();
                shell.handle.kill().await;
                Err(ShellError::Start(format!(
                    "bash did not answer within {}s",
                    self.config.start_timeout.as_secs()
                )))
            }
        }
    }
}

/// Reads a starting shell's output up to its ready marker; returns its pid.
async fn read_ready(output: &mut BoxedReader, token: &str) -> Result<u32, ShellError> {
    let ready = format!("\x1eREADY {token} ");
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = output.read(&mut buf).await?;
        if n == 0 {
            let tail = String::from_utf8_lossy(&seen[seen.len().saturating_sub(500)..])
                .trim()
                .to_owned();
            return Err(ShellError::Start(format!(
                "bash exited during start-up: {tail}"
            )));
        }
        seen.extend_from_slice(&buf[..n]);
        if let Some(at) = find(&seen, ready.as_bytes()) {
            let rest = &seen[at + ready.len()..];
            if let Some(end) = rest.iter().position(|b| *b == 0x1e) {
                let pid = std::str::from_utf8(&rest[..end])
                    .ok()
                    .and_then(|s| s.trim().parse::<u32>().ok());
                return pid.ok_or_else(|| ShellError::Start("unreadable shell pid".to_owned()));
            }
        }
        // Start-up chatter of rc files is dropped; keep memory bounded.
        if seen.len() > 64 * 1024 {
            seen.drain(..seen.len() - 1024);
        }
    }
}

async fn write_all(stdin: &mut BoxedWriter, bytes: &[u8]) -> std::io::Result<()> {
    stdin.write_all(bytes).await?;
    stdin.flush().await
}

/// [`Sandbox::signal_tree`], never for pid 0 or 1: a backend that could not
/// tell a pid must not make us signal the whole sandbox.
pub async fn signal_tree(
    sandbox: &Arc<dyn Sandbox>,
    pid: u32,
    signal: StopSignal,
    include_root: bool,
) -> Result<(), SandboxError> {
    if pid <= 1 {
        return Ok(());
    }
    sandbox.signal_tree(pid, signal, include_root).await
}

/// Runs a short helper script in the sandbox (`bash -c`), with `stdin` fed
/// to it when given.
pub async fn run_helper(
    sandbox: &Arc<dyn Sandbox>,
    script: &str,
    stdin: Option<&str>,
) -> Result<(), String> {
    let spec = SpawnSpec {
        program: "bash".to_owned(),
        args: vec!["-c".to_owned(), script.to_owned()],
        cwd: None,
        env: vec![("PATH".to_owned(), crate::sandbox::SYSTEM_PATH.to_owned())],
    };
    let mut process = sandbox.spawn(spec).await.map_err(|e| e.to_string())?;
    let written = match stdin {
        Some(data) => {
            tokio::time::timeout(
                Duration::from_secs(30),
                process.stdin.write_all(data.as_bytes()),
            )
            .await
        }
        None => Ok(Ok(())),
    };
    drop(process.stdin);
    let mut output = Vec::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(30),
        process.output.read_to_end(&mut output),
    )
    .await;
    let code = tokio::time::timeout(Duration::from_secs(30), process.handle.wait())
        .await
        .ok()
        .flatten();
    match (written, code) {
        (Ok(Ok(())), Some(0)) => Ok(()),
        (Ok(Err(err)), _) => Err(format!("writing to the helper failed: {err}")),
        (Err(_), _) => Err("the helper timed out".to_owned()),
        (_, code) => Err(format!(
            "exit {code:?}: {}",
            String::from_utf8_lossy(&output).trim()
        )),
    }
}
