//! The Singularity/Apptainer backend: one instance per environment, driven
//! through the CLI (`apptainer`, else `singularity`, or a configured path).
//!
//! * Start: `<exe> instance start --containall --no-home (--overlay DIR |
//!   --writable-tmpfs) [--bind …] [--memory NM] [--cpus N] IMAGE NAME`.
//!   `docker://` images are built once into a cached SIF (`<exe> build`), as
//!   hermes does; a failed build falls back to the `docker://` URL.
//! * Processes (the live shell, signals): `<exe> exec --cleanenv
//!   instance://NAME bash -c …`; pids are those of the instance's PID
//!   namespace.
//! * Release: `<exe> instance stop NAME`, which ends every process of it.
//!
//! Instance names are `caduceus_<worker>_<env>`: `<worker>` is the first 12
//! characters of the creating worker process's instance id, `<env>` 12 random
//! hex digits. The lease lives next to it, in `<scratch>/leases/<name>`
//! (`expires=<epoch> instance=… worker=… owner=… task=…`), renewed by the
//! worker every third of the lease. A sweep lists `caduceus_*` instances and
//! stops those that are not live and either carry this worker's prefix or
//! have no unexpired lease (their worker died). Persistent overlays
//! (`<scratch>/overlays/overlay-<task>`) outlive their instance on purpose.

pub mod cli;
mod sandbox;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::Mutex as AsyncMutex;

pub use cli::Cli;
pub use sandbox::SingularitySandbox;

use super::lease::lease_word;
use super::{CreateRequest, Provider, SweepContext};
use crate::sandbox::{Sandbox, SandboxError};

/// Instance name prefix; sweeps touch nothing else.
pub const NAME_PREFIX: &str = "caduceus_";

#[derive(Debug, Clone)]
pub struct SingularitySettings {
    /// The CLI; `apptainer`, else `singularity`, from `PATH` when `None`.
    pub executable: Option<PathBuf>,
    /// Default image (hermes: `docker://nikolaik/python-nodejs:python3.11-nodejs20`).
    pub image: String,
    /// Overlays and leases (hermes' scratch dir).
    pub scratch_dir: PathBuf,
    /// SIF cache; `$APPTAINER_CACHEDIR`, else `<scratch>/.apptainer`.
    pub cache_dir: Option<PathBuf>,
    /// `--cpus`; 0 = no limit.
    pub cpus: f64,
    /// `--memory` in MB; 0 = no limit.
    pub memory_mb: u64,
    /// Keep each task's files in an overlay directory across releases.
    pub persistent: bool,
    /// Extra `--bind` specs (`src[:dst[:ro]]`).
    pub binds: Vec<String>,
    pub lease: Duration,
    pub start_timeout: Duration,
    pub build_timeout: Duration,
}

impl Default for SingularitySettings {
    fn default() -> Self {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/tmp"));
        SingularitySettings {
            executable: None,
            image: "docker://nikolaik/python-nodejs:python3.11-nodejs20".to_owned(),
            scratch_dir: home.join(".caduceus/sandboxes/singularity"),
            cache_dir: None,
            cpus: 1.0,
            memory_mb: 5120,
            persistent: true,
            binds: Vec::new(),
            lease: Duration::from_secs(600),
            start_timeout: Duration::from_secs(120),
            build_timeout: Duration::from_secs(600),
        }
    }
}

impl SingularitySettings {
    pub fn cache_dir(&self) -> PathBuf {
        if let Some(dir) = &self.cache_dir {
            return dir.clone();
        }
        match std::env::var_os("APPTAINER_CACHEDIR").filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => self.scratch_dir.join(".apptainer"),
        }
    }

    fn leases_dir(&self) -> PathBuf {
        self.scratch_dir.join("leases")
    }
}

/// Lease files of this worker's instances, and their renewal.
pub struct LeaseFiles {
    dir: PathBuf,
    lease: Duration,
    /// instance name -> lease line without the expiry
    live: std::sync::Mutex<HashMap<String, String>>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl LeaseFiles {
    fn write(&self, name: &str, rest: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let path = self.dir.join(name);
        let tmp = self.dir.join(format!(".{name}.new"));
        std::fs::write(
            &tmp,
            format!("expires={} {rest}\n", now_secs() + self.lease.as_secs()),
        )?;
        std::fs::rename(tmp, path)
    }

    fn insert(&self, name: &str, rest: String) -> std::io::Result<()> {
        self.write(name, &rest)?;
        if let Ok(mut live) = self.live.lock() {
            live.insert(name.to_owned(), rest);
        }
        Ok(())
    }

    fn forget(&self, name: &str) {
        if let Ok(mut live) = self.live.lock() {
            live.remove(name);
        }
    }

    fn remove_file(&self, name: &str) {
        let _ = std::fs::remove_file(self.dir.join(name));
    }

    fn names(&self) -> HashSet<String> {
        self.live
            .lock()
            .map(|live| live.keys().cloned().collect())
            .unwrap_or_default()
    }

    fn renew_all(&self) {
        let entries: Vec<(String, String)> = self
            .live
            .lock()
            .map(|live| live.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        for (name, rest) in entries {
            if let Err(err) = self.write(&name, &rest) {
                tracing::warn!(instance = %name, "renewing the lease failed: {err}");
            }
        }
    }

    /// Expiry recorded for `name`, if its lease file is readable.
    fn expiry(&self, name: &str) -> Option<u64> {
        let text = std::fs::read_to_string(self.dir.join(name)).ok()?;
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix("expires="))
            .and_then(|v| v.parse().ok())
    }
}

pub struct SingularityProvider {
    settings: SingularitySettings,
    leases: Arc<LeaseFiles>,
    /// One build at a time per image.
    builds: AsyncMutex<HashMap<String, Arc<AsyncMutex<()>>>>,
    renewer: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Result of the last `--version` probe.
    probe: std::sync::Mutex<Option<(std::time::Instant, bool)>>,
}

impl SingularityProvider {
    pub fn new(settings: SingularitySettings) -> Self {
        let leases = Arc::new(LeaseFiles {
            dir: settings.leases_dir(),
            lease: settings.lease,
            live: Default::default(),
        });
        SingularityProvider {
            settings,
            leases,
            builds: AsyncMutex::new(HashMap::new()),
            renewer: std::sync::Mutex::new(None),
            probe: std::sync::Mutex::new(None),
        }
    }

    /// The configured executable, else `apptainer`/`singularity` from `PATH`.
    pub fn cli(&self) -> Option<Cli> {
        match &self.settings.executable {
            Some(path) if cli::is_executable(path) => Some(Cli { exe: path.clone() }),
            Some(_) => None,
            None => cli::find_executable().map(|exe| Cli { exe }),
        }
    }

    fn unavailable(&self) -> SandboxError {
        let what = match &self.settings.executable {
            Some(path) => format!("{} is not an executable", path.display()),
            None => "neither 'apptainer' nor 'singularity' is on PATH".to_owned(),
        };
        SandboxError::Other(format!("the singularity backend cannot run: {what}"))
    }

    fn ensure_renewer(&self) {
        let Ok(mut renewer) = self.renewer.lock() else {
            return;
        };
        if renewer.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        let leases = Arc::downgrade(&self.leases);
        let every = (self.settings.lease / 3).max(Duration::from_secs(1));
        *renewer = Some(tokio::spawn(renew_loop(leases, every)));
    }

    /// The image to start: a cached SIF for `docker://` images (built on
    /// first use), anything else as given.
    async fn resolve_image(&self, cli: &Cli, image: &str) -> String {
        let cache = self.settings.cache_dir();
        let Some(sif) = cli::sif_path_for(image, &cache) else {
            return image.to_owned();
        };
        let lock = {
            let mut builds = self.builds.lock().await;
            builds.entry(image.to_owned()).or_default().clone()
        };
        let _held = lock.lock().await;
        if sif.exists() {
            return sif.display().to_string();
        }
        if let Err(err) = std::fs::create_dir_all(&cache) {
            tracing::warn!(
                "cannot create the SIF cache {}: {err}; using {image} directly",
                cache.display()
            );
            return image.to_owned();
        }
        tracing::info!(%image, sif = %sif.display(), "building SIF image (one-time)");
        match cli
            .build(&sif, image, &cache, self.settings.build_timeout)
            .await
        {
            Ok(()) => sif.display().to_string(),
            Err(err) => {
                let _ = std::fs::remove_file(&sif);
                tracing::warn!("SIF build failed ({err}); using {image} directly");
                image.to_owned()
            }
        }
    }
}

impl Drop for SingularityProvider {
    fn drop(&mut self) {
        if let Ok(mut renewer) = self.renewer.lock()
            && let Some(task) = renewer.take()
        {
            task.abort();
        }
    }
}

/// Starts the instance's host watchdog (`lease::lease_watchdog`), detached
/// in its own session so that it outlives the worker: when the lease file is
/// not renewed, it stops the instance and removes the lease.
async fn start_watchdog(
    exe: &std::path::Path,
    name: &str,
    lease: &std::path::Path,
    length: Duration,
) {
    let script = super::lease::lease_watchdog(
        "\"$3\" instance stop --timeout 5 \"$4\" >/dev/null 2>&1\nrm -f -- \"$lease\"",
    );
    let started = tokio::process::Command::new("setsid")
        .arg("-f")
        .arg("bash")
        .arg("-c")
        .arg(script)
        .arg("caduceus-watchdog")
        .arg(lease)
        .arg(super::lease::watchdog_step(length).to_string())
        .arg(exe)
        .arg(name)
        .env_clear()
        .env("PATH", crate::sandbox::SYSTEM_PATH)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .await;
    if !started.is_ok_and(|status| status.success()) {
        tracing::warn!(instance = %name, "no lease watchdog (setsid failed); only sweepers will stop this instance if its worker dies");
    }
}

async fn renew_loop(leases: Weak<LeaseFiles>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(leases) = leases.upgrade() else {
            return;
        };
        leases.renew_all();
    }
}

/// Lowercase alphanumerics of `text`, at most `max` of them.
fn name_part(text: &str, max: usize) -> String {
    text.chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .take(max)
        .collect()
}

/// `caduceus_<worker12>_<env12>`.
pub fn instance_name(worker_instance: &str) -> String {
    let worker = name_part(worker_instance, 12);
    let worker = if worker.is_empty() {
        "none".to_owned()
    } else {
        worker
    };
    format!(
        "{NAME_PREFIX}{worker}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// The worker part of an instance name.
pub fn worker_part(name: &str) -> Option<&str> {
    name.strip_prefix(NAME_PREFIX)?.split('_').next()
}

/// Per-task settings sent by the coordinator override the worker's.
fn setting<'a>(settings: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter()
        .find_map(|k| settings.get(*k))
        .filter(|v| !v.is_null())
}

#[async_trait]
impl Provider for SingularityProvider {
    fn name(&self) -> &'static str {
        "singularity"
    }

    /// The CLI exists and answers `--version` (cached for a minute).
    async fn available(&self) -> bool {
        if let Ok(probe) = self.probe.lock()
            && let Some((at, ok)) = *probe
            && at.elapsed() < Duration::from_secs(60)
        {
            return ok;
        }
        let ok = match self.cli() {
            Some(cli) => cli.version().await.is_ok(),
            None => false,
        };
        if let Ok(mut probe) = self.probe.lock() {
            *probe = Some((std::time::Instant::now(), ok));
        }
        ok
    }

    async fn create(&self, request: &CreateRequest) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let cli = self.cli().ok_or_else(|| self.unavailable())?;
        let s = &self.settings;
        let wanted = request.settings.clone();
        let image = setting(&wanted, &["singularity_image", "image"])
            .and_then(Value::as_str)
            .unwrap_or(&s.image)
            .to_owned();
        let cpus = setting(&wanted, &["container_cpu", "cpu"])
            .and_then(Value::as_f64)
            .unwrap_or(s.cpus);
        let memory_mb = setting(&wanted, &["container_memory", "memory"])
            .and_then(Value::as_u64)
            .unwrap_or(s.memory_mb);
        let persistent = setting(&wanted, &["container_persistent", "persistent"])
            .and_then(Value::as_bool)
            .unwrap_or(s.persistent);

        let image = self.resolve_image(&cli, &image).await;
        let name = instance_name(&request.worker_instance);
        let overlay = if persistent {
            let slug: String = request
                .task_id
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let dir = s
                .scratch_dir
                .join("overlays")
                .join(format!("overlay-{slug}"));
            std::fs::create_dir_all(&dir).map_err(|e| {
                SandboxError::Other(format!(
                    "cannot create the overlay directory {}: {e}",
                    dir.display()
                ))
            })?;
            Some(dir)
        } else {
            None
        };
        // The lease exists before the instance: a sweep never finds one without.
        let rest = format!(
            "instance={} worker={} owner={} task={}",
            lease_word(&request.worker_instance),
            lease_word(&request.worker),
            lease_word(&request.owner),
            lease_word(&request.task_id)
        );
        self.leases.insert(&name, rest).map_err(|e| {
            SandboxError::Other(format!(
                "cannot write the lease in {}: {e}",
                self.leases.dir.display()
            ))
        })?;
        let spec = cli::StartSpec {
            image: image.clone(),
            name: name.clone(),
            overlay,
            binds: s.binds.clone(),
            memory_mb,
            cpus,
        };
        if let Err(err) = cli.start(&spec, s.start_timeout).await {
            self.leases.forget(&name);
            self.leases.remove_file(&name);
            // A start that timed out may have left the instance half up.
            let _ = cli.stop(&name).await;
            return Err(SandboxError::Other(format!(
                "cannot start a Singularity instance of {image}: {err}"
            )));
        }
        self.ensure_renewer();
        start_watchdog(&cli.exe, &name, &self.leases.dir.join(&name), s.lease).await;

        // Where is home, and may we write there?
        let probe = "printf '%s\\n' \"$HOME\"; if [ -d \"$HOME\" ] && [ -w \"$HOME\" ]; then echo writable; fi";
        let out = cli.exec_script(&name, probe, Duration::from_secs(60)).await;
        let (home, writable) = match out {
            Ok(out) if out.status == Some(0) => {
                let mut lines = out.stdout.lines();
                let home = lines.next().unwrap_or("").trim().to_owned();
                (
                    if home.is_empty() {
                        "/root".to_owned()
                    } else {
                        home
                    },
                    lines.any(|l| l.trim() == "writable"),
                )
            }
            Ok(out) => {
                let _ = self.stop_and_forget(&cli, &name).await;
                return Err(SandboxError::Other(format!(
                    "the instance of {image} cannot run bash (exit {:?}): {}",
                    out.status, out.stderr
                )));
            }
            Err(err) => {
                let _ = self.stop_and_forget(&cli, &name).await;
                return Err(SandboxError::Other(format!(
                    "the instance of {image} does not answer: {err}"
                )));
            }
        };
        let cwd = if writable {
            home.clone()
        } else {
            "/tmp".to_owned()
        };
        tracing::info!(instance = %name, %image, task = %request.task_id, "Singularity instance started");
        let id = format!("singularity:{name}");
        let leases = self.leases.clone();
        Ok(Arc::new_cyclic(
            |me: &std::sync::Weak<SingularitySandbox>| {
                let me: std::sync::Weak<dyn Sandbox> = me.clone();
                SingularitySandbox {
                    cli,
                    id,
                    name,
                    home,
                    cwd,
                    leases,
                    files: Arc::new(crate::backends::shell_fs::ShellFs::new(me)),
                }
            },
        ))
    }

    async fn sweep(&self, context: &SweepContext) -> Vec<String> {
        let Some(cli) = self.cli() else {
            return Vec::new();
        };
        let instances = match cli.list(&format!("{NAME_PREFIX}*")).await {
            Ok(list) => list,
            Err(err) => {
                tracing::warn!("listing Singularity instances failed: {err}");
                return Vec::new();
            }
        };
        let mine = name_part(&context.worker_instance, 12);
        let keep = self.leases.names();
        let now = now_secs();
        let mut removed = Vec::new();
        for instance in instances {
            let name = instance.instance;
            let id = format!("singularity:{name}");
            if !name.starts_with(NAME_PREFIX) || keep.contains(&name) || context.live.contains(&id)
            {
                continue;
            }
            let orphaned = worker_part(&name) == Some(mine.as_str());
            let expired = self
                .leases
                .expiry(&name)
                .is_none_or(|expires| expires < now);
            if !(orphaned || expired) {
                continue;
            }
            match self.stop_and_forget(&cli, &name).await {
                Ok(()) => {
                    tracing::info!(instance = %name, "swept Singularity instance");
                    removed.push(id);
                }
                Err(err) => tracing::warn!(instance = %name, "sweeping failed: {err}"),
            }
        }
        self.remove_stale_lease_files(now);
        removed
    }
}

impl SingularityProvider {
    async fn stop_and_forget(&self, cli: &Cli, name: &str) -> Result<(), cli::CliError> {
        self.leases.forget(name);
        cli.stop(name).await?;
        self.leases.remove_file(name);
        Ok(())
    }

    /// Lease files of instances that no longer exist, once expired.
    fn remove_stale_lease_files(&self, now: u64) {
        let keep = self.leases.names();
        let Ok(entries) = std::fs::read_dir(&self.leases.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !name.starts_with(NAME_PREFIX) || keep.contains(&name) {
                continue;
            }
            if self
                .leases
                .expiry(&name)
                .is_none_or(|expires| expires < now)
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    pub fn settings(&self) -> &SingularitySettings {
        &self.settings
    }
}
