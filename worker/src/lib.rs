//! The caduceus worker: hosts task environments (a sandbox, its live shell,
//! its background processes) and runs the worker tools in them for a
//! coordinator it attaches to. See `README.md`.

pub mod backends;
pub mod env;
pub mod link;
pub mod process;
pub mod sandbox;
pub mod shell;
pub mod tools;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use caduceus_common::result::tool_error;
use caduceus_proto::{CallResult, EnvironmentNotice, Heartbeat, Hello, RunCall};

use backends::Backends;
use env::{EnvManager, EnvSettings};
use process::notice::NoticeHub;
use shell::Secret;
use tools::{OutputSink, ToolCall, ToolSettings};

/// Everything a worker needs to start.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub name: String,
    pub labels: HashMap<String, String>,
    /// Backends to offer ("local", …); those this worker cannot serve are dropped.
    pub backends: Vec<String>,
    /// Calls this worker runs at once before the scheduler prefers others.
    pub capacity: u32,
    /// Directory local environments start in.
    pub local_cwd: String,
    /// Settings of the SSH and Singularity backends.
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
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            name: "worker".to_owned(),
            labels: HashMap::new(),
            backends: vec!["local".to_owned()],
            capacity: 16,
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
        }
    }
}

pub struct Worker {
    config: WorkerConfig,
    instance_id: String,
    envs: EnvManager,
    /// call id -> its cancel token
    calls: std::sync::Mutex<HashMap<String, CancellationToken>>,
    draining: AtomicBool,
    /// Background-process notices waiting for the coordinator link.
    notices: tokio::sync::Mutex<tokio::sync::mpsc::Receiver<EnvironmentNotice>>,
}

impl Worker {
    pub fn new(config: WorkerConfig) -> Arc<Self> {
        let (backends, refused) =
            Backends::with_options(&config.backends, &config.local_cwd, &config.backend_options);
        for reason in refused {
            tracing::warn!("{reason}");
        }
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
            },
        );
        Arc::new(Worker {
            config,
            instance_id: uuid::Uuid::new_v4().simple().to_string(),
            envs,
            calls: std::sync::Mutex::new(HashMap::new()),
            draining: AtomicBool::new(false),
            notices: tokio::sync::Mutex::new(notices),
        })
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
            environments: self.envs.infos(),
            instance_id: self.instance_id.clone(),
        }
    }

    pub fn heartbeat(&self) -> Heartbeat {
        let running = self.calls.lock().map(|c| c.len()).unwrap_or(0);
        Heartbeat {
            running_calls: u32::try_from(running).unwrap_or(u32::MAX),
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
    pub async fn run_call(&self, call: RunCall, output: Option<OutputSink>) -> CallResult {
        let started = Instant::now();
        let cancel = CancellationToken::new();
        if let Ok(mut calls) = self.calls.lock() {
            calls.insert(call.call_id.clone(), cancel.clone());
        }
        let result = self.execute(&call, cancel, output).await;
        if let Ok(mut calls) = self.calls.lock() {
            calls.remove(&call.call_id);
        }
        CallResult {
            call_id: call.call_id,
            result,
            environment_reset: false,
            duration_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        }
    }

    async fn execute(
        &self,
        call: &RunCall,
        cancel: CancellationToken,
        output: Option<OutputSink>,
    ) -> String {
        if self.draining.load(Ordering::Relaxed) {
            return tool_error(format!(
                "worker '{}' is draining and takes no new calls",
                self.config.name
            ));
        }
        let args: Map<String, Value> = match serde_json::from_str(&call.arguments_json) {
            Ok(Value::Object(map)) => map,
            _ => {
                return tool_error(
                    "Invalid tool arguments: the worker received arguments that are not a JSON object",
                );
            }
        };
        if call.tool == "process" {
            // The process tool never creates an environment: it finds the
            // process (or lists the task's processes) where they are.
            let process_call = tools::process::ProcessCall {
                envs: &self.envs,
                task_id: &call.task_id,
                session_id: &call.session_id,
                args: &args,
                cancel: &cancel,
            };
            let result = tools::process::run(&self.config.tools, process_call).await;
            let env = self.envs.get(&call.task_id);
            return tools::cap_if_needed(
                env.as_deref(),
                &call.call_id,
                result,
                call.result_cap_chars,
            )
            .await;
        }
        let spec = call.environment.clone().unwrap_or_default();
        let env = if spec.backend.is_empty() {
            // Only an existing environment (result persistence must not create one).
            match self.envs.get(&call.task_id) {
                Some(env) => env,
                None => {
                    return tool_error(format!(
                        "task '{}' has no environment on worker '{}'",
                        call.task_id, self.config.name
                    ));
                }
            }
        } else {
            let request = backends::CreateRequest {
                task_id: call.task_id.clone(),
                owner: spec.owner.clone(),
                worker: self.config.name.clone(),
                worker_instance: self.instance_id.clone(),
                settings: serde_json::from_str(&spec.settings_json).unwrap_or(Value::Null),
            };
            match self.envs.get_or_create(&spec.backend, &request).await {
                Ok(env) => env,
                Err(err) => {
                    return tool_error(format!(
                        "Could not create the environment for task '{}': {err}",
                        call.task_id
                    ));
                }
            }
        };
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
                output,
                result_cap: call.result_cap_chars,
            },
        )
        .await
    }

    /// Ends idle environments; returns the task ids ended.
    pub async fn reap_idle(&self) -> Vec<String> {
        self.envs.reap_idle(self.config.env_lifetime).await
    }

    pub fn reap_interval(&self) -> Duration {
        self.config.reap_interval
    }

    /// Ends every environment (worker shutdown).
    pub async fn shutdown(&self) {
        self.cancel_all();
        self.envs.shutdown().await;
    }
}
