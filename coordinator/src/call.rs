//! The types every stage of a call shares — dispatch, the gate, the registry,
//! the agent loop — in a leaf module, so those stages do not import each
//! other: who is calling ([`CallContext`], [`ToolFilter`]), how a call ended
//! ([`CallStatus`], decided where it is known), and the finished call
//! ([`ToolResult`]) with the one function that renders what the model reads
//! ([`ToolResult::render`]).

use std::time::Duration;

use serde_json::{Map, Value};

use caduceus_common::result::to_json;
pub use caduceus_common::result::{CallStatus, ToolReply};

/// Which tools a caller wants: hermes' enabled/disabled toolsets.
#[derive(Debug, Clone, Default)]
pub struct ToolFilter {
    /// Empty means every toolset.
    pub enabled_toolsets: Vec<String>,
    pub disabled_toolsets: Vec<String>,
    /// Tools removed on top of the toolsets (a delegated child's blocked tools).
    pub blocked_tools: Vec<String>,
}

impl ToolFilter {
    /// No toolset selection and nothing blocked: every tool.
    pub fn is_unrestricted(&self) -> bool {
        self.enabled_toolsets.is_empty()
            && self.disabled_toolsets.is_empty()
            && self.blocked_tools.is_empty()
    }
}

/// Who is calling and on behalf of which task.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// The environment key: all worker tools of a task run in one environment.
    pub task_id: String,
    pub session_id: Option<String>,
    pub tool_call_id: Option<String>,
    /// The name of the client token the call came with (`shared` for the
    /// shared token), for the audit log.
    pub caller: Option<String>,
    /// True when the agent loop makes the call (it handles agent-loop tools itself).
    pub from_agent_loop: bool,
    /// The tools this caller may use (a session's toolsets, a child's blocked tools).
    pub filter: ToolFilter,
    /// The caller's trace context (a client's `traceparent`); dispatch starts
    /// a new trace when there is none, and puts the call's own here.
    pub trace: Option<caduceus_proto::trace::TraceParent>,
}

/// A finished call: each part is set where it is known (the tool's reply on
/// the worker or in the coordinator, the worker's name and reset notice by
/// the scheduler, the approval note by the gate, the timing by dispatch) and
/// carried as a value to where it is used. [`render`](Self::render) is the
/// only place that turns it into the text the model reads.
#[derive(Debug, Clone)]
pub struct ToolResult {
    /// The tool that ran (after name repair), or the name as given.
    pub tool: String,
    pub status: CallStatus,
    /// The tool's document (hermes' spelling), or a persisted-output preview.
    pub body: String,
    /// Worker that ran the call, for worker tools.
    pub worker: Option<String>,
    /// The task's environment was recreated for this call: what the model is
    /// told about it (`environment_reset`).
    pub environment_reset: Option<String>,
    /// The call ran after its command was approved (`approval`).
    pub approval: Option<String>,
    /// Wall time from the call's arrival to its result.
    pub duration: Duration,
    /// Arguments after coercion (for traces), when they parsed.
    pub arguments: Option<Map<String, Value>>,
    /// The call's trace context (its trace id is in both sides' logs).
    pub trace: Option<caduceus_proto::trace::TraceParent>,
    /// Which stage refused the call, when one did (`plugin_block`: a
    /// `pre_tool_call` hook; `guard_block`: the command guard;
    /// `edit_denied`: an edit approval). See [`error_type`](Self::error_type).
    pub refused_by: Option<&'static str>,
}

impl ToolResult {
    /// A result with nothing but the tool's reply.
    pub fn new(tool: String, reply: ToolReply) -> Self {
        ToolResult {
            tool,
            status: reply.status,
            body: reply.body,
            worker: None,
            environment_reset: None,
            approval: None,
            duration: Duration::ZERO,
            arguments: None,
            trace: None,
            refused_by: None,
        }
    }

    /// hermes' `error_type` of a finished call, as `post_tool_call` hooks
    /// receive it: `None` when it succeeded, the refusing stage when one
    /// refused it (`plugin_block` for a hook, as hermes), else its status
    /// (`tool_error`, `timeout`, `cancelled`, `pending_approval`).
    pub fn error_type(&self) -> Option<&'static str> {
        if let Some(stage) = self.refused_by {
            return Some(stage);
        }
        match self.status {
            CallStatus::Ok => None,
            CallStatus::Error => Some("tool_error"),
            CallStatus::Blocked => Some("blocked"),
            CallStatus::PendingApproval => Some("pending_approval"),
            CallStatus::Cancelled => Some("cancelled"),
            CallStatus::Timeout => Some("timeout"),
        }
    }

    /// The text the model reads: the tool's document with the notices as
    /// extra fields in hermes' spelling (`, "approval": "…"` and
    /// `, "environment_reset": "…"` before the closing brace), or, for a
    /// body that is not a JSON object (a persisted-output preview), the
    /// notices as leading `[…]` lines.
    pub fn render(&self) -> String {
        let notices: Vec<(&str, &str)> = [
            ("approval", self.approval.as_deref()),
            ("environment_reset", self.environment_reset.as_deref()),
        ]
        .into_iter()
        .filter_map(|(key, value)| value.map(|v| (key, v)))
        .collect();
        if notices.is_empty() {
            return self.body.clone();
        }
        let body = self.body.trim_end();
        let is_object = body.trim_start().starts_with('{') && body.ends_with('}');
        if !is_object {
            let mut out = String::new();
            for (_, notice) in &notices {
                out.push('[');
                out.push_str(notice);
                out.push_str("]\n");
            }
            out.push_str(&self.body);
            return out;
        }
        let inner = body[..body.len() - 1].trim_end();
        let mut out = String::with_capacity(self.body.len() + 256);
        out.push_str(inner);
        let mut empty = inner.ends_with('{');
        for (key, notice) in notices {
            if !empty {
                out.push_str(", ");
            }
            empty = false;
            out.push_str(&to_json(key));
            out.push_str(": ");
            out.push_str(&to_json(notice));
        }
        out.push('}');
        out
    }
}

#[cfg(test)]
#[path = "call_tests.rs"]
mod tests;
