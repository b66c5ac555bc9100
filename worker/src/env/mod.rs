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

use crate::backends::lease::LeaseRecord;
use crate::backends::{Backends, CreateRequest, SweepContext};
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
    /// What the environment was created from (to recreate it after a reset).
    pub request: CreateRequest,
    pub processes: ProcessRegistry,
    /// Base environment of background processes (the shell's, sanitized).
    pub base_env: Vec<(String, String)>,
    /// Read-loop and staleness state of the file tools for this task.
    pub reads: caduceus_files::ReadTracker,
    /// The placement epoch it was created for (see [`EnvManager::fence`]).
    pub epoch: u64,
    /// The worker's browsers: the task's one is closed with the environment.
    browsers: Option<Arc<crate::browser::Browsers>>,
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
            epoch: self.epoch,
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
        if let Some(browsers) = &self.browsers {
            browsers.close_task(&self.task_id).await;
        }
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
    /// The worker's browsers, closed per task with its environment.
    pub browsers: Option<Arc<crate::browser::Browsers>>,
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
            browsers: None,
        }
    }
}

/// The lease record of an environment's sandbox (renewal time set by the caller).
fn lease_record(request: &CreateRequest, ttl_secs: u64) -> LeaseRecord {
    LeaseRecord {
        owner: request.owner.clone(),
        worker: request.worker.clone(),
        worker_instance: request.worker_instance.clone(),
        task: request.task_id.clone(),
        renewed_at: 0,
        ttl_secs,
    }
}

/// Tells the model its environment was recreated (same wording as the
/// coordinator's notice for a lost worker).
fn reset_notice(lost: &Environment) -> String {
    let kept = lost.sandbox.persistent_paths();
    let what = if kept.is_empty() {
        "Files, the working directory, variables and background processes from earlier calls are gone.".to_owned()
    } else {
        format!(
            "Files under {} were kept; other files, the working directory, variables and background processes from earlier calls are gone.",
            kept.join(" and ")
        )
    };
    format!(
        "The previous environment of this task was lost (its {} sandbox {} stopped or was removed); this call ran in a fresh environment. {what}",
        lost.backend,
        short_id(lost.sandbox.id())
    )
}

fn short_id(id: &str) -> &str {
    if id.len() == 64 && id.chars().all(|c| c.is_ascii_hexdigit()) {
        &id[..12]
    } else {
        id
    }
}

pub struct EnvManager {
    backends: Backends,
    settings: EnvSettings,
    envs: std::sync::Mutex<HashMap<String, Arc<Environment>>>,
    /// Serializes creation per task so two first calls make one environment.
    creating: AsyncMutex<HashMap<String, Arc<AsyncMutex<()>>>>,
    /// Login state shared by this host's local shells (see
    /// `ShellConfig::login_cache`), in a private directory removed at shutdown.
    login_cache: Option<(Arc<crate::shell::LoginCache>, std::path::PathBuf)>,
    /// task id -> the latest placement epoch a call or the coordinator
    /// announced; new environments are created for it.
    epochs: std::sync::Mutex<HashMap<String, u64>>,
}

/// A call from an older placement of its task than the task's environment
/// here: it must not run (its coordinator has moved on).
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "This call belongs to an older placement of task '{task}' (epoch {call}) than its environment on this worker (epoch {env}); it was not run."
)]
pub struct StaleCall {
    pub task: String,
    pub call: u64,
    pub env: u64,
}

impl EnvManager {
    pub fn new(backends: Backends, settings: EnvSettings) -> Self {
        let login_cache = (settings.login_shell || !settings.shell_init_files.is_empty())
            .then(login_cache_dir)
            .flatten()
            .map(|dir| {
                (
                    Arc::new(crate::shell::LoginCache::new(
                        dir.join("login.snap").display().to_string(),
                    )),
                    dir,
                )
            });
        if let (Some((_, dir)), Some(ledger)) = (&login_cache, backends.ledger()) {
            ledger.record_dir(&dir.display().to_string());
        }
        EnvManager {
            backends,
            settings,
            envs: std::sync::Mutex::new(HashMap::new()),
            creating: AsyncMutex::new(HashMap::new()),
            login_cache,
            epochs: std::sync::Mutex::new(HashMap::new()),
        }
    }

    fn known_epoch(&self, task_id: &str) -> u64 {
        self.epochs
            .lock()
            .ok()
            .and_then(|e| e.get(task_id).copied())
            .unwrap_or(0)
    }

    /// Admits a call of placement `epoch` (0 = unfenced): an environment of
    /// the task from an older placement is stale and is ended first (the
    /// call then gets a fresh one); a call older than what this worker knows
    /// of the task is refused.
    pub async fn fence(&self, task_id: &str, epoch: u64) -> Result<(), StaleCall> {
        if epoch == 0 {
            return Ok(());
        }
        let stale = {
            let Ok(mut epochs) = self.epochs.lock() else {
                return Ok(());
            };
            let known = epochs.entry(task_id.to_owned()).or_insert(0);
            if epoch < *known {
                return Err(StaleCall {
                    task: task_id.to_owned(),
                    call: epoch,
                    env: *known,
                });
            }
            *known = epoch;
            self.envs.lock().ok().and_then(|mut envs| {
                if envs.get(task_id).is_some_and(|env| env.epoch < epoch) {
                    envs.remove(task_id)
                } else {
                    None
                }
            })
        };
        if let Some(env) = stale {
            tracing::info!(task = %task_id, old = env.epoch, new = epoch, "stale environment ended: the task was placed afresh");
            env.end().await;
        }
        Ok(())
    }

    /// Takes the task's environment of placement `epoch` out of service at
    /// once (the coordinator says it is stale) and refuses calls of that
    /// placement from now on; the caller ends it.
    pub fn take_stale(&self, task_id: &str, epoch: u64) -> Option<Arc<Environment>> {
        if let Ok(mut epochs) = self.epochs.lock() {
            let known = epochs.entry(task_id.to_owned()).or_insert(0);
            *known = (*known).max(epoch.saturating_add(1));
        }
        self.envs.lock().ok().and_then(|mut envs| {
            if envs.get(task_id).is_some_and(|env| env.epoch <= epoch) {
                envs.remove(task_id)
            } else {
                None
            }
        })
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
        let env = self.build(backend, request).await?;
        if let Ok(mut envs) = self.envs.lock() {
            envs.insert(task_id.to_owned(), env.clone());
        }
        self.creating.lock().await.remove(task_id);
        tracing::info!(task = %task_id, %backend, sandbox = %env.sandbox.id(), "environment created");
        Ok(env)
    }

    /// A new environment (sandbox and not yet started shell); not registered.
    async fn build(
        &self,
        backend: &str,
        request: &CreateRequest,
    ) -> Result<Arc<Environment>, SandboxError> {
        let task_id = request.task_id.as_str();
        let sandbox = self.backends.create(backend, request).await?;
        let cwd = start_dir(sandbox.as_ref(), request).await;
        // The lease is fresh (labels at creation, the pool's last renewal);
        // the next periodic renewal records the new owner. Renewing here
        // would put an archive upload in front of the first command.
        let shell = PersistentShell::new(
            sandbox.clone(),
            ShellConfig {
                env: sandbox.shell_env(&self.settings.shell_env),
                cwd,
                login: self.settings.login_shell,
                init_files: self.settings.shell_init_files.clone(),
                init: self.settings.shell_init.clone(),
                sudo_password: self.settings.sudo_password.clone(),
                // Only local shells share one file system with this worker.
                login_cache: (backend == "local")
                    .then(|| self.login_cache.as_ref().map(|(c, _)| c.clone()))
                    .flatten(),
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
        let base_env = sandbox.shell_env(&self.settings.shell_env);
        Ok(Arc::new(Environment {
            task_id: task_id.to_owned(),
            backend: backend.to_owned(),
            sandbox,
            shell,
            request: request.clone(),
            processes,
            base_env,
            reads: caduceus_files::ReadTracker::new(),
            epoch: self.known_epoch(task_id),
            browsers: self.settings.browsers.clone(),
            created: Instant::now(),
            last_used: std::sync::Mutex::new(Instant::now()),
            running: AtomicU32::new(0),
        }))
    }

    fn lease_ttl_secs(&self) -> u64 {
        self.backends.lease_policy().ttl.as_secs()
    }

    /// The environment `env` unless its sandbox is known to have vanished
    /// ([`Sandbox::vanished`], no I/O); otherwise a new
    /// one for the same task (the old one is ended) and a notice for the
    /// model saying what was lost. Only the first caller replaces it.
    pub async fn ensure_live(
        &self,
        env: Arc<Environment>,
    ) -> Result<(Arc<Environment>, Option<String>), SandboxError> {
        if !env.sandbox.vanished() {
            return Ok((env, None));
        }
        let task_id = env.task_id.clone();
        let lock = {
            let mut creating = self.creating.lock().await;
            creating.entry(task_id.clone()).or_default().clone()
        };
        let _held = lock.lock().await;
        let current = self.get(&task_id);
        if let Some(current) = current.as_ref()
            && !Arc::ptr_eq(current, &env)
        {
            // Someone else replaced it meanwhile.
            return Ok((current.clone(), Some(reset_notice(&env))));
        }
        tracing::warn!(task = %task_id, sandbox = %env.sandbox.id(), "the environment's sandbox is gone; recreating it");
        if let Ok(mut envs) = self.envs.lock() {
            envs.remove(&task_id);
        }
        env.end().await;
        let fresh = self.build(&env.backend, &env.request).await?;
        if let Ok(mut envs) = self.envs.lock() {
            envs.insert(task_id.clone(), fresh.clone());
        }
        self.creating.lock().await.remove(&task_id);
        Ok((fresh, Some(reset_notice(&env))))
    }

    /// Renews the leases of every live environment's sandbox.
    pub async fn renew_leases(&self) {
        let all: Vec<Arc<Environment>> = self
            .envs
            .lock()
            .map(|envs| envs.values().cloned().collect())
            .unwrap_or_default();
        let now = std::time::SystemTime::now();
        for env in all {
            let record = lease_record(&env.request, self.lease_ttl_secs()).renewed(now);
            if let Err(err) = env.sandbox.renew_lease(&record).await {
                tracing::debug!(task = %env.task_id, "lease renewal failed: {err}");
            }
        }
    }

    /// What the sweeper must keep: this worker's live sandboxes.
    pub fn sweep_context(&self, worker_instance: &str) -> SweepContext {
        let live = self
            .envs
            .lock()
            .map(|envs| envs.values().map(|e| e.sandbox.id().to_owned()).collect())
            .unwrap_or_default();
        SweepContext {
            worker_instance: worker_instance.to_owned(),
            live,
        }
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

    /// Ends every environment and empties the warm pools.
    pub async fn shutdown(&self) {
        let all: Vec<Arc<Environment>> = self
            .envs
            .lock()
            .map(|mut envs| envs.drain().map(|(_, e)| e).collect())
            .unwrap_or_default();
        // Concurrently: ending one (its background processes' grace, a
        // container's removal) takes up to seconds, and a stopping worker has
        // a deadline (systemd, Kubernetes kill it after theirs).
        futures::future::join_all(all.iter().map(|env| env.end())).await;
        self.backends.pools().drain().await;
        if let Some((_, dir)) = &self.login_cache {
            let _ = std::fs::remove_dir_all(dir);
        }
        // Nothing of this worker is left on its host: its ledger goes.
        if let Some(ledger) = self.backends.ledger() {
            ledger.close();
        }
    }
}

/// Where the environment's shell starts: the `workdir` its task was given
/// (a cron job's, in the call's settings) when it is a directory in the
/// sandbox, else the backend's own start. A missing one is logged and left
/// out, as hermes runs a job whose workdir is gone without it.
async fn start_dir(sandbox: &dyn crate::sandbox::Sandbox, request: &CreateRequest) -> String {
    let Some(dir) = request
        .settings
        .get("workdir")
        .and_then(serde_json::Value::as_str)
        .filter(|d| d.starts_with('/'))
    else {
        return sandbox.initial_cwd();
    };
    match sandbox.files().stat(dir).await {
        Ok(Some(stat)) if stat.kind == caduceus_files::fs::FileKind::Dir => dir.to_owned(),
        other => {
            tracing::warn!(task = %request.task_id, workdir = dir, found = ?other.map(|s| s.map(|s| s.kind)), "the task's workdir is not a directory in the environment; starting without it");
            sandbox.initial_cwd()
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
        browsers: None,
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

/// A private (0700) directory for this worker process's login cache.
fn login_cache_dir() -> Option<std::path::PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let base = std::env::var_os("TMPDIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!("caduceus-login-{}", uuid::Uuid::new_v4().simple()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir).ok()?;
    Some(dir)
}
