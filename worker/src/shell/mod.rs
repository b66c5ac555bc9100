//! A live persistent shell over any [`Sandbox`]: one long-lived `bash` per
//! environment runs the commands one after another, so the working directory,
//! exported and plain variables, functions, aliases and shell options persist
//! (hermes re-spawns `bash -c` per call and keeps only cwd and exports).
//!
//! Protocol (see `README.md`): for each command the worker writes one line,
//!
//! ```text
//! IFS= read -r -d '' __cad_c;eval "$__cad_c" </dev/null;__cad_e=$?;printf '\n\036%s %d %s\036\n' TOKEN "$__cad_e" "$PWD"
//! ```
//!
//! followed by the command text and a NUL byte. bash reads its input from a
//! pipe one byte at a time, so `read` consumes exactly the command, which then
//! runs at top level (not in a function: `declare` stays global). stdin of the
//! command is `/dev/null` (readers get EOF, never hang). The end marker carries
//! a fresh random token per call, the exit code and the new cwd.
//!
//! A timeout or cancel stops the command's process tree (INT, TERM, then KILL,
//! to the shell's descendants and its session) and waits for the marker: the
//! shell survives and keeps its state. If the shell itself is stuck (a builtin
//! loop) or died, it is replaced; the new shell gets the last state snapshot
//! (taken after commands that may change shell state) and the last cwd, and
//! the caller is told.

#[cfg(test)]
#[path = "shell_tests.rs"]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use caduceus_common::text::HeadTailBuffer;

use crate::sandbox::{
    BoxedReader, BoxedWriter, ProcessHandle, Sandbox, SandboxError, SpawnSpec, StopSignal,
};

/// How to start the shell.
#[derive(Debug, Clone)]
pub struct ShellConfig {
    /// Environment of the shell (already sanitized).
    pub env: Vec<(String, String)>,
    /// Directory the first shell starts in.
    pub cwd: String,
    /// Extra commands run once when a shell starts (rc files, PATH tweaks).
    pub init: Vec<String>,
    /// How long a shell may take to start and answer.
    pub start_timeout: Duration,
    /// After TERM, how long to wait for the command's tree before KILL.
    pub kill_grace: Duration,
}

impl Default for ShellConfig {
    fn default() -> Self {
        ShellConfig {
            env: Vec::new(),
            cwd: "/".to_owned(),
            init: Vec::new(),
            start_timeout: Duration::from_secs(20),
            kill_grace: Duration::from_millis(500),
        }
    }
}

/// Receives raw output bytes as they arrive.
pub type OutputCallback<'a> = &'a mut (dyn FnMut(&[u8]) + Send);

/// One command to run.
pub struct ExecRequest<'a> {
    pub command: &'a str,
    pub timeout: Duration,
    /// Directory to `cd` into first (persists, as in hermes).
    pub workdir: Option<&'a str>,
    /// Characters kept of the output (head 40 % / tail 60 % beyond that).
    pub max_output_chars: usize,
    /// Receives raw output bytes as they arrive.
    pub on_output: Option<OutputCallback<'a>>,
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
    /// the head/tail notice; not yet ANSI-stripped or redacted.
    pub output: String,
    pub total_chars: u64,
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

struct LiveShell {
    stdin: BoxedWriter,
    output: BoxedReader,
    /// pid of bash inside the sandbox (from its own `$$`).
    pid: u32,
    handle: Box<dyn ProcessHandle>,
}

/// State kept outside the shell process so that a replacement can inherit it.
struct Remembered {
    cwd: String,
    /// A snapshot file exists in the sandbox.
    snapshot_taken: bool,
}

pub struct PersistentShell {
    sandbox: Arc<dyn Sandbox>,
    config: ShellConfig,
    live: Mutex<Option<LiveShell>>,
    remembered: std::sync::Mutex<Remembered>,
    snapshot_path: String,
    starts: AtomicU64,
}

impl PersistentShell {
    pub fn new(sandbox: Arc<dyn Sandbox>, config: ShellConfig) -> Self {
        let snapshot_path = format!(
            "{}/caduceus-shell-{}.snap",
            sandbox.temp_dir(),
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
            }),
            snapshot_path,
            starts: AtomicU64::new(0),
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

    /// Runs one command. Calls are queued: two commands never share the shell
    /// at once, so their outputs never interleave.
    pub async fn exec(&self, mut request: ExecRequest<'_>) -> Result<ExecOutcome, ShellError> {
        if request.command.contains('\0') {
            return Err(ShellError::NulInCommand);
        }
        let mut live = self.live.lock().await;
        let mut replaced = None;
        if live.is_none() {
            // A shell replaced after the previous command was reported there.
            self.start(&mut live).await?;
        }
        let Some(shell) = live.as_mut() else {
            return Err(ShellError::Start("no shell".to_owned()));
        };

        let token = uuid::Uuid::new_v4().simple().to_string();
        let frame = frame_for(
            &token,
            request.workdir,
            may_change_state(request.command).then_some(self.snapshot_path.as_str()),
        );
        let mut bytes = Vec::with_capacity(frame.len() + request.command.len() + 1);
        bytes.extend_from_slice(frame.as_bytes());
        bytes.extend_from_slice(request.command.as_bytes());
        bytes.push(0);
        if let Err(err) = write_all(&mut shell.stdin, &bytes).await {
            // The shell is gone before we could even talk to it: start over once.
            tracing::debug!("shell stdin failed ({err}); replacing the shell");
            self.discard(&mut live).await;
            let restored = self.start(&mut live).await?;
            replaced = Some(format!(
                "The shell had exited since the last command and was replaced ({restored})."
            ));
            let Some(shell) = live.as_mut() else {
                return Err(ShellError::Start("no shell".to_owned()));
            };
            write_all(&mut shell.stdin, &bytes).await?;
        }

        let Some(shell) = live.as_mut() else {
            return Err(ShellError::Start("no shell".to_owned()));
        };
        let mut capture = HeadTailBuffer::new(request.max_output_chars);
        let mut scanner = MarkerScanner::new(&token);
        let timeout = tokio::time::sleep(request.timeout);
        tokio::pin!(timeout);
        let never = CancellationToken::new();
        let cancel = request.cancel.unwrap_or(&never).clone();
        let mut buf = vec![0u8; 64 * 1024];
        let mut end = ExecEnd::Completed;
        let mut marker: Option<(i32, String)> = None;

        // Phase 1: read until the marker, the deadline, a cancel or EOF.
        loop {
            tokio::select! {
                read = shell.output.read(&mut buf) => {
                    let n = read?;
                    if n == 0 {
                        end = ExecEnd::ShellExited;
                        break;
                    }
                    let found = scanner.feed(&buf[..n], &mut |chunk| {
                        capture.push(chunk);
                        if let Some(cb) = request.on_output.as_mut() { cb(chunk); }
                    });
                    if let Some(found) = found {
                        marker = Some(found);
                        break;
                    }
                }
                () = &mut timeout => { end = ExecEnd::TimedOut; break; }
                () = cancel.cancelled() => { end = ExecEnd::Cancelled; break; }
            }
        }

        // Phase 2: stop the command's tree and let the shell come back.
        if marker.is_none() && matches!(end, ExecEnd::TimedOut | ExecEnd::Cancelled) {
            // INT first: most programs stop quietly on it and bash does not
            // report it; then TERM, then KILL for the stubborn.
            for signal in [
                StopSignal::Interrupt,
                StopSignal::Terminate,
                StopSignal::Kill,
            ] {
                self.sandbox
                    .signal_tree(shell.pid, signal, false)
                    .await
                    .ok();
                let grace = tokio::time::sleep(self.config.kill_grace);
                tokio::pin!(grace);
                loop {
                    tokio::select! {
                        read = shell.output.read(&mut buf) => {
                            match read {
                                Ok(0) | Err(_) => break,
                                Ok(n) => {
                                    if let Some(found) = scanner.feed(&buf[..n], &mut |chunk| capture.push(chunk)) {
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
            self.sandbox
                .signal_tree(shell.pid, StopSignal::Terminate, false)
                .await
                .ok();
            tokio::time::sleep(Duration::from_millis(50)).await;
            self.sandbox
                .signal_tree(shell.pid, StopSignal::Kill, false)
                .await
                .ok();
        }

        if marker.is_none() {
            // Output held back as a possible marker start is output after all.
            scanner.flush(&mut |chunk| capture.push(chunk));
        }
        let exit_code;
        let cwd;
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
                    if may_change_state(request.command) {
                        remembered.snapshot_taken = true;
                    }
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
                // `exit` ends the shell as the user asked; a replacement with
                // the saved state takes over silently. A shell we had to kill
                // is worth a word.
                if end != ExecEnd::ShellExited {
                    replaced = Some(format!(
                        "The command did not stop when signalled, so its shell was killed and replaced; the working directory{} carry over.",
                        if self
                            .remembered
                            .lock()
                            .map(|r| r.snapshot_taken)
                            .unwrap_or(false)
                        {
                            " and the last saved shell state (variables, functions, aliases, options)"
                        } else {
                            " and the environment the shell started with"
                        }
                    ));
                }
            }
        }

        Ok(ExecOutcome {
            total_chars: capture.total_chars() as u64,
            output: capture.finish(),
            exit_code,
            end,
            cwd,
            shell_replaced: replaced,
        })
    }

    /// Kills the shell and everything it started.
    pub async fn close(&self) {
        let mut live = self.live.lock().await;
        self.discard(&mut live).await;
    }

    async fn discard(&self, live: &mut Option<LiveShell>) {
        if let Some(mut shell) = live.take() {
            self.sandbox
                .signal_tree(shell.pid, StopSignal::Kill, true)
                .await
                .ok();
            shell.handle.kill().await;
        }
    }

    /// Starts a shell, restoring the remembered state. Returns a description of
    /// what was restored.
    async fn start(&self, live: &mut Option<LiveShell>) -> Result<String, ShellError> {
        let (cwd, snapshot) = {
            let r = self
                .remembered
                .lock()
                .map_err(|_| ShellError::Start("state lock poisoned".to_owned()))?;
            (r.cwd.clone(), r.snapshot_taken)
        };
        let spec = SpawnSpec {
            program: "bash".to_owned(),
            args: vec!["--noprofile".to_owned(), "--norc".to_owned()],
            cwd: Some(self.config.cwd.clone()),
            env: self.config.env.clone(),
        };
        let process = self.sandbox.spawn(spec).await?;
        let mut shell = LiveShell {
            stdin: process.stdin,
            output: process.output,
            pid: process.pid.unwrap_or(0),
            handle: process.handle,
        };
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut init = String::from(
            "exec 2>&1\nset +m\nshopt -s expand_aliases\nPS1='' PS2='' PROMPT_COMMAND=''\n",
        );
        for line in &self.config.init {
            init.push_str(line);
            init.push('\n');
        }
        if snapshot {
            init.push_str(&format!(
                "source {} >/dev/null 2>&1\n",
                shell_quote(&self.snapshot_path)
            ));
        }
        init.push_str(&format!(
            "builtin cd -- {} 2>/dev/null\n",
            shell_quote(&cwd)
        ));
        init.push_str(&format!("printf '\\036READY {token} %s\\036\\n' \"$$\"\n"));
        write_all(&mut shell.stdin, init.as_bytes()).await?;

        let ready = format!("\x1eREADY {token} ");
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        let started = tokio::time::timeout(self.config.start_timeout, async {
            loop {
                let n = shell.output.read(&mut buf).await?;
                if n == 0 {
                    return Err(ShellError::Start(format!(
                        "bash exited during start-up: {}",
                        String::from_utf8_lossy(&seen).trim()
                    )));
                }
                seen.extend_from_slice(&buf[..n]);
                if let Some(at) = find(&seen, ready.as_bytes()) {
                    let rest = &seen[at + ready.len()..];
                    if let Some(end) = rest.iter().position(|b| *b == 0x1e) {
                        let pid = std::str::from_utf8(&rest[..end])
                            .ok()
                            .and_then(|s| s.trim().parse::<u32>().ok());
                        return pid
                            .ok_or_else(|| ShellError::Start("unreadable shell pid".to_owned()));
                    }
                }
            }
        })
        .await;
        match started {
            Ok(Ok(pid)) => {
                shell.pid = pid;
                *live = Some(shell);
                self.starts.fetch_add(1, Ordering::Relaxed);
                Ok(if snapshot {
                    format!("restored saved state, cwd {cwd}")
                } else {
                    format!("cwd {cwd}")
                })
            }
            Ok(Err(err)) => {
                shell.handle.kill().await;
                Err(err)
            }
            Err(_) => {
                shell.handle.kill().await;
                Err(ShellError::Start(format!(
                    "bash did not answer within {}s",
                    self.config.start_timeout.as_secs()
                )))
            }
        }
    }
}

async fn write_all(stdin: &mut BoxedWriter, bytes: &[u8]) -> std::io::Result<()> {
    stdin.write_all(bytes).await?;
    stdin.flush().await
}

/// The line that makes bash read and run one command.
fn frame_for(token: &str, workdir: Option<&str>, snapshot: Option<&str>) -> String {
    let run = match workdir {
        Some(dir) => format!(
            "builtin cd -- {} && eval \"$__cad_c\" </dev/null",
            shell_quote(dir)
        ),
        None => "eval \"$__cad_c\" </dev/null".to_owned(),
    };
    let save = match snapshot {
        // Saved after the command, before the marker: a replacement shell can
        // inherit variables, functions, aliases and options.
        Some(path) => format!(
            "{{ builtin declare -p;builtin declare -f;builtin alias -p;builtin shopt -p;builtin set +o; }} >{} 2>/dev/null;",
            shell_quote(path)
        ),
        None => String::new(),
    };
    format!(
        "IFS= read -r -d '' __cad_c;{run};__cad_e=$?;{save}builtin printf '\\n\\036%s %d %s\\036\\n' {token} \"$__cad_e\" \"$PWD\"\n"
    )
}

/// Could this command change shell state beyond the cwd? Cheap and
/// conservative: a false positive costs one snapshot (~0.3 ms).
fn may_change_state(command: &str) -> bool {
    const WORDS: &[&str] = &[
        "export", "declare", "typeset", "readonly", "alias", "unalias", "unset", "set", "shopt",
        "source", "function", "local", "eval", "umask", "ulimit", "hash", "trap", "enable",
        "builtin", "pushd", "popd", "cd", "exec",
    ];
    if command.contains('=') || command.contains("()") {
        return true;
    }
    command
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .any(|word| word == "." || WORDS.contains(&word))
}

/// Single-quotes a string for bash.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Finds the end marker `\n\x1e<token> <code> <cwd>\x1e\n` in a byte stream
/// that arrives in arbitrary chunks, passing through everything before it.
struct MarkerScanner {
    prefix: Vec<u8>,
    /// Bytes that might be the start of the marker, held back.
    held: Vec<u8>,
    /// Once the prefix is seen: the rest of the marker line.
    tail: Option<Vec<u8>>,
}

impl MarkerScanner {
    fn new(token: &str) -> Self {
        MarkerScanner {
            prefix: format!("\n\x1e{token} ").into_bytes(),
            held: Vec::new(),
            tail: None,
        }
    }

    /// Emits whatever was held back (the stream ended without a marker).
    fn flush(&mut self, emit: &mut dyn FnMut(&[u8])) {
        if self.tail.is_none() && !self.held.is_empty() {
            emit(&self.held);
            self.held.clear();
        }
    }

    /// Feeds bytes; output before the marker goes to `emit`. Returns the exit
    /// code and cwd once the whole marker has arrived.
    fn feed(&mut self, data: &[u8], emit: &mut dyn FnMut(&[u8])) -> Option<(i32, String)> {
        if let Some(tail) = self.tail.as_mut() {
            tail.extend_from_slice(data);
            return parse_marker_tail(tail);
        }
        self.held.extend_from_slice(data);
        if let Some(at) = find(&self.held, &self.prefix) {
            emit(&self.held[..at]);
            let tail = self.held[at + self.prefix.len()..].to_vec();
            self.held.clear();
            let parsed = parse_marker_tail(&tail);
            self.tail = Some(tail);
            return parsed;
        }
        // Keep back only what could still become the prefix.
        let keep = longest_prefix_suffix(&self.held, &self.prefix);
        let cut = self.held.len() - keep;
        if cut > 0 {
            emit(&self.held[..cut]);
            self.held.drain(..cut);
        }
        None
    }
}

/// Length of the longest suffix of `data` that is a proper prefix of `prefix`.
fn longest_prefix_suffix(data: &[u8], prefix: &[u8]) -> usize {
    let max = prefix.len().saturating_sub(1).min(data.len());
    (1..=max)
        .rev()
        .find(|&k| data[data.len() - k..] == prefix[..k])
        .unwrap_or(0)
}

/// Parses `<code> <cwd>\x1e\n` once complete.
fn parse_marker_tail(tail: &[u8]) -> Option<(i32, String)> {
    let end = tail.windows(2).position(|w| w == b"\x1e\n")?;
    let text = String::from_utf8_lossy(&tail[..end]);
    let (code, cwd) = text.split_once(' ')?;
    Some((code.trim().parse().unwrap_or(1), cwd.to_owned()))
}
