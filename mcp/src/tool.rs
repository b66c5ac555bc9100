//! An MCP server's tool as a registry entry: the call goes to the server's
//! live session with the server's `timeout`; every failure is a result the
//! model reads, with an `error` field naming the server.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use caduceus_common::redact::{RedactMode, redact};
use caduceus_common::result::{CallStatus, ToolReply, tool_error};
use caduceus_coordinator::call::CallContext;
use caduceus_coordinator::registry::LocalTool;

use crate::hub::ServerState;
use crate::result::render;

pub(crate) struct McpTool {
    pub state: Arc<ServerState>,
    /// The server's own name for the tool.
    pub tool: String,
}

#[async_trait]
impl LocalTool for McpTool {
    async fn call(&self, _ctx: &CallContext, args: Map<String, Value>) -> ToolReply {
        let server = &self.state.config.name;
        let Some(session) = self.state.session() else {
            return ToolReply::error(format!("MCP server '{server}' is not connected"));
        };
        let timeout = self.state.config.timeout;
        match tokio::time::timeout(timeout, session.call_tool(&self.tool, args)).await {
            Ok(Ok(output)) => render(&output),
            Ok(Err(err)) => ToolReply::error(
                redact(&format!("MCP call failed: {err}"), RedactMode::General).into_owned(),
            ),
            Err(_) => ToolReply::new(
                CallStatus::Timeout,
                tool_error(format!(
                    "MCP call to '{}' on server '{server}' timed out after {}s",
                    self.tool,
                    timeout.as_secs_f64()
                )),
            ),
        }
    }
}
