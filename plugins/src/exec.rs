//! Running one plugin or hook executable: JSON in on stdin, its stdout back,
//! with a deadline, a cap on what it may print, and an environment that holds
//! only what it was given. The process gets its own process group, so a
//! timeout ends everything it started, not just its first process.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// Variables every executable gets from the coordinator's environment when
/// set (hermes' MCP stdio set): enough to find programs and write temp files,
/// nothing that identifies a credential.
const BASE_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "SHELL", "TMPDIR",
    "TZ",
];

/// PATH when the coordinator has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How long output is still read after the process exited, while something it
/// left behind holds its stdout open.
const LEFTOVER_GRACE: Duration = Duration::from_millis(200);

/// Bytes of stderr kept for messages (the end of it).
const STDERR_TAIL: usize = 4096;

/// One run of an executable.
#[derive(Debug, Clone)]
pub struct Exec {
    /// Program and arguments (the program resolved against `cwd` when it
    /// contains a `/`, else looked up on PATH).
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    /// Extra variables on top of the base set (declared ones, call context).
    pub env: Vec<(String, String)>,
    pub stdin: Vec<u8>,
    pub timeout: Duration,
    /// Bytes of stdout accepted; more ends the process.
    pub max_output: usize,
}

/// How the run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code (`None`: killed by a signal).
    Exited(Option<i32>),
    /// The deadline passed; its process group was killed.
    TimedOut,
    /// It printed more than `max_output` bytes; its process group was killed.
    TooMuchOutput,
    /// It could not be started.
    NotStarted(String),
}

#[derive(Debug, Clone)]
pub struct Outcome {
    pub ended: Ended,
    pub stdout: Vec<u8>,
    /// The last [`STDERR_TAIL`] bytes.
    pub stderr: String,
    pub elapsed: Duration,
}

impl Outcome {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// The environment an executable starts with: the base variables the
/// coordinator has, then `extra`. Nothing else — not the fleet token, not
/// the model's API key, not any variable the coordinator withheld at start.
pub fn environment(extra: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = BASE_ENV
        .iter()
        .filter_map(|name| std::env::var(name).ok().map(|v| ((*name).to_owned(), v)))
        .collect();
    if !env.iter().any(|(k, _)| k == "PATH") {
        env.push(("PATH".to_owned(), DEFAULT_PATH.to_owned()));
    }
    for (key, value) in extra {
        env.retain(|(k, _)| k != key);
        env.push((key.clone(), value.clone()));
    }
    env
}

/// Splits a command line into words as a POSIX shell would (hermes'
/// `shlex.split`); a leading `~/` is the user's home.
pub fn split_command(command: &str) -> Result<Vec<String>, String> {
    let mut words = caduceus_common::shell_words::split(command)?;
    if let Some(first) = words.first_mut()
        && let Some(rest) = first.strip_prefix("~/")
        && let Ok(home) = std::env::var("HOME")
    {
        *first = format!("{}/{rest}", home.trim_end_matches('/'));
    }
    Ok(words)
}

/// The program of `argv[0]`: relative paths (`./tool.sh`, `bin/tool`) are
/// the plugin directory's, bare names are looked up on PATH.
fn program(argv0: &str, cwd: &Path) -> PathBuf {
    let path = Path::new(argv0);
    if path.is_absolute() || !argv0.contains('/') {
        path.to_path_buf()
    } else {
        cwd.join(path)
    }
}

/// Runs `exec` to its end, its deadline or its output cap.
pub async fn run(exec: &Exec) -> Outcome {
    let started = Instant::now();
    let not_started = |message: String| Outcome {
        ended: Ended::NotStarted(message),
        stdout: Vec::new(),
        stderr: String::new(),
        elapsed: started.elapsed(),
    };
    let Some(argv0) = exec.argv.first() else {
        return not_started("empty command".to_owned());
    };
    let marker = RunMarker::new();
    let mut command = Command::new(program(argv0, &exec.cwd));
    command
        .args(&exec.argv[1..])
        .current_dir(&exec.cwd)
        .env_clear()
        .envs(environment(&exec.env))
        .env(RUN_MARKER, &marker.0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(err) => return not_started(format!("cannot start {argv0}: {err}")),
    };
    let pgid = child.id();
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        kill_group(pgid);
        marker.kill_carriers();
        return not_started("no pipes to the process".to_owned());
    };
    let input = exec.stdin.clone();
    // A process that never reads its stdin must not stall the run.
    let feed = tokio::spawn(async move {
        let _ = stdin.write_all(&input).await;
        let _ = stdin.shutdown().await;
    });
    let stderr_task = tokio::spawn(read_tail(stderr, STDERR_TAIL));
    let limit = exec.max_output;
    let mut stdout_bytes = Vec::new();
    let work = async {
        let mut reading = Box::pin(read_capped(stdout, limit, &mut stdout_bytes));
        tokio::select! {
            more = &mut reading => {
                if more {
                    return None;
                }
                drop(reading);
                Some(child.wait().await.ok().and_then(|s| s.code()))
            }
            status = child.wait() => {
                // The process is gone. Whatever it left running may still hold
                // stdout open; its output is read for a moment, not waited for.
                let more = tokio::time::timeout(LEFTOVER_GRACE, &mut reading)
                    .await
                    .unwrap_or(false);
                if more {
                    return None;
                }
                Some(status.ok().and_then(|s| s.code()))
            }
        }
    };
    let ended = match tokio::time::timeout(exec.timeout, work).await {
        Ok(Some(code)) => Ended::Exited(code),
        Ok(None) => Ended::TooMuchOutput,
        Err(_) => Ended::TimedOut,
    };
    // Nothing a call started outlives it: its process group ends here, however
    // the call ended (a daemon it forked into the group included, and one
    // that left the group with setsid, found by the marker it inherited).
    kill_group(pgid);
    marker.kill_carriers();
    let stdout = if ended == Ended::TimedOut {
        Vec::new()
    } else {
        stdout_bytes
    };
    feed.abort();
    // The group is gone or finished: its stderr closes soon after.
    let stderr = tokio::time::timeout(Duration::from_secs(2), stderr_task)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    Outcome {
        ended,
        stdout,
        stderr,
        elapsed: started.elapsed(),
    }
}

/// The variable every process of a run inherits, whatever session or group
/// it moves to: the one trace of a run that a double fork and `setsid` keep.
/// (A process that clears its own environment escapes it; plugins are the
/// operator's code, and this is for the daemons they start by accident.)
const RUN_MARKER: &str = "CADUCEUS_PLUGIN_RUN";

/// One run's value of [`RUN_MARKER`].
struct RunMarker(String);

impl RunMarker {
    fn new() -> Self {
        static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Self(format!("{}.{run}.{nanos}", std::process::id()))
    }

    /// SIGKILLs every process whose environment carries this run's marker,
    /// again until none is found (one may have forked while the last round
    /// was killing), at most a few rounds.
    fn kill_carriers(&self) {
        let needle = format!("{RUN_MARKER}={}\0", self.0).into_bytes();
        let own = std::process::id();
        for _ in 0..5 {
            let mut found = false;
            let Ok(entries) = std::fs::read_dir("/proc") else {
                return;
            };
            for entry in entries.flatten() {
                let Some(pid) = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.parse::<i32>().ok())
                else {
                    continue;
                };
                if u32::try_from(pid).is_ok_and(|p| p == own) {
                    continue;
                }
                let carries = std::fs::read(entry.path().join("environ"))
                    .is_ok_and(|env| env.windows(needle.len()).any(|w| w == needle));
                if carries {
                    found = true;
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
            if !found {
                return;
            }
        }
    }
}

/// Kills the process group led by `pid` (and so everything it started).
fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Reads up to `limit` bytes into `out`; `true` when there was more.
async fn read_capped(mut reader: impl AsyncRead + Unpin, limit: usize, out: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                if out.len() + n > limit {
                    let room = limit - out.len();
                    out.extend_from_slice(&buf[..room]);
                    return true;
                }
                out.extend_from_slice(&buf[..n]);
            }
        }
    }
}

/// Reads to the end, keeping the last `keep` bytes.
async fn read_tail(mut reader: impl AsyncRead + Unpin, keep: usize) -> String {
    let mut out: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.len() > keep * 2 {
                    out.drain(..out.len() - keep);
                }
            }
        }
    }
    if out.len() > keep {
        out.drain(..out.len() - keep);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[path = "exec_tests.rs"]
mod tests;
