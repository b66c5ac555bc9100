//! The `terminal` tool: hermes' schema and result shapes over the live shell
//! (foreground) and the process registry (background). See `README.md` for
//! the results a model sees.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use caduceus_common::result::{CallStatus, ToolReply, python_type, to_json};
use caduceus_guard::hints;

use super::ToolSettings;
use crate::env::Environment;
use crate::process::SpawnRequest;
use crate::shell::{ExecEnd, ExecRequest};

/// One `terminal` call.
pub struct TerminalCall<'a> {
    pub env: &'a Environment,
    pub args: &'a Map<String, Value>,
    pub cancel: &'a CancellationToken,
    pub session_id: &'a str,
    /// The coordinator's decision for a foreground command (it read the
    /// `timeout` argument, the default and the maximum).
    pub timeout: Option<Duration>,
}

/// `{"output":"","exit_code":-1,"error":…,"status":…}` — hermes' shape for a
/// command that did not run.
#[derive(Serialize)]
struct Refused<'a> {
    output: &'a str,
    exit_code: i32,
    error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a str>,
}

/// A command that did not run; `status` is hermes' word for it, which is
/// also how the call ended.
fn refused(error: impl Into<String>, status: CallStatus) -> ToolReply {
    let body = to_json(&Refused {
        output: "",
        exit_code: -1,
        error: error.into(),
        status: Some(status.as_str()),
    });
    ToolReply::new(status, body)
}

fn failed(error: impl Into<String>) -> ToolReply {
    ToolReply::failed_json(&Refused {
        output: "",
        exit_code: -1,
        error: error.into(),
        status: None,
    })
}

/// The result of a foreground command.
#[derive(Serialize)]
struct Finished<'a> {
    output: String,
    exit_code: i32,
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code_meaning: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    sudo_auth_failed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pty_note: Option<&'a str>,
    /// The shell had to be replaced (or its init files failed); what carried over.
    #[serde(skip_serializing_if = "Option::is_none")]
    shell_note: Option<String>,
}

/// The result of starting a background process.
#[derive(Serialize)]
struct Started<'a> {
    output: &'a str,
    session_id: &'a str,
    pid: u32,
    exit_code: i32,
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pty_note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<&'a str>,
    /// `false` when notifications were asked for but cannot be delivered.
    #[serde(rename = "notify_on_complete", skip_serializing_if = "Option::is_none")]
    notify_off: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    notify_unsupported: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    watch_patterns_ignored: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    notify_on_complete: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    watch_patterns: Option<&'a [String]>,
}

const SILENT_BACKGROUND_HINT: &str = "background=true without notify_on_complete=true means this process runs SILENTLY — you will not be told when it exits. If this is a bounded task (test suite, build, CI poller, deploy, anything with a defined end), you almost certainly wanted notify_on_complete=true so the system pings you on exit. Re-launch with notify_on_complete=true, or call process(action='poll') / process(action='wait') yourself to learn the outcome. Only ignore this hint for genuine long-lived processes that never exit (servers, watchers, daemons).";
const NOTIFY_UNSUPPORTED: &str = "notify_on_complete / watch_patterns are not available in this session — it cannot receive an async completion after the turn ends (a one-shot `caduceus call`, or any caller without a session). The process is running in the background; retrieve its result with process(action='poll') or process(action='wait').";
const WATCH_IGNORED: &str = "watch_patterns ignored because notify_on_complete=True; these two flags produce duplicate notifications when combined";
const PIPE_STDIN_PTY_NOTE: &str = "PTY disabled for this command because it expects piped stdin/EOF (for example gh auth login --with-token). For local background processes, call process(action='close') after writing so it receives EOF.";
const NO_PTY_NOTE: &str = "PTY requested but script(1) is not available in this sandbox; the process runs with plain pipes (write/submit/close still work).";
const FOREGROUND_PTY_NOTE: &str = "pty applies to background processes; this foreground command ran without a terminal (its stdin is empty). Use background=true with pty=true for interactive programs.";
const SUDO_WRONG_PASSWORD: &[&str] = &[
    "sudo: authentication failed",
    "sudo: incorrect password attempt",
    "sudo: maximum 3 incorrect authentication attempts",
    "sudo: 3 incorrect password attempts",
];

/// hermes' workdir rule: plain path characters only.
fn workdir_problem(workdir: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "/\\:_-.~ +@=,".contains(c);
    workdir.chars().find(|c| !allowed(*c)).map(|c| {
        format!("Blocked: workdir contains disallowed character {}. Use a simple filesystem path without shell metacharacters.", python_repr(c))
    })
}

fn python_repr(c: char) -> String {
    if c == '\'' {
        "\"'\"".to_owned()
    } else {
        format!("'{}'", c.escape_default())
    }
}

/// hermes: PTY breaks CLIs that wait for piped stdin and EOF.
fn requires_pipe_stdin(command: &str) -> bool {
    let normalized = command
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    normalized.starts_with("gh auth login") && normalized.contains("--with-token")
}

fn flag(args: &Map<String, Value>, name: &str) -> bool {
    args.get(name).and_then(Value::as_bool).unwrap_or(false)
}

pub async fn run(settings: &ToolSettings, call: TerminalCall<'_>) -> ToolReply {
    let args = call.args;
    let command = match args.get("command") {
        Some(Value::String(c)) => c.clone(),
        Some(other) => {
            return refused(
                format!(
                    "Invalid command: expected string, got {}",
                    python_type(other)
                ),
                CallStatus::Error,
            );
        }
        None => {
            return refused(
                "Invalid command: expected string, got NoneType",
                CallStatus::Error,
            );
        }
    };
    let background = flag(args, "background");
    if !background && let Some(guidance) = hints::long_lived_foreground(&command) {
        return refused(guidance, CallStatus::Error);
    }
    let workdir = args
        .get("workdir")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|w| !w.is_empty());
    if let Some(dir) = workdir
        && let Some(problem) = workdir_problem(dir)
    {
        return refused(problem, CallStatus::Blocked);
    }
    let mut pty = flag(args, "pty");
    let mut pty_note = None;
    if pty && requires_pipe_stdin(&command) {
        pty = false;
        pty_note = Some(PIPE_STDIN_PTY_NOTE);
    }

    if background {
        return start_background(
            call.env,
            args,
            call.session_id,
            command,
            workdir,
            pty,
            pty_note,
        )
        .await;
    }
    if pty {
        pty_note = Some(FOREGROUND_PTY_NOTE);
    }
    let Some(timeout) = call.timeout else {
        return failed(
            "Command execution failed: the coordinator sent no timeout for this command",
        );
    };
    run_foreground(settings, call, &command, workdir, timeout, pty_note).await
}

async fn run_foreground(
    settings: &ToolSettings,
    call: TerminalCall<'_>,
    command: &str,
    workdir: Option<&str>,
    timeout: Duration,
    pty_note: Option<&str>,
) -> ToolReply {
    let request = ExecRequest {
        command,
        timeout,
        workdir,
        max_output_chars: settings.max_output_chars,
        cancel: Some(call.cancel),
    };
    let outcome = match call.env.shell.exec(request).await {
        Ok(outcome) => outcome,
        Err(err) => return failed(format!("Command execution failed: {err}")),
    };
    if outcome.end == ExecEnd::TimedOut {
        tracing::debug!(task = %call.env.task_id, ?timeout, "foreground command timed out");
    }
    // hermes strips ANSI and redacts after the cut, on the trimmed text.
    let text = call
        .env
        .cleaner()
        .output(outcome.output_with_status.trim(), command);
    let lowered = text.to_lowercase();
    let sudo_auth_failed = SUDO_WRONG_PASSWORD
        .iter()
        .any(|marker| lowered.contains(marker));
    // A command that timed out or lost its shell while the sandbox's
    // service was not answering: the service is the news, not the command.
    let unreachable = (outcome.end != ExecEnd::Completed || outcome.shell_replaced.is_some())
        .then(|| call.env.sandbox.unreachable())
        .flatten();
    ToolReply::json(&Finished {
        exit_code_meaning: hints::exit_code_meaning(command, outcome.exit_code),
        output: text,
        exit_code: outcome.exit_code,
        error: unreachable.as_deref(),
        sudo_auth_failed,
        pty_note,
        shell_note: outcome.shell_replaced,
    })
}

async fn start_background(
    env: &Environment,
    args: &Map<String, Value>,
    session_id: &str,
    command: String,
    workdir: Option<&str>,
    pty: bool,
    pty_note: Option<&str>,
) -> ToolReply {
    let mut notify_on_complete = flag(args, "notify_on_complete");
    let mut watch_patterns: Vec<String> = match args.get("watch_patterns") {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect(),
        Some(Value::String(one)) if !one.is_empty() => vec![one.clone()],
        _ => Vec::new(),
    };
    // hermes: decided on the flags as asked.
    let hint = (!notify_on_complete && watch_patterns.is_empty()).then_some(SILENT_BACKGROUND_HINT);
    // Notices go to the session that started the process; without one nobody
    // would get them (hermes refuses the promise for stateless sessions too).
    let mut notify_unsupported = None;
    if session_id.is_empty() && (notify_on_complete || !watch_patterns.is_empty()) {
        notify_on_complete = false;
        watch_patterns.clear();
        notify_unsupported = Some(NOTIFY_UNSUPPORTED);
    }
    let mut watch_ignored = None;
    if notify_on_complete && !watch_patterns.is_empty() {
        watch_patterns.clear();
        watch_ignored = Some(WATCH_IGNORED);
    }
    let state = env.shell.state_for_background().await;
    let cwd = match workdir {
        Some(dir) => resolve_workdir(dir, &state.cwd, &env.sandbox.home_dir()),
        None => state.cwd.clone(),
    };
    let request = SpawnRequest {
        command: without_trailing_ampersand(&command).to_owned(),
        cwd,
        snapshot: state.snapshot,
        env: env.base_env.clone(),
        session_id: session_id.to_owned(),
        pty,
        notify_on_complete,
        watch_patterns: watch_patterns.clone(),
    };
    match env.processes.spawn(request).await {
        Ok(started) => {
            let pty_note = match (pty_note, started.pty_unavailable) {
                (Some(note), _) => Some(note.to_owned()),
                (None, true) => Some(NO_PTY_NOTE.to_owned()),
                (None, false) => None,
            };
            ToolReply::json(&Started {
                output: "Background process started",
                session_id: &started.process.id,
                pid: started.process.pid,
                exit_code: 0,
                error: None,
                pty_note,
                hint,
                notify_off: notify_unsupported.map(|_| false),
                notify_unsupported,
                watch_patterns_ignored: watch_ignored,
                notify_on_complete: notify_on_complete.then_some(true),
                watch_patterns: (!watch_patterns.is_empty()).then_some(watch_patterns.as_slice()),
            })
        }
        Err(err) => failed(format!("Failed to start background process: {err}")),
    }
}

/// `cmd &` as a background command: the `&` would end the tracked process at
/// once (and with it, everything it started), so it is dropped —
/// background=true already runs the command in the background.
fn without_trailing_ampersand(command: &str) -> &str {
    let trimmed = command.trim_end();
    match trimmed.strip_suffix('&') {
        Some(rest)
            if !rest.ends_with('&')
                && !rest.ends_with('\\')
                && !rest.ends_with('>')
                && !rest.ends_with('|') =>
        {
            rest.trim_end()
        }
        _ => command,
    }
}

/// A relative workdir is relative to the shell's cwd; `~` is the sandbox's home.
fn resolve_workdir(dir: &str, shell_cwd: &str, home: &str) -> String {
    let home = home.trim_end_matches('/');
    if dir == "~" {
        return if home.is_empty() {
            "/".to_owned()
        } else {
            home.to_owned()
        };
    }
    if let Some(rest) = dir.strip_prefix("~/") {
        return format!("{home}/{rest}");
    }
    if dir.starts_with('/') {
        dir.to_owned()
    } else {
        format!("{}/{dir}", shell_cwd.trim_end_matches('/'))
    }
}

#[cfg(test)]
#[path = "terminal_tests.rs"]
mod tests;
