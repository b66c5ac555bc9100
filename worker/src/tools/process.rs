//! The `process` tool: list, poll, log, wait, kill, write, submit and close
//! background processes, with hermes' replies (`tools/process_registry.py`).
//! Every output field is ANSI-stripped and redacted, and so are commands.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use caduceus_common::result::ToolReply;

use crate::env::{EnvManager, Environment};
use crate::process::background::{BackgroundProcess, WaitEnd};
use caduceus_common::text::last_chars;

/// One `process` call.
pub struct ProcessCall<'a> {
    pub envs: &'a EnvManager,
    pub task_id: &'a str,
    pub session_id: &'a str,
    pub args: &'a Map<String, Value>,
    pub cancel: &'a CancellationToken,
    /// The longest `wait`, decided by the coordinator (`terminal.timeout`).
    pub max_wait: Duration,
}

const ACTIONS: &str = "list, poll, log, wait, kill, write, submit, close";

/// A JSON object whose keys keep the order they were added in (hermes'
/// dicts), whatever serde_json's map does.
#[derive(Default)]
struct Reply(Vec<(&'static str, Value)>);

impl Reply {
    fn with(mut self, key: &'static str, value: impl Into<Value>) -> Self {
        self.0.push((key, value.into()));
        self
    }

    fn with_opt(self, key: &'static str, value: Option<impl Into<Value>>) -> Self {
        match value {
            Some(value) => self.with(key, value),
            None => self,
        }
    }

    /// The call succeeded (whatever the process did).
    fn ok(&self) -> ToolReply {
        ToolReply::json(self)
    }

    /// The call failed: the reply carries an `error`.
    fn failed(&self) -> ToolReply {
        ToolReply::failed_json(self)
    }
}

impl Serialize for Reply {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (key, value) in &self.0 {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// A list of replies, serialized in order.
struct Replies(Vec<Reply>);

impl Serialize for Replies {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter())
    }
}

fn not_found(id: &str) -> ToolReply {
    Reply::default()
        .with("status", "not_found")
        .with("error", format!("No process with ID {id}"))
        .failed()
}

fn status_word(process: &BackgroundProcess) -> &'static str {
    if process.is_running() {
        "running"
    } else {
        "exited"
    }
}

pub async fn run(call: ProcessCall<'_>) -> ToolReply {
    let action = call
        .args
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // Some models send the id as a number.
    let id = match call.args.get("session_id") {
        Some(Value::String(s)) => s.trim().to_owned(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    match action {
        "list" => list(&call),
        "poll" | "log" | "wait" | "kill" | "write" | "submit" | "close" => {
            if id.is_empty() {
                return ToolReply::error(format!("session_id is required for {action}"));
            }
            let Some((env, process)) = call.envs.find_process(&id) else {
                return not_found(&id);
            };
            match action {
                "poll" => poll(&env, &process),
                "log" => log(&env, &process, call.args),
                "wait" => wait(&env, &process, call.args, call.max_wait, call.cancel).await,
                "kill" => kill(&env, &process).await,
                "write" => write(&process, &data_arg(call.args)).await,
                "submit" => write(&process, &(data_arg(call.args) + "\n")).await,
                _ => close(&process).await,
            }
        }
        other => ToolReply::error(format!("Unknown process action: {other}. Use: {ACTIONS}")),
    }
}

fn data_arg(args: &Map<String, Value>) -> String {
    match args.get("data") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

/// Last `n` characters of the output, stripped and redacted.
fn clean_tail(env: &Environment, process: &BackgroundProcess, n: usize) -> String {
    // Strip a little more than asked so an escape cut in half does not show.
    let raw = process.output_tail(n + 64);
    let cleaned = env.cleaner().output(&raw, &process.command);
    last_chars(&cleaned, n).to_owned()
}

fn shown_command(env: &Environment, process: &BackgroundProcess) -> String {
    env.cleaner().command(&process.command)
}

fn list(call: &ProcessCall<'_>) -> ToolReply {
    let mut entries = Vec::new();
    for env in call.envs.all() {
        let own = env.task_id == call.task_id;
        for process in env.processes.all() {
            let same_session = !call.session_id.is_empty() && process.session_id == call.session_id;
            if !own && !same_session {
                continue;
            }
            let status = process.status();
            let command: String = shown_command(&env, &process).chars().take(200).collect();
            let mut entry = Reply::default()
                .with("session_id", process.id.clone())
                .with("command", command)
                .with("cwd", process.cwd.clone())
                .with("pid", process.pid)
                .with("started_at", iso_utc(process.started_at))
                .with("uptime_seconds", process.uptime().as_secs())
                .with("status", status_word(&process))
                .with("output_preview", clean_tail(&env, &process, 200));
            if !own {
                entry = entry.with("session_scoped", true);
            }
            if !status.watch_patterns.is_empty() {
                entry = entry
                    .with("watch_patterns", json!(status.watch_patterns))
                    .with("watch_hit", status.watch_hits > 0);
            }
            if status.notify_on_complete {
                entry = entry.with("notify_on_complete", true);
            }
            if status.exited {
                entry = entry.with("exit_code", status.exit_code);
            }
            entries.push((process.started_at, entry));
        }
    }
    entries.sort_by_key(|(at, _)| *at);
    #[derive(Serialize)]
    struct Listing {
        processes: Replies,
    }
    ToolReply::json(&Listing {
        processes: Replies(entries.into_iter().map(|(_, e)| e).collect()),
    })
}

fn poll(env: &Environment, process: &BackgroundProcess) -> ToolReply {
    let status = process.status();
    let mut reply = Reply::default()
        .with("session_id", process.id.clone())
        .with("command", shown_command(env, process))
        .with("status", status_word(process))
        .with("pid", process.pid)
        .with("uptime_seconds", process.uptime().as_secs())
        .with("output_preview", clean_tail(env, process, 1000));
    if status.exited {
        reply = reply
            .with("exit_code", status.exit_code)
            .with("completion_reason", status.completion_reason)
            .with("termination_source", status.termination_source);
    }
    reply.ok()
}

/// Splits like Python's `str.splitlines` does for `\n`, `\r\n` and `\r`.
fn split_lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                lines.push(&text[start..i]);
                start = i + 1;
            }
            b'\r' => {
                lines.push(&text[start..i]);
                if bytes.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if start < bytes.len() {
        lines.push(&text[start..]);
    }
    lines
}

/// Python's `seq[start:stop]` bounds for a sequence of `len` items.
fn python_slice(len: usize, start: i64, stop: i64) -> (usize, usize) {
    let len_i = i64::try_from(len).unwrap_or(i64::MAX);
    let norm = |v: i64| -> usize {
        let v = if v < 0 {
            (len_i + v).max(0)
        } else {
            v.min(len_i)
        };
        usize::try_from(v).unwrap_or(0)
    };
    let (a, b) = (norm(start), norm(stop));
    (a, b.max(a))
}

fn int_arg(args: &Map<String, Value>, name: &str) -> Option<i64> {
    let value = args.get(name)?;
    value.as_i64().or_else(|| value.as_f64().map(|f| f as i64))
}

fn log(env: &Environment, process: &BackgroundProcess, args: &Map<String, Value>) -> ToolReply {
    let offset = int_arg(args, "offset").unwrap_or(0);
    let limit = int_arg(args, "limit").unwrap_or(200);
    let full = env.cleaner().output(&process.output(), &process.command);
    let lines = split_lines(&full);
    let total = lines.len();
    let (from, to) = if offset == 0 && limit > 0 {
        python_slice(total, -limit, i64::MAX)
    } else {
        python_slice(total, offset, offset.saturating_add(limit))
    };
    let selected = &lines[from..to];
    let exited = !process.is_running();
    if exited && (total == 0 || (!selected.is_empty() && to == total)) {
        // The final output has been read: no exit notice needed.
        process.consume();
    }
    Reply::default()
        .with("session_id", process.id.clone())
        .with("command", shown_command(env, process))
        .with("status", if exited { "exited" } else { "running" })
        .with("output", selected.join("\n"))
        .with("total_lines", total)
        .with("showing", format!("{} lines", selected.len()))
        .ok()
}

async fn wait(
    env: &Environment,
    process: &Arc<BackgroundProcess>,
    args: &Map<String, Value>,
    max_wait: Duration,
    cancel: &CancellationToken,
) -> ToolReply {
    let max = max_wait.as_secs().max(1);
    let requested = int_arg(args, "timeout")
        .filter(|t| *t > 0)
        .and_then(|t| u64::try_from(t).ok());
    let (effective, clamp_note) = match requested {
        Some(asked) if asked > max => (
            max,
            Some(format!(
                "Requested wait of {asked}s was clamped to configured limit of {max}s"
            )),
        ),
        Some(asked) => (asked, None),
        None => (max, None),
    };
    let end = process
        .wait_exit(Duration::from_secs(effective), cancel)
        .await;
    let command = shown_command(env, process);
    match end {
        WaitEnd::Exited => {
            let status = process.status();
            Reply::default()
                .with("status", "exited")
                .with("command", command)
                .with("exit_code", status.exit_code)
                .with("completion_reason", status.completion_reason)
                .with("termination_source", status.termination_source)
                .with("output", clean_tail(env, process, 2000))
                .with_opt("timeout_note", clamp_note)
                .ok()
        }
        WaitEnd::Interrupted => Reply::default()
            .with("status", "interrupted")
            .with("command", command)
            .with("output", clean_tail(env, process, 1000))
            .with("note", "User sent a new message -- wait interrupted")
            .with_opt("timeout_note", clamp_note)
            .ok(),
        WaitEnd::TimedOut => Reply::default()
            .with("status", "timeout")
            .with("command", command)
            .with("output", clean_tail(env, process, 1000))
            .with(
                "timeout_note",
                clamp_note.unwrap_or_else(|| format!("Waited {effective}s, process still running")),
            )
            .ok(),
    }
}

async fn kill(env: &Environment, process: &Arc<BackgroundProcess>) -> ToolReply {
    let command = shown_command(env, process);
    if !process
        .kill(env.processes.sandbox(), "process.kill", true)
        .await
    {
        process.consume();
        let status = process.status();
        return Reply::default()
            .with("status", "already_exited")
            .with("command", command)
            .with("exit_code", status.exit_code)
            .with("completion_reason", status.completion_reason)
            .with("termination_source", status.termination_source)
            .with("output", clean_tail(env, process, 2000))
            .ok();
    }
    let status = process.status();
    Reply::default()
        .with("status", "killed")
        .with("session_id", process.id.clone())
        .with("completion_reason", status.completion_reason)
        .with("termination_source", status.termination_source)
        .with("output", clean_tail(env, process, 2000))
        .ok()
}

fn already_exited() -> ToolReply {
    Reply::default()
        .with("status", "already_exited")
        .with("error", "Process has already finished")
        .failed()
}

async fn write(process: &BackgroundProcess, data: &str) -> ToolReply {
    if !process.is_running() {
        return already_exited();
    }
    match process.write_stdin(data).await {
        Ok(written) => Reply::default()
            .with("status", "ok")
            .with("bytes_written", written)
            .ok(),
        Err(err) => Reply::default()
            .with("status", "error")
            .with("error", err)
            .failed(),
    }
}

async fn close(process: &BackgroundProcess) -> ToolReply {
    if !process.is_running() {
        return already_exited();
    }
    if process.close_stdin().await {
        Reply::default()
            .with("status", "ok")
            .with(
                "message",
                if process.pty {
                    "EOF sent"
                } else {
                    "stdin closed"
                },
            )
            .ok()
    } else {
        Reply::default()
            .with("status", "error")
            .with("error", "Process stdin not available (stdin closed)")
            .failed()
    }
}

/// `2026-03-01T12:00:05Z` (hermes prints local time without a zone; a
/// worker's local zone means nothing to a model elsewhere, so UTC it is).
fn iso_utc(at: SystemTime) -> String {
    let secs = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
#[path = "process_tests.rs"]
mod tests;
