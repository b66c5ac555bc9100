//! The `terminal` tool: hermes' schema and result shape over the live shell.

use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use caduceus_common::redact::{RedactMode, redact};
use caduceus_common::text::strip_ansi;

use super::{OutputSink, ToolSettings};
use crate::env::Environment;
use crate::shell::{ExecEnd, ExecRequest};

/// `{"output":"","exit_code":-1,"error":…,"status":…}` — hermes' shape for a
/// command that did not run.
fn refused(error: impl Into<String>, status: &str) -> String {
    json!({"output": "", "exit_code": -1, "error": error.into(), "status": status}).to_string()
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() || n.is_u64() => "int",
        Value::Number(_) => "float",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

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

pub async fn run(
    settings: &ToolSettings,
    env: &Environment,
    args: &Map<String, Value>,
    cancel: &CancellationToken,
    mut output: Option<OutputSink>,
) -> String {
    let command = match args.get("command") {
        Some(Value::String(c)) => c.clone(),
        Some(other) => {
            return refused(
                format!("Invalid command: expected string, got {}", type_name(other)),
                "error",
            );
        }
        None => return refused("Invalid command: expected string, got NoneType", "error"),
    };
    let background = args
        .get("background")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if background {
        return refused(
            "background processes are not available on this worker yet",
            "error",
        );
    }
    // hermes: a missing or zero timeout means the default.
    let timeout = args
        .get("timeout")
        .and_then(Value::as_u64)
        .filter(|t| *t > 0)
        .unwrap_or(settings.terminal_timeout_secs);
    if timeout > settings.max_foreground_timeout_secs {
        return json!({
            "error": format!(
                "Foreground timeout {timeout}s exceeds the maximum of {}s. Use background=true with notify_on_complete=true for long-running commands.",
                settings.max_foreground_timeout_secs
            )
        })
        .to_string();
    }
    let workdir = args
        .get("workdir")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|w| !w.is_empty());
    if let Some(dir) = workdir
        && let Some(problem) = workdir_problem(dir)
    {
        return refused(problem, "blocked");
    }

    let mut forward = |chunk: &[u8]| {
        if let Some(sink) = output.as_mut() {
            sink(chunk);
        }
    };
    let request = ExecRequest {
        command: &command,
        timeout: Duration::from_secs(timeout),
        workdir,
        max_output_chars: settings.max_output_chars,
        on_output: Some(&mut forward),
        cancel: Some(cancel),
    };
    let outcome = match env.shell.exec(request).await {
        Ok(outcome) => outcome,
        Err(err) => {
            return json!({"output": "", "exit_code": -1, "error": format!("Command execution failed: {err}")}).to_string();
        }
    };

    let mut text = outcome.output;
    match outcome.end {
        ExecEnd::TimedOut => text.push_str(&format!("\n[Command timed out after {timeout}s]")),
        ExecEnd::Cancelled => text.push_str("\n[Command interrupted]"),
        _ => {}
    }
    let text = strip_ansi(&text).into_owned();
    let text = redact(
        text.trim(),
        RedactMode::TerminalOutput {
            command: Some(&command),
        },
    )
    .into_owned();
    let mut result = json!({"output": text, "exit_code": outcome.exit_code, "error": Value::Null});
    if let Some(note) = outcome.shell_replaced {
        result["shell_note"] = Value::String(note);
    }
    result.to_string()
}
