//! `plugin.yaml`: hermes' manifest keys (`name`, `version`, `description`,
//! `author`, `requires_env`; others such as `kind` or `provides_tools` are
//! read and ignored) plus what an executable plugin needs: `tools` with
//! their JSON schemas and commands, `hooks` in the configuration's layout,
//! and `runs_on`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::hooks::{HookSpec, parse_hooks};
use crate::{DEFAULT_TOOL_TIMEOUT, PluginError};

/// The longest a plugin tool may be given to run.
const MAX_TOOL_TIMEOUT: Duration = Duration::from_secs(3600);
/// Bytes a plugin tool may print by default (the registry's result cap then
/// decides what the model reads).
const DEFAULT_MAX_OUTPUT: usize = 1024 * 1024;
/// Largest output cap a manifest may ask for.
const MAX_MAX_OUTPUT: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub description: String,
    /// Variables the plugin's executables receive (and without which its
    /// tools are hidden from the model).
    pub requires_env: Vec<String>,
    pub runs_on: RunsOn,
    pub tools: Vec<ToolSpec>,
    pub hooks: Vec<HookSpec>,
}

/// Where a plugin's executables run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunsOn {
    Coordinator,
    /// Workers with these labels (not built).
    Workers {
        labels: BTreeMap<String, String>,
    },
}

impl RunsOn {
    pub fn to_json(&self) -> Value {
        match self {
            RunsOn::Coordinator => json!("coordinator"),
            RunsOn::Workers { labels } => json!({"workers": {"labels": labels}}),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON schema of the arguments (an object schema).
    pub parameters: Value,
    /// The executable and its arguments (relative paths are the plugin
    /// directory's).
    pub argv: Vec<String>,
    pub timeout: Duration,
    pub max_output_bytes: usize,
    /// Results longer than this are persisted (the registry's default otherwise).
    pub max_result_chars: Option<u64>,
    /// Register over a built-in tool of the same name (`override: true`; the
    /// operator must also allow it).
    pub override_builtin: bool,
}

fn invalid(path: &Path, message: impl Into<String>) -> PluginError {
    PluginError::Manifest {
        path: path.display().to_string(),
        message: message.into(),
    }
}

/// Reads and checks a manifest.
pub fn read(path: &Path) -> Result<Manifest, PluginError> {
    let text = std::fs::read_to_string(path).map_err(|e| invalid(path, e.to_string()))?;
    let doc: serde_yaml::Value =
        serde_yaml::from_str(&text).map_err(|e| invalid(path, e.to_string()))?;
    if !doc.is_mapping() {
        return Err(invalid(path, "a manifest is a mapping"));
    }
    let dir_name = path
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text_of = |key: &str| -> Option<String> {
        match doc.get(key)? {
            serde_yaml::Value::String(s) => Some(s.clone()),
            serde_yaml::Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    };
    let name = text_of("name").unwrap_or(dir_name);
    let requires_env = match doc.get("requires_env") {
        None | Some(serde_yaml::Value::Null) => Vec::new(),
        Some(serde_yaml::Value::Sequence(items)) => items
            .iter()
            .map(|item| match item {
                serde_yaml::Value::String(s) => Ok(s.clone()),
                // hermes also accepts {name: VAR, …}.
                other => other
                    .get("name")
                    .and_then(serde_yaml::Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| invalid(path, "requires_env entries are names")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(invalid(path, "requires_env must be a list")),
    };
    let runs_on = match doc.get("runs_on") {
        None | Some(serde_yaml::Value::Null) => RunsOn::Coordinator,
        Some(serde_yaml::Value::String(s)) if s == "coordinator" => RunsOn::Coordinator,
        Some(serde_yaml::Value::String(s)) if s == "workers" => RunsOn::Workers {
            labels: BTreeMap::new(),
        },
        Some(value) if value.get("workers").is_some() => {
            let labels = value
                .get("workers")
                .and_then(|w| w.get("labels"))
                .map(|l| serde_yaml::from_value::<BTreeMap<String, String>>(l.clone()))
                .transpose()
                .map_err(|e| invalid(path, format!("runs_on.workers.labels: {e}")))?
                .unwrap_or_default();
            RunsOn::Workers { labels }
        }
        Some(_) => {
            return Err(invalid(
                path,
                "runs_on is `coordinator` or {workers: {labels: {…}}}",
            ));
        }
    };
    let tools = match doc.get("tools") {
        None | Some(serde_yaml::Value::Null) => Vec::new(),
        Some(serde_yaml::Value::Sequence(items)) => items
            .iter()
            .map(|item| tool(path, item))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(invalid(path, "tools must be a list")),
    };
    let hooks = parse_hooks(doc.get("hooks")).map_err(|e| invalid(path, e.to_string()))?;
    Ok(Manifest {
        name,
        version: text_of("version").unwrap_or_default(),
        description: text_of("description").unwrap_or_default(),
        requires_env,
        runs_on,
        tools,
        hooks,
    })
}

fn tool(path: &Path, item: &serde_yaml::Value) -> Result<ToolSpec, PluginError> {
    let name = item
        .get("name")
        .and_then(serde_yaml::Value::as_str)
        .filter(|n| valid_tool_name(n))
        .ok_or_else(|| {
            invalid(
                path,
                "every tool needs a name of letters, digits, '_' and '-' (at most 64)",
            )
        })?
        .to_owned();
    let at = |what: &str| invalid(path, format!("tool '{name}': {what}"));
    let command = item
        .get("command")
        .and_then(serde_yaml::Value::as_str)
        .ok_or_else(|| at("needs a command"))?;
    let argv = crate::exec::split_command(command).map_err(|e| at(&e))?;
    if argv.is_empty() {
        return Err(at("needs a command"));
    }
    let description = item
        .get("description")
        .and_then(serde_yaml::Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let parameters = match item.get("parameters") {
        None | Some(serde_yaml::Value::Null) => json!({"type": "object", "properties": {}}),
        Some(value) => {
            let schema: Value = serde_json::to_value(value).map_err(|e| at(&e.to_string()))?;
            if schema.get("type").and_then(Value::as_str) != Some("object") {
                return Err(at("parameters must be a JSON schema of type object"));
            }
            schema
        }
    };
    let timeout = match item.get("timeout").and_then(serde_yaml::Value::as_f64) {
        Some(secs) if secs.is_finite() && secs > 0.0 => {
            Duration::from_secs_f64(secs).min(MAX_TOOL_TIMEOUT)
        }
        Some(_) => return Err(at("timeout must be a positive number of seconds")),
        None => DEFAULT_TOOL_TIMEOUT,
    };
    let max_output_bytes = match item
        .get("max_output_bytes")
        .and_then(serde_yaml::Value::as_u64)
    {
        Some(bytes) if bytes > 0 => usize::try_from(bytes)
            .unwrap_or(MAX_MAX_OUTPUT)
            .min(MAX_MAX_OUTPUT),
        _ => DEFAULT_MAX_OUTPUT,
    };
    Ok(ToolSpec {
        name,
        description,
        parameters,
        argv,
        timeout,
        max_output_bytes,
        max_result_chars: item
            .get("max_result_chars")
            .and_then(serde_yaml::Value::as_u64),
        override_builtin: item
            .get("override")
            .and_then(serde_yaml::Value::as_bool)
            .unwrap_or(false),
    })
}

/// OpenAI's function-name rule.
fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}
