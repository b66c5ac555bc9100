//! The coordinator's side (feature `registry`): a server's tools as
//! registry entries (`Handler::Local`, toolset `mcp-<server>`, the
//! server's name as its alias) whose calls go to the server's live
//! connection, so every call passes the same pipeline as a built-in.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Map, Value};

use caduceus_common::result::ToolReply;
use caduceus_coordinator::call::CallContext;
use caduceus_coordinator::registry::actor::RegistryHandle;
use caduceus_coordinator::registry::{
    Availability, Caller, Handler, LocalTool, Owner, ParallelClass, RegistryError, ToolEntry,
};

use crate::hub::{Server, ToolSink, reconnecting_reason, tool_name, tool_schema, toolset};
use crate::session::{Connector, RemoteTool};
use crate::{McpError, ServerConfig};

/// Starts the servers (see [`crate::hub::start`]) with their tools in
/// `registry`.
pub async fn start(
    servers: Vec<ServerConfig>,
    registry: RegistryHandle,
    connector: Arc<dyn Connector>,
) -> Vec<Arc<Server>> {
    crate::hub::start(servers, Arc::new(RegistrySink::new(registry)), connector).await
}

/// Keeps each server's tools in the registry.
pub struct RegistrySink {
    registry: RegistryHandle,
    /// server -> registry name -> the tool as last offered.
    registered: Mutex<HashMap<String, BTreeMap<String, RemoteTool>>>,
}

impl RegistrySink {
    pub fn new(registry: RegistryHandle) -> Self {
        RegistrySink {
            registry,
            registered: Mutex::new(HashMap::new()),
        }
    }

    fn take(&self, server: &str) -> BTreeMap<String, RemoteTool> {
        self.registered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(server)
            .unwrap_or_default()
    }

    fn put(&self, server: &str, tools: BTreeMap<String, RemoteTool>) {
        self.registered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(server.to_owned(), tools);
    }
}

#[async_trait]
impl ToolSink for RegistrySink {
    /// Makes the registry match: stale names deregistered, the others
    /// (re-)registered and shown. A name a built-in holds is skipped
    /// (hermes: collisions with built-ins are not registered).
    async fn offer(&self, server: &Arc<Server>, tools: Vec<RemoteTool>) -> Result<(), McpError> {
        let name = server.name();
        let mut registered = self.take(name);
        let wanted: BTreeMap<String, RemoteTool> = tools
            .into_iter()
            .map(|t| (tool_name(name, &t.name), t))
            .collect();
        let stale: Vec<String> = registered
            .keys()
            .filter(|n| !wanted.contains_key(*n))
            .cloned()
            .collect();
        for tool in stale {
            let _ = self.registry.deregister(&tool, Caller::Core).await;
            registered.remove(&tool);
            tracing::info!(server = %name, tool = %tool, "MCP tool removed");
        }
        let mut outcome = Ok(());
        for (tool, remote) in wanted {
            // Recorded first: a withdrawal that interrupts this still
            // finds every name it must remove.
            registered.insert(tool.clone(), remote.clone());
            match self
                .registry
                .register(entry(server, &remote, Availability::Always), false)
                .await
            {
                Ok(()) => {}
                Err(err @ RegistryError::WouldShadow { .. }) => {
                    registered.remove(&tool);
                    tracing::warn!(server = %name, tool = %tool, "MCP tool not registered: {err}");
                }
                Err(err) => {
                    outcome = Err(McpError::Protocol {
                        server: name.to_owned(),
                        message: err.to_string(),
                    });
                    break;
                }
            }
        }
        let _ = self.registry.register_alias(name, &toolset(name)).await;
        self.put(name, registered);
        outcome
    }

    async fn suspend(&self, server: &Arc<Server>) {
        let name = server.name();
        let registered = self.take(name);
        let reason = reconnecting_reason(name);
        for remote in registered.values() {
            let hidden = entry(server, remote, Availability::Hidden(reason.clone()));
            if let Err(err) = self.registry.register(hidden, false).await {
                tracing::warn!(server = %name, tool = %remote.name, "MCP tool could not be hidden: {err}");
            }
        }
        self.put(name, registered);
    }

    async fn withdraw(&self, server: &Arc<Server>) {
        for tool in self.take(server.name()).into_keys() {
            let _ = self.registry.deregister(&tool, Caller::Core).await;
        }
    }
}

/// The registry entry of a server's tool.
fn entry(server: &Arc<Server>, tool: &RemoteTool, availability: Availability) -> ToolEntry {
    let name = server.name();
    let parallel = if server.config().supports_parallel_tool_calls {
        ParallelClass::Safe
    } else {
        ParallelClass::Sequential
    };
    ToolEntry::new(
        tool_name(name, &tool.name),
        toolset(name),
        tool_schema(name, tool),
        Handler::Local(Arc::new(McpTool {
            server: server.clone(),
            tool: tool.name.clone(),
        })),
    )
    .with_owner(Owner::Mcp(name.to_owned()))
    .with_parallel(parallel)
    .with_availability(availability)
}

/// An MCP server's tool as a coordinator-side tool.
struct McpTool {
    server: Arc<Server>,
    /// The server's own name for the tool.
    tool: String,
}

#[async_trait]
impl LocalTool for McpTool {
    async fn call(&self, _ctx: &CallContext, args: Map<String, Value>) -> ToolReply {
        self.server.call(&self.tool, args).await
    }
}
