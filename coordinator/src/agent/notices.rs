//! Environment notices (a background process finished, matched a watch
//! pattern, the environment was reset) turned into the message the model
//! reads when the notice is injected as a new turn (hermes
//! `format_process_notification`).
//!
//! The notice's `text` is a JSON body; the fields read are `command`,
//! `exit_code`, `output`, `completion_reason`, `termination_source`,
//! `pattern`, `suppressed` and `message`. A body that is not JSON is shown as
//! is.

use caduceus_proto::EnvironmentNotice;
use serde_json::{Map, Value};

/// The user message for a notice.
pub fn notice_message(notice: &EnvironmentNotice) -> String {
    let body: Map<String, Value> = match serde_json::from_str::<Value>(&notice.text) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let field = |key: &str| -> String {
        match body.get(key) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        }
    };
    let process = if notice.process_id.is_empty() {
        "unknown".to_owned()
    } else {
        notice.process_id.clone()
    };
    let command = Some(field("command"))
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    match notice.kind.as_str() {
        "watch_match" => {
            let pattern = Some(field("pattern"))
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "?".to_owned());
            let mut text = format!(
                "[IMPORTANT: Background process {process} matched watch pattern \"{pattern}\".\nCommand: {command}\nMatched output:\n{}",
                field("output")
            );
            let suppressed = body.get("suppressed").and_then(Value::as_u64).unwrap_or(0);
            if suppressed > 0 {
                text.push_str(&format!(
                    "\n({suppressed} earlier matches were suppressed by rate limit)"
                ));
            }
            text.push(']');
            text
        }
        "watch_disabled" => format!("[IMPORTANT: {}]", field("message")),
        "environment_reset" => {
            let reason = Some(field("message"))
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| notice.text.clone());
            format!(
                "[IMPORTANT: The environment of task {} was reset ({reason}). Files, the working directory, variables and background processes from earlier calls are gone.]",
                notice.task_id
            )
        }
        _ if body.is_empty() && !notice.text.trim().is_empty() => {
            format!(
                "[IMPORTANT: Background process {process}: {}]",
                notice.text.trim()
            )
        }
        _ => {
            let exit = Some(field("exit_code"))
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| "?".to_owned());
            let reason = Some(field("completion_reason"))
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| "exited".to_owned());
            let source = field("termination_source");
            let signal = if matches!(exit.as_str(), "-15" | "143") {
                ", SIGTERM"
            } else {
                ""
            };
            let status = match reason.as_str() {
                "killed" => format!(
                    "terminated by {}",
                    if source.is_empty() {
                        "caduceus"
                    } else {
                        &source
                    }
                ),
                "lost" => "marked lost because the process backend disappeared".to_owned(),
                "failed_start" => "failed to start".to_owned(),
                _ if exit == "0" => "completed normally".to_owned(),
                _ => "exited".to_owned(),
            };
            format!(
                "[IMPORTANT: Background process {process} {status} (exit code {exit}{signal}).\nCommand: {command}\nOutput:\n{}]",
                field("output")
            )
        }
    }
}

#[cfg(test)]
#[path = "notices_tests.rs"]
mod tests;
