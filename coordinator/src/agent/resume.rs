//! Resuming a session after a coordinator restart, from what the store holds
//! (`store.rs`): the transcript, the write-ahead call records, the children.
//!
//! The transcript says where the conversation stopped:
//! - after a user or tool message: the next step is a model request;
//! - after an assistant message with tool calls that were not all answered:
//!   the turn is finished first. Each of its calls is, by its record,
//!   - `done`: its recorded result is the answer (nothing runs again);
//!   - `pending` (dispatched, no result): the model is told, once, that the
//!     outcome is unknown ([`UNKNOWN_OUTCOME`]) — the call never runs again
//!     silently; a pending `delegate_task` instead runs again and adopts the
//!     children it had started (they are durable too), so they resume and
//!     report to it;
//!   - no record: it was never dispatched, and runs now;
//! - after a final answer: the session ends with it.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use caduceus_common::result::tool_error;
use caduceus_llm::{ChatMessage, Role as MessageRole, ToolCall};

use super::delegate::{Role, Tokens, TraceEntry};
use super::session::{EndStatus, SessionOutcome, SessionSpec};
use super::store::{self, StoreError, StoredSession};
use crate::call::CallStatus;
use crate::call::ToolFilter;

/// What the model reads for a call that was running when the coordinator
/// died: its effect may or may not have happened.
pub(crate) const UNKNOWN_OUTCOME: &str = "The coordinator restarted while this call was running; its outcome is unknown. Check before repeating it.";

/// How long a resumed session waits for the worker that held its environment
/// (or, without a recorded placement, for any worker) before it carries on.
pub(crate) const WORKER_WAIT: Duration = Duration::from_secs(60);

/// `{"error": "The coordinator restarted …"}`.
pub(crate) fn unknown_outcome() -> String {
    tool_error(UNKNOWN_OUTCOME)
}

/// A call of the interrupted turn, as its record says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Recovered {
    /// Its result was recorded before the restart.
    Done {
        result: String,
        /// As the pipeline decided it when the call ended (recorded, never
        /// read back out of the result).
        status: CallStatus,
        worker: Option<String>,
    },
    /// Dispatched, no result recorded.
    Unknown,
    /// A `delegate_task` whose children are adopted when it runs again.
    Adopt,
}

impl Recovered {
    pub fn status(&self) -> CallStatus {
        match self {
            Recovered::Done { status, .. } => *status,
            _ => CallStatus::Error,
        }
    }
}

/// Where a resumed conversation carries on.
#[derive(Debug)]
pub(crate) enum Next {
    /// Ask the model.
    Request,
    /// Finish the interrupted turn (the last message asked for `calls`).
    Calls {
        calls: Vec<ToolCall>,
        recovered: HashMap<String, Recovered>,
    },
    /// The final answer was given (`max_iterations`: it was the summary).
    Finished { text: String, max_iterations: bool },
}

/// A session's state rebuilt from the store.
#[derive(Debug)]
pub(crate) struct Restored {
    pub messages: Vec<ChatMessage>,
    pub next: Next,
    /// Model requests made before the restart.
    pub api_calls: u32,
    pub tokens: Tokens,
    pub trace: Vec<TraceEntry>,
    pub workers: BTreeSet<String>,
}

/// Rebuilds `session` from the store at `db`.
pub(crate) fn restore(db: &Path, session: &StoredSession) -> Result<Restored, StoreError> {
    let mut messages: Vec<ChatMessage> = store::read_transcript(db, &session.id)?
        .into_iter()
        .filter_map(|m| serde_json::from_value(m.message).ok())
        .collect();
    let calls = store::read_calls(db, &session.id)?;
    let api_calls = u32::try_from(
        messages
            .iter()
            .filter(|m| m.role == MessageRole::Assistant)
            .count(),
    )
    .unwrap_or(u32::MAX);
    let mut trace = Vec::new();
    let mut workers = BTreeSet::new();
    for call in calls.iter().filter(|c| c.state == "done") {
        let result = call.result.as_deref().unwrap_or_default();
        trace.push(TraceEntry {
            tool: call.tool.clone(),
            args_bytes: call.arguments.len(),
            result_bytes: Some(result.len()),
            status: Some(if recorded_status(call) == CallStatus::Ok {
                "ok"
            } else {
                "error"
            }),
        });
        workers.extend(call.worker.clone());
    }

    let last_assistant = messages
        .iter()
        .rposition(|m| m.role == MessageRole::Assistant);
    let next = match last_assistant {
        Some(turn) if !messages[turn].tool_calls.is_empty() => {
            let asked = messages[turn].tool_calls.clone();
            let answered = messages[turn + 1..]
                .iter()
                .filter(|m| m.role == MessageRole::Tool)
                .count();
            if answered >= asked.len() {
                Next::Request
            } else {
                // The turn's answers are appended together; drop a partial set
                // and answer the whole turn again from the records.
                messages.truncate(turn + 1);
                let recovered = asked
                    .iter()
                    .filter_map(|call| {
                        let record = calls
                            .iter()
                            .find(|c| c.turn == turn && c.call_id == call.id)?;
                        Some((call.id.clone(), recovered_of(record)))
                    })
                    .collect();
                Next::Calls {
                    calls: asked,
                    recovered,
                }
            }
        }
        Some(turn) if turn + 1 == messages.len() => {
            let summary = turn > 0
                && messages[turn - 1].role == MessageRole::User
                && messages[turn - 1].text() == super::messages::SUMMARY_REQUEST;
            Next::Finished {
                text: messages[turn].text().into_owned(),
                max_iterations: summary,
            }
        }
        _ => Next::Request,
    };
    Ok(Restored {
        messages,
        next,
        api_calls,
        tokens: Tokens {
            input: session.input_tokens,
            output: session.output_tokens,
        },
        trace,
        workers,
    })
}

fn recovered_of(record: &store::StoredCall) -> Recovered {
    match (record.state.as_str(), record.tool.as_str()) {
        ("done", _) => Recovered::Done {
            result: record.result.clone().unwrap_or_default(),
            status: recorded_status(record),
            worker: record.worker.clone(),
        },
        (_, "delegate_task") => Recovered::Adopt,
        _ => Recovered::Unknown,
    }
}

/// The spec of a stored session; `cancel` is a root's own token or a child
/// token of its parent's.
pub(crate) fn spec_of(session: &StoredSession, cancel: CancellationToken) -> SessionSpec {
    let spec = &session.spec;
    SessionSpec {
        session_id: session.id.clone(),
        parent_id: session.parent_id.clone(),
        root_id: session.root_id.clone(),
        depth: session.depth,
        task_id: session.task_id.clone(),
        release_task: spec.release_task,
        prompt: session.prompt.clone(),
        // The system prompt is the transcript's first message.
        system_prompt: None,
        filter: ToolFilter {
            enabled_toolsets: spec.enabled_toolsets.clone(),
            disabled_toolsets: spec.disabled_toolsets.clone(),
            blocked_tools: spec.blocked_tools.clone(),
        },
        // The starter's token name is not stored: a resumed session's calls
        // are logged without one.
        caller: None,
        max_iterations: spec.max_iterations.max(1),
        model_label: session.model.clone(),
        role: spec
            .role
            .as_ref()
            .map(|r| Role::parse(Some(&Value::String(r.clone())))),
        interactive: spec.interactive,
        cancel,
        task_index: session.task_index,
        parent_call_id: session.parent_call_id.clone(),
        output_schema: spec.output_schema.clone(),
        workdir: spec.workdir.clone(),
    }
}

/// The outcome of a child that ended before the restart, for its parent.
pub(crate) fn outcome_of(db: &Path, session: &StoredSession) -> SessionOutcome {
    let restored = restore(db, session).ok();
    let (trace, workers) = restored.map(|r| (r.trace, r.workers)).unwrap_or_default();
    SessionOutcome {
        status: EndStatus::parse(&session.state),
        final_text: session.final_response.clone(),
        error: session.error.clone(),
        api_calls: session.api_calls,
        duration: Duration::from_secs_f64(
            (session.ended_at.unwrap_or(session.started_at) - session.started_at).max(0.0),
        ),
        tokens: Tokens {
            input: session.input_tokens,
            output: session.output_tokens,
        },
        tool_trace: trace,
        workers,
        missed_steer: Vec::new(),
        // Not stored: the parent reads the stored final text as it is.
        schema: None,
        killed_processes: Vec::new(),
    }
}

#[cfg(test)]
#[path = "resume_tests.rs"]
mod tests;

/// The status recorded with a finished call (`ok`, `error`, …); a record
/// without one counts as an error.
fn recorded_status(record: &store::StoredCall) -> CallStatus {
    record
        .status
        .as_deref()
        .and_then(|s| serde_json::from_value(Value::String(s.to_owned())).ok())
        .unwrap_or(CallStatus::Error)
}
