//! In-process hooks around every tool call (hermes' `pre_tool_call` and
//! `post_tool_call`). Plugins and shell hooks will be adapters onto this trait.

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

#[async_trait]
pub trait ToolHook: Send + Sync {
    /// Fired once per call before it runs. The first `Block` wins.
    async fn pre_tool_call(&self, _call: &PreToolCall<'_>) -> HookDecision {
        HookDecision::Continue
    }

    /// Fired once per call after it ran (or was blocked); observers only.
    async fn post_tool_call(&self, _call: &PostToolCall<'_>) {}
}
