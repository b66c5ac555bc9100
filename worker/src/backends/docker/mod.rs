//! The Docker backend, through the engine API (bollard): one hardened
//! container per environment running a lease watchdog under an init process;
//! commands run through execs with attached stdio; leases live in a small
//! file inside each container; a sweeper removes containers whose lease
//! expired. See `../README.md`.

pub mod engine;
pub mod exec;
pub mod sandbox;
pub mod settings;
pub mod spec;
pub mod tar;

#[cfg(test)]
#[path = "docker_tests.rs"]
mod tests;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use async_trait::async_trait;
use bollard::Docker;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, ListContainersOptionsBuilder,
};
use futures::StreamExt;

use super::lease::{LeaseLabels, LeasePolicy, SweepCandidate, Verdict, epoch_secs, judge, label};
use super::{CreateRequest, Provider, SweepContext};
use crate::sandbox::{Sandbox, SandboxError};
use engine::{Engine, server_error};
use sandbox::DockerSandbox;
use settings::DockerSettings;
use spec::{EngineSupport, PersistentMounts, Refused};

pub struct DockerProvider {
    engine: Engine,
    settings: DockerSettings,
    lease: LeasePolicy,
    support: Mutex<EngineSupport>,
    /// Names of containers being created: a concurrent sweep must not take them.
    creating: Mutex<HashSet<String>>,
}

impl DockerProvider {
    pub fn new(settings: DockerSettings, lease: LeasePolicy) -> Self {
        DockerProvider {
            engine: Engine::new(settings.host.clone()),
            settings,
            lease,
            support: Mutex::new(EngineSupport::default()),
            creating: Mutex::new(HashSet::new()),
        }
    }

    pub fn settings(&self) -> &DockerSettings {
        &self.settings
    }

    /// Why the engine is unreachable, if it is (cached probe).
    pub async fn unavailable_reason(&self) -> Option<String> {
        self.engine.available().await.err()
    }

    fn labels(&self, request: &CreateRequest, pool: Option<&str>) -> LeaseLabels {
        LeaseLabels {
            owner: request.owner.clone(),
            worker: request.worker.clone(),
            worker_instance: request.worker_instance.clone(),
            task: request.task_id.clone(),
            created: epoch_secs(SystemTime::now()),
            lease_seconds: self.lease.ttl.as_secs().max(1),
            pool: pool.map(str::to_owned),
        }
    }

    async fn create_with(
        &self,
        request: &CreateRequest,
        pool: Option<&str>,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let settings = self
            .settings
            .with_overrides(&request.settings)
            .map_err(|e| SandboxError::Other(e.to_string()))?;
        let docker = self.engine.client().await?;
        let name = container_name(&request.task_id);
        if let Ok(mut creating) = self.creating.lock() {
            creating.insert(name.clone());
        }
        let created = self
            .create_container(&docker, &name, &settings, request, pool)
            .await;
        if let Ok(mut creating) = self.creating.lock() {
            creating.remove(&name);
        }
        created
    }

    async fn create_container(
        &self,
        docker: &Docker,
        name: &str,
        settings: &DockerSettings,
        request: &CreateRequest,
        pool: Option<&str>,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let persistent = if settings.persistent && pool.is_none() {
            let (home, workspace) = settings.persistent_dirs(&request.task_id);
            for dir in [&home, &workspace] {
                std::fs::create_dir_all(dir).map_err(|e| {
                    SandboxError::Other(format!(
                        "cannot create the persistent directory {}: {e}",
                        dir.display()
                    ))
                })?;
            }
            Some(PersistentMounts {
                home: home.display().to_string(),
                workspace: workspace.display().to_string(),
            })
        } else {
            None
        };
        let labels = self.labels(request, pool).to_map();
        let mut pulled = false;
        let id = loop {
            let support = self.support.lock().map(|s| *s).unwrap_or_default();
            let body = spec::container_body(
                settings,
                labels.clone(),
                persistent.as_ref(),
                support,
                self.lease.ttl.as_secs(),
            );
            let options = CreateContainerOptionsBuilder::default().name(name).build();
            match docker.create_container(Some(options), body).await {
                Ok(created) => break created.id,
                Err(err) => {
                    let (code, message) = server_error(&err)
                        .map(|(c, m)| (c, m.to_owned()))
                        .unwrap_or((0, err.to_string()));
                    if code == 404 && message.to_ascii_lowercase().contains("image") && !pulled {
                        pulled = true;
                        self.pull(docker, &settings.image).await?;
                        continue;
                    }
                    match spec::refused_feature(&message) {
                        Some(Refused::StorageOpt) if support.storage_opt => {
                            tracing::info!(
                                "the Docker engine does not support a disk size limit (container_disk); creating containers without it"
                            );
                            self.learn(|s| s.storage_opt = false);
                        }
                        Some(Refused::FileServer) if support.file_server => {
                            tracing::info!(
                                "the Docker engine cannot mount this worker's file server ({message}); containers' file tools run a script per primitive"
                            );
                            self.learn(|s| s.file_server = false);
                        }
                        Some(Refused::Resources) if support.resources => {
                            tracing::warn!(
                                "the Docker engine refused CPU/memory limits ({message}); creating containers without them"
                            );
                            self.learn(|s| s.resources = false);
                        }
                        _ => {
                            return Err(SandboxError::Other(format!(
                                "cannot create a container from '{}': {message}",
                                settings.image
                            )));
                        }
                    }
                }
            }
        };
        if let Err(err) = docker.start_container(&id, None).await {
            let _ = sandbox::remove_container(docker, &id).await;
            return Err(SandboxError::Other(format!(
                "cannot start the container from '{}': {err}",
                settings.image
            )));
        }
        let persistent_paths = if persistent.is_some() {
            vec!["/root".to_owned(), "/workspace".to_owned()]
        } else {
            Vec::new()
        };
        let served = settings.file_server.is_some()
            && self.support.lock().map(|s| s.file_server).unwrap_or(false);
        let sandbox = DockerSandbox::new(
            docker.clone(),
            id,
            name.to_owned(),
            settings.cwd.clone(),
            settings.forward_env.clone(),
            persistent_paths,
            sandbox::ContainerTraits {
                file_server_mounted: served,
                network_cut: !settings.network,
            },
        );
        tracing::debug!(container = %sandbox.name(), image = %settings.image, "container started");
        Ok(sandbox)
    }

    fn learn(&self, change: impl FnOnce(&mut EngineSupport)) {
        if let Ok(mut support) = self.support.lock() {
            change(&mut support);
        }
    }

    /// Pulls an image that is not on the engine; air-gapped engines cannot,
    /// and are told how to build one.
    async fn pull(&self, docker: &Docker, image: &str) -> Result<(), SandboxError> {
        tracing::info!(%image, "pulling image");
        let (repo, tag) = split_image(image);
        let options = CreateImageOptionsBuilder::default()
            .from_image(repo)
            .tag(tag)
            .build();
        let mut progress = docker.create_image(Some(options), None, None);
        while let Some(step) = progress.next().await {
            if let Err(err) = step {
                let hint = if image == settings::DEFAULT_IMAGE {
                    " Build it without a registry with deploy/base-image.sh.".to_owned()
                } else {
                    format!(
                        " Pull or build it on this worker's engine, or set terminal.docker_image (an engine without a registry can use {} from deploy/base-image.sh).",
                        settings::DEFAULT_IMAGE
                    )
                };
                return Err(SandboxError::Other(format!(
                    "the image '{image}' is not on the Docker engine and cannot be pulled: {err}.{hint}"
                )));
            }
        }
        Ok(())
    }

    /// Containers carrying caduceus labels. Lease records are read only
    /// where they can matter: not for held containers, nor for those younger
    /// than one lease (their label alone keeps them).
    async fn candidates(
        &self,
        docker: &Docker,
        context: &SweepContext,
        now: SystemTime,
    ) -> Result<Vec<(SweepCandidate, Vec<String>)>, SandboxError> {
        let filters = HashMap::from([("label", vec![format!("{}=1", label::MANAGED)])]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let listed = docker
            .list_containers(Some(options))
            .await
            .map_err(|e| SandboxError::Other(e.to_string()))?;
        let mut out = Vec::new();
        for summary in listed {
            let (Some(id), Some(labels)) = (summary.id.clone(), summary.labels.as_ref()) else {
                continue;
            };
            let Some(labels) = LeaseLabels::from_map(labels) else {
                continue;
            };
            let names: Vec<String> = summary
                .names
                .clone()
                .unwrap_or_default()
                .iter()
                .map(|n| n.trim_start_matches('/').to_owned())
                .collect();
            let young = labels.created.saturating_add(labels.lease_seconds) >= epoch_secs(now);
            let record = if context.live.contains(&id) || young {
                None
            } else {
                sandbox::read_lease(docker, &id).await
            };
            out.push((SweepCandidate { id, labels, record }, names));
        }
        Ok(out)
    }
}

/// `caduceus-<task>-<random>`: readable in `docker ps`, unique.
fn container_name(task_id: &str) -> String {
    let task: String = settings::safe_name(task_id)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(40)
        .collect();
    let random = uuid::Uuid::new_v4().simple().to_string();
    if task.is_empty() {
        format!("caduceus-{}", &random[..12])
    } else {
        format!("caduceus-{task}-{}", &random[..8])
    }
}

/// `repo[:tag]` (a registry port is not a tag); `latest` when untagged.
fn split_image(image: &str) -> (&str, &str) {
    if image.contains('@') {
        return (image, "");
    }
    match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, tag),
        _ => (image, "latest"),
    }
}

#[async_trait]
impl Provider for DockerProvider {
    fn name(&self) -> &'static str {
        "docker"
    }

    async fn available(&self) -> bool {
        match self.engine.available().await {
            Ok(()) => true,
            Err(reason) => {
                tracing::debug!("docker backend unavailable: {reason}");
                false
            }
        }
    }

    async fn create(&self, request: &CreateRequest) -> Result<Arc<dyn Sandbox>, SandboxError> {
        self.create_with(request, None).await
    }

    fn pool_key(&self, request: &CreateRequest) -> Option<String> {
        self.settings
            .with_overrides(&request.settings)
            .ok()?
            .pool_fingerprint()
    }

    async fn create_for_pool(
        &self,
        request: &CreateRequest,
        key: &str,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        self.create_with(request, Some(key)).await
    }

    async fn sweep(&self, context: &SweepContext) -> Vec<String> {
        let Ok(docker) = self.engine.client().await else {
            return Vec::new();
        };
        let now = SystemTime::now();
        let candidates = match self.candidates(&docker, context, now).await {
            Ok(candidates) => candidates,
            Err(err) => {
                tracing::warn!("docker sweep: cannot list containers: {err}");
                return Vec::new();
            }
        };
        let creating = self.creating.lock().map(|c| c.clone()).unwrap_or_default();
        let mut removed = Vec::new();
        for (candidate, names) in candidates {
            if names.iter().any(|n| creating.contains(n)) {
                continue;
            }
            if let Verdict::Remove(reason) = judge(&candidate, context, now) {
                let shown = names
                    .first()
                    .cloned()
                    .unwrap_or_else(|| candidate.id.clone());
                match sandbox::remove_container(&docker, &candidate.id).await {
                    Ok(()) => {
                        tracing::info!(container = %shown, task = %candidate.labels.task, "swept: {reason}");
                        removed.push(candidate.id);
                    }
                    Err(err) => {
                        tracing::warn!(container = %shown, "sweep could not remove it: {err}")
                    }
                }
            }
        }
        removed
    }
}
