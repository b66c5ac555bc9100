//! Environments: one per task id, each owning one sandbox, its live shell and
//! its background processes. Created on a task's first call, ended on release,
//! on idle (the reaper) or when the worker stops; ending one kills everything
//! it started — the shell's process tree, every background process and
//! whatever they spawned — and removes the shell's private directory.
//!
//! An environment is idle when no call runs in it and no background process
//! is alive; the idle time counts from the later of its last call and its last
//! background process's exit (hermes refreshes `_last_activity` while a
//! background process runs, with the same effect).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Mutex as AsyncMutex;

use caduceus_proto::EnvironmentInfo;

use crate::backends::{Backends, CreateRequest};
use crate::process::ProcessRegistry;
use crate::process::background::BackgroundProcess;
use crate::process::clean::OutputCleaner;
use crate::process::notice::NoticeHub;
use crate::sandbox::{Sandbox, SandboxError};
use crate::shell::{PersistentShell, Secret, ShellConfig};

pub struct Environment {
    pub task_id: String,
    pub backend: String,
    pub sandbox: Arc<dyn Sandbox>,
    pub shell: PersistentShell,
    pub processes: ProcessRegistry,
    /// Base environment of background processes (the shell's, sanitized).
    pub base_env: Vec<(String, String)>,
    /// Read-loop and staleness state of the file tools for this task.
    pub reads: caduceus_files::ReadTracker,
    created: Instant,
    last_used: std::sync::Mutex<Instant>,
    running: AtomicU32,
}

impl Environment {
    /// Marks the start of a call; the guard marks its end.
    pub fn begin_call(self: &Arc<Self>) -> CallGuard {
        self.running.fetch_add(1, Ordering::Relaxed);
        self.touch();
        CallGuard { env: self.clone() }
    }

    fn touch(&self) {
        if let Ok(mut at) = self.last_used.lock() {
            *at = Instant::now();
        }
    }

    /// Time since the environment was last busy; zero while a call runs or
    /// a background process lives.
    pub fn idle_for(&self) -> Duration {
        if self.running.load(Ordering::Relaxed) > 0 || self.processes.running() > 0 {
            return Duration::ZERO;
        }
        let since_call = self
            .last_used
            .lock()
            .map(|at| at.elapsed())
            .unwrap_or_default();
        match self.processes.last_exit() {
            Some(exit) => since_call.min(exit.elapsed()),
            None => since_call,
        }
    }

    /// ANSI stripping, redaction and literal secrets for this environment's output.
    pub fn cleaner(&self) -> &Arc<OutputCleaner> {
        self.processes.cleaner()
    }

    pub fn age(&self) -> Duration {
        self.created.elapsed()
    }

    pub fn info(&self) -> EnvironmentInfo {
        EnvironmentInfo {
            task_id: self.task_id.clone(),
            backend: self.backend.clone(),
            running_calls: self.running.load(Ordering::Relaxed),
            background_processes: u32::try_from(self.processes.running()).unwrap_or(u32::MAX),
            idle_ms: u64::try_from(self.idle_for().as_millis()).unwrap_or(u64::MAX),
            sandbox_id: self.sandbox.id().to_owned(),
            cwd: self.shell.cwd(),
        }
    }

    /// Ends the environment: its shell and every process it started, then
    /// the sandbox itself.
    pub async fn end(&self) {
        let killed = self.processes.kill_all("environment_end").await;
        if killed > 0 {
            tracing::info!(task = %self.task_id, killed, "background processes stopped with their environment");
        }
        self.shell.close().await;
        if let Err(err) = self.sandbox.destroy().await {
            tracing::warn!(task = %self.task_id, "sandbox removal failed: {err}");
        }
    }
}

/// Decrements the environment's running-call count when dropped.
pub struct CallGuard {
    env: Arc<Environment>,
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.env.running.fetch_sub(1, Ordering::Relaxed);
        self.env.touch();
    }
}

/// Settings that shape every environment of this worker.
#[derive(Debug, Clone)]
pub struct EnvSettings {
    pub shell_env: Vec<(String, String)>,
    pub shell_init: Vec<String>,
    /// Read the login files at shell start (`bash -l` semantics).
    pub login_shell: bool,
    /// Files sourced at shell start (see [`ShellConfig::init_files`]).
    pub shell_init_files: Vec<String>,
    pub sudo_password: Option<Secret>,
    /// Where background-process notices go.
    pub notices: Arc<NoticeHub>,
}

impl Default for EnvSettings {
    /// No init, no sudo; notices go nowhere (for embedders and tests that do
    /// not deliver them).
    fn default() -> Self {
        EnvSettings {
            shell_env: Vec::new(),
            shell_init: Vec::new(),
            login_shell: false,
            shell_init_files: Vec::new(),
            sudo_password: None,
            notices: NoticeHub::new().0,
        }
    }
}

pub struct EnvManager {
    backends: Backends,
    settings: EnvSettings,
    envs: std::sync::Mutex<HashMap<String, Arc<Environment>>>,
    /// Serializes creation per task so two first calls make one environment.
    creating: AsyncMutex<HashMap<String, Arc<AsyncMutex<()>>>>,
}

impl EnvManager {
    pub fn new(backends: Backends, settings: EnvSettings) -> Self {
        EnvManager {
            backends,
            settings,
            envs: std::sync::Mutex::new(HashMap::new()),
            creating: AsyncMutex::new(HashMap::new()),
        }
    }

    pub fn backends(&self) -> &Backends {
        &self.backends
    }

    pub fn get(&self, task_id: &str) -> Option<Arc<Environment>> {
        self.envs.lock().ok()?.get(task_id).cloned()
    }

    /// The task's environment, created on `backend` if it has none.
    pub async fn get_or_create(
        &self,
        backend: &str,
        request: &CreateRequest,
    ) -> Result<Arc<Environment>, SandboxError> {
        let task_id = request.task_id.as_str();
        if let Some(env) = self.get(task_id) {
            return Ok(env);
        }
        let lock = {
            let mut creating = self.creating.lock().await;
            creating.entry(task_id.to_owned()).or_default().clone()
        };
        let _held = lock.lock().await;
        if let Some(env) = self.get(task_id) {
            return Ok(env);
        }
        let sandbox = self.backends.create(backend, request).await?;
        let shell = PersistentShell::new(
            sandbox.clone(),
            ShellConfig {
                env: self.settings.shell_env.clone(),
                cwd: sandbox.initial_cwd(),
                login: self.settings.login_shell,
                init_files: self.settings.shell_init_files.clone(),
                init: self.settings.shell_init.clone(),
                sudo_password: self.settings.sudo_password.clone(),
                ..ShellConfig::default()
            },
        );
        let cleaner = Arc::new(OutputCleaner::with_literals(
            self.settings
                .sudo_password
                .iter()
                .map(|p| p.expose().to_owned()),
        ));
        let processes = ProcessRegistry::new(
            task_id.to_owned(),
            sandbox.clone(),
            self.settings.notices.clone(),
            cleaner,
        );
        let env = Arc::new(Environment {
            task_id: task_id.to_owned(),
            backend: backend.to_owned(),
            sandbox,
            shell,
            processes,
            base_env: self.settings.shell_env.clone(),
            reads: caduceus_files::ReadTracker::new(),
            created: Instant::now(),
            last_used: std::sync::Mutex::new(Instant::now()),
            running: AtomicU32::new(0),
        });
        if let Ok(mut envs) = self.envs.lock() {
            envs.insert(task_id.to_owned(), env.clone());
        }
        self.creating.lock().await.remove(task_id);
        tracing::info!(task = %task_id, %backend, "environment created");
        Ok(env)
    }

    /// Ends the task's environment. Returns whether there was one.
    pub async fn release(&self, task_id: &str) -> bool {
        let env = self
            .envs
            .lock()
            .ok()
            .and_then(|mut envs| envs.remove(task_id));
        match env {
            Some(env) => {
                env.end().await;
                tracing::info!(task = %task_id, "environment released");
                true
            }
            None => false,
        }
    }

    /// Ends environments idle for longer than `lifetime`. Returns their task ids.
    pub async fn reap_idle(&self, lifetime: Duration) -> Vec<String> {
        let idle: Vec<Arc<Environment>> = match self.envs.lock() {
            Ok(mut envs) => {
                let ids: Vec<String> = envs
                    .iter()
                    .filter(|(_, e)| e.idle_for() > lifetime)
                    .map(|(id, _)| id.clone())
                    .collect();
                ids.iter().filter_map(|id| envs.remove(id)).collect()
            }
            Err(_) => Vec::new(),
        };
        let mut reaped = Vec::new();
        for env in idle {
            env.end().await;
            tracing::info!(task = %env.task_id, "idle environment reaped");
            reaped.push(env.task_id.clone());
        }
        reaped
    }

    /// Every environment of this worker.
    pub fn all(&self) -> Vec<Arc<Environment>> {
        self.envs
            .lock()
            .map(|envs| envs.values().cloned().collect())
            .unwrap_or_default()
    }

    /// A background process by id, in whichever environment of this worker
    /// it runs (process ids are unique; hermes' registry is global too).
    pub fn find_process(&self, id: &str) -> Option<(Arc<Environment>, Arc<BackgroundProcess>)> {
        self.all()
            .into_iter()
            .find_map(|env| env.processes.get(id).map(|p| (env, p)))
    }

    pub fn infos(&self) -> Vec<EnvironmentInfo> {
        let mut infos: Vec<EnvironmentInfo> = self
            .envs
            .lock()
            .map(|envs| envs.values().map(|e| e.info()).collect())
            .unwrap_or_default();
        infos.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        infos
    }

    /// Ends every environment.
    pub async fn shutdown(&self) {
        let all: Vec<Arc<Environment>> = self
            .envs
            .lock()
            .map(|mut envs| envs.drain().map(|(_, e)| e).collect())
            .unwrap_or_default();
        for env in all {
            env.end().await;
        }
    }
}

/// An environment manager over the local backend, for tests.
#[cfg(test)]
pub(crate) fn test_manager() -> (
    EnvManager,
    tokio::sync::mpsc::Receiver<caduceus_proto::EnvironmentNotice>,
) {
    let (backends, _) = Backends::new(&["local".to_owned()], "/tmp");
    let (notices, rx) = NoticeHub::new();
    let shell_env = vec![
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".to_owned(), "/tmp".to_owned()),
    ];
    let settings = EnvSettings {
        shell_env,
        shell_init: Vec::new(),
        login_shell: false,
        shell_init_files: Vec::new(),
        sudo_password: None,
        notices,
    };
    (EnvManager::new(backends, settings), rx)
}

/// The task's environment on the local backend, for tests.
#[cfg(test)]
pub(crate) async fn test_env(manager: &EnvManager, task_id: &str) -> Arc<Environment> {
    let request = CreateRequest {
        task_id: task_id.to_owned(),
        owner: "test".to_owned(),
        worker: "test".to_owned(),
        worker_instance: "test".to_owned(),
        settings: serde_json::Value::Null,
    };
    match manager.get_or_create("local", &request).await {
        Ok(env) => env,
        Err(err) => panic!("cannot create a local environment: {err}"),
    }
}

#[cfg(test)]
#[path = "env_tests.rs"]
mod tests;
