//! The audit log: every tool call, every approval answer and the first use of
//! a token on each connection, one JSON object per line in
//! `$CADUCEUS_HOME/audit.jsonl` (see the coordinator README, section "Audit
//! log", for the fields).
//!
//! Lines are written by one dedicated thread: a caller only hands its event
//! over (the thread masks, stamps and serialises it), so no tool call waits
//! for the disk or pays for the line's text. The thread writes everything
//! queued at once, so a line is in the file (and survives a `kill -9` of the
//! coordinator) as soon as the thread has run; it `fsync`s at most once per
//! `sync_interval`, so that a machine crash loses at most that much and a
//! stream of calls does not pay a disk sync each (a sync per call cost more
//! CPU than the call itself: see the coordinator README). When the file
//! reaches `max_bytes` it is rotated: `audit.jsonl` → `audit.jsonl.1` → … →
//! `audit.jsonl.<keep>` (the oldest is dropped).

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

use caduceus_common::redact::{RedactMode, redact};

use crate::call::{CallContext, CallStatus, ToolResult};

/// Where the log goes and when it rotates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// The live file (`$CADUCEUS_HOME/audit.jsonl`).
    pub path: PathBuf,
    /// Size at which the live file is rotated (`audit.max_bytes`, 16 MiB).
    pub max_bytes: u64,
    /// Rotated files kept (`audit.keep`, 5).
    pub keep: usize,
    /// Longest a written line waits for its `fsync` (`audit.sync_interval_ms`,
    /// 1 s); zero syncs every batch as it is written.
    pub sync_interval: Duration,
}

impl AuditConfig {
    pub const DEFAULT_MAX_BYTES: u64 = 16 * 1024 * 1024;
    pub const DEFAULT_KEEP: usize = 5;
    pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_secs(1);

    pub fn in_home(home: &Path) -> Self {
        AuditConfig {
            path: home.join("audit.jsonl"),
            max_bytes: Self::DEFAULT_MAX_BYTES,
            keep: Self::DEFAULT_KEEP,
            sync_interval: Self::DEFAULT_SYNC_INTERVAL,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot open the audit log {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot start the audit writer: {0}")]
    Thread(std::io::Error),
}

/// One line of the log.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum AuditEvent {
    ToolCall(ToolCallLine),
    Approval(ApprovalLine),
    TokenUse(TokenUseLine),
}

/// A tool call as it left the pipeline.
#[derive(Debug, Clone, Serialize)]
pub struct ToolCallLine {
    /// The client token's name; `shared` for the shared token; absent for
    /// calls the coordinator makes itself.
    pub token: Option<String>,
    pub session: Option<String>,
    pub task: String,
    pub tool: String,
    /// Arguments after coercion (`None`: they did not parse). Every string
    /// in them is masked by the writer thread before the line is written.
    pub arguments: Option<Value>,
    /// The gate's verdict: `allowed`, `approved` (ran after an approval) or
    /// `refused` (see `status`); absent when the call ended before the gate.
    pub verdict: Option<&'static str>,
    pub worker: Option<String>,
    pub status: CallStatus,
    pub duration_ms: u64,
    /// The call's W3C trace id: the same id is on the call's log lines of
    /// the coordinator and the worker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
}

/// An operator's (or a session client's) answer to an approval request.
#[derive(Debug, Clone, Serialize)]
pub struct ApprovalLine {
    pub approval_id: String,
    /// Who answered: the token's name, `shared` for the shared token.
    pub answered_by: String,
    /// `approve` or `deny`.
    pub decision: &'static str,
    /// `once`, `session`, `always` for an approval.
    pub scope: Option<&'static str>,
    /// False when the id was not pending (nothing changed).
    pub accepted: bool,
    pub session: Option<String>,
    pub task: Option<String>,
    pub tool: Option<String>,
    /// The command as shown to the person (secrets masked).
    pub command: Option<String>,
}

/// The first request of a connection with one token, admitted or refused.
#[derive(Debug, Clone, Serialize)]
pub struct TokenUseLine {
    /// The token's name, `shared`, or absent when no known token was presented.
    pub token: Option<String>,
    pub role: Option<&'static str>,
    pub peer: String,
    pub method: String,
    pub admitted: bool,
    /// Why it was refused.
    pub error: Option<String>,
}

enum Message {
    Line(SystemTime, Box<AuditEvent>),
    /// Answered once every line queued before it is on disk.
    Flush(Sender<()>),
}

/// (peer address, token name) of a logged token use.
type SeenKey = (String, Option<String>);

/// The handle calls write through. Cheap to clone; the writer thread ends
/// (after writing what is queued) when the last handle is dropped.
#[derive(Clone)]
pub struct AuditLog {
    sender: Sender<Message>,
    path: PathBuf,
    /// (peer, token) pairs already logged: token use is logged once per
    /// connection, not per request.
    seen: Arc<Mutex<HashSet<SeenKey>>>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("path", &self.path)
            .finish()
    }
}

/// Connections remembered for token-use deduplication before the set starts
/// over (a long-running coordinator must not grow without bound; starting
/// over only logs a connection's token use once more).
const SEEN_LIMIT: usize = 10_000;

impl AuditLog {
    /// Opens (creating) the live file and starts the writer thread.
    pub fn open(config: AuditConfig) -> Result<Self, AuditError> {
        if let Some(dir) = config.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| AuditError::Open {
                path: config.path.clone(),
                source,
            })?;
        }
        let file = open_append(&config.path).map_err(|source| AuditError::Open {
            path: config.path.clone(),
            source,
        })?;
        let (sender, receiver) = mpsc::channel();
        let path = config.path.clone();
        std::thread::Builder::new()
            .name("caduceus-audit".to_owned())
            .spawn(move || write_loop(file, &config, &receiver))
            .map_err(AuditError::Thread)?;
        Ok(AuditLog {
            sender,
            path,
            seen: Arc::new(Mutex::new(HashSet::new())),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Queues one line (with the current time). Never blocks on the disk,
    /// and leaves masking and serialising to the writer thread.
    pub fn record(&self, event: AuditEvent) {
        if self
            .sender
            .send(Message::Line(SystemTime::now(), Box::new(event)))
            .is_err()
        {
            tracing::error!(path = %self.path.display(), "the audit writer stopped; a line was lost");
        }
    }

    /// A tool call at the pipeline's exit.
    pub fn tool_call(&self, ctx: &CallContext, done: &ToolResult, verdict: Option<&'static str>) {
        self.record(AuditEvent::ToolCall(ToolCallLine {
            token: ctx.caller.clone(),
            session: ctx.session_id.clone().filter(|s| !s.is_empty()),
            task: ctx.task_id.clone(),
            tool: done.tool.clone(),
            arguments: done.arguments.clone().map(Value::Object),
            verdict,
            worker: done.worker.clone(),
            status: done.status,
            duration_ms: u64::try_from(done.duration.as_millis()).unwrap_or(u64::MAX),
            trace_id: done.trace.map(|t| t.trace_id_hex()),
        }));
    }

    /// Logs a token use unless this connection already logged this token.
    pub fn token_use(&self, line: TokenUseLine) {
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.len() >= SEEN_LIMIT {
                seen.clear();
            }
            if !seen.insert((line.peer.clone(), line.token.clone())) {
                return;
            }
        }
        self.record(AuditEvent::TokenUse(line));
    }

    /// Waits until every line queued so far is written and synced.
    pub fn flush(&self) {
        let (done, wait) = mpsc::channel();
        if self.sender.send(Message::Flush(done)).is_ok() {
            let _ = wait.recv();
        }
    }
}

fn open_append(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Arguments and token names are for operators only.
        options.mode(0o600);
    }
    options.open(path)
}

/// The text of one line: the time first, then the event's fields, every
/// string of a call's arguments masked.
fn line_text(time: SystemTime, mut event: AuditEvent) -> Option<String> {
    if let AuditEvent::ToolCall(call) = &mut event {
        call.arguments = call.arguments.take().map(masked);
    }
    #[derive(Serialize)]
    struct Stamped {
        time: String,
        #[serde(flatten)]
        event: AuditEvent,
    }
    serde_json::to_string(&Stamped {
        time: rfc3339(time),
        event,
    })
    .ok()
}

/// `value` with every string masked as tool output is (known secrets,
/// vendor keys, `password=…` assignments, private keys), reusing its own
/// allocations where nothing changes.
fn masked(value: Value) -> Value {
    match value {
        Value::String(text) => match redact(&text, RedactMode::General) {
            std::borrow::Cow::Borrowed(_) => Value::String(text),
            std::borrow::Cow::Owned(masked) => Value::String(masked),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(masked).collect()),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(key, value)| (key, masked(value)))
                .collect(),
        ),
        other => other,
    }
}

/// The writer thread: writes what is queued as one batch, `fsync`s when the
/// oldest unsynced line has waited `sync_interval` (or at once when it is
/// zero, or when asked to flush), rotates.
fn write_loop(mut file: File, config: &AuditConfig, receiver: &Receiver<Message>) {
    let mut size = file.metadata().map_or(0, |m| m.len());
    // When the oldest line written but not yet synced was written.
    let mut unsynced_since: Option<Instant> = None;
    loop {
        let first = match unsynced_since {
            None => match receiver.recv() {
                Ok(message) => message,
                Err(_) => break,
            },
            Some(since) => {
                let wait = config.sync_interval.saturating_sub(since.elapsed());
                match receiver.recv_timeout(wait) {
                    Ok(message) => message,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        sync(&file, config);
                        unsynced_since = None;
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
        };
        let mut flushes = Vec::new();
        let mut batch = String::new();
        let mut next = Some(first);
        while let Some(message) = next {
            match message {
                Message::Line(time, event) => {
                    if let Some(text) = line_text(time, *event) {
                        batch.push_str(&text);
                        batch.push('\n');
                    }
                }
                Message::Flush(done) => flushes.push(done),
            }
            next = receiver.try_recv().ok();
        }
        if !batch.is_empty() {
            match file.write_all(batch.as_bytes()) {
                Ok(()) => {
                    size += batch.len() as u64;
                    unsynced_since.get_or_insert_with(Instant::now);
                }
                Err(err) => {
                    tracing::error!(path = %config.path.display(), %err, "cannot write the audit log")
                }
            }
        }
        let due = unsynced_since.is_some_and(|since| since.elapsed() >= config.sync_interval);
        if unsynced_since.is_some() && (due || !flushes.is_empty() || size >= config.max_bytes) {
            sync(&file, config);
            unsynced_since = None;
        }
        if size >= config.max_bytes {
            match rotate(config) {
                Ok(fresh) => {
                    file = fresh;
                    size = 0;
                }
                Err(err) => {
                    tracing::error!(path = %config.path.display(), %err, "cannot rotate the audit log")
                }
            }
        }
        for done in flushes {
            let _ = done.send(());
        }
    }
    // Every handle is gone: what was written is synced before the thread ends.
    if unsynced_since.is_some() {
        sync(&file, config);
    }
}

fn sync(file: &File, config: &AuditConfig) {
    if let Err(err) = file.sync_data() {
        tracing::error!(path = %config.path.display(), %err, "cannot sync the audit log");
    }
}

/// Shifts `path.N` to `path.N+1` (dropping `path.keep`), moves the live file
/// to `path.1` and opens a fresh one.
fn rotate(config: &AuditConfig) -> std::io::Result<File> {
    let numbered = |n: usize| {
        let mut name = config.path.clone().into_os_string();
        name.push(format!(".{n}"));
        PathBuf::from(name)
    };
    if config.keep == 0 {
        std::fs::remove_file(&config.path)?;
    } else {
        for n in (1..config.keep).rev() {
            match std::fs::rename(numbered(n), numbered(n + 1)) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => return Err(err),
                _ => {}
            }
        }
        std::fs::rename(&config.path, numbered(1))?;
    }
    open_append(&config.path)
}

/// `2026-12-02T03:27:48.123Z`.
pub fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// Days since 1970-01-01 to (year, month, day) (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
#[path = "audit_tests.rs"]
mod tests;
