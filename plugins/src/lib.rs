//! Plugins and shell hooks with no runtime in the coordinator's process.
//!
//! A plugin is a directory holding a `plugin.yaml` manifest and executables.
//! Its tools are registry entries whose handler runs an executable (arguments
//! as JSON on stdin, the result on stdout, a timeout, an output cap, only the
//! variables the plugin declares); its hooks are shell hooks. Nothing a
//! plugin ships is loaded into the coordinator: a crashing or hostile plugin
//! is a process that ends. See `README.md` for the manifest and the rules.
//!
//! * [`PluginsSettings`]: the `plugins:` configuration section.
//! * [`discover`]: what `~/.caduceus/plugins/` (and, when enabled,
//!   `./.caduceus/plugins/`) hold, and whether each plugin loads.
//! * [`Loaded`]: the tools to register and the hooks to run.
//! * [`hooks`]: the `hooks:` section in hermes' layout.

pub mod exec;
pub mod hooks;
mod manifest;
mod tool;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use caduceus_coordinator::dispatch::{HookSet, ToolHook};
use caduceus_coordinator::registry::{Handler, Owner, ToolEntry};

pub use hooks::{HookEvent, HookOrigin, HookSpec, ShellHook, parse_hooks};
pub use manifest::{Manifest, RunsOn, ToolSpec};
pub use tool::PluginTool;

#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("invalid plugins section: {0}")]
    Settings(String),
    #[error("invalid hooks: {0}")]
    Hooks(String),
    #[error("{path}: {message}")]
    Manifest { path: String, message: String },
}

/// `plugins:` in the configuration (hermes' keys, plus `project`).
///
/// ```yaml
/// plugins:
///   enabled: [greet]          # plugins are opt-in: only these load
///   disabled: [noisy]         # wins over enabled
///   project: false            # also ./.caduceus/plugins/ (CADUCEUS_ENABLE_PROJECT_PLUGINS=1)
///   entries:
///     greet: {allow_tool_override: true}   # may replace a built-in tool
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginsSettings {
    /// `None`: nothing is enabled (hermes' opt-in default).
    pub enabled: Option<Vec<String>>,
    pub disabled: Vec<String>,
    pub project: bool,
    pub entries: BTreeMap<String, PluginEntry>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PluginEntry {
    /// The plugin may register tools over built-in ones.
    pub allow_tool_override: bool,
}

impl PluginsSettings {
    /// Reads the section (missing or null: the defaults).
    /// `CADUCEUS_ENABLE_PROJECT_PLUGINS=1` turns `project` on.
    pub fn from_yaml(section: Option<&serde_yaml::Value>) -> Result<Self, PluginError> {
        let mut settings: PluginsSettings = match section.filter(|v| !v.is_null()) {
            None => PluginsSettings::default(),
            Some(value) => serde_yaml::from_value(value.clone())
                .map_err(|e| PluginError::Settings(e.to_string()))?,
        };
        if std::env::var("CADUCEUS_ENABLE_PROJECT_PLUGINS")
            .is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"))
        {
            settings.project = true;
        }
        Ok(settings)
    }

    fn override_allowed(&self, plugin: &str) -> bool {
        self.entries
            .get(plugin)
            .is_some_and(|e| e.allow_tool_override)
    }
}

/// Where a plugin was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `$CADUCEUS_HOME/plugins/`.
    User,
    /// `./.caduceus/plugins/` (only with `plugins.project`).
    Project,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::User => "user",
            Source::Project => "project",
        }
    }
}

/// Whether a found plugin loads, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Enabled,
    Disabled,
    /// Not in `plugins.enabled`.
    NotEnabled,
    /// It asks for something not built (see the message).
    Unsupported(String),
    /// Its manifest is invalid.
    Invalid(String),
}

impl State {
    pub fn describe(&self, key: &str) -> String {
        match self {
            State::Enabled => "enabled".to_owned(),
            State::Disabled => "disabled via config (plugins.disabled)".to_owned(),
            State::NotEnabled => {
                format!("not enabled in config (add '{key}' to plugins.enabled)")
            }
            State::Unsupported(why) | State::Invalid(why) => why.clone(),
        }
    }
}

/// One plugin directory.
#[derive(Debug, Clone)]
pub struct Found {
    /// The directory's name: what `plugins.enabled` and `disabled` name.
    pub key: String,
    pub dir: PathBuf,
    pub source: Source,
    pub manifest: Option<Manifest>,
    pub state: State,
}

/// The plugin directories, in the order hermes reads them (user, then
/// project; a later one with the same key replaces an earlier one).
pub fn plugin_dirs(home: &Path, settings: &PluginsSettings) -> Vec<(PathBuf, Source)> {
    let mut dirs = vec![(home.join("plugins"), Source::User)];
    if settings.project
        && let Ok(cwd) = std::env::current_dir()
    {
        dirs.push((cwd.join(".caduceus").join("plugins"), Source::Project));
    }
    dirs
}

/// Every plugin under `dirs`, with its state.
pub fn discover(dirs: &[(PathBuf, Source)], settings: &PluginsSettings) -> Vec<Found> {
    let mut found: BTreeMap<String, Found> = BTreeMap::new();
    for (root, source) in dirs {
        let Ok(entries) = std::fs::read_dir(root) else {
            continue;
        };
        let mut children: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        children.sort();
        for dir in children {
            let Some(file) = ["plugin.yaml", "plugin.yml"]
                .iter()
                .map(|name| dir.join(name))
                .find(|p| p.is_file())
            else {
                continue;
            };
            let key = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let (manifest, invalid) = match manifest::read(&file) {
                Ok(manifest) => (Some(manifest), None),
                Err(err) => (None, Some(err.to_string())),
            };
            let state = match (&manifest, invalid) {
                (_, Some(why)) => State::Invalid(why),
                _ if settings.disabled.iter().any(|d| d == &key) => State::Disabled,
                _ if !settings
                    .enabled
                    .as_ref()
                    .is_some_and(|e| e.iter().any(|n| n == &key)) =>
                {
                    State::NotEnabled
                }
                (Some(m), None) => match &m.runs_on {
                    RunsOn::Coordinator => State::Enabled,
                    RunsOn::Workers { .. } => State::Unsupported(
                        "runs_on: workers is not built yet (plugins run on the coordinator only)"
                            .to_owned(),
                    ),
                },
                (None, None) => State::Invalid("no manifest".to_owned()),
            };
            found.insert(
                key.clone(),
                Found {
                    key,
                    dir,
                    source: *source,
                    manifest,
                    state,
                },
            );
        }
    }
    found.into_values().collect()
}

/// A plugin tool ready for the registry.
pub struct PluginToolEntry {
    pub plugin: String,
    pub entry: ToolEntry,
    /// Register over an existing tool (needs `allow_tool_override`).
    pub override_existing: bool,
}

/// What the enabled plugins and the configured hooks add.
#[derive(Default)]
pub struct Loaded {
    pub tools: Vec<PluginToolEntry>,
    pub hooks: HookSet,
    /// Plugin -> may override built-ins (`plugins.entries.<p>.allow_tool_override`).
    pub override_policy: Vec<(String, bool)>,
}

/// Builds the tools and hooks of the enabled plugins (plugin hooks first,
/// then the configured `hooks`, as hermes orders them).
pub fn load(
    found: &[Found],
    settings: &PluginsSettings,
    configured_hooks: Vec<HookSpec>,
) -> Loaded {
    let mut loaded = Loaded::default();
    for plugin in found.iter().filter(|p| p.state == State::Enabled) {
        let Some(manifest) = &plugin.manifest else {
            continue;
        };
        let env: Vec<(String, String)> = manifest
            .requires_env
            .iter()
            .filter(|name| !caduceus_common::env_hygiene::is_never_passed(name))
            .filter_map(|name| {
                caduceus_common::process_env::var(name).map(|value| (name.clone(), value))
            })
            .collect();
        loaded
            .override_policy
            .push((plugin.key.clone(), settings.override_allowed(&plugin.key)));
        for spec in &manifest.tools {
            loaded.tools.push(PluginToolEntry {
                plugin: plugin.key.clone(),
                entry: tool_entry(plugin, manifest, spec),
                override_existing: spec.override_builtin,
            });
        }
        let origin = Arc::new(HookOrigin {
            label: format!("plugin {}", plugin.key),
            dir: plugin.dir.clone(),
            env: env.clone(),
        });
        for spec in &manifest.hooks {
            loaded.hooks.push(Arc::new(ShellHook {
                spec: spec.clone(),
                origin: origin.clone(),
            }) as Arc<dyn ToolHook>);
        }
    }
    let origin = Arc::new(HookOrigin {
        label: "config".to_owned(),
        dir: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        env: Vec::new(),
    });
    for spec in configured_hooks {
        loaded.hooks.push(Arc::new(ShellHook {
            spec,
            origin: origin.clone(),
        }) as Arc<dyn ToolHook>);
    }
    loaded
}

fn tool_entry(plugin: &Found, manifest: &Manifest, spec: &ToolSpec) -> ToolEntry {
    let schema = json!({
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.parameters,
    });
    let handler = PluginTool {
        plugin: plugin.key.clone(),
        tool: spec.name.clone(),
        dir: plugin.dir.clone(),
        argv: spec.argv.clone(),
        declared_env: manifest.requires_env.clone(),
        timeout: spec.timeout,
        max_output: spec.max_output_bytes,
    };
    // The toolset is the plugin's own: a manifest cannot slip a tool into a
    // built-in toolset (where a same-toolset clash would replace it).
    let mut entry = ToolEntry::new(
        spec.name.clone(),
        format!("plugin-{}", plugin.key),
        schema,
        Handler::Local(Arc::new(handler)),
    )
    .with_owner(Owner::Plugin(plugin.key.clone()));
    entry.requires_env = manifest.requires_env.clone();
    if let Some(cap) = spec.max_result_chars {
        entry = entry.with_max_result_size(cap);
    }
    entry
}

/// A plugin's row in `caduceus plugins list --json`.
pub fn describe(found: &Found) -> Value {
    let manifest = found.manifest.as_ref();
    json!({
        "name": found.key,
        "version": manifest.map(|m| m.version.clone()),
        "description": manifest.map(|m| m.description.clone()),
        "source": found.source.as_str(),
        "path": found.dir.display().to_string(),
        "enabled": found.state == State::Enabled,
        "status": found.state.describe(&found.key),
        "runs_on": manifest.map(|m| m.runs_on.to_json()),
        "tools": manifest.map(|m| m.tools.iter().map(|t| t.name.clone()).collect::<Vec<_>>()).unwrap_or_default(),
        "hooks": manifest.map(|m| m.hooks.iter().map(|h| h.event.as_str()).collect::<Vec<_>>()).unwrap_or_default(),
        "requires_env": manifest.map(|m| m.requires_env.clone()).unwrap_or_default(),
        "missing_env": manifest.map(|m| m.requires_env.iter().filter(|v| caduceus_common::process_env::var(v).is_none()).cloned().collect::<Vec<_>>()).unwrap_or_default(),
    })
}

/// Default timeout of a plugin tool.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

#[cfg(test)]
#[path = "lib_tests.rs"]
mod tests;
