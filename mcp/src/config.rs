//! `mcp_servers:` of the configuration, in hermes' keys: one entry per
//! server, stdio (`command`, `args`, `env`) or streamable HTTP (`url`,
//! `headers`; `url` wins when both are given), `timeout` (per call, 300 s),
//! `connect_timeout` (60 s), `enabled`, `tools.include` / `tools.exclude`,
//! `supports_parallel_tool_calls`. Strings may name variables as `${VAR}` or
//! `${env:VAR}`; they are read when the configuration is loaded.

use std::collections::BTreeMap;
use std::time::Duration;

use regex::Regex;
use serde::Deserialize;
use serde_yaml::Value;

use crate::McpError;

/// hermes' per-call timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// hermes' connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// How the coordinator (or, for a server with `on:`, its worker) reaches
/// a server.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
pub enum Transport {
    /// A child process speaking JSON-RPC lines on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// The configuration's `env`, on top of the few host variables a
        /// server needs to start (see `stdio::base_env`).
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

impl Transport {
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
        }
    }

    /// What `caduceus mcp list` shows: the command line or the URL (header
    /// values and env values are never shown: they carry credentials).
    pub fn target(&self) -> String {
        match self {
            Transport::Stdio { command, args, .. } => std::iter::once(command.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            Transport::Http { url, .. } => url.clone(),
        }
    }
}

/// Reconnection after a lost connection (hermes: backoff doubling up to
/// 60 s, 5 retries — 3 for the very first connection — then parked with its
/// tools deregistered and probed every 300 s). Not hermes keys: the
/// `reconnect:` mapping exists so that tests and impatient operators can
/// shorten the waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct Reconnect {
    pub retries: u32,
    pub initial_retries: u32,
    pub first_delay: Duration,
    pub max_delay: Duration,
    pub probe_interval: Duration,
}

impl Default for Reconnect {
    fn default() -> Self {
        Reconnect {
            retries: 5,
            initial_retries: 3,
            first_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            probe_interval: Duration::from_secs(300),
        }
    }
}

impl Reconnect {
    /// The wait before retry number `attempt` (1-based): doubling from
    /// `first_delay`, capped at `max_delay`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 2u32.saturating_pow(attempt.saturating_sub(1).min(16));
        self.first_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// One configured server. Serialized (JSON) it is what a worker hosting it
/// is sent (`HostedProvider.config_json`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, Deserialize)]
pub struct ServerConfig {
    pub name: String,
    pub transport: Transport,
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub enabled: bool,
    /// Only these tools (the server's own names), when given.
    pub include: Option<Vec<String>>,
    pub exclude: Vec<String>,
    pub supports_parallel_tool_calls: bool,
    pub reconnect: Reconnect,
    /// `on: {labels: {…}}`: the server runs on every worker carrying all
    /// these labels (an empty mapping: every worker), not on the coordinator.
    pub on: Option<BTreeMap<String, String>>,
}

impl ServerConfig {
    /// Whether the server's tool `tool` is offered (include, then exclude).
    pub fn offers(&self, tool: &str) -> bool {
        self.include
            .as_ref()
            .is_none_or(|only| only.iter().any(|t| t == tool))
            && !self.exclude.iter().any(|t| t == tool)
    }
}

/// A server as the configuration names it: its settings, or why they are unusable.
#[derive(Debug, Clone)]
pub struct Configured {
    pub name: String,
    pub config: Result<ServerConfig, McpError>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReconnect {
    retries: Option<u32>,
    initial_retries: Option<u32>,
    first_delay: Option<f64>,
    max_delay: Option<f64>,
    probe_interval: Option<f64>,
}

/// The keys read; hermes' others (`transport: sse`, `auth`, `sampling`, …)
/// are accepted and ignored so that a hermes configuration loads.
#[derive(Deserialize)]
struct RawServer {
    command: Option<String>,
    #[serde(default)]
    args: Option<Value>,
    #[serde(default)]
    env: BTreeMap<String, Value>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, Value>,
    timeout: Option<f64>,
    connect_timeout: Option<f64>,
    enabled: Option<bool>,
    tools: Option<RawTools>,
    supports_parallel_tool_calls: Option<bool>,
    reconnect: Option<RawReconnect>,
    on: Option<RawOn>,
}

/// `on:` — where the server runs (not a hermes key: hermes has no workers).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOn {
    #[serde(default)]
    labels: BTreeMap<String, Value>,
}

#[derive(Deserialize, Default)]
struct RawTools {
    include: Option<Vec<String>>,
    #[serde(default)]
    exclude: Vec<String>,
}

/// Parses `mcp_servers:`; `lookup` reads a variable for `${VAR}`. Servers
/// keep the configuration's order; one bad entry does not hide the others.
pub fn parse_servers(
    section: Option<&Value>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Configured>, McpError> {
    let Some(section) = section else {
        return Ok(Vec::new());
    };
    if section.is_null() {
        return Ok(Vec::new());
    }
    let Value::Mapping(map) = section else {
        return Err(McpError::Config(
            "mcp_servers must be a mapping of server names to settings".to_owned(),
        ));
    };
    let mut servers = Vec::new();
    for (key, value) in map {
        let name = match key {
            Value::String(s) => s.clone(),
            other => serde_yaml::to_string(other)
                .unwrap_or_default()
                .trim()
                .to_owned(),
        };
        let config = parse_server(&name, value, lookup);
        servers.push(Configured { name, config });
    }
    Ok(servers)
}

fn seconds(
    name: &str,
    key: &str,
    value: Option<f64>,
    default: Duration,
) -> Result<Duration, McpError> {
    match value {
        None => Ok(default),
        Some(s) if s.is_finite() && s > 0.0 => Ok(Duration::from_secs_f64(s)),
        Some(s) => Err(McpError::Config(format!(
            "MCP server '{name}': {key} must be a positive number of seconds, not {s}"
        ))),
    }
}

fn parse_server(
    name: &str,
    value: &Value,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<ServerConfig, McpError> {
    let raw: RawServer = serde_yaml::from_value(value.clone())
        .map_err(|e| McpError::Config(format!("MCP server '{name}': {e}")))?;
    let text = |s: &str| interpolate(name, s, lookup);
    let scalar = |key: &str, v: &Value| -> Result<String, McpError> {
        match v {
            Value::String(s) => text(s),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            _ => Err(McpError::Config(format!(
                "MCP server '{name}': {key} values must be strings"
            ))),
        }
    };
    let transport = if let Some(url) = &raw.url {
        let url = text(url)?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(McpError::Config(format!(
                "Invalid MCP URL for '{name}': scheme must be http or https ('{url}')"
            )));
        }
        let mut headers = BTreeMap::new();
        for (k, v) in &raw.headers {
            headers.insert(k.clone(), scalar("headers", v)?);
        }
        Transport::Http { url, headers }
    } else if let Some(command) = &raw.command {
        let command = text(command)?;
        if command.trim().is_empty() {
            return Err(McpError::Config(format!(
                "MCP server '{name}': command is empty"
            )));
        }
        let args = args_of(name, raw.args.as_ref())?
            .iter()
            .map(|a| text(a))
            .collect::<Result<Vec<_>, _>>()?;
        let mut env = BTreeMap::new();
        for (k, v) in &raw.env {
            env.insert(k.clone(), scalar("env", v)?);
        }
        Transport::Stdio { command, args, env }
    } else {
        return Err(McpError::Config(format!(
            "MCP server '{name}' has neither a command (stdio) nor a url (HTTP)"
        )));
    };
    let tools = raw.tools.unwrap_or_default();
    let defaults = Reconnect::default();
    let reconnect = match raw.reconnect {
        None => defaults,
        Some(r) => Reconnect {
            retries: r.retries.unwrap_or(defaults.retries),
            initial_retries: r.initial_retries.unwrap_or(defaults.initial_retries),
            first_delay: seconds(
                name,
                "reconnect.first_delay",
                r.first_delay,
                defaults.first_delay,
            )?,
            max_delay: seconds(name, "reconnect.max_delay", r.max_delay, defaults.max_delay)?,
            probe_interval: seconds(
                name,
                "reconnect.probe_interval",
                r.probe_interval,
                defaults.probe_interval,
            )?,
        },
    };
    Ok(ServerConfig {
        name: name.to_owned(),
        transport,
        timeout: seconds(name, "timeout", raw.timeout, DEFAULT_TIMEOUT)?,
        connect_timeout: seconds(
            name,
            "connect_timeout",
            raw.connect_timeout,
            DEFAULT_CONNECT_TIMEOUT,
        )?,
        enabled: raw.enabled.unwrap_or(true),
        include: tools.include,
        exclude: tools.exclude,
        supports_parallel_tool_calls: raw.supports_parallel_tool_calls.unwrap_or(false),
        reconnect,
        on: match raw.on {
            None => None,
            Some(on) => {
                let mut labels = BTreeMap::new();
                for (k, v) in &on.labels {
                    labels.insert(k.clone(), scalar("on.labels", v)?);
                }
                Some(labels)
            }
        },
    })
}

/// `args` as hermes reads it: a list, or a string split as a shell would
/// (`args: -y 'pkg with spaces'`); scalars become their text.
fn args_of(name: &str, args: Option<&Value>) -> Result<Vec<String>, McpError> {
    let scalar = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    };
    match args {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|v| {
                scalar(v).ok_or_else(|| {
                    McpError::Config(format!("MCP server '{name}': args must be strings"))
                })
            })
            .collect(),
        Some(Value::String(s)) => caduceus_common::shell_words::split(s).map_err(|_| {
            McpError::Config(format!(
                "MCP server '{name}': args contain invalid shell quoting"
            ))
        }),
        Some(other) => Ok(scalar(other).into_iter().collect()),
    }
}

/// A `lookup` that reads no variable: every `${VAR}` (and `${env:VAR}`)
/// stays as `${VAR}`. The settings of a server hosted on workers are parsed
/// with it: they travel to every worker that claims the server's labels, so
/// they carry no value of the coordinator's environment, and each worker
/// reads the variables from its own ([`ServerConfig::resolve_variables`]).
pub fn keep_variables(name: &str) -> Option<String> {
    Some(format!("${{{name}}}"))
}

impl ServerConfig {
    /// The settings with every `${VAR}` left by [`keep_variables`] read by
    /// `lookup` (the strings `parse_servers` interpolates: command, args,
    /// env and header values, url).
    pub fn resolve_variables(
        &self,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ServerConfig, McpError> {
        let name = self.name.as_str();
        let text = |s: &String| interpolate(name, s, lookup);
        let values = |map: &BTreeMap<String, String>| {
            map.iter()
                .map(|(k, v)| Ok((k.clone(), text(v)?)))
                .collect::<Result<BTreeMap<_, _>, McpError>>()
        };
        let transport = match &self.transport {
            Transport::Stdio { command, args, env } => Transport::Stdio {
                command: text(command)?,
                args: args.iter().map(text).collect::<Result<_, _>>()?,
                env: values(env)?,
            },
            Transport::Http { url, headers } => {
                let url = text(url)?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(McpError::Config(format!(
                        "Invalid MCP URL for '{name}': scheme must be http or https ('{url}')"
                    )));
                }
                Transport::Http {
                    url,
                    headers: values(headers)?,
                }
            }
        };
        Ok(ServerConfig {
            transport,
            ..self.clone()
        })
    }
}

/// Replaces `${VAR}` and `${env:VAR}` with the variable's value. An unset
/// variable is an error naming it: a server started with a literal
/// `${API_KEY}` would fail later and less clearly.
pub fn interpolate(
    server: &str,
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<String, McpError> {
    static PATTERN: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let pattern = PATTERN.get_or_init(|| {
        #[allow(clippy::expect_used)]
        Regex::new(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}").expect("a valid pattern")
    });
    let mut missing = None;
    let out = pattern.replace_all(text, |caps: &regex::Captures<'_>| {
        let var = &caps[1];
        match lookup(var) {
            Some(value) => value,
            None => {
                missing.get_or_insert_with(|| var.to_owned());
                String::new()
            }
        }
    });
    match missing {
        Some(var) => Err(McpError::Config(format!(
            "MCP server '{server}': the variable {var} (named as ${{{var}}}) is not set"
        ))),
        None => Ok(out.into_owned()),
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
