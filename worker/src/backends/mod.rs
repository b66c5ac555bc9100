//! The backends this worker offers. Each is a [`Provider`]: it says whether it
//! can serve right now, creates sandboxes for tasks, and sweeps sandboxes left
//! behind by dead owners or with expired leases. Shared machinery for every
//! backend: [`lease`] (labels, renewable records, the sweeper's rule) and
//! [`pool`] (warm pools). See `README.md`.

pub mod daytona;
pub mod docker;
pub mod isolation;
pub mod lease;
pub mod ledger;
pub mod local;
pub mod modal;
pub mod pool;
pub mod preamble;
pub mod served_files;
pub mod shell_fs;
pub mod singularity;
pub mod ssh;

use std::collections::HashSet;
use std::path::Path;
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

/// What a sweep may keep: sandboxes this worker holds.
#[derive(Debug, Clone, Default)]
pub struct SweepContext {
    pub worker_instance: String,
    /// Backend ids (`Sandbox::id`) of this worker's live environments and
    /// warm-pool entries.
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
    /// gone, never one in `context.live` (see [`lease::judge`]). Returns the
    /// ids removed.
    async fn sweep(&self, _context: &SweepContext) -> Vec<String> {
        Vec::new()
    }
    /// Warm-pool key of a request: requests with equal keys can use each
    /// other's pre-started sandboxes. `None` (the default): not poolable.
    fn pool_key(&self, _request: &CreateRequest) -> Option<String> {
        None
    }
    /// Starts a sandbox for the warm pool `key` (labelled as a pool entry,
    /// with no task yet).
    async fn create_for_pool(
        &self,
        request: &CreateRequest,
        _key: &str,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        self.create(request).await
    }
}

/// Settings of the backends that need more than a name, and of the shared
/// machinery (leases, warm pools).
#[derive(Debug, Clone, Default)]
pub struct BackendOptions {
    /// The SSH host (`terminal.ssh_*`); the `ssh` backend needs one.
    pub ssh: Option<ssh::SshSettings>,
    /// Daytona's API and credentials; the `daytona` backend needs them.
    pub daytona: Option<daytona::DaytonaSettings>,
    /// Modal's server and token; the `modal` backend needs them.
    pub modal: Option<modal::ModalSettings>,
    pub singularity: singularity::SingularitySettings,
    pub docker: docker::settings::DockerSettings,
    pub lease: lease::LeasePolicy,
    pub warm_pools: Vec<pool::PoolSpec>,
    /// The account local sandboxes run as; `None`: the worker's own.
    pub local_user: Option<local::SandboxUser>,
    /// `terminal.local_isolation`, probed: `None` unconfined.
    pub local_confinement: Option<isolation::Confinement>,
    /// The program that serves a sandbox's file tools (`<it>
    /// __file-server`): the worker's own binary when it has the entry point.
    /// Local sandboxes of another user run it as that user; Docker
    /// containers of an engine on this host get it mounted read-only.
    /// `None`: a shell script per primitive.
    pub file_server: Option<String>,
    /// This worker's name and process instance id (pool entries' labels);
    /// `Worker::new` fills them in.
    pub worker: String,
    pub worker_instance: String,
    /// Keep a host ledger even without the local backend: something else
    /// of this worker runs on its host (the browsers).
    pub host_processes: bool,
}

/// The local backend as a provider.
pub struct LocalProvider {
    cwd: String,
    user: Option<local::SandboxUser>,
    confinement: Option<isolation::Confinement>,
    /// This worker's ledger on the host (absent in tests without a worker).
    ledger: Option<Arc<ledger::HostLedger>>,
    file_server: Option<String>,
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
        let id = format!("local:{}", request.task_id);
        let ledger = self.ledger.clone();
        Ok(match (&self.user, &self.confinement) {
            (None, None) => {
                Arc::new(local::LocalSandbox::new(id, self.cwd.clone()).with_ledger(ledger))
            }
            (user, confinement) => local::LocalSandbox::for_user(
                id,
                self.cwd.clone(),
                user.clone(),
                confinement.clone(),
                ledger,
                self.file_server.clone(),
            ),
        })
    }

    /// Local processes and directories of dead workers of this host.
    async fn sweep(&self, _context: &SweepContext) -> Vec<String> {
        match &self.ledger {
            Some(ledger) => ledger.sweep_dead().await,
            None => Vec::new(),
        }
    }
}

/// The providers of this worker, which of them are available, and their
/// warm pools.
pub struct Backends {
    providers: Vec<Arc<dyn Provider>>,
    /// Names of providers available at the last check.
    available: std::sync::RwLock<Vec<String>>,
    pools: pool::WarmPools,
    lease: lease::LeasePolicy,
    ledger: Option<Arc<ledger::HostLedger>>,
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

    /// Builds the providers for the requested backend names with their
    /// settings; names this worker cannot serve, and warm pools it cannot
    /// keep, are returned as messages. Docker counts as unavailable until the
    /// first [`refresh`](Self::refresh) has probed the engine.
    pub fn with_options(
        requested: &[String],
        local_cwd: &str,
        options: &BackendOptions,
    ) -> (Self, Vec<String>) {
        let mut providers: Vec<Arc<dyn Provider>> = Vec::new();
        let mut refused = Vec::new();
        // Only a worker (it has an instance id) keeps a ledger.
        let ledger = ((requested.iter().any(|b| b == "local") || options.host_processes)
            && !options.worker_instance.is_empty())
        .then(|| {
            ledger::HostLedger::open(Path::new(&local::host_temp_dir()), &options.worker_instance)
        })
        .and_then(|opened| match opened {
            Ok(ledger) => Some(Arc::new(ledger)),
            Err(err) => {
                tracing::warn!("{err}; local processes will not be swept if this worker dies");
                None
            }
        });
        for backend in requested {
            if providers.iter().any(|p| p.name() == backend.as_str()) {
                continue;
            }
            match backend.as_str() {
                "local" => providers.push(Arc::new(LocalProvider {
                    cwd: local_cwd.to_owned(),
                    user: options.local_user.clone(),
                    confinement: options.local_confinement.clone(),
                    ledger: ledger.clone(),
                    file_server: options.file_server.clone(),
                })),
                "docker" => providers.push(Arc::new(docker::DockerProvider::new(
                    docker::settings::DockerSettings {
                        file_server: options.file_server.clone(),
                        ..options.docker.clone()
                    },
                    options.lease,
                ))),
                "ssh" => match &options.ssh {
                    Some(settings) if !settings.host.is_empty() => {
                        providers.push(Arc::new(ssh::SshProvider::new(settings.clone())))
                    }
                    _ => refused.push(
                        "backend 'ssh' needs a host: set terminal.ssh_host (TERMINAL_SSH_HOST)"
                            .to_owned(),
                    ),
                },
                "daytona" => match &options.daytona {
                    Some(settings) => providers.push(Arc::new(daytona::DaytonaProvider::new(
                        settings.clone(),
                    ))),
                    None => refused.push(
                        "backend 'daytona' needs credentials: set DAYTONA_API_KEY (or DAYTONA_JWT_TOKEN and DAYTONA_ORGANIZATION_ID)"
                            .to_owned(),
                    ),
                },
                "modal" => match &options.modal {
                    Some(settings) => providers.push(Arc::new(modal::ModalProvider::new(
                        settings.clone(),
                    ))),
                    None => refused.push(
                        "backend 'modal' needs credentials: set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET (or a ~/.modal.toml profile)"
                            .to_owned(),
                    ),
                },
                "singularity" | "apptainer" => providers.push(Arc::new(
                    singularity::SingularityProvider::new(options.singularity.clone()),
                )),
                other => refused.push(format!("backend '{other}' is not supported by this worker")),
            }
        }
        // Docker, Daytona and Modal answer only once probed; the others serve
        // from the start (their own checks happen when they create).
        let available = providers
            .iter()
            .map(|p| p.name().to_owned())
            .filter(|name| !matches!(name.as_str(), "docker" | "daytona" | "modal"))
            .collect();
        let pools = pool::WarmPools::default();
        refused.extend(pools.configure(
            &options.warm_pools,
            &providers,
            &options.worker,
            &options.worker_instance,
        ));
        (
            Backends {
                providers,
                available: std::sync::RwLock::new(available),
                pools,
                lease: options.lease,
                ledger,
            },
            refused,
        )
    }

    pub fn providers(&self) -> &[Arc<dyn Provider>] {
        &self.providers
    }

    /// Lease length and renewal/sweep intervals of this worker's sandboxes.
    pub fn lease_policy(&self) -> lease::LeasePolicy {
        self.lease
    }

    /// This worker's ledger of what it leaves on its host (local backend).
    pub fn ledger(&self) -> Option<&Arc<ledger::HostLedger>> {
        self.ledger.as_ref()
    }

    pub fn pools(&self) -> &pool::WarmPools {
        &self.pools
    }

    /// Starts warm-pool entries until the pools are full.
    pub async fn refill_pools(&self) -> usize {
        self.pools.refill(&self.providers, &self.available()).await
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

    /// Creates a sandbox for a task on `backend`, from its warm pool when one
    /// matches and has a live entry ready.
    pub async fn create(
        &self,
        backend: &str,
        request: &CreateRequest,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let provider = match self.provider(backend) {
            Some(provider) if self.available().iter().any(|b| b == backend) => provider,
            _ => return Err(SandboxError::Unavailable(backend.to_owned())),
        };
        if let Some(key) = provider.pool_key(request) {
            while let Some(sandbox) = self.pools.take(backend, &key) {
                if sandbox.alive().await {
                    tracing::debug!(%backend, sandbox = %sandbox.id(), task = %request.task_id, "sandbox taken from the warm pool");
                    return Ok(sandbox);
                }
                let _ = sandbox.destroy().await;
            }
        }
        provider.create(request).await
    }

    /// Sweeps every provider; warm-pool entries are kept like live sandboxes.
    pub async fn sweep(&self, context: &SweepContext) -> Vec<String> {
        let mut context = context.clone();
        context.live.extend(self.pools.ids());
        let mut removed = Vec::new();
        for provider in &self.providers {
            removed.extend(provider.sweep(&context).await);
        }
        // Without the local provider the dead ledgers (browsers of a dead
        // worker) are still this host's to sweep.
        if !self.providers.iter().any(|p| p.name() == "local")
            && let Some(ledger) = &self.ledger
        {
            removed.extend(ledger.sweep_dead().await);
        }
        removed
    }
}
