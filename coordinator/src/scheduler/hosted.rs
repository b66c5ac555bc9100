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
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use serde_json::Value;

use caduceus_proto::{HostProviders, HostedProvider, HostedTools};

use super::link::CallTable;
use crate::registry::actor::RegistryHandle;
use crate::registry::{Availability, Caller, Handler, Owner, ParallelClass, ToolEntry};

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
pub struct HostedTable(Arc<RwLock<HashMap<String, Vec<Host>>>>);

impl HostedTable {
    /// The worker that runs `tool` of `provider`: the one holding the
    /// task's environment when it hosts the provider (the call then runs
    /// next to the task's files), else the least busy host.
    pub(crate) fn route(
        &self,
        provider: &str,
        tool: &str,
        task_worker: Option<&str>,
    ) -> Option<Route> {
        let table = self.0.read().unwrap_or_else(PoisonError::into_inner);
        let hosts: Vec<&Host> = table
            .get(provider)?
            .iter()
            .filter(|h| {
                h.tools.contains(tool)
                    && !h.calls.is_closed()
                    && !h.calls.shared().draining.load(Ordering::Relaxed)
            })
            .collect();
        let chosen = hosts
            .iter()
            .find(|h| Some(h.worker_id.as_str()) == task_worker)
            .or_else(|| {
                hosts
                    .iter()
                    .min_by_key(|h| h.calls.shared().running.load(Ordering::Relaxed))
            })?;
        Some(Route {
            worker_name: chosen.worker_name.clone(),
            calls: chosen.calls.clone(),
        })
    }

    fn set(&self, provider: &str, hosts: Vec<Host>) {
        let mut table = self.0.write().unwrap_or_else(PoisonError::into_inner);
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

    /// What a worker with `labels` is to host: sent to every worker, empty
    /// too, so that one returning to a coordinator whose configuration no
    /// longer names its providers stops them.
    pub fn for_worker(&self, labels: &HashMap<String, String>) -> HostProviders {
        HostProviders {
            providers: self
                .providers
                .iter()
                .filter(|p| p.hosted_by(labels))
                .map(|p| HostedProvider {
                    name: p.name.clone(),
                    kind: p.kind.clone(),
                    config_json: p.config_json.clone(),
                })
                .collect(),
        }
    }

    /// A worker's announcement. One for a provider it was not given, or
    /// naming tools outside the provider's namespace, is refused (logged).
    pub async fn announce(
        &mut self,
        registry: &RegistryHandle,
        worker: (&str, &str, &HashMap<String, String>),
        calls: &Arc<CallTable>,
        announced: HostedTools,
    ) {
        let (worker_id, worker_name, labels) = worker;
        let Some(provider) = self.provider(&announced.provider).cloned() else {
            tracing::warn!(worker = %worker_name, provider = %announced.provider, "announcement for a provider this coordinator does not host dropped");
            return;
        };
        if !provider.hosted_by(labels) {
            tracing::warn!(worker = %worker_name, provider = %provider.name, "announcement from a worker without the provider's labels dropped");
            return;
        }
        let mut tools = BTreeMap::new();
        for tool in announced.tools {
            let schema = serde_json::from_str::<Value>(&tool.schema_json)
                .ok()
                .filter(Value::is_object);
            match schema {
                Some(schema) if tool.name.starts_with(&provider.tool_prefix) => {
                    tools.insert(tool.name, schema);
                }
                _ => {
                    tracing::warn!(worker = %worker_name, provider = %provider.name, tool = %tool.name, "hosted tool refused: its name is outside the provider's namespace or its schema is not a JSON object");
                }
            }
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
                    unavailable: announced.unavailable,
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
