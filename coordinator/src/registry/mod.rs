//! The tool registry: which tools exist, how each is served, and which ones a
//! model may see. The [`Registry`](actor::Registry) actor owns every write and
//! publishes an immutable [`ToolRegistry`] snapshot that the call pipeline reads
//! without locking.

pub mod actor;
pub mod browser_navigate;
pub mod builtin;
pub mod entry;
pub mod execute_code;
pub mod toolsets;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{Map, Value};

pub use entry::{
    Availability, DefinitionContext, Handler, LocalTool, Owner, ParallelClass, SchemaOverrideFn,
    ToolEntry,
};
use toolsets::ToolsetResolver;

use crate::call::ToolFilter;

/// Why a registry write was refused or a lookup failed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RegistryError {
    #[error(
        "tool '{name}' (toolset '{toolset}') would shadow the existing tool from toolset '{existing}'; register with override to replace it"
    )]
    WouldShadow {
        name: String,
        toolset: String,
        existing: String,
    },
    #[error(
        "plugin '{plugin}' cannot override tool '{name}' without operator opt-in (plugins.entries.{plugin}.allow_tool_override: true)"
    )]
    OverrideNotAllowed { plugin: String, name: String },
    #[error(
        "plugin '{plugin}' cannot deregister tool '{name}' (toolset '{toolset}') it does not own"
    )]
    DeregisterNotAllowed {
        plugin: String,
        name: String,
        toolset: String,
    },
    #[error("Unknown toolset: {name}. Known toolsets: {known}")]
    UnknownToolset { name: String, known: String },
    #[error("invalid schema for tool '{name}': {reason}")]
    InvalidSchema { name: String, reason: String },
    #[error("the registry actor is gone")]
    Unavailable,
}

/// Who is asking to change the registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The coordinator itself (built-ins, MCP hub).
    Core,
    Plugin(String),
}

/// Copy-on-write registry state. Cloning is cheap (a few `Arc` bumps), which is
/// how the actor publishes snapshots.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: Arc<BTreeMap<String, Arc<ToolEntry>>>,
    /// toolset -> tool names registered under it
    by_toolset: Arc<HashMap<String, BTreeSet<String>>>,
    aliases: Arc<HashMap<String, String>>,
    /// plugin id -> may override/deregister tools it does not own
    plugin_override_policy: Arc<HashMap<String, bool>>,
    /// Backends offered by at least one attached worker.
    fleet_backends: Arc<BTreeSet<String>>,
    /// Toolsets served by at least one attached worker (`Hello.toolsets`).
    fleet_toolsets: Arc<BTreeSet<String>>,
    /// Backend new environments are created on (`terminal.backend`).
    terminal_backend: Arc<str>,
    /// Backends a model may pick per `terminal` call (`placement.backend_choice`).
    backend_choice: Arc<BTreeSet<String>>,
    generation: u64,
}

impl ToolRegistry {
    pub fn new(terminal_backend: &str) -> Self {
        ToolRegistry {
            terminal_backend: Arc::from(terminal_backend),
            ..ToolRegistry::default()
        }
    }

    /// Bumped on every change; callers key caches on it.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn terminal_backend(&self) -> &str {
        &self.terminal_backend
    }

    pub fn fleet_backends(&self) -> &BTreeSet<String> {
        &self.fleet_backends
    }

    /// Lets models pick among these backends per `terminal` call.
    pub fn set_backend_choice(&mut self, backends: impl IntoIterator<Item = String>) {
        self.backend_choice = Arc::new(backends.into_iter().collect());
        self.generation += 1;
    }

    /// The backends `placement.backend_choice` allows besides the configured one.
    pub fn backend_choice(&self) -> &BTreeSet<String> {
        &self.backend_choice
    }

    /// The backends a model can pick right now (allowed, or the configured
    /// one, and attached; none when no choice is allowed); the
    /// `backend` argument is in `terminal`'s schema only when there are two
    /// or more.
    pub fn choosable_backends(&self) -> Vec<String> {
        if self.backend_choice.is_empty() {
            return Vec::new();
        }
        self.fleet_backends
            .iter()
            .filter(|b| self.backend_choice.contains(*b) || **b == *self.terminal_backend)
            .cloned()
            .collect()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<ToolEntry>> {
        self.tools.get(name)
    }

    /// Registers a tool with hermes' collision rules: a clash with a tool of a
    /// different toolset is refused unless both are MCP toolsets (a server
    /// refresh) or `override_existing` is set (plugins also need the operator's
    /// opt-in). A clash within the same toolset replaces the old entry.
    pub fn register(
        &mut self,
        entry: ToolEntry,
        override_existing: bool,
    ) -> Result<(), RegistryError> {
        if let Some(existing) = self.tools.get(&entry.name)
            && existing.toolset != entry.toolset
        {
            let both_mcp =
                existing.toolset.starts_with("mcp-") && entry.toolset.starts_with("mcp-");
            if !both_mcp {
                if !override_existing {
                    return Err(RegistryError::WouldShadow {
                        name: entry.name.clone(),
                        toolset: entry.toolset.clone(),
                        existing: existing.toolset.clone(),
                    });
                }
                if let Owner::Plugin(plugin) = &entry.owner
                    && !self
                        .plugin_override_policy
                        .get(plugin)
                        .copied()
                        .unwrap_or(false)
                {
                    return Err(RegistryError::OverrideNotAllowed {
                        plugin: plugin.clone(),
                        name: entry.name.clone(),
                    });
                }
                tracing::info!(tool = %entry.name, toolset = %entry.toolset, replaced = %existing.toolset, "tool overridden");
            }
        }
        let name = entry.name.clone();
        let toolset = entry.toolset.clone();
        if let Some(old) = Arc::make_mut(&mut self.tools).insert(name.clone(), Arc::new(entry)) {
            self.forget_from_toolset(&old.toolset, &name);
        }
        Arc::make_mut(&mut self.by_toolset)
            .entry(toolset)
            .or_default()
            .insert(name);
        self.generation += 1;
        Ok(())
    }

    /// Removes a tool. Absent names are a no-op. Plugins may only remove their
    /// own tools (or any, with the operator's opt-in); MCP toolsets are exempt.
    pub fn deregister(&mut self, name: &str, caller: &Caller) -> Result<bool, RegistryError> {
        let Some(entry) = self.tools.get(name) else {
            return Ok(false);
        };
        if let Caller::Plugin(plugin) = caller
            && !entry.toolset.starts_with("mcp-")
            && entry.owner != Owner::Plugin(plugin.clone())
            && !self
                .plugin_override_policy
                .get(plugin)
                .copied()
                .unwrap_or(false)
        {
            return Err(RegistryError::DeregisterNotAllowed {
                plugin: plugin.clone(),
                name: name.to_owned(),
                toolset: entry.toolset.clone(),
            });
        }
        let toolset = entry.toolset.clone();
        Arc::make_mut(&mut self.tools).remove(name);
        self.forget_from_toolset(&toolset, name);
        self.generation += 1;
        Ok(true)
    }

    fn forget_from_toolset(&mut self, toolset: &str, name: &str) {
        let by_toolset = Arc::make_mut(&mut self.by_toolset);
        if let Some(names) = by_toolset.get_mut(toolset) {
            names.remove(name);
            if names.is_empty() {
                by_toolset.remove(toolset);
                // An emptied toolset takes its aliases with it (hermes).
                Arc::make_mut(&mut self.aliases).retain(|_, target| target != toolset);
            }
        }
    }

    pub fn register_alias(&mut self, alias: &str, toolset: &str) {
        Arc::make_mut(&mut self.aliases).insert(alias.to_owned(), toolset.to_owned());
        self.generation += 1;
    }

    pub fn set_plugin_override_policy(&mut self, plugin: &str, allowed: bool) {
        Arc::make_mut(&mut self.plugin_override_policy).insert(plugin.to_owned(), allowed);
    }

    /// Replaces the set of backends the fleet offers. Returns whether it changed.
    pub fn set_fleet_backends(&mut self, backends: BTreeSet<String>) -> bool {
        if *self.fleet_backends == backends {
            return false;
        }
        self.fleet_backends = Arc::new(backends);
        self.generation += 1;
        true
    }

    /// Replaces the set of toolsets the fleet's workers serve. Returns
    /// whether it changed.
    pub fn set_fleet_toolsets(&mut self, toolsets: BTreeSet<String>) -> bool {
        if *self.fleet_toolsets == toolsets {
            return false;
        }
        self.fleet_toolsets = Arc::new(toolsets);
        self.generation += 1;
        true
    }

    pub fn fleet_toolsets(&self) -> &BTreeSet<String> {
        &self.fleet_toolsets
    }

    fn resolver(&self) -> ToolsetResolver<'_> {
        ToolsetResolver {
            registered: &self.by_toolset,
            aliases: &self.aliases,
        }
    }

    /// Every toolset name the registry knows.
    pub fn toolset_names(&self) -> BTreeSet<String> {
        self.resolver().names()
    }

    /// Is the tool usable right now (fleet, probe, required env vars)?
    pub fn is_available(&self, entry: &ToolEntry) -> bool {
        if entry
            .requires_env
            .iter()
            .any(|var| caduceus_common::process_env::var(var).is_none())
        {
            return false;
        }
        match &entry.availability {
            Availability::Always => true,
            Availability::Fleet => self.fleet_backends.contains(&*self.terminal_backend),
            Availability::WorkerToolset => {
                self.fleet_backends.contains(&*self.terminal_backend)
                    && self.fleet_toolsets.contains(&entry.toolset)
            }
            Availability::Hidden(_) => false,
        }
    }

    /// Names selected by the filter, before availability.
    pub fn selected_names(&self, filter: &ToolFilter) -> Result<BTreeSet<String>, RegistryError> {
        let resolver = self.resolver();
        let mut names = BTreeSet::new();
        if filter.enabled_toolsets.is_empty() {
            names.extend(self.tools.keys().cloned());
        } else {
            for toolset in &filter.enabled_toolsets {
                match resolver.resolve(toolset) {
                    Some(tools) => names.extend(tools),
                    None => {
                        return Err(RegistryError::UnknownToolset {
                            name: toolset.clone(),
                            known: resolver.names().into_iter().collect::<Vec<_>>().join(", "),
                        });
                    }
                }
            }
        }
        for toolset in &filter.disabled_toolsets {
            // Disabling an unknown toolset removes nothing; it is not an error.
            if let Some(tools) = resolver.resolve(toolset) {
                for tool in tools {
                    names.remove(&tool);
                }
            }
        }
        for tool in &filter.blocked_tools {
            names.remove(tool);
        }
        names.retain(|n| self.tools.contains_key(n));
        Ok(names)
    }

    /// Names a caller with this filter may call right now, sorted.
    pub fn available_names(&self, filter: &ToolFilter) -> Result<BTreeSet<String>, RegistryError> {
        let mut names = self.selected_names(filter)?;
        names.retain(|n| self.tools.get(n).is_some_and(|e| self.is_available(e)));
        Ok(names)
    }

    /// OpenAI function definitions (`{"type":"function","function":{…}}`),
    /// sorted by name, with dynamic overrides merged over the static schema
    /// — recomputed here, on every request, against the tools this request
    /// offers.
    pub fn definitions(&self, filter: &ToolFilter) -> Result<Vec<Value>, RegistryError> {
        let names = self.available_names(filter)?;
        let choosable = self.choosable_backends();
        let context = DefinitionContext { offered: &names };
        Ok(names
            .iter()
            .filter_map(|n| self.tools.get(n))
            .map(|e| {
                let mut definition = definition_in(e, &context);
                if e.name == "terminal" && choosable.len() > 1 {
                    self.add_backend_argument(&mut definition, &choosable);
                }
                definition
            })
            .collect())
    }

    /// `terminal`'s optional `backend` argument, listing the backends a
    /// model can pick now.
    fn add_backend_argument(&self, definition: &mut Value, choosable: &[String]) {
        let Some(properties) = definition
            .pointer_mut("/function/parameters/properties")
            .and_then(Value::as_object_mut)
        else {
            return;
        };
        properties.insert(
            "backend".to_owned(),
            serde_json::json!({
                "type": "string",
                "enum": choosable,
                "description": format!(
                    "Where to run this command (default: '{}'). Each backend is a separate environment of this task: files, the working directory and variables of one are not in the others.",
                    self.terminal_backend
                ),
            }),
        );
    }
}

/// The OpenAI function definition of one entry, in a request that offers
/// the tools of `context`.
pub fn definition_in(entry: &ToolEntry, context: &DefinitionContext<'_>) -> Value {
    let mut function: Map<String, Value> = entry.schema.as_object().cloned().unwrap_or_default();
    function.insert("name".to_owned(), Value::String(entry.name.clone()));
    if let Some(dynamic) = &entry.dynamic_schema {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dynamic(context))) {
            Ok(Some(overrides)) => function.extend(overrides),
            Ok(None) => {}
            Err(_) => {
                tracing::warn!(tool = %entry.name, "dynamic schema override panicked; using the static schema")
            }
        }
    }
    serde_json::json!({"type": "function", "function": Value::Object(function)})
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
