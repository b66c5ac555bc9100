//! One registered tool and the ways it can be served.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::call::{CallContext, ToolReply};

/// A tool served inside the coordinator process.
#[async_trait]
pub trait LocalTool: Send + Sync {
    /// Runs the tool: how it ended and the document the model reads;
    /// failures are replies with an `error` field, never panics.
    async fn call(&self, ctx: &CallContext, args: Map<String, Value>) -> ToolReply;
}

/// Where a call to the tool goes once it has passed the pipeline.
#[derive(Clone)]
pub enum Handler {
    /// Runs in the coordinator.
    Local(Arc<dyn LocalTool>),
    /// Belongs to the agent loop (`todo`, `clarify`, `delegate_task`, …): the
    /// loop intercepts it; a direct call is answered with hermes' error.
    AgentLoop,
    /// Runs on a worker, inside the task's environment.
    Worker,
    /// Belongs to a provider (an MCP server) hosted on workers: runs on a
    /// worker hosting the named provider, in no environment.
    Hosted(String),
}

impl fmt::Debug for Handler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Handler::Local(_) => f.write_str("Local"),
            Handler::AgentLoop => f.write_str("AgentLoop"),
            Handler::Worker => f.write_str("Worker"),
            Handler::Hosted(provider) => write!(f, "Hosted({provider})"),
        }
    }
}

/// What a definitions request knows when it asks a tool for its dynamic
/// schema: the tools it offers, so that a description never names a tool
/// the model does not have (hermes: `execute_code`, `browser_navigate`).
#[derive(Debug, Clone, Copy)]
pub struct DefinitionContext<'a> {
    /// Every tool offered in this request (after toolsets and availability).
    pub offered: &'a std::collections::BTreeSet<String>,
}

impl DefinitionContext<'_> {
    pub fn offers(&self, tool: &str) -> bool {
        self.offered.contains(tool)
    }
}

/// Returns fields merged over the static schema at definition time (e.g. a
/// description that names live limits or the other tools offered),
/// recomputed on every definitions request. `None` keeps the static schema.
pub type SchemaOverrideFn =
    Arc<dyn Fn(&DefinitionContext<'_>) -> Option<Map<String, Value>> + Send + Sync>;

/// When a tool is offered to a model.
#[derive(Clone)]
pub enum Availability {
    Always,
    /// While some attached worker offers the backend environments are created
    /// on (`terminal.backend`). Evaluated live against the fleet, never cached.
    Fleet,
    /// Like `Fleet`, and some attached worker serves the tool's toolset
    /// (`Hello.toolsets`: "browser" where Chromium is installed).
    WorkerToolset,
    /// Not offered right now, for the reason given (an MCP server that is
    /// reconnecting): the tool stays registered, definitions leave it out,
    /// and a call is answered with the reason.
    Hidden(String),
}

impl fmt::Debug for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Availability::Always => f.write_str("Always"),
            Availability::Fleet => f.write_str("Fleet"),
            Availability::WorkerToolset => f.write_str("WorkerToolset"),
            Availability::Hidden(reason) => write!(f, "Hidden({reason})"),
        }
    }
}

/// How the batch planner may schedule the tool next to others in one turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParallelClass {
    /// Always alone, a barrier (hermes: `clarify`).
    Never,
    /// Read-only, may run beside anything parallel-safe.
    Safe,
    /// May run in parallel with calls on non-overlapping paths (`path` arg).
    PathScoped,
    /// Runs in order with its neighbours.
    Sequential,
}

/// Who registered the tool; decides who may replace or remove it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    Builtin,
    Plugin(String),
    Mcp(String),
}

/// A registered tool. Cheap to share: the registry hands out `Arc<ToolEntry>`.
pub struct ToolEntry {
    pub name: String,
    pub toolset: String,
    /// `{"name", "description", "parameters"}` (name is filled in if absent).
    pub schema: Value,
    pub handler: Handler,
    pub availability: Availability,
    /// Environment variables the tool needs; missing ones hide the tool.
    pub requires_env: Vec<String>,
    pub description: String,
    pub emoji: String,
    /// Results longer than this are persisted and previewed. `None` = the
    /// default budget; `Some(u64::MAX)` = never (hermes pins read_file so).
    pub max_result_size_chars: Option<u64>,
    pub dynamic_schema: Option<SchemaOverrideFn>,
    pub parallel: ParallelClass,
    pub owner: Owner,
}

impl fmt::Debug for ToolEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolEntry")
            .field("name", &self.name)
            .field("toolset", &self.toolset)
            .field("handler", &self.handler)
            .field("availability", &self.availability)
            .field("parallel", &self.parallel)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

impl ToolEntry {
    /// Starts an entry for `name` in `toolset` with `schema`; the description
    /// defaults to the schema's.
    pub fn new(
        name: impl Into<String>,
        toolset: impl Into<String>,
        schema: Value,
        handler: Handler,
    ) -> Self {
        let description = schema
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        ToolEntry {
            name: name.into(),
            toolset: toolset.into(),
            schema,
            handler,
            availability: Availability::Always,
            requires_env: Vec::new(),
            description,
            emoji: String::new(),
            max_result_size_chars: None,
            dynamic_schema: None,
            parallel: ParallelClass::Sequential,
            owner: Owner::Builtin,
        }
    }

    pub fn with_availability(mut self, availability: Availability) -> Self {
        self.availability = availability;
        self
    }

    pub fn with_parallel(mut self, parallel: ParallelClass) -> Self {
        self.parallel = parallel;
        self
    }

    pub fn with_emoji(mut self, emoji: impl Into<String>) -> Self {
        self.emoji = emoji.into();
        self
    }

    pub fn with_max_result_size(mut self, chars: u64) -> Self {
        self.max_result_size_chars = Some(chars);
        self
    }

    pub fn with_requires_env(mut self, vars: &[&str]) -> Self {
        self.requires_env = vars.iter().map(|v| (*v).to_owned()).collect();
        self
    }

    pub fn with_owner(mut self, owner: Owner) -> Self {
        self.owner = owner;
        self
    }

    pub fn with_dynamic_schema(mut self, f: SchemaOverrideFn) -> Self {
        self.dynamic_schema = Some(f);
        self
    }

    /// The `parameters.properties` object of the schema, if any.
    pub fn properties(&self) -> Option<&Map<String, Value>> {
        self.schema
            .get("parameters")?
            .get("properties")?
            .as_object()
    }

    /// Names listed in `parameters.required`.
    pub fn required(&self) -> Vec<&str> {
        self.schema
            .get("parameters")
            .and_then(|p| p.get("required"))
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }
}
