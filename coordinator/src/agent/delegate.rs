//! `delegate_task`: the rules of delegation (hermes `tools/delegate_tool.py`)
//! — the `delegation:` configuration, argument checks and their error texts,
//! the child's role, tool filter and system prompt, the result entries, the
//! summary budget and the tool's live schema. Running the children is the
//! agent loop's business (`turn::AgentLoop::delegate`).
//!
//! A `delegate_task` call returns when every child has finished (the
//! children run in parallel, each a child Session actor with its own
//! environment, possibly on another worker), unless a top-level session asks
//! for `background: true`: then it returns a handle at once and the results
//! arrive later as a message (hermes 0.21 makes that the default; here it is
//! asked for, since a model that forgets the results were coming is hermes
//! #60342). `action=list|steer|stop` works on a session's background
//! children; running background calls count against
//! `max_concurrent_children` (hermes' units). Every child is watched by the
//! stall monitor (no progress for `stall_idle_seconds` between steps,
//! `stall_in_tool_seconds` inside a tool call: interrupted and reported
//! `stalled`); `stall_grace_seconds` is the one time any interrupted child
//! gets to unwind.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use caduceus_common::result::{ToolReply, python_type};

use crate::call::ToolFilter;
use crate::registry::{Handler, ParallelClass, ToolEntry};

/// Tools a child never gets (hermes `DELEGATE_BLOCKED_TOOLS`). An
/// orchestrator child keeps `delegate_task`.
pub const BLOCKED_TOOLS: &[&str] = &[
    "delegate_task",
    "clarify",
    "memory",
    "send_message",
    "execute_code",
    "cronjob",
];

pub const DEFAULT_MAX_ITERATIONS: u32 = 50;
pub const DEFAULT_MAX_CONCURRENT_CHILDREN: usize = 3;
pub const DEFAULT_MAX_SPAWN_DEPTH: u32 = 1;
pub const DEFAULT_MAX_SUMMARY_CHARS: usize = 24_000;
/// A configured child timeout is never shorter than this.
pub const MIN_CHILD_TIMEOUT_SECS: f64 = 30.0;
/// hermes' stall thresholds: no progress for this long between steps…
pub const DEFAULT_STALL_IDLE_SECS: f64 = 450.0;
/// …or inside one tool call (slow commands are legitimate).
pub const DEFAULT_STALL_IN_TOOL_SECS: f64 = 1200.0;
/// How long an interrupted child gets to unwind.
pub const DEFAULT_STALL_GRACE_SECS: f64 = 120.0;

/// The `delegation:` section. Every field is optional; unknown fields
/// (hermes' `provider`, `api_mode`, …) are accepted and ignored. Read through
/// the accessors, which apply the environment and hermes' defaults and floors
/// at call time.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct DelegationConfig {
    /// Budget of each child (default 50).
    pub max_iterations: Option<u32>,
    /// Tasks per call, all run at once (default 3, floor 1; env
    /// `DELEGATION_MAX_CONCURRENT_CHILDREN` when unset here).
    pub max_concurrent_children: Option<i64>,
    /// Depth at which delegation is refused (default 1: parent → child only).
    pub max_spawn_depth: Option<i64>,
    /// Inactivity cap per child (hermes 0.21: the longest a child may go
    /// without progress, not its total run time); 0 or unset = none; floor
    /// 30 s (env `DELEGATION_CHILD_TIMEOUT_SECONDS` when unset here).
    pub child_timeout_seconds: Option<f64>,
    /// The stall monitor's thresholds and grace (hermes: 450, 1200, 120);
    /// the grace is every interrupted child's (stalled, timed out, parent ended).
    pub stall_idle_seconds: Option<f64>,
    pub stall_in_tool_seconds: Option<f64>,
    pub stall_grace_seconds: Option<f64>,
    /// `false` forces every child to be a leaf.
    pub orchestrator_enabled: Option<bool>,
    /// Ceiling of one child's summary in the parent's context (default 24,000; 0 = none).
    pub max_summary_chars: Option<usize>,
    /// Model of the children (default: the parent's model).
    pub model: Option<String>,
    /// Endpoint and key for `model` (default: the parent's).
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    /// hermes: children's dangerous commands are approved once instead of
    /// denied (`agent/turn/children.rs`, `answer_child_approvals`).
    pub subagent_auto_approve: Option<bool>,
}

impl DelegationConfig {
    pub fn max_iterations(&self) -> u32 {
        self.max_iterations
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_MAX_ITERATIONS)
    }

    pub fn max_concurrent_children(&self) -> usize {
        let from_env = || {
            std::env::var("DELEGATION_MAX_CONCURRENT_CHILDREN")
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
        };
        match self.max_concurrent_children.or_else(from_env) {
            Some(n) => usize::try_from(n.max(1)).unwrap_or(DEFAULT_MAX_CONCURRENT_CHILDREN),
            None => DEFAULT_MAX_CONCURRENT_CHILDREN,
        }
    }

    pub fn max_spawn_depth(&self) -> u32 {
        self.max_spawn_depth
            .map(|d| u32::try_from(d.max(1)).unwrap_or(u32::MAX))
            .unwrap_or(DEFAULT_MAX_SPAWN_DEPTH)
    }

    /// The stall monitor's limits (a non-positive or unreadable value takes
    /// hermes' default).
    pub fn stall_limits(&self) -> StallLimits {
        let seconds = |value: Option<f64>, default: f64| {
            let s = value
                .filter(|s| s.is_finite() && *s > 0.0)
                .unwrap_or(default);
            Duration::try_from_secs_f64(s).unwrap_or(Duration::from_secs_f64(default))
        };
        StallLimits {
            idle: seconds(self.stall_idle_seconds, DEFAULT_STALL_IDLE_SECS),
            in_tool: seconds(self.stall_in_tool_seconds, DEFAULT_STALL_IN_TOOL_SECS),
            grace: seconds(self.stall_grace_seconds, DEFAULT_STALL_GRACE_SECS),
            cap: self.child_timeout(),
        }
    }

    /// `None`: no inactivity cap (the stall monitor still watches).
    pub fn child_timeout(&self) -> Option<Duration> {
        let from_env = || {
            std::env::var("DELEGATION_CHILD_TIMEOUT_SECONDS")
                .ok()
                .and_then(|v| v.trim().parse::<f64>().ok())
        };
        let seconds = self.child_timeout_seconds.or_else(from_env)?;
        if !seconds.is_finite() || seconds <= 0.0 {
            return None;
        }
        Duration::try_from_secs_f64(seconds.max(MIN_CHILD_TIMEOUT_SECS)).ok()
    }

    pub fn orchestrator_enabled(&self) -> bool {
        self.orchestrator_enabled.unwrap_or(true)
    }

    /// `None`: summaries are never trimmed.
    pub fn max_summary_chars(&self) -> Option<usize> {
        Some(self.max_summary_chars.unwrap_or(DEFAULT_MAX_SUMMARY_CHARS)).filter(|n| *n > 0)
    }
}

/// What the stall monitor allows a child (see [`DelegationConfig::stall_limits`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StallLimits {
    pub idle: Duration,
    pub in_tool: Duration,
    pub grace: Duration,
    /// `child_timeout_seconds`: reported as `timeout` rather than `stalled`.
    pub cap: Option<Duration>,
}

/// Where a stalled child was when it stopped moving.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StallPhase {
    Idle,
    InTool,
}

/// Whether a child may delegate further.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Leaf,
    Orchestrator,
}

impl Role {
    /// hermes `_normalize_role`: anything but "orchestrator" is a leaf.
    pub fn parse(value: Option<&Value>) -> Role {
        match value
            .and_then(Value::as_str)
            .map(|s| s.trim().to_lowercase())
        {
            Some(role) if role == "orchestrator" => Role::Orchestrator,
            _ => Role::Leaf,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Leaf => "leaf",
            Role::Orchestrator => "orchestrator",
        }
    }
}

/// One subtask of a call.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildTask {
    pub index: usize,
    pub goal: String,
    pub context: Option<String>,
    /// As requested; [`effective_role`] applies the depth and kill switch.
    pub role: Role,
    /// Placement labels of its environment: the request's top-level
    /// `labels` with the task's own over them (the parent's are added by
    /// the loop).
    pub labels: BTreeMap<String, String>,
    /// The JSON Schema its final answer must satisfy (checked to compile).
    pub output_schema: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DelegateRequest {
    pub tasks: Vec<ChildTask>,
    /// Run the children in the parent's environment (same task id).
    pub share_environment: bool,
}

/// hermes' refusal for a session at or past the depth limit.
pub fn depth_limit_error(depth: u32, max_spawn_depth: u32) -> ToolReply {
    ToolReply::error(format!(
        "Delegation depth limit reached (depth={depth}, max_spawn_depth={max_spawn_depth}). Raise delegation.max_spawn_depth in config.yaml if deeper nesting is required (no hard ceiling, but each level multiplies API cost)."
    ))
}

/// Checks the arguments; the error is the result the model reads.
pub fn parse_request(
    args: &Map<String, Value>,
    max_children: usize,
) -> Result<DelegateRequest, ToolReply> {
    let top_role = Role::parse(args.get("role"));
    let top_labels = parse_labels(args.get("labels"), "labels")?;
    let top_schema = parse_output_schema(args.get("output_schema"), "output_schema")?;
    let share_environment = args
        .get("share_environment")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let tasks = match args.get("tasks") {
        Some(Value::String(text)) => {
            let raw = text.trim();
            if raw.is_empty() {
                return Err(ToolReply::error(
                    "Provide either 'goal' (single task) or 'tasks' (batch).",
                ));
            }
            match serde_json::from_str::<Value>(raw) {
                Ok(Value::Array(list)) => Some(list),
                Ok(other) => {
                    return Err(ToolReply::error(format!(
                        "tasks must be a JSON array of task objects; parsed {} instead.",
                        python_type(&other)
                    )));
                }
                Err(err) => {
                    return Err(ToolReply::error(format!(
                        "tasks must be a JSON array of task objects; received a string that could not be parsed as JSON ({err})."
                    )));
                }
            }
        }
        Some(Value::Array(list)) => Some(list.clone()),
        _ => None,
    };
    let raw_tasks: Vec<Value> = match tasks {
        Some(list) if !list.is_empty() => {
            if list.len() > max_children {
                return Err(ToolReply::error(format!(
                    "Too many tasks: {} provided, but max_concurrent_children is {max_children}. Either reduce the task count, split into multiple delegate_task calls, or increase delegation.max_concurrent_children in config.yaml.",
                    list.len()
                )));
            }
            list
        }
        _ => match args
            .get("goal")
            .and_then(Value::as_str)
            .filter(|g| !g.trim().is_empty())
        {
            Some(goal) => {
                let mut task = Map::new();
                task.insert("goal".to_owned(), Value::String(goal.to_owned()));
                if let Some(context) = args.get("context") {
                    task.insert("context".to_owned(), context.clone());
                }
                task.insert(
                    "role".to_owned(),
                    Value::String(top_role.as_str().to_owned()),
                );
                vec![Value::Object(task)]
            }
            None => {
                return Err(ToolReply::error(
                    "Provide either 'goal' (single task) or 'tasks' (batch).",
                ));
            }
        },
    };
    let mut tasks = Vec::with_capacity(raw_tasks.len());
    for (index, task) in raw_tasks.iter().enumerate() {
        let Some(object) = task.as_object() else {
            return Err(ToolReply::error(format!(
                "Task {index} must be an object, got {}.",
                python_type(task)
            )));
        };
        let goal = object
            .get("goal")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or_default();
        if goal.is_empty() {
            return Err(ToolReply::error(format!(
                "Task {index} is missing a 'goal'."
            )));
        }
        let context = object
            .get("context")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .filter(|c| !c.trim().is_empty());
        let role = match object.get("role") {
            Some(Value::String(r)) if !r.is_empty() => Role::parse(object.get("role")),
            _ => top_role,
        };
        let mut labels = top_labels.clone();
        labels.extend(parse_labels(
            object.get("labels"),
            &format!("Task {index}'s labels"),
        )?);
        let output_schema = match object.get("output_schema") {
            None | Some(Value::Null) => top_schema.clone(),
            given => parse_output_schema(given, &format!("Task {index}'s output_schema"))?,
        };
        tasks.push(ChildTask {
            index,
            goal: goal.to_owned(),
            context,
            role,
            labels,
            output_schema,
        });
    }
    Ok(DelegateRequest {
        tasks,
        share_environment,
    })
}

/// An `output_schema` that compiles (a model may send it as JSON text).
fn parse_output_schema(value: Option<&Value>, what: &str) -> Result<Option<Value>, ToolReply> {
    let schema = match value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(text)) if text.trim().is_empty() => return Ok(None),
        Some(Value::String(text)) => serde_json::from_str(text).map_err(|err| {
            ToolReply::error(format!(
                "{what} must be a JSON Schema object; the text given is not JSON ({err})."
            ))
        })?,
        Some(other) => other.clone(),
    };
    match crate::agent::output_schema::OutputSchema::compile(&schema) {
        Ok(_) => Ok(Some(schema)),
        Err(reason) => Err(ToolReply::error(format!(
            "{what} is not a usable JSON Schema: {reason}"
        ))),
    }
}

/// Placement labels as a model writes them: an object of strings (numbers
/// and booleans are taken as their text) or `"k=v,k2=v2"`.
fn parse_labels(value: Option<&Value>, what: &str) -> Result<BTreeMap<String, String>, ToolReply> {
    let invalid = || {
        ToolReply::error(format!(
            "{what} must be an object of strings such as {{\"gpu\": \"true\"}}."
        ))
    };
    let mut labels = BTreeMap::new();
    match value {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (key, value) in map {
                let text = match value {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => return Err(invalid()),
                };
                if key.trim().is_empty() {
                    return Err(invalid());
                }
                labels.insert(key.trim().to_owned(), text.trim().to_owned());
            }
        }
        Some(Value::String(text)) => {
            for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
                let (key, value) = pair.split_once('=').ok_or_else(invalid)?;
                if key.trim().is_empty() {
                    return Err(invalid());
                }
                labels.insert(key.trim().to_owned(), value.trim().to_owned());
            }
        }
        Some(_) => return Err(invalid()),
    }
    Ok(labels)
}

/// The role a child really gets: orchestrator only while the kill switch and
/// the depth allow it.
pub fn effective_role(requested: Role, child_depth: u32, config: &DelegationConfig) -> Role {
    if requested == Role::Orchestrator
        && config.orchestrator_enabled()
        && child_depth < config.max_spawn_depth()
    {
        Role::Orchestrator
    } else {
        Role::Leaf
    }
}

/// The child's tools: the parent's toolsets minus [`BLOCKED_TOOLS`]; an
/// orchestrator keeps delegation.
pub fn child_filter(parent: &ToolFilter, role: Role) -> ToolFilter {
    let mut filter = parent.clone();
    for tool in BLOCKED_TOOLS {
        if role == Role::Orchestrator && *tool == "delegate_task" {
            continue;
        }
        if !filter.blocked_tools.iter().any(|t| t == tool) {
            filter.blocked_tools.push((*tool).to_owned());
        }
    }
    if role == Role::Orchestrator {
        filter.blocked_tools.retain(|t| t != "delegate_task");
        filter.disabled_toolsets.retain(|t| t != "delegation");
        if !filter.enabled_toolsets.is_empty()
            && !filter.enabled_toolsets.iter().any(|t| t == "delegation")
        {
            filter.enabled_toolsets.push("delegation".to_owned());
        }
    }
    filter
}

/// hermes' child system prompt.
pub fn child_system_prompt(
    task: &ChildTask,
    role: Role,
    workspace: Option<&str>,
    max_spawn_depth: u32,
    child_depth: u32,
) -> String {
    let mut parts = vec![
        "You are a focused subagent working on a specific delegated task.".to_owned(),
        String::new(),
        format!("YOUR TASK:\n{}", task.goal),
    ];
    if let Some(context) = &task.context {
        parts.push(format!("\nCONTEXT:\n{context}"));
    }
    if let Some(schema) = &task.output_schema {
        parts.push(crate::agent::output_schema::contract(schema));
    }
    if let Some(workspace) = workspace.filter(|w| !w.trim().is_empty()) {
        parts.push(format!(
            "\nWORKSPACE PATH:\n{workspace}\nUse this exact path for local repository/workdir operations unless the task explicitly says otherwise."
        ));
    }
    parts.push(
        "\nComplete this task using the tools available to you. When finished, provide a clear, concise summary of:\n- What you did\n- What you found or accomplished\n- Any files you created or modified\n- Any issues encountered\n\nImportant workspace rule: Never assume a repository lives at /workspace/... or any other container-style path unless the task/context explicitly gives that path. If no exact local path is provided, discover it first before issuing git/workdir-specific commands.\n\nKeep your final summary tight: lead with outcomes, prefer bullet points over paragraphs, and don't replay your whole process. Your response is returned to the parent agent as a summary, and overlong summaries crowd out the parent's context window."
            .to_owned(),
    );
    if role == Role::Orchestrator {
        let child_note = if child_depth + 1 >= max_spawn_depth {
            "Your own children MUST be leaves (cannot delegate further) because they would be at the depth floor — you cannot pass role='orchestrator' to your own delegate_task calls."
        } else {
            "Your own children can themselves be orchestrators or leaves, depending on the `role` you pass to delegate_task. Default is 'leaf'; pass role='orchestrator' explicitly when a child needs to further decompose its work."
        };
        parts.push(format!(
            "\n## Subagent Spawning (Orchestrator Role)\nYou have access to the `delegate_task` tool and CAN spawn your own subagents to parallelize independent work.\n\nWHEN to delegate:\n- The goal decomposes into 2+ independent subtasks that can run in parallel (e.g. research A and B simultaneously).\n- A subtask is reasoning-heavy and would flood your context with intermediate data.\n\nWHEN NOT to delegate:\n- Single-step mechanical work — do it directly.\n- Trivial tasks you can execute in one or two tool calls.\n- Re-delegating your entire assigned goal to one worker (that's just pass-through with no value added).\n\nCoordinate your workers' results and synthesize them before reporting back to your parent. You are responsible for the final summary, not your workers.\n\nNOTE: You are at depth {child_depth}. The delegation tree is capped at max_spawn_depth={max_spawn_depth}. {child_note}"
        ));
    }
    parts.join("\n")
}

/// How a child ended, as its result entry reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildStatus {
    Completed,
    Failed,
    Interrupted,
    Error,
    Timeout,
    /// No progress past the stall threshold: interrupted by the monitor.
    Stalled,
}

/// One tool call of a child, for the parent's overview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TraceEntry {
    pub tool: String,
    pub args_bytes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result_bytes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
}

/// One entry of `results`, hermes' fields first, then caduceus' own
/// (`session_id`, `task_id`, `workers`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChildEntry {
    pub task_index: usize,
    pub status: ChildStatus,
    pub summary: Option<String>,
    pub api_calls: u32,
    pub duration_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub exit_reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Tokens>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_trace: Vec<TraceEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_truncated: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_full_path: Option<String>,
    /// A steer the child accepted but ended before reading (hermes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed_steer: Option<String>,
    /// The stall monitor's findings (hermes' `stalled` metadata).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stalled_after_quiet_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall_threshold_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall_phase: Option<StallPhase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stall_grace_seconds: Option<f64>,
    /// With an `output_schema`: whether the final answer validated, the
    /// errors when it did not, and hermes' note that the text is unvalidated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_valid: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_errors: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_note: Option<String>,
    /// Background processes the child left running, killed when it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orphaned_processes: Option<Vec<String>>,
    pub session_id: String,
    pub task_id: String,
    /// Workers that ran the child's tool calls.
    pub workers: Vec<String>,
}

/// The whole result of a `delegate_task` call (`note`: why it waited
/// although `background` was asked for).
pub fn results_json(
    entries: &[ChildEntry],
    total_duration: Duration,
    note: Option<&str>,
) -> ToolReply {
    #[derive(Serialize)]
    struct Results<'a> {
        results: &'a [ChildEntry],
        total_duration_seconds: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        note: Option<&'a str>,
    }
    ToolReply::json(&Results {
        results: entries,
        total_duration_seconds: round2(total_duration.as_secs_f64()),
        note,
    })
}

/// Why a `background: true` call from a child waited anyway.
pub const BACKGROUND_ONLY_TOP_LEVEL: &str = "background runs only for top-level sessions; this call waited for its subagents, whose results are above.";

/// What a background call's handle tells the model.
pub const BACKGROUND_NOTE: &str = "The subagents run in the background. Their results arrive as a new message when all of them have finished. Carry on with work that does not depend on them, then end your turn instead of polling; delegate_task with action='list', 'steer' or 'stop' shows, redirects or stops them.";

/// The handle a background call returns (hermes' dispatch response).
pub fn dispatched_json(
    delegation_id: &str,
    goals: &[String],
    subagent_ids: &[String],
) -> ToolReply {
    ToolReply::json(&json!({
        "status": "dispatched",
        "mode": "background",
        "count": goals.len(),
        "delegation_id": delegation_id,
        "goals": goals,
        "subagent_ids": subagent_ids,
        "note": BACKGROUND_NOTE,
    }))
}

/// The message that delivers a finished background delegation to its
/// parent: our header, then the results as untrusted content (what the
/// subagents wrote is their text, not the user's). `parent_end`: the parent
/// had already ended this way, so this only records them.
pub fn background_message(
    delegation_id: &str,
    entries: &[ChildEntry],
    total_duration: Duration,
    parent_end: Option<&str>,
) -> String {
    let results = json!({
        "delegation_id": delegation_id,
        "results": entries,
        "total_duration_seconds": round2(total_duration.as_secs_f64()),
    });
    let header = match parent_end {
        None => format!(
            "[Background delegation {delegation_id} finished: {} subagent(s). Their results:]",
            entries.len()
        ),
        Some(status) => format!(
            "[Background delegation {delegation_id} was stopped because this session ended ({status}): {} subagent(s). Their results:]",
            entries.len()
        ),
    };
    format!(
        "{header}\n{}",
        crate::agent::messages::untrusted_block("delegate_task", &results.to_string())
    )
}

/// The JSON inside a [`background_message`] (tests, readers of transcripts).
pub fn background_results(message: &str) -> Option<Value> {
    let body = message.split_once("\n\n")?.1;
    let json = body.rsplit_once("\n</untrusted_tool_result>")?.0;
    serde_json::from_str(json).ok()
}

/// What is recorded when background children did not unwind within the
/// grace after their parent ended.
pub fn abandoned_message(
    delegations: &std::collections::BTreeSet<&str>,
    subagent_ids: &[&str],
    grace: Duration,
    parent_end: &str,
) -> String {
    let names: Vec<&str> = delegations.iter().copied().collect();
    format!(
        "[Background delegation(s) {} abandoned: this session ended ({parent_end}) and subagent(s) {} did not stop within {}s; their results are lost.]",
        names.join(", "),
        subagent_ids.join(", "),
        python_float(grace.as_secs_f64()),
    )
}

/// hermes' refusal of a background dispatch when `cap` background units
/// already run (`tools/async_delegation.py`; the single-task and batch texts).
pub fn background_capacity_error(cap: usize, tasks: usize) -> ToolReply {
    if tasks > 1 {
        ToolReply::error(format!(
            "Async delegation capacity reached ({cap} running). Wait for one to finish (its result will re-enter the chat), or raise delegation.max_concurrent_children in config.yaml to allow more concurrent background units."
        ))
    } else {
        ToolReply::error(format!(
            "Async delegation capacity reached ({cap} running). Wait for one to finish (its result will re-enter the chat), or run this task synchronously (background=false). Raise delegation.max_concurrent_children in config.yaml to allow more concurrent background subagents."
        ))
    }
}

/// hermes' note on a summary whose child ended before reading a steer.
pub fn missed_steer_note(steer: &str) -> String {
    format!("[steer did not land — the subagent finished before it could be delivered: {steer}]")
}

/// The error of a child the stall monitor interrupted.
pub fn stalled_error(
    api_calls: u32,
    threshold: Duration,
    phase: StallPhase,
    unwound: bool,
) -> String {
    let seconds = python_float(threshold.as_secs_f64());
    let place = match phase {
        StallPhase::Idle => "between steps",
        StallPhase::InTool => "inside a tool call",
    };
    let end = if unwound {
        "it was interrupted"
    } else {
        "it was interrupted and did not stop within the grace period, so it was abandoned"
    };
    format!(
        "Subagent stopped making progress after {api_calls} API call(s) — no activity for {seconds}s {place} (stall threshold); {end}."
    )
}

/// Seconds rounded to hundredths, as hermes reports durations.
pub fn round2(seconds: f64) -> f64 {
    (seconds * 100.0).round() / 100.0
}

/// hermes' text for a child that hit its wall-clock limit.
pub fn timeout_error(timeout: Duration, api_calls: u32) -> String {
    let seconds = python_float(timeout.as_secs_f64());
    if api_calls == 0 {
        format!(
            "Subagent timed out after {seconds}s without making any API call — the child never reached its first LLM request (prompt construction, credential resolution, or transport may be stuck)."
        )
    } else {
        format!(
            "Subagent timed out after {seconds}s with {api_calls} API call(s) completed — likely stuck on a slow API call or unresponsive network request."
        )
    }
}

/// Trims a summary longer than `cap` to a head (~75 %) and tail (~25 %)
/// snapped to line boundaries, with hermes' footer pointing at the full text
/// (`spill_path`, saved in the parent's sandbox).
pub fn trim_summary(summary: &str, cap: usize, spill_path: Option<&str>) -> String {
    let chars: Vec<char> = summary.chars().collect();
    let original_len = chars.len();
    let head_budget = cap * 3 / 4;
    let tail_budget = cap - head_budget;
    let mut head: String = chars[..head_budget.min(original_len)].iter().collect();
    let mut tail: String = chars[original_len.saturating_sub(tail_budget)..]
        .iter()
        .collect();
    if let Some(nl) = head.rfind('\n')
        && head[..nl].chars().count() as f64 > head_budget as f64 * 0.5
    {
        head.truncate(nl);
    }
    if let Some(nl) = tail.find('\n')
        && (tail[..nl].chars().count() as f64) < tail_budget as f64 * 0.5
    {
        tail = tail[nl + 1..].to_owned();
    }
    let rule = "─".repeat(8);
    let mut footer = vec![
        String::new(),
        format!("{rule} [SUMMARY TRUNCATED] {rule}"),
        format!(
            "Showing {} chars (head) + {} chars (tail) of {} total — trimmed to protect the parent's context window.",
            group(head.chars().count()),
            group(tail.chars().count()),
            group(original_len)
        ),
    ];
    match spill_path {
        Some(path) => {
            let middle_start_line = head.matches('\n').count() + 2;
            footer.push(format!("Full subagent output saved to: {path}"));
            footer.push(format!(
                "To read the omitted middle: read_file path=\"{path}\" offset={middle_start_line} limit=200  (the file is the complete summary; raise/lower offset to page through it)."
            ));
        }
        None => footer.push("Full output could not be stored to disk; the head+tail above is all that was preserved.".to_owned()),
    }
    footer.push("─".repeat(37));
    format!(
        "{head}\n\n[... middle omitted — see footer ...]\n\n{tail}{}",
        footer.join("\n")
    )
}

fn group(n: usize) -> String {
    caduceus_common::text::group_thousands(n as u64)
}

fn python_float(value: f64) -> String {
    if value.fract() == 0.0 {
        format!("{value:.1}")
    } else {
        format!("{value}")
    }
}

/// The description fields of `delegate_task`, regenerated whenever the tool
/// list is built, so the model sees the limits in force.
pub fn schema_overrides(
    config: &DelegationConfig,
    static_parameters: &Value,
) -> Map<String, Value> {
    let max_children = config.max_concurrent_children();
    let max_depth = config.max_spawn_depth();
    let orchestrator_on = config.orchestrator_enabled();
    let nesting = if max_depth >= 2 && orchestrator_on {
        format!(
            "Nested delegation IS enabled (max_spawn_depth={max_depth}): pass role='orchestrator' on a child to let it spawn its own workers, up to {} additional level(s) deep.",
            max_depth - 1
        )
    } else if max_depth >= 2 {
        format!(
            "Nested delegation is DISABLED (delegation.orchestrator_enabled=false), even though max_spawn_depth={max_depth}. role='orchestrator' is silently forced to 'leaf'."
        )
    } else {
        format!(
            "Nested delegation is OFF (max_spawn_depth={max_depth}): every child is a leaf and cannot delegate further. Raise delegation.max_spawn_depth in config.yaml to enable nesting."
        )
    };
    let limits = config.stall_limits();
    let timeout = match limits.cap {
        Some(limit) => format!(
            "A subagent that makes no progress for {}s is stopped (status timeout); each has its own iteration budget.",
            limit.as_secs()
        ),
        None => format!(
            "Subagents have no wall-clock limit; each has its own iteration budget. One that makes no progress for {}s between steps ({}s inside a tool call) is interrupted and reported as stalled.",
            limits.idle.as_secs(),
            limits.in_tool.as_secs()
        ),
    };
    let description = format!(
        "Spawn one or more subagents to work on tasks in isolated contexts. Each subagent gets its own conversation, its own environment (terminal session, working directory and files; possibly on another worker host) and a toolset. Only the final summary is returned -- intermediate tool results never enter your context window.\n\n\
TWO MODES (one of 'goal' or 'tasks' is required):\n\
1. Single task: provide 'goal' (+ optional context and role).\n\
2. Batch (parallel): provide 'tasks' array with up to {max_children} items; they run concurrently (delegation.max_concurrent_children in config.yaml). {nesting}\n\n\
By default the call BLOCKS until every subagent has finished and returns all results at once: {{\"results\": [one entry per task, in task order], \"total_duration_seconds\"}}. Each entry has status (completed|failed|interrupted|error|timeout|stalled), summary, api_calls, duration_seconds, exit_reason, tool_trace and the workers that ran it. {timeout}\n\n\
BACKGROUND (top-level agent only): background=true returns a handle at once ({{\"status\": \"dispatched\", \"delegation_id\", \"subagent_ids\"}}); the same results arrive later as a new message. Meanwhile action='list' shows your background subagents, action='steer' with subagent_id and message queues guidance they read before their next step (a subagent that already finished reports the steer as too late), action='stop' with subagent_id ends one early (its partial result still arrives).\n\n\
WHEN TO USE delegate_task:\n\
- Parallel independent workstreams (build/test/lint on different hosts, research A and B simultaneously)\n\
- Reasoning-heavy subtasks (debugging, code review, research synthesis)\n\
- Tasks that would flood your context with intermediate data\n\n\
WHEN NOT TO USE:\n\
- Single tool call -> just call the tool directly\n\
- Tasks needing user interaction -> subagents cannot use clarify\n\n\
IMPORTANT:\n\
- Subagents have NO memory of your conversation. Pass all relevant info (file paths, error messages, constraints) via the 'context' field.\n\
- Subagents do not share your files unless share_environment=true: by default each starts in a fresh environment, possibly on another host. Pass file contents in 'context' or have them write results where you can read them.\n\
- Subagent summaries are SELF-REPORTS, not verified facts. Verify side effects (files written, URLs, IDs) yourself before telling the user an operation succeeded.\n\
- Leaf subagents (role='leaf', the default) CANNOT call: delegate_task, clarify, memory, send_message, execute_code, cronjob.\n\
- Orchestrator subagents (role='orchestrator') keep delegate_task, bounded by max_spawn_depth={max_depth}.\n\
- Results are always returned as an array, one entry per task."
    );
    let mut parameters = static_parameters.clone();
    if let Some(properties) = parameters
        .get_mut("properties")
        .and_then(Value::as_object_mut)
    {
        if let Some(tasks) = properties.get_mut("tasks").and_then(Value::as_object_mut) {
            tasks.insert(
                "description".to_owned(),
                Value::String(format!(
                    "Batch mode: tasks to run in parallel (up to {max_children}, set via delegation.max_concurrent_children). Each gets its own subagent with isolated context and environment. When provided, top-level goal/context/role are ignored."
                )),
            );
        }
        if let Some(role) = properties.get_mut("role").and_then(Value::as_object_mut) {
            let note = if max_depth >= 2 && orchestrator_on {
                format!(
                    "Nesting IS enabled (max_spawn_depth={max_depth}): orchestrator children can themselves delegate up to {} more level(s) deep.",
                    max_depth - 1
                )
            } else {
                format!(
                    "Nesting is OFF (max_spawn_depth={max_depth}, orchestrator_enabled={orchestrator_on}); 'orchestrator' is silently forced to 'leaf'."
                )
            };
            role.insert(
                "description".to_owned(),
                Value::String(format!(
                    "Role of the child agent. 'leaf' (default) = focused worker, cannot delegate further. 'orchestrator' = can use delegate_task to spawn its own workers. {note}"
                )),
            );
        }
    }
    let mut overrides = Map::new();
    overrides.insert("description".to_owned(), Value::String(description));
    overrides.insert("parameters".to_owned(), parameters);
    overrides
}

/// The `delegate_task` registry entry with its live schema.
pub fn registry_entry(schema: Value, config: Arc<DelegationConfig>) -> ToolEntry {
    let parameters = schema
        .get("parameters")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    ToolEntry::new("delegate_task", "delegation", schema, Handler::AgentLoop)
        .with_parallel(ParallelClass::Sequential)
        .with_emoji("🔀")
        .with_dynamic_schema(Arc::new(move |_| {
            Some(schema_overrides(&config, &parameters))
        }))
}

#[cfg(test)]
#[path = "delegate_tests.rs"]
mod tests;
