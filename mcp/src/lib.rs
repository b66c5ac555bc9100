//! The MCP client: the servers of `mcp_servers:` (stdio child processes and
//! streamable HTTP endpoints), each supervised by the hub, which hands its
//! tools to a [`hub::ToolSink`]: the coordinator's registry (feature
//! `registry`: `Handler::Local` entries named `mcp__<server>__<tool>` in
//! toolset `mcp-<server>`, so every call goes through the same pipeline as
//! a built-in), or, for a server hosted on a worker (`on: {labels: …}`),
//! the worker's link to its coordinator. Without the feature the crate does
//! not depend on the coordinator.
//!
//! The SDK (rmcp) is behind [`session::Connector`] / [`session::Session`]:
//! the hub, the tools and the result shaping speak our own types only, and
//! `sdk.rs` is the one file that names rmcp.

pub mod config;
pub mod hub;
#[cfg(feature = "registry")]
pub mod registry;
pub mod result;
pub mod sdk;
pub mod session;
mod stdio;

pub use config::{Configured, Reconnect, ServerConfig, Transport, keep_variables, parse_servers};
pub use hub::{Probe, Server, ToolSink, probe, start, tool_name, tool_schema, toolset};
pub use session::{CallOutput, Connector, RemoteTool, ServerIdentity, Session};

/// Why a server or a call failed. Every variant's text names the server, so
/// that it can be shown to the model and the operator as it is.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum McpError {
    #[error("{0}")]
    Config(String),
    #[error("MCP server '{server}' could not be started: {message}")]
    Spawn { server: String, message: String },
    #[error("MCP server '{server}' failed to connect: {message}")]
    Connect { server: String, message: String },
    #[error("MCP server '{server}' did not finish connecting within {seconds}s")]
    ConnectTimeout { server: String, seconds: u64 },
    #[error("MCP server '{server}' closed the connection")]
    Closed { server: String },
    #[error("MCP server '{server}': {message}")]
    Protocol { server: String, message: String },
}
