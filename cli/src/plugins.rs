//! Plugins and shell hooks on this host's coordinator: loading them at start
//! (`plugins:` and `hooks:` of the configuration, `$CADUCEUS_HOME/plugins/`)
//! and `caduceus plugins list`.

use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Subcommand;

use caduceus_coordinator::gate::Gate;
use caduceus_coordinator::registry::RegistryError;
use caduceus_coordinator::{Coordinator, CoordinatorConfig};
use caduceus_plugins::{Found, PluginsSettings, State, discover, load, parse_hooks, plugin_dirs};

use crate::config::{Config, home_dir};
use crate::out;

#[derive(Subcommand, Clone, Copy)]
pub enum PluginsCommand {
    /// The plugins this host's coordinator would load, and why the others do not.
    List {
        /// Print JSON (one array).
        #[arg(long)]
        json: bool,
    },
}

fn found(config: &Config) -> Result<(PluginsSettings, Vec<Found>)> {
    let settings =
        PluginsSettings::from_yaml(config.plugins.as_ref()).context("invalid configuration")?;
    let found = discover(&plugin_dirs(&home_dir(), &settings), &settings);
    Ok((settings, found))
}

/// Starts a coordinator with the enabled plugins' tools registered, the
/// plugins' and configuration's hooks in its pipeline, and the MCP servers of
/// `mcp_servers:` connected (their tools registered as they come up). A plugin tool the
/// registry refuses (it would shadow a built-in without permission) is
/// logged and left out; the coordinator starts anyway.
pub(crate) async fn start_coordinator(
    config: &Config,
    mut coordinator_config: CoordinatorConfig,
    gate: Arc<dyn Gate>,
) -> Result<Arc<Coordinator>> {
    let hooks = parse_hooks(config.hooks.as_ref()).context("invalid configuration")?;
    let (settings, found) = found(config)?;
    for plugin in &found {
        match &plugin.state {
            State::Enabled => {
                tracing::info!(plugin = %plugin.key, path = %plugin.dir.display(), "plugin enabled")
            }
            State::Invalid(why) | State::Unsupported(why) => {
                tracing::warn!(plugin = %plugin.key, "plugin not loaded: {why}")
            }
            other => {
                tracing::debug!(plugin = %plugin.key, "plugin not loaded: {}", other.describe(&plugin.key))
            }
        }
    }
    let loaded = load(&found, &settings, hooks);
    coordinator_config.hooks = loaded.hooks;
    coordinator_config.hosted = crate::mcp_client::hosted(config)?;
    let coordinator = Coordinator::start(coordinator_config, gate).await?;
    let registry = coordinator.registry();
    for (plugin, allowed) in &loaded.override_policy {
        registry.set_plugin_override_policy(plugin, *allowed);
    }
    for tool in loaded.tools {
        let name = tool.entry.name.clone();
        match registry.register(tool.entry, tool.override_existing).await {
            Ok(()) => tracing::info!(plugin = %tool.plugin, tool = %name, "plugin tool registered"),
            Err(
                err
                @ (RegistryError::WouldShadow { .. } | RegistryError::OverrideNotAllowed { .. }),
            ) => {
                tracing::warn!(plugin = %tool.plugin, tool = %name, "plugin tool not registered: {err}")
            }
            Err(err) => return Err(err).context("registering plugin tools"),
        }
    }
    crate::mcp_client::start(config, registry.clone()).await?;
    Ok(coordinator)
}

pub fn run(command: PluginsCommand, config: &Config) -> Result<()> {
    match command {
        PluginsCommand::List { json } => {
            let (_, found) = found(config)?;
            if json {
                let rows: Vec<_> = found.iter().map(caduceus_plugins::describe).collect();
                return out(&serde_json::to_string_pretty(&rows)?);
            }
            if found.is_empty() {
                return out(&format!(
                    "no plugins in {}",
                    home_dir().join("plugins").display()
                ));
            }
            out(&format!(
                "{:<20} {:<10} {:<8} {:<24} {:<24} STATUS",
                "NAME", "VERSION", "SOURCE", "TOOLS", "HOOKS"
            ))?;
            for plugin in &found {
                let (version, tools, hooks) = match &plugin.manifest {
                    Some(m) => (
                        m.version.clone(),
                        m.tools
                            .iter()
                            .map(|t| t.name.as_str())
                            .collect::<Vec<_>>()
                            .join(","),
                        m.hooks
                            .iter()
                            .map(|h| h.event.as_str())
                            .collect::<Vec<_>>()
                            .join(","),
                    ),
                    None => Default::default(),
                };
                out(&format!(
                    "{:<20} {:<10} {:<8} {:<24} {:<24} {}",
                    plugin.key,
                    version,
                    plugin.source.as_str(),
                    tools,
                    hooks,
                    plugin.state.describe(&plugin.key)
                ))?;
            }
            Ok(())
        }
    }
}
