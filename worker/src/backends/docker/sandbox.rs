//! One Docker container as a [`Sandbox`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use bollard::query_parameters::{
    DownloadFromContainerOptionsBuilder, RemoveContainerOptionsBuilder,
    UploadToContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures::StreamExt;

use caduceus_files::fs::FileSystem;

use super::engine::{is_gone, server_error};
use super::exec;
use super::tar;
use crate::backends::lease::{LeaseRecord, epoch_secs};
use crate::sandbox::{Sandbox, SandboxError, SpawnSpec, SpawnedProcess, StopSignal};

/// Where the lease record lives inside the container (on its root file
/// system: the engine's archive API does not reach into tmpfs mounts).
pub const LEASE_FILE: &str = "/.caduceus-lease";

/// How the watcher learned the container's fate.
#[derive(Debug, Default)]
struct Watch {
    /// The container stopped or was removed.
    gone: AtomicBool,
    /// The watcher lost its connection; `alive()` asks the engine instead.
    blind: AtomicBool,
}

pub struct DockerSandbox {
    docker: Docker,
    id: String,
    name: String,
    cwd: String,
    forward_env: Vec<String>,
    persistent_paths: Vec<String>,
    watch: Arc<Watch>,
    watcher: tokio::task::JoinHandle<()>,
    files: Arc<dyn FileSystem>,
    /// Started with `--network=none` (`docker_network: false`).
    network_cut: bool,
}

/// What a started container was given, beyond its names.
#[derive(Debug, Clone, Copy)]
pub struct ContainerTraits {
    /// The worker's file server is bind-mounted in it.
    pub file_server_mounted: bool,
    /// It runs with `--network=none`.
    pub network_cut: bool,
}

impl std::fmt::Debug for DockerSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSandbox")
            .field("id", &self.id)
            .field("name", &self.name)
            .finish()
    }
}

impl Drop for DockerSandbox {
    fn drop(&mut self) {
        self.watcher.abort();
    }
}

impl DockerSandbox {
    /// Wraps a started container and starts watching it.
    pub fn new(
        docker: Docker,
        id: String,
        name: String,
        cwd: String,
        forward_env: Vec<String>,
        persistent_paths: Vec<String>,
        traits: ContainerTraits,
    ) -> Arc<Self> {
        let ContainerTraits {
            file_server_mounted,
            network_cut,
        } = traits;
        let watch = Arc::new(Watch::default());
        let watcher = tokio::spawn(watch_container(docker.clone(), id.clone(), watch.clone()));
        Arc::new_cyclic(|me: &std::sync::Weak<DockerSandbox>| {
            // The file tools go to the mounted file server, one exec for the
            // environment's life; else (and if it cannot start: another libc
            // in the image) one small script per primitive through this
            // sandbox's execs (the archive API does not see tmpfs mounts).
            let me: std::sync::Weak<dyn Sandbox> = me.clone();
            let files = crate::backends::served_files::files(
                me,
                file_server_mounted.then(|| super::spec::FILE_SERVER_PATH.to_owned()),
            );
            DockerSandbox {
                docker,
                id,
                name,
                cwd,
                forward_env,
                persistent_paths,
                watch,
                watcher,
                files,
                network_cut,
            }
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn docker(&self) -> &Docker {
        &self.docker
    }
}

/// Waits for the container to stop (a long poll on the engine) and records it.
async fn watch_container(docker: Docker, id: String, watch: Arc<Watch>) {
    loop {
        let options = WaitContainerOptionsBuilder::default()
            .condition("not-running")
            .build();
        let mut stream = docker.wait_container(&id, Some(options));
        match stream.next().await {
            // Any answer means it stopped (a non-zero exit arrives as an error).
            Some(Ok(_)) | Some(Err(bollard::errors::Error::DockerContainerWaitError { .. })) => {
                break;
            }
            Some(Err(err)) if is_gone(&err) => break,
            _ => {
                // Connection trouble or a request timeout: ask directly, then wait again.
                watch.blind.store(true, Ordering::Relaxed);
                match docker.inspect_container(&id, None).await {
                    Ok(inspect) if inspect.state.as_ref().and_then(|s| s.running) == Some(true) => {
                        watch.blind.store(false, Ordering::Relaxed);
                    }
                    Ok(_) => break,
                    Err(err) if is_gone(&err) => break,
                    Err(_) => {}
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    watch.gone.store(true, Ordering::Relaxed);
}

#[async_trait]
impl Sandbox for DockerSandbox {
    fn network_cut(&self) -> Option<&'static str> {
        self.network_cut.then_some("docker_network: false")
    }

    fn backend(&self) -> &str {
        "docker"
    }

    fn id(&self) -> &str {
        &self.id
    }

    async fn spawn(&self, spec: SpawnSpec) -> Result<SpawnedProcess, SandboxError> {
        if self.watch.gone.load(Ordering::Relaxed) {
            return Err(SandboxError::Gone(format!(
                "container {} is no longer running",
                self.name
            )));
        }
        let spec = SpawnSpec {
            cwd: spec.cwd.or_else(|| Some(self.cwd.clone())),
            ..spec
        };
        let spawned = exec::spawn(&self.docker, &self.id, &spec)
            .await
            .map_err(|failure| failure.into_sandbox_error(&spec.program));
        if matches!(spawned, Err(SandboxError::Gone(_))) {
            // The engine said so before the watcher did.
            self.watch.gone.store(true, Ordering::Relaxed);
        }
        spawned
    }

    async fn signal_tree(
        &self,
        pid: u32,
        signal: StopSignal,
        include_root: bool,
    ) -> Result<(), SandboxError> {
        exec::signal_tree(&self.docker, &self.id, pid, signal, include_root).await
    }

    fn files(&self) -> Arc<dyn FileSystem> {
        self.files.clone()
    }

    fn temp_dir(&self) -> String {
        "/tmp".to_owned()
    }

    fn home_dir(&self) -> String {
        "/root".to_owned()
    }

    fn initial_cwd(&self) -> String {
        self.cwd.clone()
    }

    async fn alive(&self) -> bool {
        if self.watch.gone.load(Ordering::Relaxed) {
            return false;
        }
        if !self.watch.blind.load(Ordering::Relaxed) {
            return true;
        }
        match self.docker.inspect_container(&self.id, None).await {
            Ok(inspect) => inspect.state.and_then(|s| s.running) == Some(true),
            Err(err) => !is_gone(&err),
        }
    }

    async fn destroy(&self) -> Result<(), SandboxError> {
        self.watcher.abort();
        self.watch.gone.store(true, Ordering::Relaxed);
        remove_container(&self.docker, &self.id).await
    }

    fn shell_env(&self, worker_env: &[(String, String)]) -> Vec<(String, String)> {
        // The container has its own PATH, HOME, …; only forwarded names cross.
        worker_env
            .iter()
            .filter(|(k, _)| self.forward_env.iter().any(|f| f == k))
            .cloned()
            .collect()
    }

    async fn renew_lease(&self, record: &LeaseRecord) -> Result<(), SandboxError> {
        write_lease(&self.docker, &self.id, record).await
    }

    fn vanished(&self) -> bool {
        self.watch.gone.load(Ordering::Relaxed)
    }

    async fn gone_before(&self, at: std::time::SystemTime) -> bool {
        let Ok(inspect) = self.docker.inspect_container(&self.id, None).await else {
            // Removed: when is unknown.
            return false;
        };
        let state = inspect.state.unwrap_or_default();
        if state.running == Some(true) {
            return false;
        }
        state
            .finished_at
            .as_deref()
            .and_then(parse_rfc3339)
            .is_some_and(|finished| finished < at)
    }

    fn persistent_paths(&self) -> Vec<String> {
        self.persistent_paths.clone()
    }
}

/// Removes a container and its anonymous volumes; gone already is fine.
pub async fn remove_container(docker: &Docker, id: &str) -> Result<(), SandboxError> {
    let options = RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(err) if matches!(server_error(&err), Some((404, _))) => Ok(()),
        Err(err)
            if server_error(&err)
                .is_some_and(|(code, m)| code == 409 && m.contains("already in progress")) =>
        {
            Ok(())
        }
        Err(err) => Err(SandboxError::Other(format!(
            "cannot remove container {id}: {err}"
        ))),
    }
}

/// Writes the lease record into the container (one archive upload).
pub async fn write_lease(
    docker: &Docker,
    id: &str,
    record: &LeaseRecord,
) -> Result<(), SandboxError> {
    let name = LEASE_FILE.trim_start_matches('/');
    let archive = tar::single_file(
        name,
        0o644,
        epoch_secs(std::time::SystemTime::now()),
        record.to_json().as_bytes(),
    )
    .map_err(|err| SandboxError::Other(format!("cannot pack the lease of {id}: {err}")))?;
    let options = UploadToContainerOptionsBuilder::default().path("/").build();
    docker
        .upload_to_container(id, Some(options), bollard::body_full(archive.into()))
        .await
        .map_err(|err| {
            if is_gone(&err) {
                SandboxError::Gone(err.to_string())
            } else {
                SandboxError::Other(format!("cannot renew the lease of {id}: {err}"))
            }
        })
}

/// Reads the lease record from the container; `None` when missing or unreadable.
pub async fn read_lease(docker: &Docker, id: &str) -> Option<LeaseRecord> {
    let options = DownloadFromContainerOptionsBuilder::default()
        .path(LEASE_FILE)
        .build();
    let mut stream = docker.download_from_container(id, Some(options));
    let mut archive = Vec::new();
    while let Some(chunk) = stream.next().await {
        archive.extend_from_slice(&chunk.ok()?);
        if archive.len() > 64 * 1024 {
            return None;
        }
    }
    match tar::first_entry(&archive).ok()? {
        tar::TarEntry::File(file) => LeaseRecord::from_json(&String::from_utf8_lossy(&file.data)),
        _ => None,
    }
}

/// `2026-11-30T01:55:12.123456789Z` (or with a `+hh:mm` offset) as a time.
pub fn parse_rfc3339(text: &str) -> Option<std::time::SystemTime> {
    let (date, rest) = text.split_once('T')?;
    let mut parts = date.split('-');
    let year: i64 = parts.next()?.parse().ok()?;
    let month: i64 = parts.next()?.parse().ok()?;
    let day: i64 = parts.next()?.parse().ok()?;
    let zone_at = rest.find(['Z', 'z', '+', '-']).unwrap_or(rest.len());
    let (clock, zone) = rest.split_at(zone_at);
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let mut hms = hms.split(':');
    let hours: i64 = hms.next()?.parse().ok()?;
    let minutes: i64 = hms.next()?.parse().ok()?;
    let seconds: i64 = hms.next()?.parse().ok()?;
    let mut digits: String = fraction.chars().take(9).collect();
    while digits.len() < 9 {
        digits.push('0');
    }
    let nanos: u32 = digits.parse().ok()?;
    let offset = match zone.chars().next() {
        Some(sign @ ('+' | '-')) => {
            let (h, m) = zone[1..].split_once(':')?;
            let secs = h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60;
            if sign == '+' { secs } else { -secs }
        }
        _ => 0,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hours * 3600 + minutes * 60 + seconds - offset;
    let secs = u64::try_from(secs).ok()?;
    Some(std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos))
}
