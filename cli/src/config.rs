//! `~/.caduceus/config.yaml` (or `--config`, or `$CADUCEUS_HOME/config.yaml`),
//! with environment variables overriding the file.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use serde::Deserialize;

use caduceus_common::process_env;
use caduceus_coordinator::gate::{
    ApprovalMode, ApprovalSettings, ContainerApprovals, EditApprovals,
};
use caduceus_worker::backends::docker::settings::DockerSettings;
use caduceus_worker::backends::lease::LeasePolicy;
use caduceus_worker::backends::pool::PoolSpec;

use crate::token::TokenSource;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Config {
    /// Coordinator address for client commands (`CADUCEUS_COORDINATOR`).
    pub coordinator: Option<String>,
    /// Shared token: the file's `token` or `token_file`, overridden by
    /// `CADUCEUS_TOKEN` or `CADUCEUS_TOKEN_FILE` (see `token.rs`).
    #[serde(skip)]
    pub token: Option<TokenSource>,
    #[serde(rename = "token")]
    token_value: Option<String>,
    token_file: Option<PathBuf>,
    /// Where `serve` listens.
    pub listen: Option<String>,
    pub tls: TlsSection,
    pub terminal: TerminalSection,
    pub worker: WorkerSection,
    pub tool_output: ToolOutputSection,
    /// The command guard's approvals (`mode`, `timeout`, `deny`, `containers`,
    /// `edits`).
    pub approvals: ApprovalsSection,
    /// The audit log (`enabled`, `max_bytes`, `keep`).
    pub audit: AuditSection,
    /// `execute_code` limits (`timeout`, `max_tool_calls`), hermes' section.
    pub code_execution: CodeExecutionSection,
    /// Where new environments go (`labels`, `wait_seconds`, `backend_choice`).
    pub placement: PlacementSection,
    /// Per worker token: the labels its workers may claim and the hosted
    /// providers they may run (read by the coordinator; see
    /// coordinator/README.md).
    pub worker_grants: Option<BTreeMap<String, GrantSection>>,
    /// The browser toolset on workers (`inactivity_timeout`, `allow_private_urls`).
    pub browser: BrowserSection,
    /// hermes' `security:`; only `allow_private_urls` is read (by the
    /// browser, `web_extract` and `vision_analyze`).
    pub security: SecuritySection,
    /// hermes' `web:`; only `extract_char_limit` is read (by `web_extract`).
    pub web: WebSection,
    /// hermes' `auxiliary:`; only `vision` is read (the model of
    /// `vision_analyze` and `browser_vision`).
    pub auxiliary: AuxiliarySection,
    /// Commands, globs and approval keys that run without approval; "always"
    /// approvals are appended here (hermes `command_allowlist`).
    #[serde(deserialize_with = "string_list")]
    pub command_allowlist: Vec<String>,
    /// The file this configuration was read from (or would be, when missing).
    #[serde(skip)]
    pub path: Option<PathBuf>,
    /// Sections read by later parts of caduceus; kept so a config written for
    /// them loads today.
    pub delegation: Option<serde_yaml::Value>,
    /// Parsed by caduceus-mcp when the coordinator starts (`mcp_client.rs`).
    pub mcp_servers: Option<serde_yaml::Value>,
    pub plugins: Option<serde_yaml::Value>,
    pub hooks: Option<serde_yaml::Value>,
    pub llm: Option<serde_yaml::Value>,
    /// `max_turns` (session budget), `clarify_timeout_seconds`.
    pub agent: Option<serde_yaml::Value>,
}

/// `approvals:`. hermes' spellings load: `mode: manual|smart` mean ask (there
/// is no auxiliary-model approval here), YAML `mode: off`/`false` mean off;
/// hermes' `cron_mode` is ignored.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "RawApprovals")]
pub struct ApprovalsSection {
    pub mode: ApprovalMode,
    /// How long a request waits for its answer (60 s); pending approvals
    /// expire after it.
    pub timeout: Duration,
    /// fnmatch globs refused in every mode.
    pub deny: Vec<String>,
    /// Dangerous-command approvals on container backends: off (relaxed, as
    /// hermes) or ask (like the host).
    pub containers: ContainerApprovals,
    /// Edits by write_file and patch: off, or ask (each waits for a person,
    /// who sees its diff).
    pub edits: EditApprovals,
}

impl Default for ApprovalsSection {
    fn default() -> Self {
        ApprovalsSection {
            mode: ApprovalMode::Ask,
            timeout: Duration::from_secs(60),
            deny: Vec::new(),
            containers: ContainerApprovals::Off,
            edits: EditApprovals::Off,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawApprovals {
    mode: Option<serde_yaml::Value>,
    timeout: Option<f64>,
    #[serde(deserialize_with = "string_list")]
    deny: Vec<String>,
    containers: Option<serde_yaml::Value>,
    edits: Option<serde_yaml::Value>,
}

impl TryFrom<RawApprovals> for ApprovalsSection {
    type Error = String;

    fn try_from(raw: RawApprovals) -> Result<Self, String> {
        let word = |value: Option<serde_yaml::Value>, name: &str| match value {
            None | Some(serde_yaml::Value::Null) => Ok(String::new()),
            Some(serde_yaml::Value::Bool(b)) => Ok(if b { "on" } else { "off" }.to_owned()),
            Some(serde_yaml::Value::String(s)) => Ok(s),
            Some(_) => Err(format!("approvals.{name} must be a word")),
        };
        let timeout = match raw.timeout {
            None => Duration::from_secs(60),
            Some(t) if t.is_finite() && t > 0.0 && t <= 86_400.0 => Duration::from_secs_f64(t),
            Some(t) => {
                return Err(format!(
                    "approvals.timeout must be a number of seconds between 0 and 86400, not {t}"
                ));
            }
        };
        Ok(ApprovalsSection {
            mode: ApprovalMode::parse(&word(raw.mode, "mode")?)?,
            timeout,
            deny: raw.deny,
            containers: ContainerApprovals::parse(&word(raw.containers, "containers")?)?,
            edits: EditApprovals::parse(&word(raw.edits, "edits")?)?,
        })
    }
}

/// A list of strings; `null` is empty.
fn string_list<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    Ok(Option::<Vec<String>>::deserialize(deserializer)?.unwrap_or_default())
}

/// `terminal.docker_network`: `none` (or false) is Docker's network mode
/// none; `bridge` (or true) the engine's default network.
fn docker_network<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<bool>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Flag(bool),
        Mode(String),
    }
    match Option::<Raw>::deserialize(deserializer)? {
        None => Ok(None),
        Some(Raw::Flag(on)) => Ok(Some(on)),
        Some(Raw::Mode(mode)) => network_mode(&mode).map(Some).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "docker_network '{mode}' is not one of none, bridge, true, false"
            ))
        }),
    }
}

/// `none`/`bridge` and the boolean spellings; `None` for anything else.
fn network_mode(mode: &str) -> Option<bool> {
    match mode.trim().to_ascii_lowercase().as_str() {
        "none" | "false" | "0" | "no" | "off" => Some(false),
        "bridge" | "default" | "true" | "1" | "yes" | "on" => Some(true),
        _ => None,
    }
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
    /// Shells read the login files once at start, as `bash -l` does (hermes).
    pub login_shell: bool,
    /// Files every shell sources once at start (`~/` is the sandbox's home).
    pub shell_init_files: Vec<String>,
    /// Without `shell_init_files`: source `~/.profile`, `~/.bash_profile`
    /// and `~/.bashrc` (hermes' default).
    pub auto_source_bashrc: bool,
    /// SSH backend host (`TERMINAL_SSH_HOST`); the backend needs one.
    pub ssh_host: Option<String>,
    /// SSH account (`TERMINAL_SSH_USER`); the ssh client's default when unset.
    pub ssh_user: Option<String>,
    /// SSH port (`TERMINAL_SSH_PORT`).
    pub ssh_port: u16,
    /// Private key file (`TERMINAL_SSH_KEY`); only this key is offered.
    pub ssh_key: Option<String>,
    /// known_hosts file (`TERMINAL_SSH_KNOWN_HOSTS`); new hosts are added,
    /// changed keys refused.
    pub ssh_known_hosts: Option<String>,
    /// Seconds to wait for the TCP connection (`TERMINAL_SSH_CONNECT_TIMEOUT`).
    pub ssh_connect_timeout: u64,
    /// Directory of the master's control socket (keep it short).
    pub ssh_control_dir: Option<String>,
    /// Daytona snapshot sandboxes are created from (`TERMINAL_DAYTONA_SNAPSHOT`).
    pub daytona_snapshot: Option<String>,
    /// Daytona image when no snapshot is set (`TERMINAL_DAYTONA_IMAGE`);
    /// neither: the organization's default snapshot. Credentials, the API
    /// URL and the target come from `DAYTONA_*` variables only.
    pub daytona_image: Option<String>,
    /// How long a persistent Daytona sandbox is kept after it stopped
    /// (`TERMINAL_DAYTONA_KEEP_SECONDS`, default 7 days): its
    /// `autoDeleteInterval`, and what the sweep spares.
    pub daytona_keep_seconds: u64,
    /// Registry image of Modal sandboxes (`TERMINAL_MODAL_IMAGE`), debian:bookworm-slim
    /// when unset. Credentials and the server URL come from `MODAL_*` variables or
    /// `~/.modal.toml`.
    pub modal_image: Option<String>,
    /// A Modal sandbox's whole lifetime, its `timeout` on Modal's side (at least the
    /// lease, at most 24 h): what bounds an abandoned sandbox when no worker is left.
    pub modal_timeout_seconds: u64,
    /// Image of Singularity/Apptainer environments (`TERMINAL_SINGULARITY_IMAGE`).
    pub singularity_image: Option<String>,
    /// The apptainer/singularity executable (`TERMINAL_SINGULARITY_EXECUTABLE`);
    /// `apptainer`, else `singularity`, from PATH when unset.
    pub singularity_executable: Option<String>,
    /// Extra `--bind` specs for Singularity instances.
    pub singularity_binds: Vec<String>,
    /// Overlays, leases and the SIF cache (`TERMINAL_SCRATCH_DIR`).
    pub scratch_dir: Option<String>,
    /// CPUs of a container environment, 0 = no limit (`TERMINAL_CONTAINER_CPU`).
    pub container_cpu: f64,
    /// Memory of a container environment in MB, 0 = no limit (`TERMINAL_CONTAINER_MEMORY`).
    pub container_memory: u64,
    /// Keep a task's container files across releases (`TERMINAL_CONTAINER_PERSISTENT`):
    /// Docker's per-task directories; Daytona stops the task's sandbox and starts it again.
    pub container_persistent: bool,
    /// Confinement of local environments without containers: `none`,
    /// `workspace` (own PID and mount namespace, writes only in the
    /// workspace and temp dir) or `strict` (and no network)
    /// (`TERMINAL_LOCAL_ISOLATION`, `worker --local-isolation`).
    pub local_isolation: String,
    /// Seconds a remote or container environment outlives its worker's last
    /// lease renewal before sweeps remove it (`TERMINAL_SANDBOX_LEASE_SECONDS`).
    pub sandbox_lease_seconds: u64,

    // ---- Docker backend (hermes' names; `TERMINAL_<KEY>` overrides) ----
    /// Image of new containers (default `caduceus-base:bookworm`, built by
    /// `deploy/base-image.sh`; e.g. `debian:bookworm-slim` with a registry).
    pub docker_image: Option<String>,
    /// Writable-layer size per container, MB (default 51200), where the
    /// engine's storage driver supports a size.
    pub container_disk: Option<u64>,
    /// Process limit per container (default 256).
    pub container_pids: Option<i64>,
    /// Network access: `bridge`/true (default) or `none`/false
    /// (Docker's network mode none: only a loopback).
    #[serde(deserialize_with = "docker_network")]
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
    /// Where persistent Docker directories live on the worker
    /// (`TERMINAL_SANDBOX_DIR`, default `$CADUCEUS_HOME/sandboxes`).
    pub sandbox_dir: Option<PathBuf>,

    // ---- sweeper, availability, pools (every backend) ----
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
            login_shell: true,
            shell_init_files: Vec::new(),
            auto_source_bashrc: true,
            ssh_host: None,
            ssh_user: None,
            ssh_port: 22,
            ssh_key: None,
            ssh_known_hosts: None,
            ssh_connect_timeout: 10,
            ssh_control_dir: None,
            daytona_snapshot: None,
            daytona_image: None,
            daytona_keep_seconds: 7 * 24 * 3600,
            modal_image: None,
            modal_timeout_seconds: 3600,
            singularity_image: None,
            singularity_executable: None,
            singularity_binds: Vec::new(),
            scratch_dir: None,
            container_cpu: 1.0,
            container_memory: 5120,
            container_persistent: true,
            sandbox_lease_seconds: 600,
            local_isolation: "none".to_owned(),
            docker_image: None,
            container_disk: None,
            container_pids: None,
            docker_network: None,
            docker_volumes: Vec::new(),
            docker_env: BTreeMap::new(),
            docker_forward_env: Vec::new(),
            docker_cwd: None,
            docker_host: None,
            sandbox_dir: None,
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
            cpu: self.container_cpu,
            memory_mb: self.container_memory,
            disk_mb: self.container_disk.unwrap_or(defaults.disk_mb),
            network: self.docker_network.unwrap_or(defaults.network),
            volumes: self.docker_volumes.clone(),
            env: self.docker_env.clone(),
            forward_env: self.docker_forward_env.clone(),
            persistent: self.container_persistent,
            sandbox_dir: self
                .sandbox_dir
                .clone()
                .unwrap_or_else(|| home_dir().join("sandboxes")),
            cwd: self.docker_cwd.clone().unwrap_or(defaults.cwd),
            pids_limit: self.container_pids.unwrap_or(defaults.pids_limit),
            host: self.docker_host.clone(),
            // The worker's own binary, filled in where backends are made.
            file_server: None,
        }
    }

    /// What the coordinator sends with each call: the container settings
    /// this configuration sets (away from the defaults); a worker's own
    /// configuration fills in the rest. Host paths are never sent.
    pub fn environment_settings(&self) -> serde_json::Value {
        let defaults = TerminalSection::default();
        let mut map = serde_json::Map::new();
        if let Some(v) = &self.docker_image {
            map.insert("docker_image".into(), v.clone().into());
        }
        if self.container_cpu != defaults.container_cpu {
            map.insert("container_cpu".into(), self.container_cpu.into());
        }
        if self.container_memory != defaults.container_memory {
            map.insert("container_memory".into(), self.container_memory.into());
        }
        if let Some(v) = self.container_disk {
            map.insert("container_disk".into(), v.into());
        }
        if self.container_persistent != defaults.container_persistent {
            map.insert(
                "container_persistent".into(),
                self.container_persistent.into(),
            );
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

    /// Lease length (`sandbox_lease_seconds`, shared by every sandboxed
    /// backend) and sweep interval.
    pub fn lease_policy(&self) -> LeasePolicy {
        LeasePolicy::new(
            Duration::from_secs(self.sandbox_lease_seconds.max(1)),
            Duration::from_secs(self.sweep_interval_seconds.max(1)),
        )
    }
}

/// `placement:` (read by the coordinator: `serve` and embedded fleets).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlacementSection {
    /// Labels every new environment needs unless its request names its own
    /// (`caduceus call --labels`, a session's or delegated child's labels).
    pub labels: BTreeMap<String, String>,
    /// How long a call waits for a worker that offers the backend, carries
    /// the labels and has room before it fails (30).
    pub wait_seconds: f64,
    /// Backends a model may pick per `terminal` call with its `backend`
    /// argument (offered only while two or more of these and
    /// `terminal.backend` are attached); empty = no choice.
    #[serde(deserialize_with = "string_list")]
    pub backend_choice: Vec<String>,
}

impl Default for PlacementSection {
    fn default() -> Self {
        PlacementSection {
            labels: BTreeMap::new(),
            wait_seconds: 30.0,
            backend_choice: Vec::new(),
        }
    }
}

impl PlacementSection {
    /// The scheduler's settings; refuses a wait that is not a number of
    /// seconds between 0 and a day.
    pub fn config(&self) -> Result<caduceus_coordinator::scheduler::PlacementConfig> {
        let wait = self.wait_seconds;
        if !(wait.is_finite() && (0.0..=86_400.0).contains(&wait)) {
            anyhow::bail!(
                "placement.wait_seconds must be a number of seconds between 0 and 86400, not {wait}"
            );
        }
        Ok(caduceus_coordinator::scheduler::PlacementConfig {
            labels: self.labels.clone(),
            wait: Duration::from_secs_f64(wait),
        })
    }
}

/// One token's entry of `worker_grants:`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrantSection {
    /// label -> the value its workers may claim (`"*"`: any value).
    pub labels: BTreeMap<String, String>,
    /// The hosted providers (`mcp_servers` with `on:`) its workers may run:
    /// a list of names, or `"*"` for all.
    pub host: Option<serde_yaml::Value>,
}

/// The coordinator's grants from `worker_grants:`; `None` when the section
/// is absent (then worker tokens claim any label and host nothing).
pub fn worker_grants(
    section: Option<&BTreeMap<String, GrantSection>>,
) -> Result<Option<caduceus_coordinator::auth::WorkerGrants>> {
    use caduceus_coordinator::auth::{Grant, HostGrant, WorkerGrants};
    let Some(section) = section else {
        return Ok(None);
    };
    let mut grants = BTreeMap::new();
    for (token, entry) in section {
        let host = match &entry.host {
            None | Some(serde_yaml::Value::Null) => HostGrant::None,
            Some(serde_yaml::Value::String(all)) if all == "*" => HostGrant::All,
            Some(serde_yaml::Value::Sequence(names)) => HostGrant::Named(
                names
                    .iter()
                    .map(|n| {
                        n.as_str().map(str::to_owned).ok_or_else(|| {
                            anyhow::anyhow!(
                                "worker_grants.{token}.host must list provider names (strings)"
                            )
                        })
                    })
                    .collect::<Result<_>>()?,
            ),
            Some(_) => anyhow::bail!(
                "worker_grants.{token}.host must be a list of provider names or \"*\""
            ),
        };
        let labels = entry
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), (v != "*").then(|| v.clone())))
            .collect();
        grants.insert(token.clone(), Grant { labels, host });
    }
    Ok(Some(WorkerGrants(grants)))
}

/// `browser:` (hermes' keys; the others hermes has are ignored).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct BrowserSection {
    /// Seconds without a call after which a task's browser is closed
    /// (hermes: 120; hermes floors it at 30, caduceus at 1).
    pub inactivity_timeout: u64,
    /// Loopback, private and link-local URLs may be opened (hermes: off).
    pub allow_private_urls: bool,
}

impl Default for BrowserSection {
    fn default() -> Self {
        BrowserSection {
            inactivity_timeout: 120,
            allow_private_urls: false,
        }
    }
}

/// `web:` (hermes' keys other than `extract_char_limit` are ignored).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct WebSection {
    /// `web_extract`'s per-page budget when a call names none (hermes: 15,000).
    pub extract_char_limit: Option<usize>,
}

/// `auxiliary:` (hermes' keys other than `vision` are ignored).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct AuxiliarySection {
    pub vision: AuxiliaryModel,
}

/// One auxiliary model: an OpenAI-compatible endpoint and model name. A
/// missing `base_url` means the `llm:` endpoint (and its key).
#[derive(Clone, Default, Deserialize)]
#[serde(default)]
pub struct AuxiliaryModel {
    /// The model name (`AUXILIARY_VISION_MODEL` overrides it); none: the
    /// vision tools are not offered.
    pub model: Option<String>,
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    /// Seconds one answer may take (hermes: 120).
    pub timeout: Option<f64>,
    /// hermes: 0.1.
    pub temperature: Option<f64>,
}

impl std::fmt::Debug for AuxiliaryModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuxiliaryModel")
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

/// `security:` (hermes' keys other than `allow_private_urls` are ignored).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct SecuritySection {
    pub allow_private_urls: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct WorkerSection {
    pub name: Option<String>,
    pub backends: Option<Vec<String>>,
    pub labels: HashMap<String, String>,
    pub capacity: Option<u32>,
    /// Environments this worker holds at most (`--max-envs`).
    pub max_envs: Option<u32>,
    /// The account local sandboxes of a root worker run as (default
    /// `nobody`; `CADUCEUS_RUN_AS`).
    pub run_as: Option<String>,
    /// Let a root worker run local sandboxes as root
    /// (`CADUCEUS_ALLOW_ROOT_SANDBOX=1`).
    pub allow_root_sandbox: bool,
    /// Run the MCP servers the coordinator asks this worker to host
    /// (`--host-mcp`).
    pub host_mcp: bool,
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

/// `audit:`: every tool call, approval answer and token use, one JSON line
/// each in `$CADUCEUS_HOME/audit.jsonl`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditSection {
    /// On by default.
    pub enabled: bool,
    /// The live file is rotated to `audit.jsonl.1` at this size (16 MiB).
    pub max_bytes: u64,
    /// Rotated files kept (5).
    pub keep: usize,
    /// Longest a written line waits for its `fsync`, in milliseconds (1000);
    /// 0 syncs every batch of lines as it is written. Lines are in the file
    /// as soon as they are written either way: this bounds what a machine
    /// crash (not a coordinator crash) can lose.
    pub sync_interval_ms: u64,
}

/// hermes' `code_execution` section. Its `mode` (project/strict) is read and
/// ignored: scripts always run in the session's working directory inside the
/// task's environment.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct CodeExecutionSection {
    /// Seconds a script may run (300).
    pub timeout: u64,
    /// Tool calls one script may make (50).
    pub max_tool_calls: u32,
}

impl Default for CodeExecutionSection {
    fn default() -> Self {
        CodeExecutionSection {
            timeout: caduceus_common::execute_code::DEFAULT_TIMEOUT_SECS,
            max_tool_calls: caduceus_common::execute_code::DEFAULT_MAX_TOOL_CALLS,
        }
    }
}

impl Default for AuditSection {
    fn default() -> Self {
        AuditSection {
            enabled: true,
            max_bytes: caduceus_coordinator::audit::AuditConfig::DEFAULT_MAX_BYTES,
            keep: caduceus_coordinator::audit::AuditConfig::DEFAULT_KEEP,
            sync_interval_ms: u64::try_from(
                caduceus_coordinator::audit::AuditConfig::DEFAULT_SYNC_INTERVAL.as_millis(),
            )
            .unwrap_or(1000),
        }
    }
}

impl AuditSection {
    /// Where the log goes, or `None` when it is off.
    pub fn config(&self) -> Option<caduceus_coordinator::audit::AuditConfig> {
        self.enabled
            .then(|| caduceus_coordinator::audit::AuditConfig {
                max_bytes: self.max_bytes.max(1024),
                keep: self.keep,
                sync_interval: std::time::Duration::from_millis(self.sync_interval_ms),
                ..caduceus_coordinator::audit::AuditConfig::in_home(&home_dir())
            })
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
        config.token = TokenSource::one_of(
            config.token_value.take(),
            config.token_file.take(),
            ("the configuration's token", "token_file"),
        )
        .with_context(|| format!("invalid configuration in {}", path.display()))?;
        config.path = Some(path);
        config.apply_env()?;
        Ok(config)
    }

    /// The command guard's settings: `approvals`, `command_allowlist`, the
    /// file "always" approvals are written to, and whether a sudo password
    /// is configured (`SUDO_PASSWORD`).
    pub fn approval_settings(&self) -> ApprovalSettings {
        ApprovalSettings {
            mode: self.approvals.mode,
            timeout: self.approvals.timeout,
            deny: self.approvals.deny.clone(),
            allowlist: self.command_allowlist.clone(),
            containers: self.approvals.containers,
            edits: self.approvals.edits,
            sudo_password_configured: process_env::var("SUDO_PASSWORD").is_some(),
            allowlist_file: self.path.clone(),
        }
    }

    fn apply_env(&mut self) -> Result<()> {
        // Secret-named ones (CADUCEUS_TOKEN, CADUCEUS_TOKEN_FILE,
        // CADUCEUS_COORDINATOR) were withheld from the environment at start.
        let var = process_env::var;
        if let Some(v) = var("CADUCEUS_COORDINATOR") {
            self.coordinator = Some(v);
        }
        if let Some(source) = TokenSource::one_of(
            var("CADUCEUS_TOKEN"),
            var("CADUCEUS_TOKEN_FILE").map(PathBuf::from),
            ("CADUCEUS_TOKEN", "CADUCEUS_TOKEN_FILE"),
        )? {
            self.token = Some(source);
        }
        if let Some(v) = var("CADUCEUS_RUN_AS") {
            self.worker.run_as = Some(v);
        }
        if let Some(v) = var("CADUCEUS_ALLOW_ROOT_SANDBOX") {
            self.worker.allow_root_sandbox = matches!(v.trim(), "1" | "true" | "yes");
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
        if let Some(v) = var("TERMINAL_LOCAL_ISOLATION") {
            self.terminal.local_isolation = v;
        }
        if let Some(v) = var("TERMINAL_LIFETIME_SECONDS").and_then(|v| v.parse().ok()) {
            self.terminal.lifetime_seconds = v;
        }
        self.apply_remote_backend_env(&var);
        Ok(())
    }

    /// `TERMINAL_SSH_*`, `TERMINAL_SINGULARITY_*`, `TERMINAL_CONTAINER_*`.
    fn apply_remote_backend_env(&mut self, var: &dyn Fn(&str) -> Option<String>) {
        let t = &mut self.terminal;
        for (name, slot) in [
            ("TERMINAL_SSH_HOST", &mut t.ssh_host),
            ("TERMINAL_SSH_USER", &mut t.ssh_user),
            ("TERMINAL_SSH_KEY", &mut t.ssh_key),
            ("TERMINAL_SSH_KNOWN_HOSTS", &mut t.ssh_known_hosts),
            ("TERMINAL_SSH_CONTROL_DIR", &mut t.ssh_control_dir),
            ("TERMINAL_SINGULARITY_IMAGE", &mut t.singularity_image),
            ("TERMINAL_DAYTONA_SNAPSHOT", &mut t.daytona_snapshot),
            ("TERMINAL_DAYTONA_IMAGE", &mut t.daytona_image),
            ("TERMINAL_MODAL_IMAGE", &mut t.modal_image),
            (
                "TERMINAL_SINGULARITY_EXECUTABLE",
                &mut t.singularity_executable,
            ),
            ("TERMINAL_SCRATCH_DIR", &mut t.scratch_dir),
        ] {
            if let Some(v) = var(name) {
                *slot = Some(v);
            }
        }
        if let Some(v) = var("TERMINAL_SSH_PORT").and_then(|v| v.parse().ok()) {
            t.ssh_port = v;
        }
        if let Some(v) = var("TERMINAL_SSH_CONNECT_TIMEOUT").and_then(|v| v.parse().ok()) {
            t.ssh_connect_timeout = v;
        }
        if let Some(v) = var("TERMINAL_CONTAINER_CPU").and_then(|v| v.parse().ok()) {
            t.container_cpu = v;
        }
        if let Some(v) = var("TERMINAL_CONTAINER_MEMORY").and_then(|v| v.parse().ok()) {
            t.container_memory = v;
        }
        if let Some(v) = var("TERMINAL_CONTAINER_PERSISTENT") {
            t.container_persistent =
                matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on");
        }
        if let Some(v) = var("TERMINAL_DAYTONA_KEEP_SECONDS").and_then(|v| v.parse().ok()) {
            t.daytona_keep_seconds = v;
        }
        if let Some(v) = var("TERMINAL_SANDBOX_LEASE_SECONDS").and_then(|v| v.parse().ok()) {
            t.sandbox_lease_seconds = v;
        }
        if let Some(v) = var("TERMINAL_DOCKER_IMAGE") {
            t.docker_image = Some(v);
        }
        if let Some(v) = var("TERMINAL_CONTAINER_DISK").and_then(|v| v.parse().ok()) {
            t.container_disk = Some(v);
        }
        if let Some(v) = var("TERMINAL_DOCKER_NETWORK") {
            match network_mode(&v) {
                Some(on) => t.docker_network = Some(on),
                None => tracing::warn!(
                    "TERMINAL_DOCKER_NETWORK '{v}' is not one of none, bridge, true, false; ignored"
                ),
            }
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

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
