//! The MCP servers of `mcp_servers:`: those without `on:` are started with
//! this host's coordinator (their tools join the registry, see
//! mcp/README.md); those with `on: {labels: …}` are handed to the
//! coordinator as hosted providers, which the matching workers run. And
//! `caduceus mcp list` / `caduceus mcp test NAME`.

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use caduceus_coordinator::registry::actor::RegistryHandle;
use caduceus_coordinator::scheduler::hosted::HostedProviderConfig;
use caduceus_mcp::sdk::RmcpConnector;
use caduceus_mcp::{Configured, ServerConfig, Transport};

use crate::config::Config;
use crate::out;

/// The configured servers, with `${VAR}` read from the environment the
/// process started with (including the variables it withholds from itself).
fn configured(config: &Config) -> Result<Vec<Configured>> {
    caduceus_mcp::parse_servers(config.mcp_servers.as_ref(), &|name| {
        caduceus_common::process_env::var(name)
    })
    .context("invalid configuration")
}

/// Starts the enabled servers' supervisors and waits for their first
/// connection attempt; a server that is invalid or down is logged and
/// does not stop the coordinator.
pub(crate) async fn start(config: &Config, registry: RegistryHandle) -> Result<()> {
    // Hosted ones are the workers' (their variables are the workers' too).
    let hosted: Vec<String> = hosted(config)?.into_iter().map(|h| h.name).collect();
    let mut servers = Vec::new();
    for server in configured(config)? {
        match server.config {
            _ if hosted.contains(&server.name) => {}
            Ok(settings) if settings.on.is_some() => {}
            Ok(settings) if settings.enabled => servers.push(settings),
            Ok(_) => tracing::debug!(server = %server.name, "MCP server disabled"),
            Err(err) => tracing::warn!(server = %server.name, "MCP server not started: {err}"),
        }
    }
    if !servers.is_empty() {
        caduceus_mcp::registry::start(servers, registry, Arc::new(RmcpConnector)).await;
    }
    Ok(())
}

/// The enabled servers with `on: {labels: …}`, as the coordinator's hosted
/// providers: workers with those labels run them. Their settings are read
/// with `${VAR}` left as it is: they go to any worker that claims the
/// labels, and each worker reads the variables from its own environment.
pub(crate) fn hosted(config: &Config) -> Result<Vec<HostedProviderConfig>> {
    let servers =
        caduceus_mcp::parse_servers(config.mcp_servers.as_ref(), &caduceus_mcp::keep_variables)
            .context("invalid configuration")?;
    let mut hosted = Vec::new();
    for server in servers {
        let Ok(settings) = server.config else {
            // Logged by `start`.
            continue;
        };
        let Some(labels) = settings.on.clone() else {
            continue;
        };
        if !settings.enabled {
            continue;
        }
        hosted.push(HostedProviderConfig {
            name: settings.name.clone(),
            kind: "mcp".to_owned(),
            labels,
            config_json: serde_json::to_string(&settings)?,
            toolset: caduceus_mcp::toolset(&settings.name),
            tool_prefix: caduceus_mcp::tool_name(&settings.name, ""),
            call_timeout: settings.timeout,
            parallel_safe: settings.supports_parallel_tool_calls,
        });
    }
    Ok(hosted)
}

fn row(server: &Configured) -> Value {
    match &server.config {
        Ok(c) => json!({
            "name": server.name,
            "transport": c.transport.kind(),
            "target": c.transport.target(),
            "enabled": c.enabled,
            "toolset": caduceus_mcp::toolset(&server.name),
            "include": c.include,
            "exclude": c.exclude,
            "timeout": c.timeout.as_secs_f64(),
            "connect_timeout": c.connect_timeout.as_secs_f64(),
            "on": c.on.as_ref().map(|labels| json!({"labels": labels})),
            "error": Value::Null,
        }),
        Err(err) => json!({"name": server.name, "enabled": false, "error": err.to_string()}),
    }
}

/// `caduceus mcp list`: what the configuration names (nothing is started).
pub(crate) fn list(config: &Config, as_json: bool) -> Result<()> {
    let servers = configured(config)?;
    if as_json {
        let rows: Vec<Value> = servers.iter().map(row).collect();
        return out(&serde_json::to_string_pretty(&rows)?);
    }
    if servers.is_empty() {
        return out("no MCP servers configured (mcp_servers: in config.yaml)");
    }
    out(&format!(
        "{:<16} {:<6} {:<8} {:<44} TOOLS",
        "NAME", "KIND", "STATUS", "TARGET"
    ))?;
    for server in &servers {
        match &server.config {
            Ok(c) => {
                let tools = match (&c.include, c.exclude.is_empty()) {
                    (Some(only), _) => format!("only {}", only.join(",")),
                    (None, false) => format!("all but {}", c.exclude.join(",")),
                    (None, true) => "all".to_owned(),
                };
                out(&format!(
                    "{:<16} {:<6} {:<8} {:<44} {}",
                    server.name,
                    c.transport.kind(),
                    if c.enabled { "enabled" } else { "disabled" },
                    match &c.on {
                        // Hosted: run by the workers with these labels.
                        Some(labels) => format!(
                            "{} (on workers: {})",
                            c.transport.target(),
                            if labels.is_empty() {
                                "all".to_owned()
                            } else {
                                labels
                                    .iter()
                                    .map(|(k, v)| format!("{k}={v}"))
                                    .collect::<Vec<_>>()
                                    .join(",")
                            }
                        ),
                        None => c.transport.target(),
                    },
                    tools
                ))?;
            }
            Err(err) => out(&format!(
                "{:<16} {:<6} {:<8} {err}",
                server.name, "-", "invalid"
            ))?,
        }
    }
    Ok(())
}

/// `caduceus mcp test NAME`: connects once, lists the tools, disconnects.
/// A server that cannot be reached is an error (exit status 1).
pub(crate) async fn test(config: &Config, name: &str, as_json: bool) -> Result<()> {
    let servers = configured(config)?;
    let Some(server) = servers.iter().find(|s| s.name == name) else {
        let known: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
        bail!(
            "no MCP server '{name}' in mcp_servers (configured: {})",
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        );
    };
    let settings: &ServerConfig = match &server.config {
        Ok(settings) => settings,
        Err(err) => bail!("{err}"),
    };
    // A failure is the command's error (printed as `{"error": …}` under --json).
    let probe = caduceus_mcp::probe(settings, &RmcpConnector).await?;
    if as_json {
        let mut value = serde_json::to_value(&probe)?;
        value["ok"] = Value::Bool(true);
        return out(&serde_json::to_string_pretty(&value)?);
    }
    let via = match &settings.transport {
        Transport::Stdio { .. } => "stdio",
        Transport::Http { .. } => "streamable HTTP",
    };
    out(&format!(
        "MCP server '{}' connected over {via} in {} ms: {} {} (protocol {})",
        probe.server,
        probe.connect_ms,
        probe.server_name.as_deref().unwrap_or("?"),
        probe.server_version.as_deref().unwrap_or(""),
        probe.protocol
    ))?;
    out(&format!("{} tools:", probe.tools.len()))?;
    for tool in &probe.tools {
        let description = tool["description"].as_str().unwrap_or_default();
        let first_line = description.lines().next().unwrap_or_default();
        out(&format!(
            "  {:<40} {}",
            tool["name"].as_str().unwrap_or_default(),
            first_line
        ))?;
    }
    if !probe.filtered_out.is_empty() {
        out(&format!(
            "left out by tools.include/exclude: {}",
            probe.filtered_out.join(", ")
        ))?;
    }
    Ok(())
}
