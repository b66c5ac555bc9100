//! The call pipeline: every tool call, from the CLI, a client or an agent loop,
//! goes through [`Dispatcher::call`]:
//!
//! `parse args -> repair tool name -> coerce args -> agent-loop interception ->
//! pre_tool_call hooks -> gate (command guard, approvals) -> route (coordinator
//! tool | worker tool via the scheduler | MCP) -> post_tool_call hooks -> cap the
//! result`.
//!
//! Every failure on the way is a JSON result with an `error` field; nothing
//! panics and nothing waits forever.

pub mod coerce;
pub mod hooks;
pub mod repair;
mod status;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;

use caduceus_common::result::tool_error;
use caduceus_common::text::sanitize_tool_error;

use crate::guard::{Gate, GateCall};
use crate::registry::actor::RegistryHandle;
use crate::registry::{Handler, ToolEntry, ToolFilter, ToolRegistry};
use crate::scheduler::{ScheduleError, SchedulerHandle, WorkerCall};
pub use hooks::{HookDecision, PostToolCall, PreToolCall, ToolHook};
pub use status::status_of;

/// Who is calling and on behalf of which task.
#[derive(Debug, Clone, Default)]
pub struct CallContext {
    /// The environment key: all worker tools of a task run in one environment.
    pub task_id: String,
    pub session_id: Option<String>,
    pub tool_call_id: Option<String>,
    /// The name of the client token the call came with (`shared` for the
    /// shared token), for the audit log.
    pub caller: Option<String>,
    /// True when the agent loop makes the call (it handles agent-loop tools itself).
    pub from_agent_loop: bool,
    /// The tools this caller may use (a session's toolsets, a child's blocked tools).
    pub filter: ToolFilter,
}

/// Raw arguments: text straight from a model, or an already-parsed value.
#[derive(Debug, Clone)]
pub enum RawArguments {
    Text(String),
    Value(Value),
}

#[derive(Debug, Clone)]
pub struct CallRequest {
    pub tool: String,
    pub arguments: RawArguments,
    pub ctx: CallContext,
}

/// How a call ended, for hooks, events and the agent loop's bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallStatus {
    Ok,
    Error,
    Blocked,
    PendingApproval,
    Cancelled,
    Timeout,
}

#[derive(Debug, Clone)]
pub struct CallOutcome {
    /// The tool that ran (after name repair), or the name as given.
    pub tool: String,
    /// Exactly what the model reads.
    pub result: String,
    pub status: CallStatus,
    /// Worker that ran the call, for worker tools.
    pub worker: Option<String>,
    pub duration: Duration,
    /// Arguments after coercion (for traces), when they parsed.
    pub arguments: Option<Map<String, Value>>,
}

/// Pipeline settings.
#[derive(Debug, Clone)]
pub struct DispatchConfig {
    /// Coordinator id, used as the sandbox owner label.
    pub owner: String,
    /// Result size above which results are persisted (hermes: 100,000).
    pub default_result_cap: u64,
    /// Default `terminal` timeout in seconds (hermes: 180, `TERMINAL_TIMEOUT`).
    pub terminal_timeout_secs: u64,
    /// Backend settings sent with every call (image, cwd, …), a JSON object.
    pub environment_settings: Value,
    /// Upper bound for calls without a timeout of their own.
    pub default_call_deadline: Duration,
    /// Where every call is recorded as it leaves the pipeline.
    pub audit: Option<crate::audit::AuditLog>,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            owner: String::new(),
            default_result_cap: 100_000,
            terminal_timeout_secs: 180,
            environment_settings: Value::Object(Map::new()),
            default_call_deadline: Duration::from_secs(600),
            audit: None,
        }
    }
}

/// The error text hermes returns for arguments that are not a JSON object.
pub fn invalid_arguments_result() -> String {
    json!({
        "error": "Invalid tool arguments",
        "message": "Tool arguments must be a valid JSON object; tool was not executed."
    })
    .to_string()
}

/// Parses raw arguments into an object. Empty text means no arguments.
pub fn parse_arguments(raw: &RawArguments) -> Option<Map<String, Value>> {
    match raw {
        RawArguments::Text(text) if text.trim().is_empty() => Some(Map::new()),
        RawArguments::Text(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => Some(map),
            _ => None,
        },
        RawArguments::Value(Value::Object(map)) => Some(map.clone()),
        RawArguments::Value(Value::Null) => Some(Map::new()),
        RawArguments::Value(_) => None,
    }
}

pub struct Dispatcher {
    registry: RegistryHandle,
    scheduler: SchedulerHandle,
    gate: Arc<dyn Gate>,
    hooks: Vec<Arc<dyn ToolHook>>,
    config: DispatchConfig,
    /// `config.environment_settings` as sent with every worker call.
    settings_json: String,
}

impl Dispatcher {
    pub fn new(
        registry: RegistryHandle,
        scheduler: SchedulerHandle,
        gate: Arc<dyn Gate>,
        config: DispatchConfig,
    ) -> Self {
        Dispatcher {
            registry,
            scheduler,
            gate,
            hooks: Vec::new(),
            settings_json: config.environment_settings.to_string(),
            config,
        }
    }

    pub fn add_hook(&mut self, hook: Arc<dyn ToolHook>) {
        self.hooks.push(hook);
    }

    pub fn config(&self) -> &DispatchConfig {
        &self.config
    }

    pub fn registry(&self) -> &RegistryHandle {
        &self.registry
    }

    pub fn scheduler(&self) -> &SchedulerHandle {
        &self.scheduler
    }

    /// The gate in front of every call (its approvals, for sessions).
    pub fn gate(&self) -> &Arc<dyn Gate> {
        &self.gate
    }

    /// Runs one call through the whole pipeline.
    pub async fn call(&self, request: CallRequest) -> CallOutcome {
        self.call_streaming(request, None).await
    }

    /// Like [`call`](Self::call), forwarding live output chunks of worker tools.
    pub async fn call_streaming(
        &self,
        request: CallRequest,
        output: Option<mpsc::Sender<Bytes>>,
    ) -> CallOutcome {
        let started = Instant::now();
        let snapshot = self.registry.snapshot();
        let CallRequest {
            tool,
            arguments,
            ctx,
        } = request;
        // The gate's verdict, once it has judged the call (for the audit log).
        let verdict: OnceLock<&'static str> = OnceLock::new();
        let finish = |tool: String,
                      result: String,
                      status: CallStatus,
                      worker: Option<String>,
                      args: Option<Map<String, Value>>| {
            let duration = started.elapsed();
            if let Some(audit) = &self.config.audit {
                audit.tool_call(
                    &ctx,
                    &tool,
                    args.as_ref(),
                    verdict.get().copied(),
                    worker.as_deref(),
                    status,
                    duration,
                );
            }
            CallOutcome {
                tool,
                // Every result leaves here: no secret this process knows reaches
                // the model or a client, whatever tool or worker printed it.
                result: caduceus_common::redact::mask_known_secrets(&result).into_owned(),
                status,
                worker,
                duration,
                arguments: args,
            }
        };

        // 1. Arguments must be a JSON object; nothing runs otherwise.
        let Some(mut args) = parse_arguments(&arguments) else {
            return finish(
                tool,
                invalid_arguments_result(),
                CallStatus::Error,
                None,
                None,
            );
        };

        // 2. Resolve (and repair) the name among the tools this caller may use.
        let entry = match self.resolve(&snapshot, &tool, &ctx.filter) {
            Ok(entry) => entry,
            Err(result) => return finish(tool, result, CallStatus::Error, None, Some(args)),
        };
        let name = entry.name.clone();

        // 3. Coerce to the schema.
        if let Some(parameters) = entry.schema.get("parameters") {
            coerce::coerce_arguments(&mut args, parameters);
        }

        // 4. Agent-loop tools are the loop's business.
        if matches!(entry.handler, Handler::AgentLoop) && !ctx.from_agent_loop {
            let result =
                json!({"error": format!("{name} must be handled by the agent loop")}).to_string();
            return finish(name, result, CallStatus::Error, None, Some(args));
        }

        // 5. pre_tool_call hooks: the first block wins.
        for hook in &self.hooks {
            let decision = hook
                .pre_tool_call(&PreToolCall {
                    tool: &name,
                    args: &args,
                    ctx: &ctx,
                })
                .await;
            if let HookDecision::Block { message } = decision {
                let result = tool_error(message);
                self.post_hooks(
                    &name,
                    &args,
                    &ctx,
                    &result,
                    started.elapsed(),
                    CallStatus::Blocked,
                )
                .await;
                return finish(name, result, CallStatus::Blocked, None, Some(args));
            }
        }

        // 6. The gate: command guard and approvals.
        let gate_call = GateCall {
            ctx: &ctx,
            entry: &entry,
            args: &args,
            backend: snapshot.terminal_backend(),
        };
        let admission = match self.gate.admit(&gate_call).await {
            Ok(admission) => {
                let _ = verdict.set(if admission.approval_note.is_some() {
                    "approved"
                } else {
                    "allowed"
                });
                admission
            }
            Err(refusal) => {
                let _ = verdict.set("refused");
                self.post_hooks(
                    &name,
                    &args,
                    &ctx,
                    &refusal.result,
                    started.elapsed(),
                    refusal.status,
                )
                .await;
                return finish(name, refusal.result, refusal.status, None, Some(args));
            }
        };

        // 7. Route.
        let (mut result, worker, status) = match &entry.handler {
            Handler::Local(tool_impl) => {
                let tool_impl = tool_impl.clone();
                let call_ctx = ctx.clone();
                let call_args = args.clone();
                // A panicking tool must not take the pipeline with it.
                let joined =
                    tokio::spawn(async move { tool_impl.call(&call_ctx, call_args).await }).await;
                match joined {
                    Ok(result) => {
                        let status = status_of(&result);
                        (result, None, status)
                    }
                    Err(err) => {
                        let message = if err.is_panic() {
                            "the tool panicked".to_owned()
                        } else {
                            "the tool was cancelled".to_owned()
                        };
                        let result = tool_error(sanitize_tool_error(&format!(
                            "Tool execution failed: {message}"
                        )));
                        (result, None, CallStatus::Error)
                    }
                }
            }
            Handler::Worker => {
                self.run_on_worker(&entry, &args, &ctx, snapshot.terminal_backend(), output)
                    .await
            }
            Handler::Mcp { server, .. } => (
                tool_error(format!("MCP server '{server}' is not connected")),
                None,
                CallStatus::Error,
            ),
            Handler::AgentLoop => (
                // The agent loop intercepts these before routing; reaching here
                // means a loop forwarded one by mistake.
                json!({"error": format!("{name} must be handled by the agent loop")}).to_string(),
                None,
                CallStatus::Error,
            ),
        };

        // 9. Cap coordinator-side results (worker tools are capped on the worker,
        // next to the sandbox that stores the full text). The status stays the
        // full result's: a preview is never an error of its own.
        if !matches!(entry.handler, Handler::Worker) {
            let cap = self.result_cap(&entry);
            if cap > 0 && result.chars().count() as u64 > cap {
                let id = ctx.tool_call_id.clone().unwrap_or_else(new_result_id);
                result = self.previewed(&ctx.task_id, &id, result).await;
            }
        }
        if let Some(note) = &admission.approval_note {
            result = crate::guard::texts::with_approval_note(&result, note);
        }

        // 8. post_tool_call hooks observe the final result.
        self.post_hooks(&name, &args, &ctx, &result, started.elapsed(), status)
            .await;
        finish(name, result, status, worker, Some(args))
    }

    async fn post_hooks(
        &self,
        tool: &str,
        args: &Map<String, Value>,
        ctx: &CallContext,
        result: &str,
        duration: Duration,
        status: CallStatus,
    ) {
        for hook in &self.hooks {
            hook.post_tool_call(&PostToolCall {
                tool,
                args,
                ctx,
                result,
                duration,
                status,
            })
            .await;
        }
    }

    /// Finds the entry for `tool`, repairing near-miss names; the error is the
    /// result the model reads.
    fn resolve(
        &self,
        snapshot: &ToolRegistry,
        tool: &str,
        filter: &ToolFilter,
    ) -> Result<Arc<ToolEntry>, String> {
        // The common case costs one lookup: an existing, available tool and a
        // caller without toolset restrictions.
        if filter.is_unrestricted()
            && let Some(entry) = snapshot.get(tool)
            && snapshot.is_available(entry)
        {
            return Ok(entry.clone());
        }
        let available = match snapshot.available_names(filter) {
            Ok(names) => names,
            Err(err) => return Err(tool_error(err.to_string())),
        };
        if available.contains(tool)
            && let Some(entry) = snapshot.get(tool)
        {
            return Ok(entry.clone());
        }
        if let Some(entry) = snapshot.get(tool)
            && snapshot
                .selected_names(filter)
                .is_ok_and(|s| s.contains(tool))
        {
            return Err(tool_error(unavailable_reason(snapshot, entry)));
        }
        if let Some(repaired) = repair::repair_tool_name(tool, &available)
            && let Some(entry) = snapshot.get(&repaired)
        {
            tracing::debug!(given = tool, repaired = %repaired, "repaired tool name");
            return Ok(entry.clone());
        }
        let list = available
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ");
        Err(tool_error(format!(
            "Tool '{tool}' does not exist. Available tools: {list}"
        )))
    }

    /// Characters above which a result is persisted; 0 = never (hermes pins
    /// read_file so, since it pages on its own).
    fn result_cap(&self, entry: &ToolEntry) -> u64 {
        match entry.max_result_size_chars {
            Some(u64::MAX) => 0,
            Some(cap) => cap.min(self.config.default_result_cap),
            None => self.config.default_result_cap,
        }
    }

    async fn run_on_worker(
        &self,
        entry: &ToolEntry,
        args: &Map<String, Value>,
        ctx: &CallContext,
        backend: &str,
        output: Option<mpsc::Sender<Bytes>>,
    ) -> (String, Option<String>, CallStatus) {
        let call = WorkerCall {
            task_id: ctx.task_id.clone(),
            session_id: ctx.session_id.clone().unwrap_or_default(),
            tool: entry.name.clone(),
            arguments_json: serde_json::to_string(args).unwrap_or_else(|_| "{}".to_owned()),
            backend: backend.to_owned(),
            settings_json: self.settings_json.clone(),
            owner: self.config.owner.clone(),
            result_cap_chars: self.result_cap(entry),
            output,
            deadline: self.deadline_for(&entry.name, args),
        };
        match self.scheduler.run_call(call).await {
            Ok(done) => {
                let mut result = done.result;
                if let Some(previous) = done.reset_from {
                    result = with_reset_notice(&result, &previous);
                }
                let status = status_of(&result);
                (result, Some(done.worker), status)
            }
            Err(err) => {
                let status = match err {
                    ScheduleError::Timeout { .. } => CallStatus::Timeout,
                    _ => CallStatus::Error,
                };
                (
                    tool_error(err.to_string()),
                    err.worker().map(str::to_owned),
                    status,
                )
            }
        }
    }

    /// How long the coordinator waits for a worker call before giving up on it:
    /// the tool's own timeout plus a grace period, so the worker's timeout
    /// handling (which kills the process tree) always answers first.
    fn deadline_for(&self, tool: &str, args: &Map<String, Value>) -> Duration {
        let waits_for_command = match tool {
            "terminal" => args.get("background").and_then(Value::as_bool) != Some(true),
            "process" => true,
            _ => false,
        };
        if !waits_for_command {
            return self.config.default_call_deadline;
        }
        let timeout = args
            .get("timeout")
            .and_then(Value::as_u64)
            .filter(|t| *t > 0)
            .unwrap_or(self.config.terminal_timeout_secs);
        Duration::from_secs(timeout.min(86_400)) + Duration::from_secs(30)
    }

    /// Stores `content` inside the task's sandbox (the worker's internal
    /// `__persist_result` tool) and returns its path there. Only where the
    /// task already has an environment: persisting never creates one.
    pub async fn persist_result(&self, task_id: &str, id: &str, content: &str) -> Option<String> {
        let call = WorkerCall {
            task_id: task_id.to_owned(),
            session_id: String::new(),
            tool: "__persist_result".to_owned(),
            arguments_json: json!({"id": id, "content": content}).to_string(),
            // Empty: only where the task already has an environment.
            backend: String::new(),
            settings_json: "{}".to_owned(),
            owner: self.config.owner.clone(),
            result_cap_chars: 0,
            output: None,
            deadline: Duration::from_secs(30),
        };
        let done = self.scheduler.run_call(call).await.ok()?;
        let value: Value = serde_json::from_str(&done.result).ok()?;
        value.get("path").and_then(Value::as_str).map(str::to_owned)
    }

    /// A too-large result saved inside the task's sandbox, as the model reads
    /// it: the persisted preview, or a truncated one when it could not be saved.
    pub async fn previewed(&self, task_id: &str, id: &str, result: String) -> String {
        match self.persist_result(task_id, id, &result).await {
            Some(path) => caduceus_common::persist::persisted_preview(&result, &path),
            None => caduceus_common::persist::unsaved_preview(&result),
        }
    }
}

fn unavailable_reason(snapshot: &ToolRegistry, entry: &ToolEntry) -> String {
    let missing: Vec<&str> = entry
        .requires_env
        .iter()
        .filter(|v| caduceus_common::process_env::var(v).is_none())
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return format!(
            "Tool '{}' is not available: set {} to enable it.",
            entry.name,
            missing.join(", ")
        );
    }
    match entry.availability {
        crate::registry::Availability::Fleet => format!(
            "Tool '{}' is not available: no attached worker offers the '{}' backend. Attach one with `caduceus worker --coordinator URL --backends {}`.",
            entry.name,
            snapshot.terminal_backend(),
            snapshot.terminal_backend()
        ),
        _ => format!(
            "Tool '{}' is not available right now (its availability check failed).",
            entry.name
        ),
    }
}

/// Tells the model, inside the result, that its environment was recreated.
fn with_reset_notice(result: &str, previous_worker: &str) -> String {
    let notice = format!(
        "The previous environment of this task was lost (worker '{previous_worker}' went away); this call ran in a fresh environment. Files, the working directory, variables and background processes from earlier calls are gone."
    );
    match serde_json::from_str::<Value>(result) {
        Ok(Value::Object(mut map)) => {
            map.insert("environment_reset".to_owned(), Value::String(notice));
            Value::Object(map).to_string()
        }
        _ => format!("[{notice}]\n{result}"),
    }
}

fn new_result_id() -> String {
    format!("result_{}", uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;
