//! The backends this worker offers. Each is a [`Provider`]: it says whether it
//! can serve right now, creates sandboxes for tasks, and sweeps sandboxes left
//! behind by dead owners or with expired leases.

pub mod local;
pub mod shell_fs;
pub mod singularity;
pub mod ssh;

use std::collections::HashSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::sandbox::{Sandbox, SandboxError};

/// What a provider needs to create a sandbox for a task.
#[derive(Debug, Clone)]
pub struct CreateRequest {
    pub task_id: String,
    /// The coordinator that owns the task (sandbox owner label).
    pub owner: String,
    /// This worker's name and process instance id (sandbox owner labels).
    pub worker: String,
    pub worker_instance: String,
    /// Backend settings sent by the coordinator (image, …), a JSON object.
    pub settings: Value,
}

/// What a sweep may keep: sandboxes of live environments of this worker.
#[derive(Debug, Clone, Default)]
pub struct SweepContext {
    pub worker_instance: String,
    /// Backend ids (`Sandbox::id`) of this worker's live environments.
    pub live: HashSet<String>,
}

#[async_trait]
pub trait Provider: Send + Sync {
    /// Backend name ("local", "docker", …).
    fn name(&self) -> &'static str;
    /// Can it serve right now (engine reachable, binary present, host set)?
    async fn available(&self) -> bool;
    async fn create(&self, request: &CreateRequest) -> Result<Arc<dyn Sandbox>, SandboxError>;
    /// Removes this backend's sandboxes whose lease expired or whose owner is
    /// gone, never one in `context.live`. Returns the ids removed.
    async fn sweep(&self, _context: &SweepContext) -> Vec<String> {
        Vec::new()
    }
}

/// The local backend as a provider.
pub struct LocalProvider {
    cwd: String,
}

#[async_trait]
impl Provider for LocalProvider {
    fn name(&self) -> &'static str {
        "local"
    }

    async fn available(&self) -> bool {
        true
    }

    async fn create(&self, request: &CreateRequest) -> Result<Arc<dyn Sandbox>, SandboxError> {
        Ok(Arc::new(local::LocalSandbox::new(
            format!("local:{}", request.task_id),
            self.cwd.clone(),
        )))
    }
}

/// Settings of the backends that need more than a name.
#[derive(Debug, Clone, Default)]
pub struct BackendOptions {
    /// The SSH host (`terminal.ssh_*`); the `ssh` backend needs one.
    pub ssh: Option<ssh::SshSettings>,
    pub singularity: singularity::SingularitySettings,
}

/// The providers of this worker and which of them are available.
pub struct Backends {
    providers: Vec<Arc<dyn Provider>>,
    /// Names of providers available at the last check.
    available: std::sync::RwLock<Vec<String>>,
}

impl std::fmt::Debug for Backends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backends")
            .field("available", &self.available())
            .finish()
    }
}

impl Backends {
    /// Builds the providers for the requested backend names; names this worker
    /// cannot serve are returned as messages.
    pub fn new(requested: &[String], local_cwd: &str) -> (Self, Vec<String>) {
        Self::with_options(requested, local_cwd, &BackendOptions::default())
    }

    /// [`new`](Self::new) with the settings of the SSH and Singularity backends.
    pub fn with_options(
        requested: &[String],
        local_cwd: &str,
        options: &BackendOptions,
    ) -> (Self, Vec<String>) {
        let mut providers: Vec<Arc<dyn Provider>> = Vec::new();
        let mut refused = Vec::new();
        for backend in requested {
            match backend.as_str() {
                "local" => providers.push(Arc::new(LocalProvider {
                    cwd: local_cwd.to_owned(),
                })),
                "ssh" => match &options.ssh {
                    Some(settings) if !settings.host.is_empty() => {
                        providers.push(Arc::new(ssh::SshProvider::new(settings.clone())))
                    }
                    _ => refused.push(
                        "backend 'ssh' needs a host: set terminal.ssh_host (TERMINAL_SSH_HOST)"
                            .to_owned(),
                    ),
                },
                "singularity" | "apptainer" => providers.push(Arc::new(
                    singularity::SingularityProvider::new(options.singularity.clone()),
                )),
                other => refused.push(format!("backend '{other}' is not supported by this worker")),
            }
        }
        let available = providers.iter().map(|p| p.name().to_owned()).collect();
        (
            Backends {
                providers,
                available: std::sync::RwLock::new(available),
            },
            refused,
        )
    }

    /// Backends available at the last [`refresh`](Self::refresh).
    pub fn available(&self) -> Vec<String> {
        self.available.read().map(|a| a.clone()).unwrap_or_default()
    }

    /// Probes every provider; returns whether the available set changed.
    pub async fn refresh(&self) -> bool {
        let mut now = Vec::new();
        for provider in &self.providers {
            if provider.available().await {
                now.push(provider.name().to_owned());
            }
        }
        match self.available.write() {
            Ok(mut available) if *available != now => {
                *available = now;
                true
            }
            _ => false,
        }
    }

    pub fn provider(&self, backend: &str) -> Option<&Arc<dyn Provider>> {
        self.providers.iter().find(|p| p.name() == backend)
    }

    /// Creates a sandbox for a task on `backend`.
    pub async fn create(
        &self,
        backend: &str,
        request: &CreateRequest,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        match self.provider(backend) {
            Some(provider) if self.available().iter().any(|b| b == backend) => {
                provider.create(request).await
            }
            _ => Err(SandboxError::Unavailable(backend.to_owned())),
        }
    }

    /// Sweeps every provider.
    pub async fn sweep(&self, context: &SweepContext) -> Vec<String> {
        let mut removed = Vec::new();
        for provider in &self.providers {
            removed.extend(provider.sweep(context).await);
        }
        removed
    }
}
