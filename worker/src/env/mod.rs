//! Environments: one per task id, each owning one sandbox and its live shell.
//! Created on a task's first call, ended on release, on idle (the reaper) or
//! when the worker stops; ending one kills everything it started.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Mutex as AsyncMutex;

use caduceus_proto::EnvironmentInfo;

use crate::backends::{Backends, CreateRequest};
use crate::sandbox::{Sandbox, SandboxError};
use crate::shell::{PersistentShell, ShellConfig};

pub struct Environment {
    pub task_id: String,
    pub backend: String,
    pub sandbox: Arc<dyn Sandbox>,
    pub shell: PersistentShell,
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

    pub fn idle_for(&self) -> Duration {
        if self.running.load(Ordering::Relaxed) > 0 {
            return Duration::ZERO;
        }
        self.last_used
            .lock()
            .map(|at| at.elapsed())
            .unwrap_or_default()
    }

    pub fn age(&self) -> Duration {
        self.created.elapsed()
    }

    pub fn info(&self) -> EnvironmentInfo {
        EnvironmentInfo {
            task_id: self.task_id.clone(),
            backend: self.backend.clone(),
            running_calls: self.running.load(Ordering::Relaxed),
            background_processes: 0,
            idle_ms: u64::try_from(self.idle_for().as_millis()).unwrap_or(u64::MAX),
            sandbox_id: self.sandbox.id().to_owned(),
            cwd: self.shell.cwd(),
        }
    }

    /// Ends the environment: its shell and every process it started, then
    /// the sandbox itself.
    pub async fn end(&self) {
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
                init: self.settings.shell_init.clone(),
                ..ShellConfig::default()
            },
        );
        let env = Arc::new(Environment {
            task_id: task_id.to_owned(),
            backend: backend.to_owned(),
            sandbox,
            shell,
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
