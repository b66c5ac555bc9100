//! `~/.caduceus/config.yaml` (or `--config`, or `$CADUCEUS_HOME/config.yaml`),
//! with environment variables overriding the file.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Deserialize;

use caduceus_worker::backends::docker::settings::DockerSettings;
use caduceus_worker::backends::lease::LeasePolicy;
use caduceus_worker::backends::pool::PoolSpec;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Coordinator address for client commands (`CADUCEUS_COORDINATOR`).
    pub coordinator: Option<String>,
    /// Shared token (`CADUCEUS_TOKEN`).
    pub token: Option<String>,
    /// Where `serve` listens.
    pub listen: Option<String>,
    pub tls: TlsSection,
    pub terminal: TerminalSection,
    pub worker: WorkerSection,
    pub tool_output: ToolOutputSection,
    /// Sections read by later parts of caduceus; kept so a config written for
    /// them loads today.
    pub approvals: Option<serde_yaml::Value>,
    pub command_allowlist: Option<serde_yaml::Value>,
    pub delegation: Option<serde_yaml::Value>,
    pub mcp_servers: Option<serde_yaml::Value>,
    pub plugins: Option<serde_yaml::Value>,
    pub hooks: Option<serde_yaml::Value>,
    pub llm: Option<serde_yaml::Value>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct TlsSection {
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// CA that signed the coordinator's certificate (workers, clients).
    pub ca: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct TerminalSection {
    /// Backend new environments are created on (`TERMINAL_ENV`).
    pub backend: String,
    /// Default foreground timeout, seconds (`TERMINAL_TIMEOUT`).
    pub timeout: u64,
    /// Longest foreground timeout, seconds (`TERMINAL_MAX_FOREGROUND_TIMEOUT`).
    pub max_foreground_timeout: u64,
    /// Directory local environments start in (`TERMINAL_CWD`).
    pub cwd: Option<String>,
    /// Variables passed into sandboxes although their names look secret.
    pub env_passthrough: Vec<String>,
    /// Idle environments are ended after this many seconds (`TERMINAL_LIFETIME_SECONDS`).
    pub lifetime_seconds: u64,
    /// How often idle environments are looked for, seconds.
    pub reap_interval_seconds: u64,

    // ---- Docker backend (hermes' names; `TERMINAL_<KEY>` overrides) ----
    /// Image of new containers (default `caduceus-base:bookworm`, built by
    /// `deploy/base-image.sh`; e.g. `debian:bookworm-slim` with a registry).
    pub docker_image: Option<String>,
    /// CPUs per container (default 1; 0 = no limit).
    pub container_cpu: Option<f64>,
    /// Memory per container, MB (default 5120; 0 = no limit).
    pub container_memory: Option<u64>,
    /// Writable-layer size per container, MB (default 51200), where the
    /// engine's storage driver supports a size.
    pub container_disk: Option<u64>,
    /// `/workspace` and `/root` outlive the container, per task (default true).
    pub container_persistent: Option<bool>,
    /// Process limit per container (default 256).
    pub container_pids: Option<i64>,
    /// Network access (default true; false = `--network=none`).
    pub docker_network: Option<bool>,
    /// Bind mounts `host:container[:opts]` (worker-side only).
    pub docker_volumes: Vec<String>,
    /// Variables set in every container.
    pub docker_env: BTreeMap<String, String>,
    /// Names of worker variables passed into container shells.
    pub docker_forward_env: Vec<String>,
    /// Directory a fresh container shell starts in (default `/root`).
    pub docker_cwd: Option<String>,
    /// Engine address (default `$DOCKER_HOST` or the local socket).
    pub docker_host: Option<String>,
    /// Where persistent sandbox directories live on the worker
    /// (default `$CADUCEUS_HOME/sandboxes`).
    pub sandbox_dir: Option<PathBuf>,

    // ---- leases, sweeper, pools (every backend) ----
    /// Lease length of sandboxes, seconds: a sandbox not renewed for this
    /// long (its worker died) is removed by any worker's sweeper.
    pub lease_seconds: u64,
    /// How often each worker sweeps, seconds (and once at start).
    pub sweep_interval_seconds: u64,
    /// How often backend availability is probed, seconds.
    pub backend_probe_seconds: u64,
    /// Sandboxes kept ready: `{docker: 2}` or
    /// `[{backend: docker, docker_image: "...", size: 2}]`.
    pub warm_pool: Option<serde_yaml::Value>,
}

impl Default for TerminalSection {
    fn default() -> Self {
        TerminalSection {
            backend: "local".to_owned(),
            timeout: 180,
            max_foreground_timeout: 600,
            cwd: None,
            env_passthrough: Vec::new(),
            lifetime_seconds: 300,
            reap_interval_seconds: 60,
            docker_image: None,
            container_cpu: None,
            container_memory: None,
            container_disk: None,
            container_persistent: None,
            container_pids: None,
            docker_network: None,
            docker_volumes: Vec::new(),
            docker_env: BTreeMap::new(),
            docker_forward_env: Vec::new(),
            docker_cwd: None,
            docker_host: None,
            sandbox_dir: None,
            lease_seconds: 90,
            sweep_interval_seconds: 60,
            backend_probe_seconds: 15,
            warm_pool: None,
        }
    }
}

impl TerminalSection {
    /// The worker's Docker settings: configured values over the defaults.
    pub fn docker_settings(&self) -> DockerSettings {
        let defaults = DockerSettings::default();
        DockerSettings {
            image: self.docker_image.clone().unwrap_or(defaults.image),
            cpu: self.container_cpu.unwrap_or(defaults.cpu),
            memory_mb: self.container_memory.unwrap_or(defaults.memory_mb),
            disk_mb: self.container_disk.unwrap_or(defaults.disk_mb),
            network: self.docker_network.unwrap_or(defaults.network),
            volumes: self.docker_volumes.clone(),
            env: self.docker_env.clone(),
            forward_env: self.docker_forward_env.clone(),
            persistent: self.container_persistent.unwrap_or(defaults.persistent),
            sandbox_dir: self
                .sandbox_dir
                .clone()
                .unwrap_or_else(|| home_dir().join("sandboxes")),
            cwd: self.docker_cwd.clone().unwrap_or(defaults.cwd),
            pids_limit: self.container_pids.unwrap_or(defaults.pids_limit),
            host: self.docker_host.clone(),
        }
    }

    /// What the coordinator sends with each call: the backend settings the
    /// user set explicitly (a worker's own configuration fills in the rest).
    pub fn environment_settings(&self) -> serde_json::Value {
        let mut map = serde_json::Map::new();
        if let Some(v) = &self.docker_image {
            map.insert("docker_image".into(), v.clone().into());
        }
        if let Some(v) = self.container_cpu {
            map.insert("container_cpu".into(), v.into());
        }
        if let Some(v) = self.container_memory {
            map.insert("container_memory".into(), v.into());
        }
        if let Some(v) = self.container_disk {
            map.insert("container_disk".into(), v.into());
        }
        if let Some(v) = self.container_persistent {
            map.insert("container_persistent".into(), v.into());
        }
        if let Some(v) = self.docker_network {
            map.insert("docker_network".into(), v.into());
        }
        if let Some(v) = &self.docker_cwd {
            map.insert("docker_cwd".into(), v.clone().into());
        }
        if !self.docker_env.is_empty() {
            let env: serde_json::Map<String, serde_json::Value> = self
                .docker_env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into()))
                .collect();
            map.insert("docker_env".into(), env.into());
        }
        serde_json::Value::Object(map)
    }

    /// `warm_pool` as pool specs.
    pub fn warm_pools(&self) -> Result<Vec<PoolSpec>> {
        let Some(value) = &self.warm_pool else {
            return Ok(Vec::new());
        };
        let json = serde_json::to_value(value).context("terminal.warm_pool is not valid")?;
        caduceus_worker::backends::pool::parse_specs(&json)
            .map_err(|e| anyhow::anyhow!("terminal.warm_pool: {e}"))
    }

    pub fn lease_policy(&self) -> LeasePolicy {
        LeasePolicy::new(
            Duration::from_secs(self.lease_seconds.max(1)),
            Duration::from_secs(self.sweep_interval_seconds.max(1)),
        )
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct WorkerSection {
    pub name: Option<String>,
    pub backends: Option<Vec<String>>,
    pub labels: HashMap<String, String>,
    pub capacity: Option<u32>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ToolOutputSection {
    /// Characters of terminal output a model sees (hermes `tool_output.max_bytes`).
    pub max_bytes: usize,
}

impl Default for ToolOutputSection {
    fn default() -> Self {
        ToolOutputSection { max_bytes: 50_000 }
    }
}

/// `$CADUCEUS_HOME`, else `~/.caduceus`.
pub fn home_dir() -> PathBuf {
    if let Some(home) = std::env::var_os("CADUCEUS_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(home);
    }
    let user_home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    user_home.join(".caduceus")
}

impl Config {
    /// Loads the file (a missing default file is fine; a missing `--config`
    /// file is an error) and applies the environment.
    pub fn load(explicit: Option<&Path>) -> Result<Self> {
        let (path, must_exist) = match explicit {
            Some(path) => (path.to_path_buf(), true),
            None => (home_dir().join("config.yaml"), false),
        };
        let mut config = match std::fs::read_to_string(&path) {
            Ok(text) if text.trim().is_empty() => Config::default(),
            Ok(text) => serde_yaml::from_str(&text)
                .with_context(|| format!("invalid configuration in {}", path.display()))?,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && !must_exist => {
                Config::default()
            }
            Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
        };
        config.apply_env();
        Ok(config)
    }

    fn apply_env(&mut self) {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if let Some(v) = var("CADUCEUS_COORDINATOR") {
            self.coordinator = Some(v);
        }
        if let Some(v) = var("CADUCEUS_TOKEN") {
            self.token = Some(v);
        }
        if let Some(v) = var("TERMINAL_ENV") {
            self.terminal.backend = v;
        }
        if let Some(v) = var("TERMINAL_TIMEOUT").and_then(|v| v.parse().ok()) {
            self.terminal.timeout = v;
        }
        if let Some(v) = var("TERMINAL_MAX_FOREGROUND_TIMEOUT").and_then(|v| v.parse().ok()) {
            self.terminal.max_foreground_timeout = v;
        }
        if let Some(v) = var("TERMINAL_CWD") {
            self.terminal.cwd = Some(v);
        }
        if let Some(v) = var("TERMINAL_LIFETIME_SECONDS").and_then(|v| v.parse().ok()) {
            self.terminal.lifetime_seconds = v;
        }
        let t = &mut self.terminal;
        if let Some(v) = var("TERMINAL_DOCKER_IMAGE") {
            t.docker_image = Some(v);
        }
        if let Some(v) = var("TERMINAL_CONTAINER_CPU").and_then(|v| v.parse().ok()) {
            t.container_cpu = Some(v);
        }
        if let Some(v) = var("TERMINAL_CONTAINER_MEMORY").and_then(|v| v.parse().ok()) {
            t.container_memory = Some(v);
        }
        if let Some(v) = var("TERMINAL_CONTAINER_DISK").and_then(|v| v.parse().ok()) {
            t.container_disk = Some(v);
        }
        if let Some(v) = var("TERMINAL_CONTAINER_PERSISTENT").and_then(|v| parse_bool(&v)) {
            t.container_persistent = Some(v);
        }
        if let Some(v) = var("TERMINAL_DOCKER_NETWORK").and_then(|v| parse_bool(&v)) {
            t.docker_network = Some(v);
        }
        if let Some(v) = var("TERMINAL_DOCKER_VOLUMES").and_then(|v| serde_json::from_str(&v).ok())
        {
            t.docker_volumes = v;
        }
        if let Some(v) = var("TERMINAL_DOCKER_ENV").and_then(|v| serde_json::from_str(&v).ok()) {
            t.docker_env = v;
        }
        if let Some(v) =
            var("TERMINAL_DOCKER_FORWARD_ENV").and_then(|v| serde_json::from_str(&v).ok())
        {
            t.docker_forward_env = v;
        }
        if let Some(v) = var("TERMINAL_SANDBOX_DIR") {
            t.sandbox_dir = Some(PathBuf::from(v));
        }
    }
}

/// hermes' truthy strings.
fn parse_bool(text: &str) -> Option<bool> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Some(true),
        "0" | "false" | "no" | "off" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
