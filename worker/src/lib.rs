//! The caduceus worker: hosts task environments (a sandbox, its live shell,
//! its background processes) and runs the worker tools in them for a
//! coordinator it attaches to. See `README.md`.

pub mod backends;
pub mod browser;
pub mod env;
pub mod hosted;
pub mod link;
pub mod metrics;
pub mod process;
mod recovery;
pub mod sandbox;
pub mod shell;
pub mod tools;
pub mod url_guard;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use caduceus_common::result::ToolReply;
use caduceus_proto::{
    CallResult, EnvironmentNotice, Heartbeat, Hello, PersistResult, RunCall, ScriptToolResult,
};

use backends::Backends;
use env::{EnvManager, EnvSettings};
use process::notice::NoticeHub;
use shell::Secret;
use tools::{ToolCall, ToolSettings};

/// How long the pool waits after handing out a sandbox before starting its
/// replacement (starting a container loads the engine for a few hundred ms).
const POOL_REFILL_DELAY: Duration = Duration::from_millis(750);

/// How long a graceful stop waits for cancelled calls to answer.
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// Everything a worker needs to start.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub name: String,
    pub labels: HashMap<String, String>,
    /// Backends to offer ("local", …); those this worker cannot serve are dropped.
    pub backends: Vec<String>,
    /// Calls this worker runs at once before the scheduler prefers others.
    pub capacity: u32,
    /// Environments this worker holds at most (`--max-envs`); the scheduler
    /// places no new task on it when full. 0 = no limit.
    pub max_environments: u32,
    /// Directory local environments start in.
    pub local_cwd: String,
    /// Settings of the Docker, SSH and Singularity backends, leases and
    /// warm pools.
    pub backend_options: backends::BackendOptions,
    pub tools: ToolSettings,
    /// Environment of every sandbox shell (already sanitized).
    pub shell_env: Vec<(String, String)>,
    /// Commands every shell runs once at start.
    pub shell_init: Vec<String>,
    /// Shells read the login files at start (`bash -l` semantics, as hermes).
    pub login_shell: bool,
    /// Files every shell sources once at start (hermes
    /// `terminal.shell_init_files`, or `~/.profile`, `~/.bash_profile`,
    /// `~/.bashrc` with `auto_source_bashrc`); `~/` is the sandbox's home.
    pub shell_init_files: Vec<String>,
    /// Password `sudo` gets in the sandboxes (hermes `SUDO_PASSWORD`).
    pub sudo_password: Option<Secret>,
    /// Idle environments older than this are ended (hermes: 300 s).
    pub env_lifetime: Duration,
    /// How often the reaper looks (hermes: 60 s).
    pub reap_interval: Duration,
    /// How often backend availability is probed (changes go out with the
    /// next heartbeat at once).
    pub backend_probe_interval: Duration,
    /// The browser toolset (offered when Chromium is found).
    pub browser: browser::BrowserSettings,
    /// Run the MCP servers the coordinator asks this worker to host
    /// (`--host-mcp`; off: they are refused, logged).
    pub host_mcp: bool,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            name: "worker".to_owned(),
            labels: HashMap::new(),
            backends: vec!["local".to_owned()],
            capacity: 16,
            max_environments: 0,
            local_cwd: std::env::current_dir()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "/".to_owned()),
            backend_options: backends::BackendOptions::default(),
            tools: ToolSettings::default(),
            shell_env: Vec::new(),
            shell_init: Vec::new(),
            login_shell: false,
            shell_init_files: Vec::new(),
            sudo_password: None,
            env_lifetime: Duration::from_secs(300),
            reap_interval: Duration::from_secs(60),
            backend_probe_interval: Duration::from_secs(15),
            browser: browser::BrowserSettings::default(),
            host_mcp: false,
        }
    }
}

pub struct Worker {
    config: WorkerConfig,
    instance_id: String,
    envs: EnvManager,
    /// call id -> its cancel token
    calls: std::sync::Mutex<HashMap<String, CancellationToken>>,
    /// `execute_code` call id -> where the coordinator's answers to its
    /// script's tool calls go.
    scripts:
        std::sync::Mutex<HashMap<String, tokio::sync::mpsc::UnboundedSender<ScriptToolResult>>>,
    draining: AtomicBool,
    /// Woken when something heartbeats carry changed (backend availability).
    heartbeat_due: tokio::sync::Notify,
    /// Background-process notices waiting for the coordinator link.
    notices: tokio::sync::Mutex<tokio::sync::mpsc::Receiver<EnvironmentNotice>>,
    metrics: metrics::WorkerMetrics,
    browsers: Arc<browser::Browsers>,
    /// MCP servers the coordinator asked this worker to host.
    hosted: hosted::Hosted,
}

impl Worker {
    pub fn new(config: WorkerConfig) -> Arc<Self> {
        let instance_id = uuid::Uuid::new_v4().simple().to_string();
        let options = backends::BackendOptions {
            worker: config.name.clone(),
            worker_instance: instance_id.clone(),
            // Chromium and hosted MCP servers run on the host, outside the
            // environments: the ledger's guardian ends them with the worker.
            host_processes: config.browser.program.is_some() || config.host_mcp,
            ..config.backend_options.clone()
        };
        let (backends, refused) =
            Backends::with_options(&config.backends, &config.local_cwd, &options);
        for reason in refused {
            tracing::warn!("{reason}");
        }
        let browsers = Arc::new(browser::Browsers::new(
            browser::BrowserSettings {
                owner: config.name.clone(),
                ..config.browser.clone()
            },
            backends.ledger().cloned(),
        ));
        let hosting = hosted::HostingPolicy {
            enabled: config.host_mcp,
            tag: backends.ledger().map(|l| l.tag()),
        };
        let (hub, notices) = NoticeHub::new();
        let envs = EnvManager::new(
            backends,
            EnvSettings {
                shell_env: config.shell_env.clone(),
                shell_init: config.shell_init.clone(),
                login_shell: config.login_shell,
                shell_init_files: config.shell_init_files.clone(),
                sudo_password: config.sudo_password.clone(),
                notices: hub,
                browsers: Some(browsers.clone()),
            },
        );
        Arc::new(Worker {
            config,
            instance_id,
            envs,
            calls: std::sync::Mutex::new(HashMap::new()),
            scripts: std::sync::Mutex::new(HashMap::new()),
            draining: AtomicBool::new(false),
            heartbeat_due: tokio::sync::Notify::new(),
            notices: tokio::sync::Mutex::new(notices),
            metrics: metrics::WorkerMetrics::new(),
            browsers,
            hosted: hosted::Hosted::new(Arc::new(caduceus_mcp::sdk::RmcpConnector), hosting),
        })
    }

    /// The worker's browsers (one per task).
    pub fn browsers(&self) -> &Arc<browser::Browsers> {
        &self.browsers
    }

    /// The MCP servers this worker hosts for its coordinator.
    pub fn hosted(&self) -> &hosted::Hosted {
        &self.hosted
    }

    /// The toolsets this worker serves beyond the environment tools.
    fn toolsets(&self) -> Vec<String> {
        let mut toolsets = Vec::new();
        if self.browsers.available() {
            toolsets.push("browser".to_owned());
        }
        if self.config.tools.speech.espeak.is_some() {
            toolsets.push("tts".to_owned());
        }
        toolsets
    }

    /// Probes the backends and sweeps once, then keeps doing so in the
    /// background until `shutdown`: availability every
    /// `backend_probe_interval`, lease renewal every `lease.renew_every`,
    /// sweeps every `lease.sweep_every`, warm pools refilled on demand.
    pub async fn start_housekeeping(self: &Arc<Self>, shutdown: CancellationToken) {
        self.envs.backends().refresh().await;
        self.sweep().await;
        let worker = self.clone();
        tokio::spawn(async move { worker.housekeeping(shutdown).await });
    }

    async fn housekeeping(self: Arc<Self>, shutdown: CancellationToken) {
        let tick = |every: Duration| {
            let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            interval
        };
        let mut probe = tick(
            self.config
                .backend_probe_interval
                .max(Duration::from_millis(100)),
        );
        let mut renew = tick(self.config.backend_options.lease.renew_every);
        let mut sweep = tick(self.config.backend_options.lease.sweep_every);
        let mut pool_retry = tick(Duration::from_secs(60));
        let pools = self.clone();
        let pool_shutdown = shutdown.clone();
        // Refilling can take seconds per sandbox: its own task, so renewals
        // and sweeps never wait behind it.
        tokio::spawn(async move {
            loop {
                pools.envs.backends().refill_pools().await;
                tokio::select! {
                    () = pools.envs.backends().pools().wanted() => {
                        // An entry was just handed out: let its first
                        // command run before the engine starts a container.
                        tokio::time::sleep(POOL_REFILL_DELAY).await;
                    }
                    () = tokio::time::sleep(Duration::from_secs(5)) => {}
                    () = pool_shutdown.cancelled() => break,
                }
            }
        });
        loop {
            tokio::select! {
                _ = probe.tick() => {
                    if self.envs.backends().refresh().await {
                        tracing::info!(available = ?self.envs.backends().available(), "backend availability changed");
                        self.heartbeat_due.notify_one();
                    }
                }
                _ = renew.tick() => {
                    self.envs.renew_leases().await;
                    self.envs.backends().pools().renew().await;
                }
                _ = sweep.tick() => { self.sweep().await; }
                _ = pool_retry.tick() => self.envs.backends().pools().reset_failures(),
                () = shutdown.cancelled() => break,
            }
        }
    }

    /// Removes sandboxes of any worker whose lease expired, and this
    /// worker's own sandboxes that nothing holds any more.
    pub async fn sweep(&self) -> Vec<String> {
        let removed = self
            .envs
            .backends()
            .sweep(&self.envs.sweep_context(&self.instance_id))
            .await;
        if !removed.is_empty() {
            tracing::info!(count = removed.len(), "sweeper removed sandboxes");
            self.metrics.swept(removed.len());
        }
        removed
    }

    /// Resolves when a heartbeat should go out before its time.
    pub async fn heartbeat_due(&self) {
        self.heartbeat_due.notified().await;
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Random per process: sandboxes it creates carry it as their owner.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    pub fn environments(&self) -> &EnvManager {
        &self.envs
    }

    /// What `worker --metrics` serves.
    pub fn metrics(&self) -> &metrics::WorkerMetrics {
        &self.metrics
    }

    /// The queue of background-process notices for the coordinator. One
    /// connection at a time holds it; notices raised while no link is up wait
    /// here.
    pub fn notices(&self) -> &tokio::sync::Mutex<tokio::sync::mpsc::Receiver<EnvironmentNotice>> {
        &self.notices
    }

    pub fn hello(&self) -> Hello {
        Hello {
            name: self.config.name.clone(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            labels: self.config.labels.clone(),
            backends: self.envs.backends().available(),
            capacity: self.config.capacity,
            max_environments: self.config.max_environments,
            environments: self.envs.infos(),
            instance_id: self.instance_id.clone(),
            toolsets: self.toolsets(),
        }
    }

    pub fn heartbeat(&self) -> Heartbeat {
        Heartbeat {
            environments: self.envs.infos(),
            backends: if self.draining.load(Ordering::Relaxed) {
                Vec::new()
            } else {
                self.envs.backends().available()
            },
        }
    }

    pub fn running_calls(&self) -> usize {
        self.calls.lock().map(|c| c.len()).unwrap_or(0)
    }

    pub fn set_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// Cancels one running call (its command's process tree is stopped).
    pub fn cancel(&self, call_id: &str) -> bool {
        match self
            .calls
            .lock()
            .ok()
            .and_then(|calls| calls.get(call_id).cloned())
        {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Cancels every running call (the link to the coordinator was lost).
    pub fn cancel_all(&self) {
        if let Ok(calls) = self.calls.lock() {
            for token in calls.values() {
                token.cancel();
            }
        }
    }

    /// Runs one call to completion. Never fails: problems are error results.
    /// Its log lines carry the coordinator's trace id (`RunCall.traceparent`).
    /// Opens the answer channel of an `execute_code` call's script (before
    /// the call runs, so no answer can arrive unrouted).
    pub fn open_script(
        &self,
        call_id: &str,
        upstream: tokio::sync::mpsc::Sender<caduceus_proto::WorkerEvent>,
    ) -> tools::code::ScriptLink {
        let (tx, answers) = tokio::sync::mpsc::unbounded_channel();
        if let Ok(mut scripts) = self.scripts.lock() {
            scripts.insert(call_id.to_owned(), tx);
        }
        tools::code::ScriptLink { upstream, answers }
    }

    /// Routes the coordinator's answer to a script's tool call; one for a
    /// run that has ended is dropped.
    pub fn script_answer(&self, answer: ScriptToolResult) {
        let sender = self
            .scripts
            .lock()
            .ok()
            .and_then(|s| s.get(&answer.call_id).cloned());
        if let Some(sender) = sender {
            let _ = sender.send(answer);
        }
    }

    /// Forgets a script's answer channel (its call is over).
    pub fn close_script(&self, call_id: &str) {
        if let Ok(mut scripts) = self.scripts.lock() {
            scripts.remove(call_id);
        }
    }

    pub async fn run_call(
        &self,
        call: RunCall,
        script: Option<tools::code::ScriptLink>,
    ) -> CallResult {
        let trace = caduceus_proto::trace::TraceParent::parse(&call.traceparent);
        let span = tracing::info_span!(
            "tool_call",
            trace_id = %trace.map(|t| t.trace_id_hex()).unwrap_or_default(),
            parent_span_id = %trace.map(|t| t.span_id_hex()).unwrap_or_default(),
            tool = %call.tool,
            task = %call.task_id,
        );
        self.run_call_in_span(call, script).instrument(span).await
    }

    async fn run_call_in_span(
        &self,
        call: RunCall,
        script: Option<tools::code::ScriptLink>,
    ) -> CallResult {
        let started = Instant::now();
        let cancel = CancellationToken::new();
        if let Ok(mut calls) = self.calls.lock() {
            calls.insert(call.call_id.clone(), cancel.clone());
        }
        let (reply, reset) = self.execute(&call, cancel, script).await;
        if let Ok(mut calls) = self.calls.lock() {
            calls.remove(&call.call_id);
        }
        self.close_script(&call.call_id);
        // The call's status is final here: counted and logged once.
        self.metrics
            .call_finished(&call.tool, reply.status, started.elapsed());
        tracing::info!(
            status = reply.status.as_str(),
            duration_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            "tool call finished"
        );
        call_result(call.call_id, reply, reset, started)
    }

    /// Saves a coordinator-side result in the task's existing environment;
    /// the answer's body is the file's path there.
    pub async fn persist_result(&self, persist: PersistResult) -> CallResult {
        let started = Instant::now();
        let reply = match self.envs.get(&persist.task_id) {
            Some(env) => {
                match tools::persist_in_sandbox(&env, &persist.result_id, &persist.content).await {
                    Ok(path) => ToolReply::ok(path),
                    Err(err) => ToolReply::error(err),
                }
            }
            None => ToolReply::error(format!(
                "task '{}' has no environment on worker '{}'",
                persist.task_id, self.config.name
            )),
        };
        call_result(persist.call_id, reply, None, started)
    }

    /// Runs the call; the second value is the notice when the environment
    /// had to be recreated because its sandbox was gone.
    async fn execute(
        &self,
        call: &RunCall,
        cancel: CancellationToken,
        script: Option<tools::code::ScriptLink>,
    ) -> (ToolReply, Option<String>) {
        if self.draining.load(Ordering::Relaxed) {
            return (
                ToolReply::error(format!(
                    "worker '{}' is draining and takes no new calls",
                    self.config.name
                )),
                None,
            );
        }
        let args: Map<String, Value> = match serde_json::from_str(&call.arguments_json) {
            Ok(Value::Object(map)) => map,
            _ => {
                return (
                    ToolReply::error(
                        "Invalid tool arguments: the worker received arguments that are not a JSON object",
                    ),
                    None,
                );
            }
        };
        if !call.provider.is_empty() {
            // A hosted MCP server's tool: next to this host, in no environment.
            return (
                self.hosted
                    .call(&call.provider, &call.tool, args, &cancel)
                    .await,
                None,
            );
        }
        if call.tool == "process" {
            return (self.run_process(call, &args, &cancel).await, None);
        }
        let env = match self.environment_for(call).await {
            Ok(env) => env,
            Err(reply) => return (reply, None),
        };
        let (env, reset) = match recovery::live(&self.envs, env, &call.task_id).await {
            Ok(found) => found,
            Err(reply) => return (reply, None),
        };
        if let Some(setting) = env.sandbox.network_cut()
            && reaches_network(&call.tool, &args)
        {
            return (
                ToolReply::failed_json(&serde_json::json!({
                    "success": false,
                    "error": format!(
                        "{} is refused here: this environment has no network ({setting}), and the tool would reach the network from the worker on its behalf",
                        call.tool
                    ),
                })),
                reset,
            );
        }
        if browser::is_browser_tool(&call.tool) {
            // The browser belongs to the task's environment (it ends with
            // it), but runs on this worker's host.
            let _running = env.begin_call();
            let reply = if call.tool == "browser_vision" {
                self.browser_vision(&env, &call.task_id, &args).await
            } else {
                self.browsers.run(&call.task_id, &call.tool, &args).await
            };
            let env = self.envs.get(&call.task_id);
            return (
                tools::cap_if_needed(env.as_deref(), &call.call_id, reply, call.result_cap_chars)
                    .await,
                reset,
            );
        }
        let started = std::time::SystemTime::now();
        let reply = self
            .run_tool(call, args.clone(), env.clone(), cancel.clone(), script)
            .await;
        match recovery::after_call(&self.envs, env, started, reset).await {
            recovery::AfterCall::Done(reset) => (reply, reset),
            recovery::AfterCall::Rerun(fresh, reset) => {
                (self.run_tool(call, args, fresh, cancel, None).await, reset)
            }
        }
    }

    /// `browser_vision`'s screenshot, saved in the task's environment and
    /// sent to the coordinator, which asks the vision model.
    async fn browser_vision(
        &self,
        env: &env::Environment,
        task_id: &str,
        args: &Map<String, Value>,
    ) -> ToolReply {
        use base64::Engine;
        let annotate = args
            .get("annotate")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let png = match self.browsers.screenshot(task_id, annotate).await {
            Ok(data) => base64::engine::general_purpose::STANDARD.decode(data),
            Err(err) => {
                return ToolReply::failed_json(&serde_json::json!({
                    "success": false,
                    "error": format!("Error during vision analysis: {err}"),
                }));
            }
        };
        let Ok(png) = png else {
            return ToolReply::failed_json(&serde_json::json!({
                "success": false,
                "error": "Error during vision analysis: the screenshot was not valid base64",
            }));
        };
        let mut extra = Map::new();
        if let Some(path) = tools::image::save_screenshot(env, &png).await {
            extra.insert("screenshot_path".to_owned(), Value::String(path));
        }
        tools::image::image_document("image/png", &png, extra)
    }

    /// The process tool never creates an environment: it finds the process
    /// (or lists the task's processes) where they are.
    async fn run_process(
        &self,
        call: &RunCall,
        args: &Map<String, Value>,
        cancel: &CancellationToken,
    ) -> ToolReply {
        let process_call = tools::process::ProcessCall {
            envs: &self.envs,
            task_id: &call.task_id,
            session_id: &call.session_id,
            args,
            cancel,
            max_wait: call_timeout(call).unwrap_or(Duration::ZERO),
        };
        let reply = tools::process::run(process_call).await;
        let env = self.envs.get(&call.task_id);
        tools::cap_if_needed(env.as_deref(), &call.call_id, reply, call.result_cap_chars).await
    }

    /// The task's environment, created on the call's backend when it has none.
    async fn environment_for(&self, call: &RunCall) -> Result<Arc<env::Environment>, ToolReply> {
        let spec = call.environment.clone().unwrap_or_default();
        let request = backends::CreateRequest {
            task_id: call.task_id.clone(),
            owner: spec.owner.clone(),
            worker: self.config.name.clone(),
            worker_instance: self.instance_id.clone(),
            settings: serde_json::from_str(&spec.settings_json).unwrap_or(Value::Null),
        };
        self.envs
            .get_or_create(&spec.backend, &request)
            .await
            .map_err(|err| {
                ToolReply::error(format!(
                    "Could not create the environment for task '{}': {err}",
                    call.task_id
                ))
            })
    }

    async fn run_tool(
        &self,
        call: &RunCall,
        args: Map<String, Value>,
        env: Arc<env::Environment>,
        cancel: CancellationToken,
        script: Option<tools::code::ScriptLink>,
    ) -> ToolReply {
        let _running = env.begin_call();
        tools::run(
            &self.config.tools,
            ToolCall {
                call_id: call.call_id.clone(),
                session_id: call.session_id.clone(),
                tool: call.tool.clone(),
                args,
                env: env.clone(),
                cancel,
                result_cap: call.result_cap_chars,
                timeout: call_timeout(call),
                script_tools: call.script_tools.clone(),
                script,
            },
        )
        .await
    }

    /// Ends idle environments; returns the task ids ended.
    pub async fn reap_idle(&self) -> Vec<String> {
        let reaped = self.envs.reap_idle(self.config.env_lifetime).await;
        self.metrics.reaped(reaped.len());
        reaped
    }

    pub fn reap_interval(&self) -> Duration {
        self.config.reap_interval
    }

    /// The first half of a graceful stop (SIGTERM, SIGINT): take no new
    /// calls, let the running ones finish within `grace`, then cancel what is
    /// left (the whole command, see `shell/`) and wait for those results.
    /// The link then tells the coordinator and [`Worker::shutdown`] ends the
    /// environments.
    pub async fn stop_gracefully(&self, grace: Duration) {
        self.set_draining();
        self.heartbeat_due.notify_one();
        let deadline = Instant::now() + grace;
        while self.running_calls() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if self.running_calls() > 0 {
            tracing::info!(
                calls = self.running_calls(),
                "shutdown grace over; cancelling the calls still running"
            );
            self.cancel_all();
            // A cancelled command is stopped within a few kill rounds; a
            // backend that hangs must not keep the worker from exiting.
            let cancelled = Instant::now() + CANCEL_WAIT;
            while self.running_calls() > 0 && Instant::now() < cancelled {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// Ends every environment and warm-pool sandbox (worker shutdown).
    pub async fn shutdown(&self) {
        self.cancel_all();
        self.hosted.stop_all().await;
        // Its own layer: a browser whose environment is already gone (or
        // whose end fails) is closed here all the same.
        self.browsers.close_all().await;
        self.envs.shutdown().await;
    }
}

/// The command timeout the coordinator decided; `None` when it sent none.
fn call_timeout(call: &RunCall) -> Option<Duration> {
    (call.timeout_ms > 0).then(|| Duration::from_millis(call.timeout_ms))
}

/// The wire form of a finished call.
fn call_result(
    call_id: String,
    reply: ToolReply,
    reset: Option<String>,
    started: Instant,
) -> CallResult {
    CallResult {
        call_id,
        // Whatever the tool printed, no secret this worker knows leaves it.
        body: match caduceus_common::redact::mask_known_secrets(&reply.body) {
            std::borrow::Cow::Owned(masked) => masked,
            std::borrow::Cow::Borrowed(_) => reply.body,
        },
        status: caduceus_proto::CallStatus::from(reply.status) as i32,
        environment_reset: reset.unwrap_or_default(),
        duration_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
    }
}

/// The outside-world tools whose call reaches the network from the worker:
/// the browser, `web_extract`, and `vision_analyze` of an http(s) image
/// (one read from the environment's files does not).
fn reaches_network(tool: &str, args: &Map<String, Value>) -> bool {
    match tool {
        tools::web::TOOL => true,
        tools::image::TOOL => args
            .get("image_url")
            .and_then(Value::as_str)
            .map(|u| u.trim().to_ascii_lowercase())
            .is_some_and(|u| u.starts_with("http://") || u.starts_with("https://")),
        other => browser::is_browser_tool(other),
    }
}
