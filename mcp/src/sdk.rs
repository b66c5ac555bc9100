//! The one file that names rmcp: [`RmcpConnector`] opens sessions over a
//! child process's pipes or streamable HTTP, speaking the current protocol
//! (`server/discover`, 2026-07-28) and falling back to the `initialize`
//! handshake of 2025-11-25 for older servers.
//!
//! `notifications/tools/list_changed` reaches us two ways: a 2026-07-28
//! server sends it on a `subscriptions/listen` stream we open when the
//! server announces `tools.listChanged`; an older one sends it unscoped,
//! to the client handler. Either way one message goes to `tools_changed`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, watch};

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, ProtocolVersion,
    ServerNotification, SubscriptionFilter,
};
use rmcp::service::{NotificationContext, RunningService, RunningServiceCancellationToken};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, Peer, RoleClient, ServiceError};

use crate::session::{CallOutput, Connector, RemoteTool, ServerIdentity, Session};
use crate::{McpError, ServerConfig, Transport, stdio};

/// Opens rmcp sessions.
#[derive(Debug, Default, Clone, Copy)]
pub struct RmcpConnector;

struct Handler {
    tools_changed: mpsc::UnboundedSender<()>,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        let _ = self.tools_changed.send(());
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("caduceus", env!("CARGO_PKG_VERSION")),
        )
    }
}

fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::LATEST],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    }
}

struct RmcpSession {
    server: String,
    identity: ServerIdentity,
    peer: Peer<RoleClient>,
    cancel: Mutex<Option<RunningServiceCancellationToken>>,
    done: watch::Receiver<bool>,
}

fn service_error(server: &str, err: ServiceError) -> McpError {
    match err {
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => McpError::Closed {
            server: server.to_owned(),
        },
        ServiceError::McpError(data) => McpError::Protocol {
            server: server.to_owned(),
            message: data.message.into_owned(),
        },
        other => McpError::Protocol {
            server: server.to_owned(),
            message: other.to_string(),
        },
    }
}

#[async_trait]
impl Connector for RmcpConnector {
    async fn connect(
        &self,
        server: &ServerConfig,
        tools_changed: mpsc::UnboundedSender<()>,
    ) -> Result<Arc<dyn Session>, McpError> {
        let name = server.name.clone();
        let handler = Handler {
            tools_changed: tools_changed.clone(),
        };
        let connect_error = |e: rmcp::service::ClientInitializeError| McpError::Connect {
            server: name.clone(),
            message: e.to_string(),
        };
        let (running, child) = match &server.transport {
            Transport::Stdio { command, args, env } => {
                // Not `Auto`: its 10 s discover deadline counts the process's
                // start-up, and a Python server on a busy host takes longer;
                // its late answer then breaks the fallback handshake ("conflict
                // initialized response id"). A server that answers
                // `server/discover` with an error is older: start it again
                // and use `initialize`.
                let spawned = stdio::spawn(&name, command, args, env)?;
                let modern = Handler {
                    tools_changed: tools_changed.clone(),
                }
                .serve_with_lifecycle(
                    (spawned.stdout, spawned.stdin),
                    ClientLifecycleMode::Discover {
                        preferred_versions: vec![ProtocolVersion::LATEST],
                    },
                )
                .await;
                match modern {
                    Ok(running) => (running, Some(spawned.child)),
                    Err(rmcp::service::ClientInitializeError::JsonRpcError(_)) => {
                        stdio::kill_group(&spawned.child);
                        drop(spawned.child);
                        let legacy = stdio::spawn(&name, command, args, env)?;
                        let running = handler
                            .serve_with_lifecycle(
                                (legacy.stdout, legacy.stdin),
                                ClientLifecycleMode::Initialize,
                            )
                            .await
                            .map_err(connect_error)?;
                        (running, Some(legacy.child))
                    }
                    Err(err) => return Err(connect_error(err)),
                }
            }
            Transport::Http { url, headers } => {
                // reqwest is built without a default crypto provider (ring is ours).
                let _ = rustls::crypto::ring::default_provider().install_default();
                let mut custom = HashMap::new();
                for (key, value) in headers {
                    let header =
                        reqwest::header::HeaderName::try_from(key.as_str()).map_err(|e| {
                            McpError::Config(format!("MCP server '{name}': header '{key}': {e}"))
                        })?;
                    let value =
                        reqwest::header::HeaderValue::try_from(value.as_str()).map_err(|e| {
                            McpError::Config(format!("MCP server '{name}': header '{key}': {e}"))
                        })?;
                    custom.insert(header, value);
                }
                let client = reqwest::Client::builder()
                    .build()
                    .map_err(|e| McpError::Connect {
                        server: name.clone(),
                        message: e.to_string(),
                    })?;
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom)
                    .reinit_on_expired_session(true);
                let transport = StreamableHttpClientTransport::with_client(client, config);
                let running = handler
                    .serve_with_lifecycle(transport, lifecycle())
                    .await
                    .map_err(connect_error)?;
                (running, None)
            }
        };
        let info = running.peer().peer_info();
        let identity = match &info {
            Some(info) => {
                let capabilities = serde_json::to_value(&info.capabilities).unwrap_or_default();
                ServerIdentity {
                    protocol: info.protocol_version.as_str().to_owned(),
                    name: info.server_info.as_ref().map(|i| i.name.clone()),
                    version: info.server_info.as_ref().map(|i| i.version.clone()),
                    tools_list_changed: capabilities["tools"]["listChanged"] == Value::Bool(true),
                }
            }
            None => ServerIdentity::default(),
        };
        let modern = info
            .as_ref()
            .is_some_and(|i| !i.protocol_version.has_initialize());
        let peer = running.peer().clone();
        let cancel = running.cancellation_token();
        let (done_tx, done) = watch::channel(false);
        tokio::spawn(watch_service(name.clone(), running, child, done_tx));
        if modern && identity.tools_list_changed {
            tokio::spawn(listen_for_changes(
                name.clone(),
                peer.clone(),
                tools_changed,
            ));
        }
        Ok(Arc::new(RmcpSession {
            server: name,
            identity,
            peer,
            cancel: Mutex::new(Some(cancel)),
            done,
        }))
    }
}

/// Waits for the service to end (the process exited, the transport failed
/// or we closed it), then ends the server's process group and reaps it.
async fn watch_service(
    server: String,
    running: RunningService<RoleClient, Handler>,
    child: Option<tokio::process::Child>,
    done: watch::Sender<bool>,
) {
    let reason = running.waiting().await;
    tracing::debug!(server = %server, ?reason, "MCP session ended");
    if let Some(mut child) = child {
        stdio::kill_group(&child);
        let _ = child.kill().await;
        let status = child.wait().await;
        tracing::debug!(server = %server, ?status, "MCP server process ended");
    }
    let _ = done.send(true);
}

/// The `subscriptions/listen` stream of a 2026-07-28 server: one message
/// per tools list change, until the stream or the session ends.
async fn listen_for_changes(
    server: String,
    peer: Peer<RoleClient>,
    tools_changed: mpsc::UnboundedSender<()>,
) {
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut subscription = match peer.listen(filter).await {
        Ok(subscription) => subscription,
        Err(err) => {
            tracing::warn!(server = %server, "MCP server refused the tools list subscription: {err}");
            return;
        }
    };
    loop {
        match subscription.next().await {
            Ok(Some(ServerNotification::ToolListChangedNotification(_))) => {
                if tools_changed.send(()).is_err() {
                    return;
                }
            }
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(err) => {
                tracing::debug!(server = %server, "MCP subscription ended: {err}");
                return;
            }
        }
    }
}

#[async_trait]
impl Session for RmcpSession {
    fn identity(&self) -> &ServerIdentity {
        &self.identity
    }

    async fn list_tools(&self) -> Result<Vec<RemoteTool>, McpError> {
        let tools = self
            .peer
            .list_all_tools()
            .await
            .map_err(|e| service_error(&self.server, e))?;
        Ok(tools
            .iter()
            .filter_map(|tool| {
                let value = serde_json::to_value(tool).ok()?;
                Some(RemoteTool {
                    name: value.get("name")?.as_str()?.to_owned(),
                    description: value
                        .get("description")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    input_schema: value
                        .get("inputSchema")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default(),
                })
            })
            .collect())
    }

    async fn call_tool(
        &self,
        name: &str,
        args: Map<String, Value>,
    ) -> Result<CallOutput, McpError> {
        let result = self
            .peer
            .call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args))
            .await
            .map_err(|e| service_error(&self.server, e))?;
        let value = serde_json::to_value(&result).map_err(|e| McpError::Protocol {
            server: self.server.clone(),
            message: e.to_string(),
        })?;
        Ok(CallOutput {
            content: value
                .get("content")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            structured: value
                .get("structuredContent")
                .filter(|v| !v.is_null())
                .cloned(),
            is_error: value
                .get("isError")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }

    async fn closed(&self) {
        let mut done = self.done.clone();
        let _ = done.wait_for(|ended| *ended).await;
    }

    async fn close(&self) {
        let cancel = self.cancel.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(cancel) = cancel {
            cancel.cancel();
        }
        self.closed().await;
    }
}
