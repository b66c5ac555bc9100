//! Our side of the SDK boundary: what the hub needs from a connection to one
//! server. Values are the protocol's own JSON (content blocks, schemas), so
//! that a new SDK version changes `sdk.rs` only.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::{McpError, ServerConfig};

/// One tool as the server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteTool {
    pub name: String,
    pub description: Option<String>,
    /// The tool's `inputSchema` (a JSON Schema object).
    pub input_schema: Map<String, Value>,
}

/// A `tools/call` answer: the content blocks as JSON objects (`{"type":
/// "text", "text": …}`, images, resources), `structuredContent` and `isError`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallOutput {
    pub content: Vec<Value>,
    pub structured: Option<Value>,
    pub is_error: bool,
}

/// What the handshake told us about the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerIdentity {
    /// The negotiated protocol version (e.g. `2026-07-28`, `2025-11-25`).
    pub protocol: String,
    pub name: Option<String>,
    pub version: Option<String>,
    /// The server announces `tools.listChanged`.
    pub tools_list_changed: bool,
}

/// A live connection to one server.
#[async_trait]
pub trait Session: Send + Sync {
    fn identity(&self) -> &ServerIdentity;
    /// Every tool, following pagination.
    async fn list_tools(&self) -> Result<Vec<RemoteTool>, McpError>;
    /// One call; a tool's own failure is `Ok` with `is_error`.
    async fn call_tool(&self, name: &str, args: Map<String, Value>)
    -> Result<CallOutput, McpError>;
    /// Resolves once the connection has ended (the process exited, the
    /// transport failed, or [`close`](Self::close) was called).
    async fn closed(&self);
    /// Ends the connection (and a stdio server's process).
    async fn close(&self);
}

/// Opens sessions. `tools_changed` receives one message per
/// `notifications/tools/list_changed` the server sends on that session.
#[async_trait]
pub trait Connector: Send + Sync {
    async fn connect(
        &self,
        server: &ServerConfig,
        tools_changed: mpsc::UnboundedSender<()>,
    ) -> Result<Arc<dyn Session>, McpError>;
}
