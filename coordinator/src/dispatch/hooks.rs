//! Hooks around every tool call and session (hermes' `pre_tool_call`,
//! `post_tool_call`, `on_session_start`, `on_session_end`, `subagent_start`,
//! `subagent_stop`). Shell hooks from the configuration and plugin hooks
//! (`caduceus-plugins`) implement [`ToolHook`]; the coordinator is handed
//! them at start as a [`HookSet`].

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::call::{CallContext, ToolResult};

/// What a pre-call hook decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookDecision {
    Continue,
    /// The call does not run; the model reads `{"error": message}`.
    Block {
        message: String,
    },
}

/// The call as the hook sees it, after parsing, name repair and coercion.
pub struct PreToolCall<'a> {
    pub tool: &'a str,
    pub args: &'a Map<String, Value>,
    pub ctx: &'a CallContext,
}

/// The finished call: its tool, arguments, status, timing and document.
pub struct PostToolCall<'a> {
    pub result: &'a ToolResult,
    pub ctx: &'a CallContext,
}

/// Which moment of a session's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEventKind {
    /// A top-level session starts (`on_session_start`).
    Start,
    /// A top-level session ended, however it ended (`on_session_end`).
    End,
    /// A delegated child starts (`subagent_start`).
    SubagentStart,
    /// A delegated child ended (`subagent_stop`).
    SubagentStop,
}

impl SessionEventKind {
    /// hermes' hook name.
    pub fn hook_name(self) -> &'static str {
        match self {
            SessionEventKind::Start => "on_session_start",
            SessionEventKind::End => "on_session_end",
            SessionEventKind::SubagentStart => "subagent_start",
            SessionEventKind::SubagentStop => "subagent_stop",
        }
    }
}

/// One session event, with hermes' event-specific keys in `data`
/// (`model`, `platform`; at the end `completed`, `interrupted`, `status`;
/// for a child `child_session_id`, `child_status`, `duration_ms`, …).
#[derive(Debug, Clone)]
pub struct SessionEvent<'a> {
    pub kind: SessionEventKind,
    pub session_id: &'a str,
    /// The parent of a delegated child.
    pub parent_session_id: Option<&'a str>,
    pub task_id: &'a str,
    pub data: Map<String, Value>,
}

#[async_trait]
pub trait ToolHook: Send + Sync {
    /// Fired once per call before it runs. The first `Block` wins.
    async fn pre_tool_call(&self, _call: &PreToolCall<'_>) -> HookDecision {
        HookDecision::Continue
    }

    /// Fired once per call after it ran (or was blocked); observers only.
    async fn post_tool_call(&self, _call: &PostToolCall<'_>) {}

    /// Fired at the start and end of sessions and delegated children;
    /// observers only.
    async fn session_event(&self, _event: &SessionEvent<'_>) {}
}

/// The hooks a coordinator runs, in order (plugin hooks first, then the
/// configuration's shell hooks, as hermes: a plugin's block wins a tie).
#[derive(Clone, Default)]
pub struct HookSet(pub Vec<Arc<dyn ToolHook>>);

impl HookSet {
    pub fn push(&mut self, hook: Arc<dyn ToolHook>) {
        self.0.push(hook);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for HookSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HookSet({} hooks)", self.0.len())
    }
}
