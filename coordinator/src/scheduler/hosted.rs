//! Tool providers hosted on workers: MCP servers configured with `on:
//! {labels: …}` run on every worker whose labels match, next to that host's
//! resources. The scheduler tells a matching worker to host them (in
//! `HostProviders`, after its welcome); the worker announces what each one
//! offers (`HostedTools`); this module keeps the registry in step — a tool
//! is registered while some attached worker offers it, hidden while its only
//! hosts are reconnecting to the server, and gone when they detach — and
//! says which worker serves a call ([`HostedTable::route`]).
//!
//! The coordinator does not know what a provider is (the MCP client lives
//! in caduceus-mcp, which the worker runs): a provider's settings travel as
//! the JSON the configuration's owner (the CLI) made of them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use serde_json::Value;

use caduceus_proto::{HostProviders, HostedProvider, HostedTools};

use crate::auth::HostGrant;

use super::link::CallTable;
use crate::registry::actor::RegistryHandle;
use crate::registry::{Availability, Caller, Handler, Owner, ParallelClass, ToolEntry};

/// At most this many tools per provider and worker are taken; the rest of
/// an announcement is refused (logged).
pub const MAX_TOOLS: usize = 1000;
/// A tool's name (the MCP spec's limit, with our `mcp__<server>__` prefix).
pub const MAX_NAME_CHARS: usize = 192;
/// A tool's description, as the server wrote it.
pub const MAX_DESCRIPTION_CHARS: usize = 8 * 1024;
/// A tool's whole schema JSON.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// The schema a hosted tool is registered with, or why it is refused. The
/// worker that announced it is trusted only as far as its grant: the name
/// must lie in the provider's namespace and be a plain identifier, the
/// schema must be the model's shape (`parameters` an object) within the
/// size limits, and the description is marked as the server's words, so
/// that the model (and whoever reads the definitions) can tell a hosted
/// server's text from caduceus' own.
pub(crate) fn checked_tool(
    provider: &HostedProviderConfig,
    name: &str,
    schema_json: &str,
) -> Result<Value, String> {
    if !name.starts_with(&provider.tool_prefix) || name.len() == provider.tool_prefix.len() {
        return Err(format!(
            "its name is outside the provider's namespace `{}*`",
            provider.tool_prefix
        ));
    }
    if name.chars().count() > MAX_NAME_CHARS
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(format!(
            "its name is not 1-{MAX_NAME_CHARS} letters, digits, `_`, `-` or `.`"
        ));
    }
    if schema_json.len() > MAX_SCHEMA_BYTES {
        return Err(format!(
            "its schema is {} bytes, over {MAX_SCHEMA_BYTES}",
            schema_json.len()
        ));
    }
    let mut schema = serde_json::from_str::<Value>(schema_json)
        .ok()
        .filter(Value::is_object)
        .ok_or("its schema is not a JSON object")?;
    if !schema.get("parameters").is_none_or(Value::is_object) {
        return Err("its `parameters` is not a JSON object".to_owned());
    }
    let description = match schema.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(_) => return Err("its description is not a string".to_owned()),
    };
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(format!(
            "its description is {} characters, over {MAX_DESCRIPTION_CHARS}",
            description.chars().count()
        ));
    }
    let object = schema
        .as_object_mut()
        .ok_or("its schema is not a JSON object")?;
    // The name the model sees is the one routed on, whatever the schema said.
    object.insert("name".to_owned(), Value::String(name.to_owned()));
    object.insert(
        "description".to_owned(),
        Value::String(marked_description(&provider.name, &description)),
    );
    Ok(schema)
}

/// A hosted tool's description as the model sees it: the server's text,
/// marked as that server's.
pub fn marked_description(provider: &str, description: &str) -> String {
    format!("[from the MCP server '{provider}', run on a worker] {description}")
}

/// What a worker sent, cut for a log line.
fn truncated(text: &str) -> String {
    const MAX: usize = 200;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(MAX).collect();
        format!("{cut}…")
    }
}

/// A provider that runs on workers, as the configuration names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostedProviderConfig {
    /// Its name (the `mcp_servers` key); also the alias of its toolset.
    pub name: String,
    /// "mcp".
    pub kind: String,
    /// The labels a worker must carry (all of them) to host it; empty: every worker.
    pub labels: BTreeMap<String, String>,
    /// Its settings, for the worker (`HostedProvider.config_json`).
    pub config_json: String,
    /// The toolset its tools are registered in (`mcp-<name>`).
    pub toolset: String,
    /// Every tool name it announces must start with this (`mcp__<name>__`):
    /// a worker cannot register a name outside its provider's namespace.
    pub tool_prefix: String,
    /// The provider's own per-call timeout (enforced on the worker); the
    /// coordinator waits 30 s longer before it gives up on the worker.
    pub call_timeout: Duration,
    /// Its tools may run in parallel with each other in one turn.
    pub parallel_safe: bool,
}

impl HostedProviderConfig {
    fn hosted_by(&self, labels: &HashMap<String, String>) -> bool {
        self.labels
            .iter()
            .all(|(key, value)| labels.get(key) == Some(value))
    }
}

/// One worker offering a provider's tools.
#[derive(Clone)]
pub(crate) struct Host {
    worker_id: String,
    worker_name: String,
    calls: Arc<CallTable>,
    tools: BTreeSet<String>,
}

/// Where a hosted call goes.
pub(crate) struct Route {
    pub worker_name: String,
    pub calls: Arc<CallTable>,
}

/// provider -> the workers serving its tools now. Written by the scheduler
/// actor, read by callers without a message (as placements are).
#[derive(Clone, Default)]
pub struct HostedTable {
    hosts: Arc<RwLock<HashMap<String, Vec<Host>>>>,
    /// Turns among equally busy hosts, so that calls spread over them.
    turn: Arc<AtomicUsize>,
}

impl HostedTable {
    /// The worker that runs `tool` of `provider`: the one holding the
    /// task's environment when it hosts the provider (the call then runs
    /// next to the task's files), else the least busy host, taking turns
    /// among equally busy ones. A host silent for longer than
    /// `suspect_after` (stopped, or cut off) is passed over while another
    /// is heard from; with only silent hosts the call goes to one and ends
    /// when it is heard from again or found lost.
    pub(crate) fn route(
        &self,
        provider: &str,
        tool: &str,
        task_worker: Option<&str>,
        suspect_after: Duration,
    ) -> Option<Route> {
        let table = self.hosts.read().unwrap_or_else(PoisonError::into_inner);
        let serving: Vec<&Host> = table
            .get(provider)?
            .iter()
            .filter(|h| {
                h.tools.contains(tool)
                    && !h.calls.is_closed()
                    && !h.calls.shared().draining.load(Ordering::Relaxed)
            })
            .collect();
        let heard: Vec<&Host> = serving
            .iter()
            .copied()
            .filter(|h| h.calls.shared().heartbeat_age() <= suspect_after)
            .collect();
        let hosts = if heard.is_empty() { serving } else { heard };
        let chosen = match hosts
            .iter()
            .find(|h| Some(h.worker_id.as_str()) == task_worker)
        {
            Some(host) => *host,
            None => {
                let running = |h: &Host| h.calls.shared().running.load(Ordering::Relaxed);
                let least = hosts.iter().map(|h| running(h)).min()?;
                let idle: Vec<&Host> = hosts
                    .iter()
                    .copied()
                    .filter(|h| running(h) == least)
                    .collect();
                idle[self.turn.fetch_add(1, Ordering::Relaxed) % idle.len()]
            }
        };
        Some(Route {
            worker_name: chosen.worker_name.clone(),
            calls: chosen.calls.clone(),
        })
    }

    fn set(&self, provider: &str, hosts: Vec<Host>) {
        let mut table = self.hosts.write().unwrap_or_else(PoisonError::into_inner);
        if hosts.is_empty() {
            table.remove(provider);
        } else {
            table.insert(provider.to_owned(), hosts);
        }
    }
}

/// What one worker last said of one provider.
struct Offer {
    worker_name: String,
    calls: Arc<CallTable>,
    /// registry name -> schema
    tools: BTreeMap<String, Value>,
    /// Non-empty: reconnecting (the tools are hidden), and why.
    unavailable: String,
}

/// The scheduler's record of hosted providers (owned by the actor).
pub(crate) struct Hosted {
    providers: Vec<HostedProviderConfig>,
    table: HostedTable,
    /// provider -> worker id -> its last announcement
    offers: HashMap<String, BTreeMap<String, Offer>>,
    /// provider -> the registry names registered for it
    registered: HashMap<String, BTreeSet<String>>,
}

impl Hosted {
    pub fn new(providers: Vec<HostedProviderConfig>, table: HostedTable) -> Self {
        Hosted {
            providers,
            table,
            offers: HashMap::new(),
            registered: HashMap::new(),
        }
    }

    pub fn provider(&self, name: &str) -> Option<&HostedProviderConfig> {
        self.providers.iter().find(|p| p.name == name)
    }

    /// What a worker with `labels` whose credential grants `grant` is to
    /// host: sent to every worker, empty too, so that one returning to a
    /// coordinator whose configuration no longer names its providers (or
    /// no longer grants them) stops them. A provider its labels match but
    /// its grant does not allow is withheld, settings and all, and logged.
    pub fn for_worker(
        &self,
        worker_name: &str,
        labels: &HashMap<String, String>,
        grant: &HostGrant,
    ) -> HostProviders {
        HostProviders {
            providers: self
                .providers
                .iter()
                .filter(|p| p.hosted_by(labels))
                .filter(|p| {
                    let allowed = grant.allows(&p.name);
                    if !allowed {
                        tracing::warn!(worker = %worker_name, provider = %p.name, "hosted provider withheld: the worker's token is not granted it (worker_grants.<token>.host)");
                    }
                    allowed
                })
                .map(|p| HostedProvider {
                    name: p.name.clone(),
                    kind: p.kind.clone(),
                    config_json: p.config_json.clone(),
                })
                .collect(),
        }
    }

    /// A worker's announcement. One for a provider the worker was not
    /// given (`hosting`: what [`Hosted::for_worker`] sent it) is dropped;
    /// of the rest, each tool is checked ([`checked_tool`]) and one that
    /// fails is refused; both are logged.
    pub async fn announce(
        &mut self,
        registry: &RegistryHandle,
        worker: (&str, &str, &BTreeSet<String>),
        calls: &Arc<CallTable>,
        announced: HostedTools,
    ) {
        let (worker_id, worker_name, hosting) = worker;
        let Some(provider) = self.provider(&announced.provider).cloned() else {
            tracing::warn!(worker = %worker_name, provider = %truncated(&announced.provider), "announcement for a provider this coordinator does not host dropped");
            return;
        };
        if !hosting.contains(&provider.name) {
            tracing::warn!(worker = %worker_name, provider = %provider.name, "announcement for a provider this worker was not given dropped");
            return;
        }
        let mut tools = BTreeMap::new();
        let announced_count = announced.tools.len();
        for tool in announced.tools.into_iter().take(MAX_TOOLS) {
            match checked_tool(&provider, &tool.name, &tool.schema_json) {
                Ok(schema) => {
                    tools.insert(tool.name, schema);
                }
                Err(why) => {
                    tracing::warn!(worker = %worker_name, provider = %provider.name, tool = %truncated(&tool.name), "hosted tool refused: {why}");
                }
            }
        }
        if announced_count > MAX_TOOLS {
            tracing::warn!(worker = %worker_name, provider = %provider.name, announced = announced_count, "hosted tools beyond the first {MAX_TOOLS} refused");
        }
        let offers = self.offers.entry(provider.name.clone()).or_default();
        if tools.is_empty() && announced.unavailable.is_empty() {
            offers.remove(worker_id);
        } else {
            offers.insert(
                worker_id.to_owned(),
                Offer {
                    worker_name: worker_name.to_owned(),
                    calls: calls.clone(),
                    tools,
                    unavailable: truncated(&announced.unavailable),
                },
            );
        }
        self.sync(registry, &provider).await;
    }

    /// A worker left: its offers go, and the tools only it served with them.
    pub async fn worker_left(&mut self, registry: &RegistryHandle, worker_id: &str) {
        let affected: Vec<HostedProviderConfig> = self
            .providers
            .iter()
            .filter(|p| {
                self.offers
                    .get_mut(&p.name)
                    .is_some_and(|offers| offers.remove(worker_id).is_some())
            })
            .cloned()
            .collect();
        for provider in affected {
            self.sync(registry, &provider).await;
        }
    }

    /// Makes the routing table and the registry match the offers of
    /// `provider`: a tool some live host offers is registered and shown; one
    /// only reconnecting hosts list is registered hidden; the rest go.
    async fn sync(&mut self, registry: &RegistryHandle, provider: &HostedProviderConfig) {
        let empty = BTreeMap::new();
        let offers = self.offers.get(&provider.name).unwrap_or(&empty);
        let hosts: Vec<Host> = offers
            .iter()
            .filter(|(_, o)| o.unavailable.is_empty())
            .map(|(worker_id, o)| Host {
                worker_id: worker_id.clone(),
                worker_name: o.worker_name.clone(),
                calls: o.calls.clone(),
                tools: o.tools.keys().cloned().collect(),
            })
            .collect();
        self.table.set(&provider.name, hosts);
        // name -> (schema, availability); live offers first, so that a tool
        // one host serves is shown even while another host reconnects.
        let mut wanted: BTreeMap<String, (Value, Availability)> = BTreeMap::new();
        for offer in offers.values().filter(|o| o.unavailable.is_empty()) {
            for (name, schema) in &offer.tools {
                wanted
                    .entry(name.clone())
                    .or_insert_with(|| (schema.clone(), Availability::Always));
            }
        }
        for offer in offers.values().filter(|o| !o.unavailable.is_empty()) {
            for (name, schema) in &offer.tools {
                wanted.entry(name.clone()).or_insert_with(|| {
                    (
                        schema.clone(),
                        Availability::Hidden(offer.unavailable.clone()),
                    )
                });
            }
        }
        let registered = self.registered.entry(provider.name.clone()).or_default();
        for stale in registered
            .iter()
            .filter(|n| !wanted.contains_key(*n))
            .cloned()
            .collect::<Vec<_>>()
        {
            let _ = registry.deregister(&stale, Caller::Core).await;
            registered.remove(&stale);
            tracing::info!(provider = %provider.name, tool = %stale, "hosted tool removed");
        }
        let parallel = if provider.parallel_safe {
            ParallelClass::Safe
        } else {
            ParallelClass::Sequential
        };
        for (name, (schema, availability)) in wanted {
            let entry = ToolEntry::new(
                name.clone(),
                provider.toolset.clone(),
                schema,
                Handler::Hosted(provider.name.clone()),
            )
            .with_owner(Owner::Mcp(provider.name.clone()))
            .with_parallel(parallel)
            .with_availability(availability);
            match registry.register(entry, false).await {
                Ok(()) => {
                    registered.insert(name);
                }
                Err(err) => {
                    tracing::warn!(provider = %provider.name, tool = %name, "hosted tool not registered: {err}")
                }
            }
        }
        if !registered.is_empty() {
            let _ = registry
                .register_alias(&provider.name, &provider.toolset)
                .await;
        }
    }
}

#[cfg(test)]
#[path = "hosted_tests.rs"]
mod tests;
