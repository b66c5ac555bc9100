//! `~/.caduceus/config.yaml` (or `--config`, or `$CADUCEUS_HOME/config.yaml`),
//! with environment variables overriding the file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

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
    /// Shells read the login files once at start, as `bash -l` does (hermes).
    pub login_shell: bool,
    /// Files every shell sources once at start (`~/` is the sandbox's home).
    pub shell_init_files: Vec<String>,
    /// Without `shell_init_files`: source `~/.profile`, `~/.bash_profile`
    /// and `~/.bashrc` (hermes' default).
    pub auto_source_bashrc: bool,
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
        }
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
    }
}
