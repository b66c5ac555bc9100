//! Tool providers this worker hosts for its coordinator: MCP servers whose
//! configuration says `on: {labels: …}` matching this worker's labels. The
//! coordinator sends their settings (`HostProviders`) after its welcome; the
//! servers run here, next to this host's resources, as children of this
//! process (the caduceus-mcp client, the same supervisor as on a
//! coordinator: reconnect with backoff, parking, hot reload), and outlive
//! reconnects of the link. What each offers goes up as `HostedTools`,
//! again in full after every (re)attach; calls arrive as `RunCall`s naming
//! the provider.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use caduceus_common::result::{CallStatus, ToolReply, tool_error};
use caduceus_mcp::session::{Connector, RemoteTool};
use caduceus_mcp::{McpError, Server, ServerConfig, ToolSink, Transport};
use caduceus_proto::{HostProviders, HostedTool, HostedTools};

/// Whether this worker runs the MCP servers its coordinator asks it to host,
/// and how it marks their processes.
#[derive(Debug, Clone, Default)]
pub struct HostingPolicy {
    /// `--host-mcp`: off by default. A server's settings come from the
    /// coordinator and its command runs on this host as the worker's user,
    /// outside any sandbox: the operator of the host opts in.
    pub enabled: bool,
    /// The worker's ledger tag (`CADUCEUS_LEDGER=<instance>`), given to
    /// every stdio server, so that a worker killed outright does not leave
    /// them running: its guardian, or the next worker's sweep, ends them.
    pub tag: Option<(String, String)>,
}

/// The providers this worker runs and what each offers.
pub struct Hosted {
    policy: HostingPolicy,
    announcements: Arc<Announcements>,
    connector: Arc<dyn Connector>,
    /// Serializes `HostProviders` (each may wait for servers to start).
    changing: tokio::sync::Mutex<()>,
    running: Mutex<HashMap<String, Running>>,
}

struct Running {
    config_json: String,
    server: Arc<Server>,
}

impl Hosted {
    pub fn new(connector: Arc<dyn Connector>, policy: HostingPolicy) -> Self {
        Hosted {
            policy,
            announcements: Arc::new(Announcements::default()),
            connector,
            changing: tokio::sync::Mutex::new(()),
            running: Mutex::new(HashMap::new()),
        }
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the providers not running yet (waiting for each one's first
    /// connection attempt), and stops those no longer listed or listed with
    /// other settings (waiting for their processes to end). One whose
    /// settings cannot be read, or name a variable this worker's environment
    /// lacks, is refused (logged). Without `--host-mcp` nothing is started.
    pub async fn host(&self, providers: HostProviders) {
        let _one_at_a_time = self.changing.lock().await;
        if !self.policy.enabled {
            if !providers.providers.is_empty() {
                let names: Vec<&str> = providers
                    .providers
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect();
                tracing::warn!(
                    providers = %names.join(", "),
                    "the coordinator asks this worker to host MCP servers; refused: this worker was not started with --host-mcp (worker.host_mcp)"
                );
            }
            return;
        }
        let wanted: BTreeMap<String, String> = providers
            .providers
            .into_iter()
            .filter(|p| {
                let mcp = p.kind == "mcp";
                if !mcp {
                    tracing::warn!(provider = %p.name, kind = %p.kind, "hosted provider of an unknown kind ignored");
                }
                mcp
            })
            .map(|p| (p.name, p.config_json))
            .collect();
        let stopped: Vec<Arc<Server>> = {
            let mut running = self.running();
            let gone: Vec<String> = running
                .iter()
                .filter(|(name, r)| wanted.get(*name) != Some(&r.config_json))
                .map(|(name, _)| name.clone())
                .collect();
            gone.iter()
                .filter_map(|name| running.remove(name))
                .map(|r| r.server)
                .collect()
        };
        for server in &stopped {
            tracing::info!(provider = %server.name(), "no longer hosted here (or its settings changed): stopping it");
            server.stop();
        }
        // Its process is gone before another copy (new settings) starts.
        stop_and_wait(&stopped).await;
        let mut starting = Vec::new();
        {
            let running = self.running();
            for (name, config_json) in &wanted {
                if running.contains_key(name) {
                    continue;
                }
                match serde_json::from_str::<ServerConfig>(config_json) {
                    Ok(config) if config.name == *name => match self.prepare(&config) {
                        Ok(config) => starting.push(config),
                        Err(err) => {
                            tracing::warn!(provider = %name, "hosted provider refused: {err}");
                        }
                    },
                    Ok(_) | Err(_) => {
                        tracing::warn!(provider = %name, "hosted provider refused: its settings are not an MCP server's");
                    }
                }
            }
        }
        if starting.is_empty() {
            return;
        }
        let configs: BTreeMap<String, String> = starting
            .iter()
            .filter_map(|c| Some((c.name.clone(), wanted.get(&c.name)?.clone())))
            .collect();
        let sink: Arc<dyn ToolSink> = self.announcements.clone();
        let started = caduceus_mcp::start(starting, sink, self.connector.clone()).await;
        let mut running = self.running();
        for server in started {
            let config_json = configs.get(server.name()).cloned().unwrap_or_default();
            running.insert(
                server.name().to_owned(),
                Running {
                    config_json,
                    server,
                },
            );
        }
    }

    /// The settings as this host runs them: `${VAR}` read from the worker's
    /// environment (the coordinator sends them unread), a stdio server
    /// marked with the ledger's tag.
    fn prepare(&self, config: &ServerConfig) -> Result<ServerConfig, McpError> {
        let mut config = config.resolve_variables(&caduceus_common::process_env::var)?;
        if let (Transport::Stdio { env, .. }, Some((key, value))) =
            (&mut config.transport, &self.policy.tag)
        {
            env.insert(key.clone(), value.clone());
        }
        Ok(config)
    }

    /// Runs `tool` (the registry's name) of `provider`; cancelled, it
    /// answers at once (the server is sent `notifications/cancelled` by the
    /// client as its request is dropped).
    pub async fn call(
        &self,
        provider: &str,
        tool: &str,
        args: Map<String, Value>,
        cancel: &CancellationToken,
    ) -> ToolReply {
        let server = self.running().get(provider).map(|r| r.server.clone());
        let Some(server) = server else {
            return ToolReply::error(format!(
                "MCP server '{provider}' is not hosted on this worker"
            ));
        };
        let Some(own_name) = self.announcements.own_name(provider, tool) else {
            return ToolReply::error(format!(
                "MCP server '{provider}' offers no tool '{tool}' here"
            ));
        };
        tokio::select! {
            reply = server.call(&own_name, args) => reply,
            () = cancel.cancelled() => ToolReply::new(CallStatus::Cancelled, tool_error(format!("The call to '{tool}' was cancelled"))),
        }
    }

    /// Every provider's current state is to be sent again (a new link).
    pub fn resend_all(&self) {
        self.announcements.mark_all();
    }

    /// Resolves when announcements are waiting to be sent.
    pub async fn changed(&self) {
        self.announcements.changed.notified().await;
    }

    /// The announcements waiting to be sent, oldest change first.
    pub fn take_pending(&self) -> Vec<HostedTools> {
        self.announcements.take_pending()
    }

    /// Stops every provider (the worker is stopping) and waits for their
    /// processes to end.
    pub async fn stop_all(&self) {
        let servers: Vec<Arc<Server>> = self.running().drain().map(|(_, r)| r.server).collect();
        for server in &servers {
            server.stop();
        }
        stop_and_wait(&servers).await;
    }
}

/// Waits for stopped servers' supervisors to finish (their processes
/// ended and reaped), at most [`STOP_WAIT`]: the ledger's guardian is the
/// layer behind a server that does not end.
async fn stop_and_wait(servers: &[Arc<Server>]) {
    let all = futures::future::join_all(servers.iter().map(|s| s.stopped()));
    if tokio::time::timeout(STOP_WAIT, all).await.is_err() {
        tracing::warn!(
            "hosted MCP servers did not all stop within {}s",
            STOP_WAIT.as_secs()
        );
    }
}

/// How long stopping hosted servers may take.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What each provider offers, as last announced, and which announcements
/// the link has not sent yet. The providers' supervisors write it (as their
/// [`ToolSink`]); the link reads it.
#[derive(Default)]
struct Announcements {
    state: Mutex<AnnouncementState>,
    changed: Notify,
}

#[derive(Default)]
struct AnnouncementState {
    /// provider -> what it offers now
    current: BTreeMap<String, HostedTools>,
    /// provider -> registry name -> the server's own name of the tool
    own_names: HashMap<String, HashMap<String, String>>,
    /// providers whose state the link is to send
    pending: BTreeSet<String>,
}

impl Announcements {
    fn lock(&self) -> std::sync::MutexGuard<'_, AnnouncementState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn own_name(&self, provider: &str, tool: &str) -> Option<String> {
        self.lock().own_names.get(provider)?.get(tool).cloned()
    }

    fn publish(&self, announcement: HostedTools) {
        {
            let mut state = self.lock();
            state.pending.insert(announcement.provider.clone());
            state
                .current
                .insert(announcement.provider.clone(), announcement);
        }
        self.changed.notify_one();
    }

    fn mark_all(&self) {
        {
            let mut state = self.lock();
            let all: Vec<String> = state.current.keys().cloned().collect();
            state.pending.extend(all);
        }
        self.changed.notify_one();
    }

    fn take_pending(&self) -> Vec<HostedTools> {
        let mut state = self.lock();
        let pending = std::mem::take(&mut state.pending);
        pending
            .iter()
            .filter_map(|p| state.current.get(p).cloned())
            .collect()
    }
}

#[async_trait]
impl ToolSink for Announcements {
    async fn offer(&self, server: &Arc<Server>, tools: Vec<RemoteTool>) -> Result<(), McpError> {
        let provider = server.name();
        let names: HashMap<String, String> = tools
            .iter()
            .map(|t| (caduceus_mcp::tool_name(provider, &t.name), t.name.clone()))
            .collect();
        let tools = tools
            .iter()
            .map(|t| HostedTool {
                name: caduceus_mcp::tool_name(provider, &t.name),
                schema_json: caduceus_mcp::tool_schema(provider, t).to_string(),
            })
            .collect();
        self.lock().own_names.insert(provider.to_owned(), names);
        self.publish(HostedTools {
            provider: provider.to_owned(),
            tools,
            unavailable: String::new(),
        });
        Ok(())
    }

    async fn suspend(&self, server: &Arc<Server>) {
        let provider = server.name();
        let tools = self
            .lock()
            .current
            .get(provider)
            .map(|a| a.tools.clone())
            .unwrap_or_default();
        self.publish(HostedTools {
            provider: provider.to_owned(),
            tools,
            unavailable: caduceus_mcp::hub::reconnecting_reason(provider),
        });
    }

    async fn withdraw(&self, server: &Arc<Server>) {
        let provider = server.name();
        self.lock().own_names.remove(provider);
        self.publish(HostedTools {
            provider: provider.to_owned(),
            tools: Vec::new(),
            unavailable: String::new(),
        });
    }
}
