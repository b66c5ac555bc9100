//! Notices about background processes, sent to the session that started the
//! process: `process_exited` (notify_on_complete), `watch_match`,
//! `watch_disabled` and `watch_overflow`. The body (`EnvironmentNotice.text`)
//! is a JSON object shaped like hermes' completion-queue events, with
//! `message` holding the text hermes injects into the conversation
//! (`format_process_notification`).

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use caduceus_proto::EnvironmentNotice;

use super::watch::{
    GLOBAL_COOLDOWN, GLOBAL_MAX_PER_WINDOW, GLOBAL_WINDOW, GlobalBreaker, WATCH_MIN_INTERVAL,
    WATCH_STRIKE_LIMIT,
};

/// Notices waiting for the link to the coordinator (they survive a
/// reconnect); beyond this many the oldest undelivered are dropped.
pub const NOTICE_QUEUE: usize = 4096;

pub const KIND_EXITED: &str = "process_exited";
pub const KIND_WATCH_MATCH: &str = "watch_match";
pub const KIND_WATCH_DISABLED: &str = "watch_disabled";
pub const KIND_WATCH_OVERFLOW: &str = "watch_overflow";

/// Where notices go: the worker's queue to its coordinator, and the
/// worker-wide watch breaker.
pub struct NoticeHub {
    tx: mpsc::Sender<EnvironmentNotice>,
    pub breaker: GlobalBreaker,
}

impl std::fmt::Debug for NoticeHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NoticeHub").finish_non_exhaustive()
    }
}

impl NoticeHub {
    pub fn new() -> (Arc<Self>, mpsc::Receiver<EnvironmentNotice>) {
        let (tx, rx) = mpsc::channel(NOTICE_QUEUE);
        (
            Arc::new(NoticeHub {
                tx,
                breaker: GlobalBreaker::default(),
            }),
            rx,
        )
    }

    pub fn send(&self, notice: EnvironmentNotice) {
        match self.tx.try_send(notice) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                tracing::warn!(
                    "a background-process notice was dropped: {NOTICE_QUEUE} are waiting for the coordinator"
                );
            }
            // Nobody delivers notices (an embedder without a link).
            Err(mpsc::error::TrySendError::Closed(_)) => {
                tracing::debug!("a background-process notice has nowhere to go")
            }
        }
    }
}

/// Who a notice is about.
#[derive(Debug, Clone)]
pub struct Origin<'a> {
    pub task_id: &'a str,
    pub session_id: &'a str,
    pub process_id: &'a str,
    /// Already redacted.
    pub command: &'a str,
}

fn notice(origin: &Origin<'_>, kind: &str, body: &Value) -> EnvironmentNotice {
    EnvironmentNotice {
        task_id: origin.task_id.to_owned(),
        kind: kind.to_owned(),
        process_id: origin.process_id.to_owned(),
        text: body.to_string(),
        session_id: origin.session_id.to_owned(),
    }
}

/// How a process ended, for the exit notice.
#[derive(Debug, Clone)]
pub struct Completion<'a> {
    pub exit_code: Option<i32>,
    pub completion_reason: &'a str,
    pub termination_source: &'a str,
    /// Last 2,000 characters, stripped and redacted.
    pub output: &'a str,
    /// Unix time the process started.
    pub started_at: f64,
}

pub fn exited(origin: &Origin<'_>, c: &Completion<'_>) -> EnvironmentNotice {
    let exit = c
        .exit_code
        .map(|code| code.to_string())
        .unwrap_or_else(|| "?".to_owned());
    let signal = if matches!(c.exit_code, Some(-15 | 143)) {
        ", SIGTERM"
    } else {
        ""
    };
    let status = match c.completion_reason {
        "killed" => format!(
            "terminated by {}",
            if c.termination_source.is_empty() {
                "caduceus"
            } else {
                c.termination_source
            }
        ),
        "lost" => "marked lost because the process backend disappeared".to_owned(),
        "failed_start" => "failed to start".to_owned(),
        _ if c.exit_code == Some(0) => "completed normally".to_owned(),
        _ => "exited".to_owned(),
    };
    let message = format!(
        "[IMPORTANT: Background process {} {status} (exit code {exit}{signal}).\nCommand: {}\nOutput:\n{}]",
        origin.process_id, origin.command, c.output
    );
    notice(
        origin,
        KIND_EXITED,
        &json!({
            "type": "completion",
            "session_id": origin.process_id,
            "command": origin.command,
            "exit_code": c.exit_code,
            "completion_reason": c.completion_reason,
            "termination_source": c.termination_source,
            "output": c.output,
            "started_at": c.started_at,
            "message": message,
        }),
    )
}

pub fn watch_match(
    origin: &Origin<'_>,
    pattern: &str,
    output: &str,
    suppressed: u64,
) -> EnvironmentNotice {
    let mut message = format!(
        "[IMPORTANT: Background process {} matched watch pattern \"{pattern}\".\nCommand: {}\nMatched output:\n{output}",
        origin.process_id, origin.command
    );
    if suppressed > 0 {
        message.push_str(&format!(
            "\n({suppressed} earlier matches were suppressed by rate limit)"
        ));
    }
    message.push(']');
    notice(
        origin,
        KIND_WATCH_MATCH,
        &json!({
            "type": "watch_match",
            "session_id": origin.process_id,
            "command": origin.command,
            "pattern": pattern,
            "output": output,
            "suppressed": suppressed,
            "message": message,
        }),
    )
}

pub fn watch_disabled(origin: &Origin<'_>, suppressed: u64) -> EnvironmentNotice {
    let text = format!(
        "Watch patterns disabled for process {} — {WATCH_STRIKE_LIMIT} consecutive rate-limit windows triggered (min spacing {}s). Falling back to notify_on_complete semantics; you'll get exactly one notification when the process exits.",
        origin.process_id,
        WATCH_MIN_INTERVAL.as_secs()
    );
    notice(
        origin,
        KIND_WATCH_DISABLED,
        &json!({
            "type": "watch_disabled",
            "session_id": origin.process_id,
            "command": origin.command,
            "suppressed": suppressed,
            "message": format!("[IMPORTANT: {text}]"),
        }),
    )
}

pub fn overflow_tripped(origin: &Origin<'_>) -> EnvironmentNotice {
    let text = format!(
        "Watch-pattern overflow: >{GLOBAL_MAX_PER_WINDOW} notifications in {}s across all processes. Suppressing further watch_match events for {}s.",
        GLOBAL_WINDOW.as_secs(),
        GLOBAL_COOLDOWN.as_secs()
    );
    notice(
        origin,
        KIND_WATCH_OVERFLOW,
        &json!({"type": "watch_overflow_tripped", "message": format!("[IMPORTANT: {text}]")}),
    )
}

pub fn overflow_released(origin: &Origin<'_>, suppressed: u64) -> EnvironmentNotice {
    let text = format!(
        "Watch-pattern notifications resumed. {suppressed} match event(s) were suppressed during the flood."
    );
    notice(
        origin,
        KIND_WATCH_OVERFLOW,
        &json!({"type": "watch_overflow_released", "suppressed": suppressed, "message": format!("[IMPORTANT: {text}]")}),
    )
}
