//! One supervisor task per server: it connects, registers the server's
//! tools, re-lists them on every `tools/list_changed`, and when the
//! connection is lost reconnects with backoff; after the configured retries
//! the server is parked (its tools deregistered) and probed now and then.
//! The task is the only writer of its server's toolset, so registry writes
//! for one server never race.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};

use caduceus_coordinator::registry::actor::RegistryHandle;
use caduceus_coordinator::registry::{
    Caller, Handler, Owner, ParallelClass, RegistryError, ToolEntry,
};

use crate::session::{Connector, RemoteTool, ServerIdentity, Session};
use crate::tool::McpTool;
use crate::{McpError, ServerConfig};

/// The registry name of a server's tool, as hermes spells it:
/// `mcp__<server>__<tool>`, every character outside `[A-Za-z0-9_]` made `_`.
pub fn tool_name(server: &str, tool: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("mcp__{}__{}", clean(server), clean(tool))
}

/// The toolset of a server's tools.
pub fn toolset(server: &str) -> String {
    format!("mcp-{server}")
}

/// A server's live connection, shared by its supervisor (the writer) and its
/// tools (which read it at every call).
pub(crate) struct ServerState {
    pub config: ServerConfig,
    session: RwLock<Option<Arc<dyn Session>>>,
}

impl ServerState {
    pub(crate) fn session(&self) -> Option<Arc<dyn Session>> {
        self.session
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_session(&self, session: Option<Arc<dyn Session>>) {
        *self.session.write().unwrap_or_else(|e| e.into_inner()) = session;
    }
}

/// Starts a supervisor for every enabled server and waits until each has
/// made its first connection attempt (bounded by its `connect_timeout`), so
/// that the first definitions request after start sees the tools of the
/// servers that are up. The supervisors live as long as the process.
pub async fn start(
    servers: Vec<ServerConfig>,
    registry: RegistryHandle,
    connector: Arc<dyn Connector>,
) {
    let mut first_attempts = Vec::new();
    for config in servers.into_iter().filter(|s| s.enabled) {
        let state = Arc::new(ServerState {
            config,
            session: RwLock::new(None),
        });
        let (ready, first) = oneshot::channel();
        tokio::spawn(supervise(state, registry.clone(), connector.clone(), ready));
        first_attempts.push(first);
    }
    for first in first_attempts {
        let _ = first.await;
    }
}

async fn connect(
    connector: &dyn Connector,
    config: &ServerConfig,
    changes: mpsc::UnboundedSender<()>,
) -> Result<Arc<dyn Session>, McpError> {
    match tokio::time::timeout(config.connect_timeout, connector.connect(config, changes)).await {
        Ok(result) => result,
        Err(_) => Err(McpError::ConnectTimeout {
            server: config.name.clone(),
            seconds: config.connect_timeout.as_secs(),
        }),
    }
}

async fn supervise(
    state: Arc<ServerState>,
    registry: RegistryHandle,
    connector: Arc<dyn Connector>,
    ready: oneshot::Sender<()>,
) {
    let server = state.config.name.clone();
    let reconnect = state.config.reconnect;
    let mut ready = Some(ready);
    let mut registered = BTreeSet::new();
    let mut ever_connected = false;
    let mut failures = 0u32;
    let mut parked = false;
    loop {
        let (changes, mut changed) = mpsc::unbounded_channel();
        match connect(connector.as_ref(), &state.config, changes).await {
            Ok(session) => {
                let identity = session.identity().clone();
                if let Err(err) =
                    refresh(&state, &registry, session.as_ref(), &mut registered).await
                {
                    tracing::warn!(server = %server, "MCP server connected but its tools could not be listed: {err}");
                    session.close().await;
                    failures += 1;
                } else {
                    log_connected(&server, &identity, registered.len(), parked);
                    failures = 0;
                    parked = false;
                    ever_connected = true;
                    state.set_session(Some(session.clone()));
                    if let Some(ready) = ready.take() {
                        let _ = ready.send(());
                    }
                    serve(
                        &state,
                        &registry,
                        session.as_ref(),
                        &mut changed,
                        &mut registered,
                    )
                    .await;
                    state.set_session(None);
                    tracing::warn!(server = %server, "MCP server connection lost; reconnecting");
                }
            }
            Err(err) => {
                failures += 1;
                tracing::warn!(server = %server, attempt = failures, "{err}");
            }
        }
        if let Some(ready) = ready.take() {
            // Start-up waits for one attempt, not for the retries.
            let _ = ready.send(());
        }
        let limit = if ever_connected {
            reconnect.retries
        } else {
            reconnect.initial_retries
        };
        if failures > limit {
            if !parked {
                parked = true;
                for name in std::mem::take(&mut registered) {
                    let _ = registry.deregister(&name, Caller::Core).await;
                }
                tracing::warn!(
                    server = %server,
                    "MCP server parked after {failures} failed attempts: its tools are deregistered; probing every {}s",
                    reconnect.probe_interval.as_secs()
                );
            }
            tokio::time::sleep(reconnect.probe_interval).await;
        } else {
            tokio::time::sleep(reconnect.delay(failures.max(1))).await;
        }
    }
}

fn log_connected(server: &str, identity: &ServerIdentity, tools: usize, was_parked: bool) {
    tracing::info!(
        server = %server,
        protocol = %identity.protocol,
        server_name = identity.name.as_deref().unwrap_or(""),
        tools,
        unparked = was_parked,
        "MCP server connected"
    );
}

/// Until the connection ends: re-lists the tools on every change notice.
async fn serve(
    state: &Arc<ServerState>,
    registry: &RegistryHandle,
    session: &dyn Session,
    changed: &mut mpsc::UnboundedReceiver<()>,
    registered: &mut BTreeSet<String>,
) {
    loop {
        tokio::select! {
            () = session.closed() => return,
            notice = changed.recv() => {
                if notice.is_none() {
                    return;
                }
                // A burst of notices needs one re-list.
                while changed.try_recv().is_ok() {}
                match refresh(state, registry, session, registered).await {
                    Ok(()) => tracing::info!(server = %state.config.name, tools = registered.len(), "MCP tools list changed; registry updated"),
                    Err(err) => tracing::warn!(server = %state.config.name, "MCP tools list changed but re-listing failed: {err}"),
                }
            }
        }
    }
}

/// Lists the server's tools and makes the registry match: stale names
/// deregistered, the others (re-)registered. A name a built-in holds is
/// skipped (hermes: collisions with built-ins are not registered).
async fn refresh(
    state: &Arc<ServerState>,
    registry: &RegistryHandle,
    session: &dyn Session,
    registered: &mut BTreeSet<String>,
) -> Result<(), McpError> {
    let server = &state.config.name;
    let wanted: BTreeMap<String, RemoteTool> = session
        .list_tools()
        .await?
        .into_iter()
        .filter(|t| state.config.offers(&t.name))
        .map(|t| (tool_name(server, &t.name), t))
        .collect();
    let stale: Vec<String> = registered
        .iter()
        .filter(|name| !wanted.contains_key(*name))
        .cloned()
        .collect();
    for name in stale {
        let _ = registry.deregister(&name, Caller::Core).await;
        registered.remove(&name);
        tracing::info!(server = %server, tool = %name, "MCP tool removed");
    }
    for (name, tool) in wanted {
        match registry.register(entry(state, &name, &tool), false).await {
            Ok(()) => {
                registered.insert(name);
            }
            Err(err @ RegistryError::WouldShadow { .. }) => {
                tracing::warn!(server = %server, tool = %name, "MCP tool not registered: {err}");
            }
            Err(err) => {
                return Err(McpError::Protocol {
                    server: server.clone(),
                    message: err.to_string(),
                });
            }
        }
    }
    let _ = registry.register_alias(server, &toolset(server)).await;
    Ok(())
}

/// The model's schema of a server's tool: its `inputSchema` as
/// `parameters` (an object schema, `properties` filled in when absent).
fn entry(state: &Arc<ServerState>, name: &str, tool: &RemoteTool) -> ToolEntry {
    let server = &state.config.name;
    let mut parameters = tool.input_schema.clone();
    parameters
        .entry("type")
        .or_insert_with(|| Value::String("object".to_owned()));
    parameters
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    let description = tool
        .description
        .clone()
        .filter(|d| !d.trim().is_empty())
        .unwrap_or_else(|| format!("MCP tool {} from {server}", tool.name));
    let schema = json!({"name": name, "description": description, "parameters": parameters});
    let parallel = if state.config.supports_parallel_tool_calls {
        ParallelClass::Safe
    } else {
        ParallelClass::Sequential
    };
    ToolEntry::new(
        name,
        toolset(server),
        schema,
        Handler::Local(Arc::new(McpTool {
            state: state.clone(),
            tool: tool.name.clone(),
        })),
    )
    .with_owner(Owner::Mcp(server.clone()))
    .with_parallel(parallel)
}

/// What `caduceus mcp test NAME` reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Probe {
    pub server: String,
    pub transport: &'static str,
    pub protocol: String,
    pub server_name: Option<String>,
    pub server_version: Option<String>,
    pub connect_ms: u64,
    /// `[{name (the registry's), tool (the server's), description}]`, after
    /// `tools.include` / `tools.exclude`.
    pub tools: Vec<Value>,
    /// Tools the server lists that the filters leave out.
    pub filtered_out: Vec<String>,
}

/// Connects once, lists the tools and disconnects.
pub async fn probe(config: &ServerConfig, connector: &dyn Connector) -> Result<Probe, McpError> {
    let started = Instant::now();
    let (changes, _changed) = mpsc::unbounded_channel();
    let session = connect(connector, config, changes).await?;
    let connect_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let listed = session.list_tools().await;
    session.close().await;
    let (offered, filtered): (Vec<_>, Vec<_>) =
        listed?.into_iter().partition(|t| config.offers(&t.name));
    let identity = session.identity().clone();
    Ok(Probe {
        server: config.name.clone(),
        transport: config.transport.kind(),
        protocol: identity.protocol,
        server_name: identity.name,
        server_version: identity.version,
        connect_ms,
        tools: offered
            .iter()
            .map(|t| {
                json!({
                    "name": tool_name(&config.name, &t.name),
                    "tool": t.name,
                    "description": t.description.clone().unwrap_or_default(),
                })
            })
            .collect(),
        filtered_out: filtered.into_iter().map(|t| t.name).collect(),
    })
}
