//! The SSH backend: environments on a remote host, reached through the
//! `openssh` crate (the system `ssh` client in multiplex mode). One master
//! connection per host carries every environment's channels; when it drops,
//! the next process start re-establishes it.
//!
//! An environment is a directory `~/.caduceus/envs/<env-id>/` on the host
//! holding its lease and the pids of the processes started for it (see
//! [`scripts`]). Its live shell is one remote `bash` on one channel. Unlike
//! hermes, an unreachable host is an error naming the host and what ssh
//! said; nothing ever falls back to running locally.
//!
//! The worker renews the leases of its environments every third of the
//! lease; a worker that dies stops renewing, and the next sweep (by any
//! worker using the host) kills the environment's processes and removes its
//! directory once the lease has passed.

mod host;
mod sandbox;
pub mod scripts;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;

pub use host::{SshError, SshHost};
pub use sandbox::{SshSandbox, parse_pid_line};
use scripts::LeaseOwner;

use super::{CreateRequest, Provider, SweepContext};
use crate::sandbox::{Sandbox, SandboxError};

/// Where and how to connect (`terminal.ssh_*` in the config).
#[derive(Debug, Clone)]
pub struct SshSettings {
    pub host: String,
    /// Remote account; the ssh client's default (config, local user) when `None`.
    pub user: Option<String>,
    pub port: u16,
    /// Private key; only this key is offered when set.
    pub key: Option<PathBuf>,
    /// known_hosts file (unknown hosts are added, changed keys refused);
    /// the ssh client's default when `None`.
    pub known_hosts: Option<PathBuf>,
    pub connect_timeout: Duration,
    /// Directory of the master's control socket. Keep it short: a Unix
    /// socket path has ~108 bytes.
    pub control_dir: PathBuf,
    /// Directory shells start in; the remote home when `None`.
    pub cwd: Option<String>,
    /// How long an environment outlives its worker's last renewal.
    pub lease: Duration,
    /// How long a reachability probe result is trusted.
    pub probe_ttl: Duration,
}

impl SshSettings {
    pub fn new(host: impl Into<String>) -> Self {
        SshSettings {
            host: host.into(),
            user: None,
            port: 22,
            key: None,
            known_hosts: None,
            connect_timeout: Duration::from_secs(10),
            control_dir: default_control_dir(),
            cwd: None,
            lease: Duration::from_secs(600),
            probe_ttl: Duration::from_secs(30),
        }
    }

    /// `user@host:port`.
    pub fn target(&self) -> String {
        match &self.user {
            Some(user) => format!("{user}@{}:{}", self.host, self.port),
            None => format!("{}:{}", self.host, self.port),
        }
    }
}

/// `/tmp/caduceus-ssh-<uid>`: short, per user.
pub fn default_control_dir() -> PathBuf {
    PathBuf::from(format!("/tmp/caduceus-ssh-{}", nix::unistd::getuid()))
}

/// The environments whose leases this worker renews.
#[derive(Default)]
pub struct LeaseBook {
    envs: std::sync::Mutex<HashMap<String, LeaseOwner>>,
}

impl LeaseBook {
    fn insert(&self, env_id: &str, owner: LeaseOwner) {
        if let Ok(mut envs) = self.envs.lock() {
            envs.insert(env_id.to_owned(), owner);
        }
    }

    fn remove(&self, env_id: &str) {
        if let Ok(mut envs) = self.envs.lock() {
            envs.remove(env_id);
        }
    }

    fn snapshot(&self) -> Vec<(String, LeaseOwner)> {
        self.envs
            .lock()
            .map(|envs| envs.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default()
    }
}

pub struct SshProvider {
    host: Arc<SshHost>,
    leases: Arc<LeaseBook>,
    renewer: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl SshProvider {
    pub fn new(settings: SshSettings) -> Self {
        SshProvider {
            host: Arc::new(SshHost::new(settings)),
            leases: Arc::new(LeaseBook::default()),
            renewer: std::sync::Mutex::new(None),
        }
    }

    pub fn host(&self) -> &Arc<SshHost> {
        &self.host
    }

    /// Starts the lease renewal loop once (it ends with the provider).
    fn ensure_renewer(&self) {
        let Ok(mut renewer) = self.renewer.lock() else {
            return;
        };
        if renewer.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        let host = Arc::downgrade(&self.host);
        let leases = Arc::downgrade(&self.leases);
        let lease = self.host.settings().lease;
        *renewer = Some(tokio::spawn(renew_loop(host, leases, lease)));
    }
}

impl Drop for SshProvider {
    fn drop(&mut self) {
        if let Ok(mut renewer) = self.renewer.lock()
            && let Some(task) = renewer.take()
        {
            task.abort();
        }
    }
}

async fn renew_loop(host: Weak<SshHost>, leases: Weak<LeaseBook>, lease: Duration) {
    let every = (lease / 3).max(Duration::from_secs(1));
    loop {
        tokio::time::sleep(every).await;
        let (Some(host), Some(leases)) = (host.upgrade(), leases.upgrade()) else {
            return;
        };
        let envs = leases.snapshot();
        if envs.is_empty() {
            continue;
        }
        let script = scripts::renew_leases(&envs, lease.as_secs().max(1));
        if let Err(err) = host.run(&script, b"", Duration::from_secs(30)).await {
            tracing::warn!("renewing SSH environment leases failed: {err}");
        }
    }
}

#[async_trait]
impl Provider for SshProvider {
    fn name(&self) -> &'static str {
        "ssh"
    }

    /// The `ssh` client is installed, a host is set, and the host answers
    /// (probe cached for `probe_ttl`).
    async fn available(&self) -> bool {
        !self.host.settings().host.is_empty()
            && host::ssh_client_present()
            && self.host.reachable().await
    }

    async fn create(&self, request: &CreateRequest) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let settings = self.host.settings();
        let env_id = env_id_for(&request.task_id);
        let owner = LeaseOwner {
            instance: request.worker_instance.clone(),
            worker: request.worker.clone(),
            owner: request.owner.clone(),
            task: request.task_id.clone(),
        };
        // Registered before the directory exists, so that a sweep running
        // meanwhile counts it as live.
        self.leases.insert(&env_id, owner.clone());
        let lease_secs = settings.lease.as_secs().max(1);
        let script = format!(
            "{}{}",
            scripts::create_env(&env_id, &owner, lease_secs),
            scripts::start_watchdog(&env_id, lease_secs)
        );
        let out = match self.host.run(&script, b"", Duration::from_secs(60)).await {
            Ok(out) if out.success() => out,
            Ok(out) => {
                self.leases.remove(&env_id);
                return Err(SandboxError::Other(format!(
                    "cannot create the environment directory on SSH host {}: {}",
                    self.host.target(),
                    out.stderr_text()
                )));
            }
            Err(err) => {
                self.leases.remove(&env_id);
                return Err(SandboxError::Other(err.to_string()));
            }
        };
        self.ensure_renewer();
        let home = out
            .stdout_text()
            .lines()
            .last()
            .unwrap_or("")
            .trim()
            .to_owned();
        let home = if home.is_empty() {
            "/".to_owned()
        } else {
            home
        };
        let cwd = settings
            .cwd
            .clone()
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| home.clone());
        let cwd = if cwd == "~" {
            home.clone()
        } else {
            cwd.strip_prefix("~/")
                .map(|rest| format!("{home}/{rest}"))
                .unwrap_or(cwd)
        };
        tracing::info!(target = %self.host.target(), env = %env_id, task = %request.task_id, "SSH environment created");
        let id = format!("ssh:{}/{env_id}", self.host.target());
        let host = self.host.clone();
        let leases = self.leases.clone();
        Ok(Arc::new_cyclic(|me: &std::sync::Weak<SshSandbox>| {
            let me: std::sync::Weak<dyn Sandbox> = me.clone();
            SshSandbox {
                id,
                host,
                env_id,
                home,
                cwd,
                leases,
                files: Arc::new(crate::backends::shell_fs::ShellFs::new(me)),
            }
        }))
    }

    async fn sweep(&self, context: &SweepContext) -> Vec<String> {
        if self.host.settings().host.is_empty() || !self.host.reachable().await {
            return Vec::new();
        }
        let prefix = format!("ssh:{}/", self.host.target());
        let mut live: Vec<String> = context
            .live
            .iter()
            .filter_map(|id| id.strip_prefix(&prefix).map(str::to_owned))
            .collect();
        live.extend(self.leases.snapshot().into_iter().map(|(id, _)| id));
        let script = scripts::sweep(&context.worker_instance, &live);
        match self.host.run(&script, b"", Duration::from_secs(120)).await {
            Ok(out) if out.success() => {
                let removed: Vec<String> = out
                    .stdout_text()
                    .lines()
                    .map(|id| format!("{prefix}{id}"))
                    .collect();
                for id in &removed {
                    tracing::info!(sandbox = %id, "swept SSH environment");
                }
                removed
            }
            Ok(out) => {
                tracing::warn!(
                    "sweeping SSH host {} failed: {}",
                    self.host.target(),
                    out.stderr_text()
                );
                Vec::new()
            }
            Err(err) => {
                tracing::warn!("sweeping SSH host failed: {err}");
                Vec::new()
            }
        }
    }
}

/// `<task slug>-<8 hex>`: readable in `ls`, unique, safe in paths and lease words.
pub fn env_id_for(task_id: &str) -> String {
    let slug: String = task_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(32)
        .collect();
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    if slug.is_empty() {
        format!("env-{suffix}")
    } else {
        format!("{slug}-{suffix}")
    }
}

/// Variables that describe the worker's own host and would be wrong on
/// another one; remote and container shells keep the sandbox's own values.
const HOST_SPECIFIC: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "PWD",
    "OLDPWD",
    "TMPDIR",
    "TMP",
    "TEMP",
    "HOSTNAME",
    "SHLVL",
    "MAIL",
    "_",
    "DISPLAY",
    "XAUTHORITY",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
];

/// The part of the worker's (sanitized) shell environment that makes sense
/// on another host: everything but paths and identities of the worker's own
/// host, and its `SSH_*`/`XDG_*` session variables.
pub fn portable_env(env: &[(String, String)]) -> Vec<(String, String)> {
    env.iter()
        .filter(|(key, _)| {
            !HOST_SPECIFIC.contains(&key.as_str())
                && !key.starts_with("SSH_")
                && !key.starts_with("XDG_")
                && !key.starts_with("CARGO")
                && !key.starts_with("RUSTUP")
        })
        .cloned()
        .collect()
}
