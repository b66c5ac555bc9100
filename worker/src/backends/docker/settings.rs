//! Docker backend settings: the worker's configuration (`terminal.docker_*`,
//! `terminal.container_*`, hermes' names) with per-environment overrides sent
//! by the coordinator.
//!
//! What the coordinator may override (it decides what a task's environment
//! looks like): `docker_image`, `container_cpu`, `container_memory`,
//! `container_disk`, `docker_network`, `docker_env`, `container_persistent`,
//! `docker_cwd`. What only the worker's own configuration sets (they name
//! things on the worker's host): `docker_volumes`, `docker_forward_env`,
//! `sandbox_dir`, `docker_host`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

/// The image used when none is configured: built by `deploy/base-image.sh`
/// without a registry.
pub const DEFAULT_IMAGE: &str = "caduceus-base:bookworm";

#[derive(Debug, Clone, PartialEq)]
pub struct DockerSettings {
    /// `docker_image`.
    pub image: String,
    /// `container_cpu`: CPUs (fractions allowed); 0 = no limit.
    pub cpu: f64,
    /// `container_memory`: MB; 0 = no limit.
    pub memory_mb: u64,
    /// `container_disk`: MB of writable layer, where the storage driver
    /// supports a size (overlay2 on xfs with pquota, btrfs, zfs); 0 = no limit.
    pub disk_mb: u64,
    /// `docker_network`: false runs the container with `--network=none`.
    pub network: bool,
    /// `docker_volumes`: `host:container[:options]` bind mounts.
    pub volumes: Vec<String>,
    /// `docker_env`: variables set in the container.
    pub env: BTreeMap<String, String>,
    /// `docker_forward_env`: names of worker variables passed into the shell.
    pub forward_env: Vec<String>,
    /// `container_persistent`: `/workspace` and `/root` are host directories
    /// under `<sandbox_dir>/docker/<task>/` that outlive the container (a new
    /// environment of the same task on this worker finds its files again);
    /// otherwise they are tmpfs and vanish with the container.
    pub persistent: bool,
    /// `sandbox_dir`: where persistent directories live on the worker's host.
    pub sandbox_dir: PathBuf,
    /// `docker_cwd`: directory a fresh shell starts in.
    pub cwd: String,
    /// `container_pids`: process limit (hermes: 256).
    pub pids_limit: i64,
    /// `docker_host`: engine address (`unix:///…`, `tcp://…`); default
    /// `$DOCKER_HOST` or the local socket.
    pub host: Option<String>,
    /// The host path of the program that serves file tools (`<it>
    /// __file-server`), mounted read-only into every container at
    /// [`super::spec::FILE_SERVER_PATH`]; the worker fills it in (its own
    /// binary). `None`, or an engine that cannot mount it: a shell script per
    /// primitive through `docker exec`.
    pub file_server: Option<String>,
}

impl Default for DockerSettings {
    fn default() -> Self {
        DockerSettings {
            image: DEFAULT_IMAGE.to_owned(),
            cpu: 1.0,
            memory_mb: 5120,
            disk_mb: 51200,
            network: true,
            volumes: Vec::new(),
            env: BTreeMap::new(),
            forward_env: Vec::new(),
            persistent: true,
            sandbox_dir: PathBuf::from("/var/lib/caduceus/sandboxes"),
            cwd: "/root".to_owned(),
            pids_limit: 256,
            host: None,
            file_server: None,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid docker setting '{key}': {reason}")]
pub struct SettingsError {
    pub key: String,
    pub reason: String,
}

fn bad(key: &str, reason: impl Into<String>) -> SettingsError {
    SettingsError {
        key: key.to_owned(),
        reason: reason.into(),
    }
}

impl DockerSettings {
    /// These settings with the coordinator's overrides (a JSON object with
    /// hermes' key names; unknown keys are other backends' business).
    pub fn with_overrides(&self, overrides: &Value) -> Result<DockerSettings, SettingsError> {
        let mut out = self.clone();
        let Some(map) = overrides.as_object() else {
            return Ok(out);
        };
        for (key, value) in map {
            match key.as_str() {
                "docker_image" => {
                    let image = value
                        .as_str()
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .ok_or_else(|| bad(key, "expected a non-empty string"))?;
                    out.image = image.to_owned();
                }
                "container_cpu" => {
                    out.cpu = value
                        .as_f64()
                        .filter(|v| *v >= 0.0)
                        .ok_or_else(|| bad(key, "expected a number ≥ 0"))?
                }
                "container_memory" => {
                    out.memory_mb = value
                        .as_u64()
                        .ok_or_else(|| bad(key, "expected MB as a whole number"))?
                }
                "container_disk" => {
                    out.disk_mb = value
                        .as_u64()
                        .ok_or_else(|| bad(key, "expected MB as a whole number"))?
                }
                "docker_network" => {
                    out.network = value
                        .as_bool()
                        .ok_or_else(|| bad(key, "expected true or false"))?
                }
                "container_persistent" => {
                    out.persistent = value
                        .as_bool()
                        .ok_or_else(|| bad(key, "expected true or false"))?
                }
                "docker_cwd" => {
                    let cwd = value
                        .as_str()
                        .filter(|s| s.starts_with('/'))
                        .ok_or_else(|| bad(key, "expected an absolute path"))?;
                    out.cwd = cwd.to_owned();
                }
                "docker_env" => {
                    let env = value
                        .as_object()
                        .ok_or_else(|| bad(key, "expected an object of strings"))?;
                    for (name, v) in env {
                        let text = match v {
                            Value::String(s) => s.clone(),
                            Value::Number(n) => n.to_string(),
                            Value::Bool(b) => b.to_string(),
                            _ => {
                                return Err(bad(key, format!("value of '{name}' is not a string")));
                            }
                        };
                        out.env.insert(name.clone(), text);
                    }
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// Everything that shapes a container but not which task uses it: two
    /// requests with the same fingerprint can share a warm pool. `None` when
    /// containers are task-specific (persistent directories are per task).
    pub fn pool_fingerprint(&self) -> Option<String> {
        if self.persistent {
            return None;
        }
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        Some(format!(
            "docker|{}|cpu={}|mem={}|disk={}|net={}|pids={}|cwd={}|vol={}|env={}",
            self.image,
            self.cpu,
            self.memory_mb,
            self.disk_mb,
            self.network,
            self.pids_limit,
            self.cwd,
            self.volumes.join(","),
            env.join(",")
        ))
    }

    /// The task's persistent directories on the host: (`home`, `workspace`).
    pub fn persistent_dirs(&self, task_id: &str) -> (PathBuf, PathBuf) {
        let base = self.sandbox_dir.join("docker").join(safe_name(task_id));
        (base.join("home"), base.join("workspace"))
    }
}

/// A task id as one path component (no `/`, no `..`, bounded length).
pub fn safe_name(task_id: &str) -> String {
    let mut name: String = task_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    if name.is_empty() || name.chars().all(|c| c == '.') {
        name = format!("task_{name}");
    }
    name
}
