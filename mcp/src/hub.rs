//! One supervisor task per server: it connects, offers the server's tools
//! to its [`ToolSink`], re-lists them on every `tools/list_changed`, and
//! when the connection is lost hides them and reconnects with backoff;
//! after the configured retries the server is parked (its tools withdrawn)
//! and probed now and then. The task is the only writer of its server's
//! tools, so writes for one server never race.

use std::sync::{Arc, RwLock};
use std::time::Instant;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use caduceus_common::redact::{RedactMode, redact};
use caduceus_common::result::{CallStatus, ToolReply, tool_error};

use crate::result::render;
use crate::session::{Connector, RemoteTool, ServerIdentity, Session};
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

/// One configured server while its supervisor runs: its settings and live
/// connection, shared by the supervisor (the writer) and whoever serves its
/// tools (which read the connection at every call).
pub struct Server {
    config: ServerConfig,
    session: RwLock<Option<Arc<dyn Session>>>,
    stop: CancellationToken,
    /// Cancelled when the supervisor has finished (after a stop: the
    /// connection closed, a stdio server's process ended and reaped).
    finished: CancellationToken,
}

impl Server {
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    fn session(&self) -> Option<Arc<dyn Session>> {
        self.session
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn set_session(&self, session: Option<Arc<dyn Session>>) {
        *self.session.write().unwrap_or_else(|e| e.into_inner()) = session;
    }

    /// Ends the supervisor: its tools are withdrawn and the connection (a
    /// stdio server's process) closed.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Resolves once the supervisor has finished after [`Server::stop`]
    /// (a stdio server's process has ended).
    pub async fn stopped(&self) {
        self.finished.cancelled().await;
    }

    /// One call of the server's tool `tool` (its own name) with the server's
    /// `timeout`; every failure is a reply with an `error` naming the server.
    pub async fn call(&self, tool: &str, args: Map<String, Value>) -> ToolReply {
        let server = &self.config.name;
        let Some(session) = self.session() else {
            return ToolReply::error(format!("MCP server '{server}' is not connected"));
        };
        let timeout = self.config.timeout;
        match tokio::time::timeout(timeout, session.call_tool(tool, args)).await {
            Ok(Ok(output)) => render(&output),
            Ok(Err(err)) => ToolReply::error(
                redact(&format!("MCP call failed: {err}"), RedactMode::General).into_owned(),
            ),
            Err(_) => ToolReply::new(
                CallStatus::Timeout,
                tool_error(format!(
                    "MCP call to '{tool}' on server '{server}' timed out after {}s",
                    timeout.as_secs_f64()
                )),
            ),
        }
    }
}

/// Where a server's supervisor publishes its tools: the coordinator's
/// registry (feature `registry`), or a worker's link to its coordinator.
/// Each server's calls come from its own supervisor, one at a time.
#[async_trait]
pub trait ToolSink: Send + Sync {
    /// Connected (or the list changed): these are the server's tools now,
    /// after `tools.include` / `tools.exclude`.
    async fn offer(&self, server: &Arc<Server>, tools: Vec<RemoteTool>) -> Result<(), McpError>;
    /// The connection was lost and a reconnect is under way: hide the tools
    /// until the next `offer`.
    async fn suspend(&self, server: &Arc<Server>);
    /// Parked after repeated failures, or stopped: the tools are gone.
    async fn withdraw(&self, server: &Arc<Server>);
}

/// Why a tool of a reconnecting server is hidden (what a call of it reads).
pub fn reconnecting_reason(server: &str) -> String {
    format!(
        "MCP server '{server}' lost its connection and is reconnecting; its tools are back once it is."
    )
}

/// Starts a supervisor for every enabled server and waits until each has
/// made its first connection attempt (bounded by its `connect_timeout`), so
/// that the first definitions request after start sees the tools of the
/// servers that are up. A supervisor runs until its [`Server::stop`].
pub async fn start(
    servers: Vec<ServerConfig>,
    sink: Arc<dyn ToolSink>,
    connector: Arc<dyn Connector>,
) -> Vec<Arc<Server>> {
    let mut first_attempts = Vec::new();
    let mut started = Vec::new();
    for config in servers.into_iter().filter(|s| s.enabled) {
        let server = Arc::new(Server {
            config,
            session: RwLock::new(None),
            stop: CancellationToken::new(),
            finished: CancellationToken::new(),
        });
        let (ready, first) = oneshot::channel();
        tokio::spawn(supervise(
            server.clone(),
            sink.clone(),
            connector.clone(),
            ready,
        ));
        first_attempts.push(first);
        started.push(server);
    }
    for first in first_attempts {
        let _ = first.await;
    }
    started
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

/// The server's tools as offered (include/exclude applied).
async fn offered(server: &Server, session: &dyn Session) -> Result<Vec<RemoteTool>, McpError> {
    Ok(session
        .list_tools()
        .await?
        .into_iter()
        .filter(|t| server.config.offers(&t.name))
        .collect())
}

async fn supervise(
    server: Arc<Server>,
    sink: Arc<dyn ToolSink>,
    connector: Arc<dyn Connector>,
    ready: oneshot::Sender<()>,
) {
    let stop = server.stop.clone();
    tokio::select! {
        () = supervise_until_stopped(&server, sink.as_ref(), connector.as_ref(), ready) => {}
        () = stop.cancelled() => {}
    }
    if let Some(session) = server.session() {
        server.set_session(None);
        session.close().await;
    }
    sink.withdraw(&server).await;
    tracing::info!(server = %server.name(), "MCP server stopped");
    server.finished.cancel();
}

async fn supervise_until_stopped(
    server: &Arc<Server>,
    sink: &dyn ToolSink,
    connector: &dyn Connector,
    ready: oneshot::Sender<()>,
) {
    let name = server.name().to_owned();
    let reconnect = server.config.reconnect;
    let mut ready = Some(ready);
    let mut ever_connected = false;
    let mut failures = 0u32;
    let mut parked = false;
    loop {
        let (changes, mut changed) = mpsc::unbounded_channel();
        match connect(connector, &server.config, changes).await {
            Ok(session) => {
                let identity = session.identity().clone();
                let listed = match offered(server, session.as_ref()).await {
                    Ok(tools) => {
                        let count = tools.len();
                        sink.offer(server, tools).await.map(|()| count)
                    }
                    Err(err) => Err(err),
                };
                match listed {
                    Err(err) => {
                        tracing::warn!(server = %name, "MCP server connected but its tools could not be listed: {err}");
                        session.close().await;
                        failures += 1;
                    }
                    Ok(count) => {
                        log_connected(&name, &identity, count, parked);
                        failures = 0;
                        parked = false;
                        ever_connected = true;
                        server.set_session(Some(session.clone()));
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(());
                        }
                        serve(server, sink, session.as_ref(), &mut changed).await;
                        server.set_session(None);
                        // hermes hides a reconnecting server's tools (its
                        // check_fn): the model is not offered tools that
                        // can only fail until the server is back.
                        sink.suspend(server).await;
                        tracing::warn!(server = %name, "MCP server connection lost; its tools are hidden while it reconnects");
                    }
                }
            }
            Err(err) => {
                failures += 1;
                tracing::warn!(server = %name, attempt = failures, "{err}");
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
                sink.withdraw(server).await;
                tracing::warn!(
                    server = %name,
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
    server: &Arc<Server>,
    sink: &dyn ToolSink,
    session: &dyn Session,
    changed: &mut mpsc::UnboundedReceiver<()>,
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
                let relisted = match offered(server, session).await {
                    Ok(tools) => {
                        let count = tools.len();
                        sink.offer(server, tools).await.map(|()| count)
                    }
                    Err(err) => Err(err),
                };
                match relisted {
                    Ok(count) => tracing::info!(server = %server.name(), tools = count, "MCP tools list changed; tools updated"),
                    Err(err) => tracing::warn!(server = %server.name(), "MCP tools list changed but re-listing failed: {err}"),
                }
            }
        }
    }
}

/// The model's schema of a server's tool, `{"name", "description",
/// "parameters"}`: its `inputSchema` as `parameters` (an object schema,
/// `properties` filled in when absent), its description or `MCP tool
/// <tool> from <server>`.
pub fn tool_schema(server: &str, tool: &RemoteTool) -> Value {
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
    json!({"name": tool_name(server, &tool.name), "description": description, "parameters": parameters})
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
