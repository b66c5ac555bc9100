//! The caduceus coordinator: the tool registry, the call pipeline, the
//! scheduler that places calls on workers, and the gRPC services. See
//! `README.md` for the contract.

pub mod agent;
pub mod audit;
pub mod auth;
pub mod call;
pub mod cron;
pub mod dispatch;
pub mod gate;
pub mod memory;
pub mod metrics;
pub mod registry;
pub mod scheduler;
pub mod server;
pub mod skills;
pub mod web;

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use ractor::{ActorRef, Message, RpcReplyPort};
use serde_json::Value;
use tokio::sync::mpsc;
use tonic::Status;

use caduceus_proto::{
    StatusResponse, Welcome, WorkerCommand, WorkerEvent, worker_command, worker_event,
};

use agent::{AgentSettings, SessionHub};
use auth::{Authenticator, TokenError, TokenInfo, TokenStore};
use call::ToolFilter;
use call::{CallContext, ToolResult};
use dispatch::{CallRequest, DispatchConfig, Dispatcher, RawArguments};
use gate::Gate;
use registry::RegistryError;
use registry::actor::RegistryHandle;
use scheduler::{AttachError, SchedulerConfig, SchedulerHandle};

/// Everything a coordinator needs to start.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// Stable id (sandbox owner labels); random when empty.
    pub id: String,
    /// The shared token: an admin token for workers, clients and operators
    /// alike (scoped tokens are created with `caduceus tokens create`).
    pub token: String,
    /// Backend new environments are created on (`terminal.backend`, `TERMINAL_ENV`).
    pub terminal_backend: String,
    /// Default `terminal` timeout (`TERMINAL_TIMEOUT`), seconds.
    pub terminal_timeout_secs: u64,
    /// Heartbeat interval and the silences after which a worker is suspect
    /// and lost.
    pub liveness: scheduler::Liveness,
    /// Longest foreground `terminal` timeout, seconds (hermes: 600).
    pub max_foreground_timeout_secs: u64,
    /// Backend settings sent with every call (image, cwd, …).
    pub environment_settings: Value,
    /// Results above this many characters are persisted (hermes: 100,000).
    pub result_cap: u64,
    /// Agent sessions: model, budgets, delegation, session storage.
    pub agent: AgentSettings,
    /// The audit log (`$CADUCEUS_HOME/audit.jsonl`); `None`: not kept.
    pub audit: Option<audit::AuditLog>,
    /// Hooks around every call and session (plugins', the configuration's).
    pub hooks: dispatch::HookSet,
    /// `$CADUCEUS_HOME`: where the agent's state lives (`memories/`,
    /// `skills/`); `None`: the memory and skill tools are not offered.
    pub home: Option<std::path::PathBuf>,
    /// Default placement labels and how long a call waits for a worker.
    pub placement: scheduler::PlacementConfig,
    /// Backends a model may pick per `terminal` call (its `backend`
    /// argument, offered only while more than one of them is attached);
    /// empty: no choice (`placement.backend_choice`).
    pub backend_choice: Vec<String>,
    /// `execute_code` limits (`code_execution.timeout`, `.max_tool_calls`).
    pub code_timeout_secs: u64,
    pub code_max_tool_calls: u32,
    /// The time cron schedules are read in (a test moves a manual clock).
    pub cron_clock: Arc<dyn cron::clock::Clock>,
    /// Tool providers (MCP servers with `on: {labels: …}`) that run on the
    /// workers carrying those labels.
    pub hosted: Vec<scheduler::hosted::HostedProviderConfig>,
    /// `worker_grants:`: which labels and hosted providers each worker
    /// token may claim (see `auth::grants`); `None`: not configured.
    pub worker_grants: Option<auth::WorkerGrants>,
    /// The auxiliary vision model (`auxiliary.vision`); `vision_analyze` and
    /// `browser_vision` are offered only with one.
    pub vision: Option<dispatch::vision::VisionModel>,
}

impl Default for CoordinatorConfig {
    fn default() -> Self {
        CoordinatorConfig {
            id: String::new(),
            token: String::new(),
            terminal_backend: "local".to_owned(),
            terminal_timeout_secs: 180,
            liveness: scheduler::Liveness::default(),
            max_foreground_timeout_secs: 600,
            environment_settings: Value::Object(serde_json::Map::new()),
            result_cap: 100_000,
            agent: AgentSettings::default(),
            audit: None,
            hooks: dispatch::HookSet::default(),
            home: None,
            placement: scheduler::PlacementConfig::default(),
            backend_choice: Vec::new(),
            code_timeout_secs: caduceus_common::execute_code::DEFAULT_TIMEOUT_SECS,
            code_max_tool_calls: caduceus_common::execute_code::DEFAULT_MAX_TOOL_CALLS,
            cron_clock: Arc::new(cron::clock::SystemClock),
            hosted: Vec::new(),
            worker_grants: None,
            vision: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    #[error("a coordinator needs a non-empty token (--token or CADUCEUS_TOKEN)")]
    MissingToken,
    #[error(transparent)]
    Tokens(#[from] TokenError),
    #[error("the built-in tools failed to register: {0}")]
    Registry(#[from] RegistryError),
    #[error("an actor failed to start: {0}")]
    Spawn(#[from] ractor::SpawnErr),
}

/// A running coordinator. Cheap to share behind an `Arc`.
pub struct Coordinator {
    id: String,
    config: CoordinatorConfig,
    registry: RegistryHandle,
    scheduler: SchedulerHandle,
    dispatcher: Arc<Dispatcher>,
    sessions: SessionHub,
    tokens: Arc<TokenStore>,
    /// Workers attached with a scoped token: revoking it, or its expiry,
    /// disconnects them.
    worker_tokens: Mutex<Vec<AttachedWith>>,
    metrics: metrics::Metrics,
    /// The `cronjob` tool nudges the Cron actor through it.
    cron_wake: Arc<tokio::sync::Notify>,
    /// The Cron actor, once [`Coordinator::start_cron`] started it.
    cron: Mutex<Option<cron::runner::CronActor>>,
}

/// A worker's command channel and the scoped token it attached with.
struct AttachedWith {
    token: TokenInfo,
    commands: CommandSender,
}

/// How often attached workers' tokens are checked for expiry.
const EXPIRY_CHECK: Duration = Duration::from_secs(1);

/// Where a worker's commands go (its attach response stream).
/// Commands to one attached worker. Unbounded: how many calls a worker may
/// hold is placement's decision (`--max-envs`) and whether it is gone is
/// liveness' (heartbeats), never the depth of a queue — a bounded queue
/// failed the 65th concurrent call on a healthy worker.
pub type CommandSender = mpsc::UnboundedSender<Result<WorkerCommand, Status>>;

/// The events a worker sends, from gRPC or from an in-process worker.
pub type WorkerEventStream = Pin<Box<dyn Stream<Item = Result<WorkerEvent, Status>> + Send>>;

/// A client's tool call: what the Control API's `CallTool` carries, and what
/// embedded front ends (`caduceus call`, `mcp serve`, the benches) build.
#[derive(Debug)]
pub struct ClientCall {
    pub tool: String,
    pub arguments: RawArguments,
    /// Empty: the `default` task.
    pub task_id: String,
    pub session_id: Option<String>,
    /// Who is calling (for the audit log).
    pub caller: Option<String>,
    /// Placement labels for the task (empty: leave them as they are).
    pub labels: std::collections::BTreeMap<String, String>,
    pub trace: Option<caduceus_proto::trace::TraceParent>,
}

impl ClientCall {
    /// `tool` with `arguments` in `task_id`, nothing else set.
    pub fn new(tool: &str, arguments: RawArguments, task_id: &str) -> Self {
        ClientCall {
            tool: tool.to_owned(),
            arguments,
            task_id: task_id.to_owned(),
            session_id: None,
            caller: None,
            labels: Default::default(),
            trace: None,
        }
    }
}

impl Coordinator {
    /// Starts the registry and scheduler actors with the built-in tools.
    pub async fn start(
        mut config: CoordinatorConfig,
        gate: Arc<dyn Gate>,
    ) -> Result<Arc<Self>, CoordinatorError> {
        if config.token.is_empty() {
            return Err(CoordinatorError::MissingToken);
        }
        // Scoped tokens live in the state database next to the sessions.
        let tokens = Arc::new(TokenStore::open(config.agent.state_db.as_deref())?);
        if config.id.is_empty() {
            config.id = format!("coord-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        }
        let mut initial = registry::builtin::builtin_registry(&config.terminal_backend)?;
        initial.set_backend_choice(config.backend_choice.iter().cloned());
        // delegate_task describes the live delegation limits.
        if let Some(schema) = initial.get("delegate_task").map(|e| e.schema.clone()) {
            initial.register(
                agent::delegate::registry_entry(schema, config.agent.delegation.clone()),
                false,
            )?;
        }
        let mut skill_sync = None;
        if let Some(home) = &config.home {
            let memory = Arc::new(memory::MemoryStore::new(home.join("memories")));
            initial.register(memory::registry_entry(memory.clone())?, false)?;
            config.agent.memory = Some(memory);
            let store = Arc::new(skills::SkillStore::new(home.join("skills")));
            for entry in skills::registry_entries(&store)? {
                initial.register(entry, false)?;
            }
            skill_sync = Some(Arc::new(skills::sync::SkillSync::new(store)));
        }
        initial.register(web::search_entry()?, false)?;
        if config.vision.is_some() {
            for entry in registry::builtin::vision_entries()? {
                initial.register(entry, false)?;
            }
        }
        let cron_wake = Arc::new(tokio::sync::Notify::new());
        if let Some(db) = &config.agent.state_db {
            initial.register(agent::search::registry_entry(db.clone())?, false)?;
            initial.register(
                cron::registry_entry(cron::CronTool::new(
                    db.clone(),
                    config.cron_clock.clone(),
                    cron_wake.clone(),
                ))?,
                false,
            )?;
        }
        let (registry, _) = RegistryHandle::start(initial).await?;
        let (notices, notices_rx) = mpsc::unbounded_channel();
        let metrics = metrics::Metrics::default();
        let (scheduler, _) = SchedulerHandle::start(
            registry.clone(),
            SchedulerConfig {
                liveness: config.liveness,
                notices: Some(notices),
                placement: config.placement.clone(),
                metrics: metrics.clone(),
                hosted: config.hosted.clone(),
            },
        )
        .await?;
        let dispatch_config = DispatchConfig {
            owner: config.id.clone(),
            default_result_cap: config.result_cap,
            terminal_timeout_secs: config.terminal_timeout_secs,
            max_foreground_timeout_secs: config.max_foreground_timeout_secs,
            environment_settings: config.environment_settings.clone(),
            audit: config.audit.clone(),
            metrics: metrics.clone(),
            code_timeout_secs: config.code_timeout_secs,
            code_max_tool_calls: config.code_max_tool_calls,
            vision: config.vision.clone(),
            ..DispatchConfig::default()
        };
        let mut dispatcher =
            Dispatcher::new(registry.clone(), scheduler.clone(), gate, dispatch_config);
        for hook in &config.hooks.0 {
            dispatcher.add_hook(hook.clone());
        }
        if let Some(sync) = skill_sync {
            dispatcher.set_skill_sync(sync);
        }
        let dispatcher = Arc::new(dispatcher);
        let sessions = SessionHub::new(dispatcher.clone(), config.agent.clone());
        // Background-process notices go to the session that started the process.
        sessions.spawn_notice_router(notices_rx);
        let coordinator = Arc::new(Coordinator {
            id: config.id.clone(),
            config,
            registry,
            scheduler,
            dispatcher,
            sessions,
            tokens,
            worker_tokens: Mutex::new(Vec::new()),
            metrics,
            cron_wake,
            cron: Mutex::new(None),
        });
        let weak = Arc::downgrade(&coordinator);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(EXPIRY_CHECK);
            loop {
                tick.tick().await;
                let Some(coordinator) = weak.upgrade() else {
                    break;
                };
                coordinator.disconnect_expired_workers().await;
            }
        });
        Ok(coordinator)
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn token(&self) -> &str {
        &self.config.token
    }

    /// Checks the tokens of requests (the shared one and the scoped ones).
    pub fn authenticator(&self) -> Authenticator {
        Authenticator::new(&self.config.token, self.tokens.clone())
            .with_audit(self.config.audit.clone())
    }

    /// The audit log, when one is kept.
    pub fn audit(&self) -> Option<&audit::AuditLog> {
        self.config.audit.as_ref()
    }

    /// The scoped tokens.
    pub fn tokens(&self) -> &Arc<TokenStore> {
        &self.tokens
    }

    /// Remembers that the worker reading `commands` attached with the scoped
    /// token `token`, so that revoking the token, or its expiry, disconnects it.
    pub fn worker_attached_with(&self, token: TokenInfo, commands: CommandSender) {
        let mut attached = self.worker_tokens.lock().unwrap_or_else(|e| e.into_inner());
        attached.retain(|a| !a.commands.is_closed());
        attached.push(AttachedWith { token, commands });
    }

    /// Revokes the token with id `which` (or every live one named so) and
    /// ends the streams of the workers attached with it: they see
    /// `UNAUTHENTICATED`, and their reconnection is refused. Returns the
    /// revoked tokens and how many workers were disconnected.
    pub async fn revoke_token(&self, which: &str) -> Result<(Vec<TokenInfo>, usize), TokenError> {
        let tokens = self.tokens.clone();
        let which_owned = which.to_owned();
        let revoked = tokio::task::spawn_blocking(move || tokens.revoke(&which_owned))
            .await
            .unwrap_or_else(|err| Err(TokenError::Interrupted(err.to_string())))?;
        for token in &revoked {
            tracing::info!(id = %token.id, name = %token.name, role = token.role.as_str(), "token revoked");
        }
        let disconnected = self
            .disconnect_workers(
                |token| revoked.iter().any(|t| t.id == token.id),
                "revoked token: the token '{name}' this worker attached with was revoked",
            )
            .await;
        Ok((revoked, disconnected))
    }

    /// Disconnects the workers whose token has expired since they attached.
    async fn disconnect_expired_workers(&self) {
        let now = auth::tokens::now_secs();
        self.disconnect_workers(
            |token| token.expires_at.is_some_and(|at| at <= now),
            "expired token: the token '{name}' this worker attached with has expired",
        )
        .await;
    }

    /// Ends the attach streams of the workers whose token is `hit`, with
    /// `UNAUTHENTICATED` and `message` (`{name}`: the token's name); how many.
    async fn disconnect_workers(&self, hit: impl Fn(&TokenInfo) -> bool, message: &str) -> usize {
        let streams: Vec<AttachedWith> = {
            let mut attached = self.worker_tokens.lock().unwrap_or_else(|e| e.into_inner());
            let (hit, kept) = std::mem::take(&mut *attached)
                .into_iter()
                .partition(|a| hit(&a.token));
            *attached = kept;
            hit
        };
        let mut disconnected = 0;
        for AttachedWith { token, commands } in streams {
            let status = Status::unauthenticated(message.replace("{name}", &token.name));
            // Ending the response stream with an error closes the attach; a
            // worker too busy to take it gets it as soon as it reads again.
            if commands.send(Err(status)).is_ok() {
                disconnected += 1;
            }
        }
        disconnected
    }

    /// Approval state of the command guard; `None` when the coordinator runs
    /// without one (an open gate).
    pub fn approvals(&self) -> Option<Arc<gate::Approvals>> {
        self.dispatcher.gate().approvals()
    }

    pub fn registry(&self) -> &RegistryHandle {
        &self.registry
    }

    pub fn scheduler(&self) -> &SchedulerHandle {
        &self.scheduler
    }

    pub fn dispatcher(&self) -> &Arc<Dispatcher> {
        &self.dispatcher
    }

    /// Agent sessions: start, cancel, answer clarify questions.
    pub fn sessions(&self) -> &SessionHub {
        &self.sessions
    }

    /// Starts the Cron actor (a served coordinator, after it resumed its
    /// predecessor's sessions): due jobs run from now on, and the runs a
    /// dead predecessor left unfinished are adopted. `false` without a
    /// state database, or when it already runs.
    pub fn start_cron(&self) -> bool {
        let Some(db) = self.config.agent.state_db.clone() else {
            return false;
        };
        let mut cron = self.cron.lock().unwrap_or_else(|e| e.into_inner());
        if cron.is_some() {
            return false;
        }
        *cron = cron::runner::CronActor::start(cron::runner::CronStart {
            db,
            clock: self.config.cron_clock.clone(),
            wake: self.cron_wake.clone(),
            hub: self.sessions.clone(),
            home: self.config.home.clone(),
        });
        cron.is_some()
    }

    /// One tool call through the whole pipeline, as a client makes it.
    /// Non-empty `labels` become the task's placement labels (they decide
    /// where its environment goes when it has none yet); a `trace` continues
    /// the client's (its `traceparent`).
    pub async fn call_tool(&self, call: ClientCall) -> ToolResult {
        let ClientCall {
            tool,
            arguments,
            task_id,
            session_id,
            caller,
            labels,
            trace,
        } = call;
        let task_id = task_id.as_str();
        let task_id = if task_id.is_empty() {
            "default"
        } else {
            task_id
        };
        if !labels.is_empty() {
            self.scheduler.set_task_labels(task_id, labels);
        }
        self.dispatcher
            .call(CallRequest {
                tool,
                arguments,
                ctx: CallContext {
                    task_id: task_id.to_owned(),
                    session_id,
                    caller,
                    trace,
                    ..CallContext::default()
                },
            })
            .await
    }

    /// The definitions a model with `filter` would see, and the registry generation.
    pub fn definitions(&self, filter: &ToolFilter) -> Result<(Vec<Value>, u64), RegistryError> {
        let snapshot = self.registry.snapshot();
        Ok((snapshot.definitions(filter)?, snapshot.generation()))
    }

    /// The metrics as a scrape of `GET /metrics` reads them (OpenMetrics
    /// text): the counters, and the gauges read from the live state now.
    pub async fn metrics_text(&self) -> String {
        let workers = self.scheduler.status().await;
        let sessions = self.sessions.statuses();
        let child_sessions = sessions.iter().filter(|s| !s.parent_id.is_empty()).count();
        let live = metrics::LiveState {
            environment_backends: workers
                .iter()
                .flat_map(|w| w.environments.iter().map(|e| e.backend.clone()))
                .collect(),
            worker_states: workers.into_iter().map(|w| w.state).collect(),
            top_level_sessions: sessions.len() - child_sessions,
            child_sessions,
            approvals_pending: self.approvals().map_or(0, |a| a.list().len()),
        };
        self.metrics.render(live).await
    }

    pub async fn status(&self) -> StatusResponse {
        StatusResponse {
            coordinator_id: self.id.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            workers: self.scheduler.status().await,
            sessions: self.sessions.statuses(),
            registry_generation: self.registry.snapshot().generation(),
        }
    }

    /// Cordons (no new environments) or uncordons a worker by name.
    pub async fn cordon_worker(
        &self,
        name: &str,
        cordon: bool,
    ) -> Result<caduceus_proto::WorkerStatus, scheduler::OperationError> {
        self.scheduler.cordon(name, cordon).await
    }

    /// Drains a worker by name: no new environments, its running calls
    /// finish, its environments end, and the worker process exits 0.
    pub async fn drain_worker(
        &self,
        name: &str,
    ) -> Result<caduceus_proto::WorkerStatus, scheduler::OperationError> {
        self.scheduler.drain(name).await
    }

    pub async fn release_environment(&self, task_id: &str) -> bool {
        self.dispatcher.forget_task(task_id);
        self.scheduler.release(task_id).await
    }

    /// Attaches a worker whose events arrive on `events` and whose commands go
    /// to `commands`. The first event must be its hello; the first command it
    /// receives is the welcome. Returns once the worker has joined; a task keeps
    /// reading its events until the stream ends.
    pub async fn attach_worker(
        &self,
        events: WorkerEventStream,
        commands: CommandSender,
        peer: String,
    ) -> Result<String, Status> {
        self.attach_worker_as(events, commands, peer, None).await
    }

    /// What a worker attaching as `caller` may claim (`None`: an in-process
    /// worker, unrestricted), under this coordinator's `worker_grants`.
    pub fn worker_grant(&self, caller: Option<&auth::Caller>) -> auth::WorkerGrant {
        auth::WorkerGrant::for_caller(caller, self.config.worker_grants.as_ref())
    }

    /// Attaches a worker that presented `caller`'s credential: a hello
    /// claiming labels beyond its grant is refused, and it is given only
    /// the hosted providers its grant allows.
    pub async fn attach_worker_as(
        &self,
        mut events: WorkerEventStream,
        commands: CommandSender,
        peer: String,
        caller: Option<&auth::Caller>,
    ) -> Result<String, Status> {
        let grant = self.worker_grant(caller);
        let first = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .map_err(|_| Status::deadline_exceeded("no hello within 10s of attaching"))?;
        let hello = match first {
            Some(Ok(WorkerEvent {
                event: Some(worker_event::Event::Hello(hello)),
            })) => hello,
            Some(Ok(_)) => {
                return Err(Status::invalid_argument(
                    "the first message on Attach must be a hello",
                ));
            }
            Some(Err(status)) => return Err(status),
            None => {
                return Err(Status::cancelled(
                    "the worker closed the stream before its hello",
                ));
            }
        };
        if let Err(refusal) = grant.check_labels(&hello.labels) {
            tracing::warn!(worker = %hello.name, %peer, token = %grant.token, "attach refused: {refusal}");
            return Err(Status::permission_denied(refusal));
        }
        let attached = self
            .scheduler
            .attach(hello, peer, commands.clone(), grant.host)
            .await
            .map_err(|err| match err {
                AttachError::DuplicateName(_) => Status::already_exists(err.to_string()),
                AttachError::InvalidHello(_) => Status::invalid_argument(err.to_string()),
                AttachError::Unavailable => Status::unavailable(err.to_string()),
            })?;
        let welcome = WorkerCommand {
            command: Some(worker_command::Command::Welcome(Welcome {
                worker_id: attached.worker_id.clone(),
                coordinator_id: self.id.clone(),
                heartbeat_interval_ms: millis(self.config.liveness.heartbeat_interval),
                lost_after_ms: millis(self.config.liveness.lost_after),
                stale: attached.stale,
            })),
        };
        if commands.send(Ok(welcome)).is_err() {
            attached
                .link
                .stop(Some("the worker left before its welcome".to_owned()));
            return Err(Status::cancelled("the worker left before its welcome"));
        }
        // Right after the welcome, before any call: the worker starts the
        // providers it is to host (stops those it is no longer to host) and
        // announces their tools.
        let _ = commands.send(Ok(WorkerCommand {
            command: Some(worker_command::Command::Host(attached.host)),
        }));
        tokio::spawn(scheduler::link::read_events(
            events,
            attached.link,
            attached.calls,
        ));
        Ok(attached.worker_id)
    }

    /// Stops accepting calls and stops the actors. Sessions are cancelled,
    /// except durable ones (a served coordinator's): those stay recorded as
    /// running, and the next coordinator on the database resumes them.
    pub fn shutdown(&self) {
        if let Some(cron) = self.cron.lock().unwrap_or_else(|e| e.into_inner()).take() {
            cron.stop();
        }
        if !self.config.agent.durable {
            self.sessions.cancel_all();
        }
        self.scheduler.stop();
        self.registry.stop();
    }
}

fn millis(duration: Duration) -> u32 {
    u32::try_from(duration.as_millis()).unwrap_or(u32::MAX)
}

/// Sends `message` to `actor` and waits for the reply; `None` when the actor
/// is gone or dropped the reply port.
pub(crate) async fn ask<M: Message, T: Send + 'static>(
    actor: &ActorRef<M>,
    message: impl FnOnce(RpcReplyPort<T>) -> M,
) -> Option<T> {
    match actor.call(message, None).await {
        Ok(ractor::rpc::CallResult::Success(reply)) => Some(reply),
        _ => None,
    }
}
