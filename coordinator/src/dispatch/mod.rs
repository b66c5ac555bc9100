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

mod code;
pub mod coerce;
pub mod hooks;
pub mod repair;
pub mod vision;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tracing::Instrument;

use caduceus_common::result::{python_type, tool_error};
use caduceus_common::text::sanitize_tool_error;
use caduceus_proto::trace::TraceParent;

use crate::call::{CallContext, CallStatus, ToolFilter, ToolReply, ToolResult};
use crate::gate::{Approvals, EditApprovals, EditQuery, Gate, GateCall};
use crate::metrics::{Metrics, UNKNOWN_TOOL};
use crate::registry::actor::RegistryHandle;
use crate::registry::{Handler, ToolEntry, ToolRegistry};
use crate::scheduler::{ScheduleError, SchedulerHandle, WorkerCall};
use crate::skills::sync::{SYNC_TOOL, SkillSync};
pub use hooks::{
    HookDecision, HookSet, PostToolCall, PreToolCall, SessionEvent, SessionEventKind, ToolHook,
};

/// The worker's edit preview (`worker/src/tools/files.rs`): the diff of a
/// `write_file` or `patch` call, nothing written.
const EDIT_PREVIEW: &str = "edit_preview";

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

/// Pipeline settings.
#[derive(Debug, Clone)]
pub struct DispatchConfig {
    /// Coordinator id, used as the sandbox owner label.
    pub owner: String,
    /// Result size above which results are persisted (hermes: 100,000).
    pub default_result_cap: u64,
    /// Default `terminal` timeout in seconds (hermes: 180, `TERMINAL_TIMEOUT`),
    /// also the longest `process wait`.
    pub terminal_timeout_secs: u64,
    /// Longest foreground `terminal` timeout, seconds (hermes: 600,
    /// `TERMINAL_MAX_FOREGROUND_TIMEOUT`).
    pub max_foreground_timeout_secs: u64,
    /// Backend settings sent with every call (image, cwd, …), a JSON object.
    pub environment_settings: Value,
    /// Upper bound for calls without a timeout of their own.
    pub default_call_deadline: Duration,
    /// Where every call is recorded as it leaves the pipeline.
    pub audit: Option<crate::audit::AuditLog>,
    /// Where every call is counted as it leaves the pipeline.
    pub metrics: Metrics,
    /// `execute_code`'s timeout, seconds (`code_execution.timeout`, 300).
    pub code_timeout_secs: u64,
    /// Tool calls one script may make (`code_execution.max_tool_calls`, 50).
    pub code_max_tool_calls: u32,
    /// The auxiliary vision model of `vision_analyze` and `browser_vision`
    /// (`auxiliary.vision`); `None`: those tools are not offered.
    pub vision: Option<vision::VisionModel>,
}

impl Default for DispatchConfig {
    fn default() -> Self {
        DispatchConfig {
            owner: String::new(),
            default_result_cap: 100_000,
            terminal_timeout_secs: 180,
            max_foreground_timeout_secs: 600,
            environment_settings: Value::Object(Map::new()),
            default_call_deadline: Duration::from_secs(600),
            audit: None,
            metrics: Metrics::default(),
            code_timeout_secs: caduceus_common::execute_code::DEFAULT_TIMEOUT_SECS,
            code_max_tool_calls: caduceus_common::execute_code::DEFAULT_MAX_TOOL_CALLS,
            vision: None,
        }
    }
}

/// hermes' answer to arguments that are not a JSON object.
pub fn invalid_arguments_result() -> ToolReply {
    ToolReply::failed_json(&json!({
        "error": "Invalid tool arguments",
        "message": "Tool arguments must be a valid JSON object; tool was not executed."
    }))
}

/// hermes' answer to an agent-loop tool called from outside a loop.
fn agent_loop_only(name: &str) -> ToolReply {
    ToolReply::error(format!("{name} must be handled by the agent loop"))
}

/// Parses raw arguments into an object. Empty text means no arguments.
pub fn parse_arguments(raw: RawArguments) -> Option<Map<String, Value>> {
    match raw {
        RawArguments::Text(text) => parse_argument_text(&text),
        RawArguments::Value(Value::Object(map)) => Some(map),
        RawArguments::Value(Value::Null) => Some(Map::new()),
        RawArguments::Value(_) => None,
    }
}

/// Arguments as a model wrote them: a JSON object, or nothing at all.
pub fn parse_argument_text(text: &str) -> Option<Map<String, Value>> {
    if text.trim().is_empty() {
        return Some(Map::new());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
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
    /// The copies of skills in environments (a coordinator with a home).
    skills: Option<Arc<SkillSync>>,
    /// Tasks whose environments start in a directory of their own (a cron
    /// job's `workdir`): task id -> the settings sent with its calls.
    task_settings: std::sync::RwLock<std::collections::HashMap<String, String>>,
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
            skills: None,
            task_settings: Default::default(),
        }
    }

    /// The environments of `task_id` start in `workdir` (when it is a
    /// directory there): sent with the task's calls as the `workdir` setting.
    pub fn set_task_workdir(&self, task_id: &str, workdir: &str) {
        let mut settings = self.config.environment_settings.clone();
        if let Value::Object(map) = &mut settings {
            map.insert("workdir".to_owned(), Value::String(workdir.to_owned()));
        }
        self.task_settings
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(task_id.to_owned(), settings.to_string());
    }

    /// The settings sent with a call of `task_id`.
    fn settings_of(&self, task_id: &str) -> String {
        let custom = self
            .task_settings
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match custom.get(task_id) {
            Some(settings) => settings.clone(),
            None => self.settings_json.clone(),
        }
    }

    /// Copies the skills a task views into its environment from now on.
    pub fn set_skill_sync(&mut self, sync: Arc<SkillSync>) {
        self.skills = Some(sync);
    }

    /// The task ended: nothing of it is kept (its environments are released).
    pub fn forget_task(&self, task_id: &str) {
        if let Some(sync) = &self.skills {
            sync.forget(task_id);
        }
        self.task_settings
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(task_id);
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

    /// Every call leaves here: it is counted in the metrics, logged in its
    /// trace's span and written to the audit log.
    pub async fn call(&self, mut request: CallRequest) -> ToolResult {
        // The one place a call's trace is decided: the caller's, continued
        // with a span of ours, or a new one.
        let trace = request
            .ctx
            .trace
            .map_or_else(TraceParent::new_root, |caller| caller.child());
        request.ctx.trace = Some(trace);
        let span = tracing::info_span!(
            "tool_call",
            trace_id = %trace.trace_id_hex(),
            span_id = %trace.span_id_hex(),
            tool = %request.tool,
            task = %request.ctx.task_id,
        );
        self.traced(request).instrument(span).await
    }

    async fn traced(&self, request: CallRequest) -> ToolResult {
        let audited = self
            .config
            .audit
            .as_ref()
            .map(|audit| (audit, request.ctx.clone()));
        let trace = request.ctx.trace;
        let verdict = OnceLock::new();
        let mut done = self.pipeline(request, &verdict).await;
        done.trace = trace;
        // Only registered names label the metrics: a client cannot grow
        // the label set by calling made-up tools.
        let known = self.registry.snapshot().get(&done.tool).is_some();
        self.config.metrics.call_finished(
            if known { &done.tool } else { UNKNOWN_TOOL },
            done.status,
            done.duration,
        );
        tracing::info!(
            status = done.status.as_str(),
            duration_us = u64::try_from(done.duration.as_micros()).unwrap_or(u64::MAX),
            worker = done.worker.as_deref().unwrap_or(""),
            "tool call finished"
        );
        if let Some((audit, ctx)) = audited {
            audit.tool_call(&ctx, &done, verdict.get().copied());
        }
        done
    }

    /// The stages; `verdict` gets the gate's verdict once it has judged the call.
    async fn pipeline(&self, request: CallRequest, verdict: &OnceLock<&'static str>) -> ToolResult {
        let started = Instant::now();
        let snapshot = self.registry.snapshot();
        let CallRequest {
            tool,
            arguments,
            ctx,
        } = request;
        let finish = |tool: String, reply: ToolReply, args: Option<Map<String, Value>>| {
            // Every result leaves here: no secret this process knows reaches
            // the model or a client, whatever tool or worker printed it.
            let reply = match caduceus_common::redact::mask_known_secrets(&reply.body) {
                std::borrow::Cow::Owned(body) => ToolReply { body, ..reply },
                std::borrow::Cow::Borrowed(_) => reply,
            };
            ToolResult {
                duration: started.elapsed(),
                arguments: args,
                ..ToolResult::new(tool, reply)
            }
        };

        // 1. Arguments must be a JSON object; nothing runs otherwise.
        let Some(mut args) = parse_arguments(arguments) else {
            return finish(tool, invalid_arguments_result(), None);
        };

        // 2. Resolve (and repair) the name among the tools this caller may use.
        let entry = match self.resolve(&snapshot, &tool, &ctx.filter) {
            Ok(entry) => entry,
            Err(reply) => return finish(tool, reply, Some(args)),
        };
        let name = entry.name.clone();

        // 3. Coerce to the schema.
        if let Some(parameters) = entry.schema.get("parameters") {
            coerce::coerce_arguments(&mut args, parameters);
        }

        // 4. Agent-loop tools are the loop's business.
        if matches!(entry.handler, Handler::AgentLoop) && !ctx.from_agent_loop {
            return finish(name.clone(), agent_loop_only(&name), Some(args));
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
                let reply = ToolReply::new(CallStatus::Blocked, tool_error(message));
                let done = ToolResult {
                    refused_by: Some("plugin_block"),
                    ..finish(name, reply, Some(args))
                };
                self.post_hooks(&done, &ctx).await;
                return done;
            }
        }

        // 6. The command timeout is decided here, once, and sent to the worker.
        let timeout = match self.command_timeout(&entry, &args) {
            Ok(timeout) => timeout,
            Err(reply) => return finish(name, reply, Some(args)),
        };

        // 7. The backend: the configured one, or the one a `terminal` call
        // picked (`backend`), decided before the gate, whose rules depend on it.
        let backend = match chosen_backend(&snapshot, &entry, &mut args) {
            Ok(backend) => backend,
            Err(reply) => return finish(name, reply, Some(args)),
        };

        // 8. The gate: command guard and approvals.
        let gate_call = GateCall {
            ctx: &ctx,
            entry: &entry,
            args: &args,
            backend: &backend,
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
                let refused_by = (refusal.status == CallStatus::Blocked).then_some("guard_block");
                let reply = ToolReply::new(refusal.status, refusal.result);
                let done = ToolResult {
                    refused_by,
                    ..finish(name, reply, Some(args))
                };
                self.post_hooks(&done, &ctx).await;
                return done;
            }
        };
        let mut approval_note = admission.approval_note;

        // 7b. Edit approvals: the worker previews the edit, a person decides
        // with its diff in front of them; refused, nothing is written.
        if matches!(entry.handler, Handler::Worker)
            && caduceus_files::preview::is_edit_tool(&name)
            && let Some(approvals) = self.gate.approvals()
            && approvals.settings().edits == EditApprovals::Ask
        {
            match self
                .approve_edit(&approvals, &name, &args, &ctx, snapshot.terminal_backend())
                .await
            {
                Ok(note) => approval_note = approval_note.or(note),
                Err((reply, refused_by)) => {
                    let _ = verdict.set("refused");
                    let done = ToolResult {
                        refused_by,
                        ..finish(name, reply, Some(args))
                    };
                    self.post_hooks(&done, &ctx).await;
                    return done;
                }
            }
        }

        // 9. Route. A worker call first brings the task's copies of the
        // skills it uses up to date (nothing to do while nothing changed).
        let mut worker = None;
        let mut environment_reset = None;
        if matches!(entry.handler, Handler::Worker) {
            environment_reset = self.refresh_skills(&ctx, &backend).await;
        }
        let mut reply = match &entry.handler {
            Handler::Local(tool_impl) => {
                let tool_impl = tool_impl.clone();
                let call_ctx = ctx.clone();
                let call_args = args.clone();
                // A panicking tool must not take the pipeline with it.
                let joined =
                    tokio::spawn(async move { tool_impl.call(&call_ctx, call_args).await }).await;
                joined.unwrap_or_else(|err| {
                    let message = if err.is_panic() {
                        "the tool panicked"
                    } else {
                        "the tool was cancelled"
                    };
                    ToolReply::error(sanitize_tool_error(&format!(
                        "Tool execution failed: {message}"
                    )))
                })
            }
            Handler::Worker => {
                let ran = if entry.name == crate::registry::execute_code::NAME {
                    self.run_code(
                        &snapshot,
                        self.result_cap(&entry),
                        &args,
                        &ctx,
                        &backend,
                        timeout,
                    )
                    .await
                } else if vision::is_vision_tool(&entry.name) {
                    // The worker gets the image; the question is asked here,
                    // where the vision model's key is. Its image document is
                    // never capped: it is read here, not by the model.
                    let mut ran = self
                        .run_on_worker(
                            WorkerJob {
                                tool: &entry.name,
                                args: &args,
                                result_cap_chars: 0,
                                timeout,
                            },
                            &ctx,
                            &backend,
                            None,
                        )
                        .await;
                    ran.reply =
                        vision::answer(self.config.vision.as_ref(), &entry.name, &args, ran.reply)
                            .await;
                    ran
                } else {
                    self.run_on_worker(
                        WorkerJob {
                            tool: &entry.name,
                            args: &args,
                            result_cap_chars: self.result_cap(&entry),
                            timeout,
                        },
                        &ctx,
                        &backend,
                        None,
                    )
                    .await
                };
                if ran.environment_reset.is_some()
                    && let Some(sync) = &self.skills
                {
                    // A fresh environment holds no copies any more.
                    sync.invalidate(&self.environment_task(&ctx.task_id, &backend));
                }
                worker = ran.worker;
                environment_reset = ran.environment_reset.or(environment_reset);
                ran.reply
            }
            Handler::Hosted(provider) => {
                let ran = self.run_hosted(provider, &entry.name, &args, &ctx).await;
                worker = ran.worker;
                ran.reply
            }
            // The agent loop intercepts these before routing; reaching here
            // means a loop forwarded one by mistake.
            Handler::AgentLoop => agent_loop_only(&name),
        };
        if name == "skill_view" && reply.status == CallStatus::Ok {
            environment_reset = self
                .skill_into_environment(&mut reply, &args, &ctx, &backend)
                .await;
        }

        // 10. Cap coordinator-side results (worker tools are capped on the
        // worker, next to the sandbox that stores the full text). The status
        // stays the full result's: a preview is never an error of its own.
        if !matches!(entry.handler, Handler::Worker) {
            let cap = self.result_cap(&entry);
            if cap > 0 && reply.body.chars().count() as u64 > cap {
                let id = ctx.tool_call_id.clone().unwrap_or_else(new_result_id);
                let body = std::mem::take(&mut reply.body);
                reply.body = self.previewed(&ctx.task_id, &id, body).await;
            }
        }

        // 11. post_tool_call hooks observe the finished call.
        let done = ToolResult {
            worker,
            environment_reset,
            approval: approval_note,
            ..finish(name, reply, Some(args))
        };
        self.post_hooks(&done, &ctx).await;
        done
    }

    async fn post_hooks(&self, result: &ToolResult, ctx: &CallContext) {
        for hook in &self.hooks {
            hook.post_tool_call(&PostToolCall { result, ctx }).await;
        }
    }

    /// Tells every hook about a session starting or ending (observers:
    /// nothing they answer changes the session).
    pub async fn session_event(&self, event: SessionEvent<'_>) {
        for hook in &self.hooks {
            hook.session_event(&event).await;
        }
    }

    /// Finds the entry for `tool`, repairing near-miss names; the error is the
    /// result the model reads.
    fn resolve(
        &self,
        snapshot: &ToolRegistry,
        tool: &str,
        filter: &ToolFilter,
    ) -> Result<Arc<ToolEntry>, ToolReply> {
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
            Err(err) => return Err(ToolReply::error(err.to_string())),
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
            return Err(ToolReply::error(unavailable_reason(snapshot, entry)));
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
        Err(ToolReply::error(format!(
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

    /// The diff a `write_file` or `patch` call would apply, previewed on the
    /// worker (nothing is written), put to a person. `Ok`: the note for the
    /// result; `Err`: the reply the model reads instead — the tool's own
    /// refusal when the preview already fails, else the person's "no".
    async fn approve_edit(
        &self,
        approvals: &Approvals,
        tool: &str,
        args: &Map<String, Value>,
        ctx: &CallContext,
        backend: &str,
    ) -> Result<Option<String>, (ToolReply, Option<&'static str>)> {
        let (files, diff) = self
            .preview_edit(tool, args, ctx, backend)
            .await
            .map_err(|reply| (reply, None))?;
        if files.is_empty() {
            // Nothing would change: there is nothing to approve.
            return Ok(None);
        }
        let note = approvals
            .request_edit(EditQuery {
                tool,
                files: &files,
                diff: &diff,
                task_id: &ctx.task_id,
                session_id: ctx.session_id.as_deref().filter(|s| !s.is_empty()),
            })
            .await
            .map_err(|message| {
                (
                    ToolReply::new(CallStatus::Blocked, tool_error(message)),
                    Some("edit_denied"),
                )
            })?;
        // The person approved this diff. A file that changed while they
        // looked would make the same call apply another one: previewed
        // again, it must still be the diff they saw.
        match self.preview_edit(tool, args, ctx, backend).await {
            Ok((_, now)) if now == diff => Ok(note),
            Ok(_) => Err((
                ToolReply::new(
                    CallStatus::Blocked,
                    tool_error(
                        "The file changed while the edit waited for approval, so the approved diff no longer applies; nothing was written. Read the file again and retry.",
                    ),
                ),
                Some("edit_denied"),
            )),
            Err(reply) => Err((reply, None)),
        }
    }

    /// What an edit would change, computed on the worker without writing:
    /// the files and their unified diff, or the tool's own refusal.
    async fn preview_edit(
        &self,
        tool: &str,
        args: &Map<String, Value>,
        ctx: &CallContext,
        backend: &str,
    ) -> Result<(Vec<String>, String), ToolReply> {
        let mut preview_args = Map::new();
        preview_args.insert("tool".to_owned(), Value::String(tool.to_owned()));
        preview_args.insert("arguments".to_owned(), Value::Object(args.clone()));
        let ran = self
            .run_on_worker(
                WorkerJob {
                    tool: EDIT_PREVIEW,
                    args: &preview_args,
                    result_cap_chars: 0,
                    timeout: None,
                },
                ctx,
                backend,
                None,
            )
            .await;
        if ran.reply.status != CallStatus::Ok {
            return Err(ran.reply);
        }
        let preview: Value = serde_json::from_str(&ran.reply.body).unwrap_or(Value::Null);
        let files = preview["files"]
            .as_array()
            .map(|f| {
                f.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let diff = preview["diff"].as_str().unwrap_or_default().to_owned();
        Ok((files, diff))
    }

    async fn run_on_worker(
        &self,
        job: WorkerJob<'_>,
        ctx: &CallContext,
        backend: &str,
        script: Option<crate::scheduler::ScriptCalls>,
    ) -> WorkerRun {
        let WorkerJob {
            tool,
            args,
            result_cap_chars,
            timeout,
        } = job;
        let task_id = self.environment_task(&ctx.task_id, backend);
        let call = WorkerCall {
            task_id,
            session_id: ctx.session_id.clone().unwrap_or_default(),
            tool: tool.to_owned(),
            arguments_json: serde_json::to_string(args).unwrap_or_else(|_| "{}".to_owned()),
            backend: backend.to_owned(),
            settings_json: self.settings_of(&ctx.task_id),
            owner: self.config.owner.clone(),
            result_cap_chars,
            timeout,
            traceparent: ctx.trace.map(|t| t.to_string()).unwrap_or_default(),
            // The worker's own timeout handling (which kills the process
            // tree) always answers first.
            deadline: timeout.map_or(self.config.default_call_deadline, |t| {
                t + Duration::from_secs(30)
            }),
            script,
        };
        match self.scheduler.run_call(call).await {
            Ok(done) => WorkerRun {
                reply: done.reply,
                worker: Some(done.worker),
                environment_reset: done.environment_reset,
            },
            Err(err) => {
                let status = match err {
                    ScheduleError::Timeout { .. } => CallStatus::Timeout,
                    _ => CallStatus::Error,
                };
                WorkerRun {
                    reply: ToolReply::new(status, tool_error(err.to_string())),
                    worker: err.worker().map(str::to_owned),
                    environment_reset: None,
                }
            }
        }
    }

    /// The environment a call of `task_id` on `backend` runs in: another
    /// backend than the configured one is another environment of the task.
    fn environment_task(&self, task_id: &str, backend: &str) -> String {
        if backend == self.registry.snapshot().terminal_backend() {
            task_id.to_owned()
        } else {
            crate::scheduler::backend_environment(task_id, backend)
        }
    }

    /// Before a worker call: sends the changes of the task's skills when its
    /// copies are out of date. A failure is logged, not the call's: the
    /// call runs with the copies as they are. The answer is the reset
    /// notice the copying consumed (the call's own to report).
    async fn refresh_skills(&self, ctx: &CallContext, backend: &str) -> Option<String> {
        let sync = self.skills.as_ref().filter(|s| s.tracking())?;
        let env = self.environment_task(&ctx.task_id, backend);
        if !sync.stale(&env, self.scheduler.placement_of(&env).as_ref()) {
            return None;
        }
        match self.sync_skills(sync, &env, ctx, backend).await {
            Ok((_, reset)) => reset,
            Err(err) => {
                tracing::warn!(task = %ctx.task_id, "could not update the skills in the environment: {err}");
                None
            }
        }
    }

    /// After a successful `skill_view(name)`: the skill's files are copied
    /// into the task's environment and `skill_dir` names them there. When no
    /// worker offers the backend, or the copy fails, `skill_dir` stays the
    /// coordinator's and `skill_files_unavailable` says why.
    async fn skill_into_environment(
        &self,
        reply: &mut ToolReply,
        args: &Map<String, Value>,
        ctx: &CallContext,
        backend: &str,
    ) -> Option<String> {
        let sync = self.skills.as_ref()?;
        if args
            .get("file_path")
            .and_then(Value::as_str)
            .is_some_and(|p| !p.is_empty())
        {
            return None;
        }
        let mut view: Value = serde_json::from_str(&reply.body).ok()?;
        // `path` is the skill's SKILL.md relative to the skills root.
        let rel_dir = view["path"].as_str()?.strip_suffix("/SKILL.md")?.to_owned();
        if rel_dir.is_empty() || view["success"] != true {
            return None;
        }
        let mut reset = None;
        if !self.registry.snapshot().fleet_backends().contains(backend) {
            view["skill_files_unavailable"] = json!(format!(
                "No attached worker offers the '{backend}' backend, so the skill's files were not copied into an environment."
            ));
        } else {
            let env = self.environment_task(&ctx.task_id, backend);
            sync.use_skill(&env, &rel_dir);
            match self.sync_skills(sync, &env, ctx, backend).await {
                Ok((Some(root), consumed)) => {
                    view["skill_dir"] = json!(format!("{root}/{rel_dir}"));
                    reset = consumed;
                }
                Ok((None, consumed)) => reset = consumed,
                Err(err) => {
                    view["skill_files_unavailable"] = json!(format!(
                        "The skill's files could not be copied into the environment: {err}"
                    ));
                }
            }
        }
        *reply = ToolReply::success_document(&view);
        reset
    }

    /// Brings `env`'s copies up to date with `skill_sync` commands; answers
    /// the skills root inside the environment and the reset notice a
    /// command got. A command that landed in a recreated environment starts
    /// over once with everything.
    async fn sync_skills(
        &self,
        sync: &SkillSync,
        env: &str,
        ctx: &CallContext,
        backend: &str,
    ) -> Result<(Option<String>, Option<String>), String> {
        let mut reset = None;
        for attempt in 0..2 {
            let Some(plan) = sync.plan(env, self.scheduler.placement_of(env).as_ref()) else {
                return Ok((None, reset));
            };
            let mut root = None;
            let mut recreated = false;
            for batch in &plan.batches {
                let ran = self
                    .run_on_worker(
                        WorkerJob {
                            tool: SYNC_TOOL,
                            args: batch,
                            result_cap_chars: 0,
                            timeout: None,
                        },
                        ctx,
                        backend,
                        None,
                    )
                    .await;
                if ran.environment_reset.is_some() {
                    reset = ran.environment_reset;
                    recreated = true;
                }
                let answer: Value = serde_json::from_str(&ran.reply.body).unwrap_or(Value::Null);
                if ran.reply.status != CallStatus::Ok {
                    sync.invalidate(env);
                    return Err(answer["error"]
                        .as_str()
                        .map_or_else(|| ran.reply.body.clone(), str::to_owned));
                }
                root = answer["root"].as_str().map(str::to_owned);
            }
            if recreated && attempt == 0 {
                // The environment was recreated under the commands: what was
                // there before, and what earlier batches wrote, is gone.
                sync.invalidate(env);
                continue;
            }
            sync.commit(env, plan, self.scheduler.placement_of(env), root);
            break;
        }
        Ok((sync.root(env), reset))
    }

    /// A hosted provider's tool, on a worker hosting it (no environment).
    async fn run_hosted(
        &self,
        provider: &str,
        tool: &str,
        args: &Map<String, Value>,
        ctx: &CallContext,
    ) -> WorkerRun {
        let call = crate::scheduler::HostedCall {
            provider: provider.to_owned(),
            tool: tool.to_owned(),
            arguments_json: serde_json::to_string(args).unwrap_or_else(|_| "{}".to_owned()),
            task_id: ctx.task_id.clone(),
            session_id: ctx.session_id.clone().unwrap_or_default(),
            traceparent: ctx.trace.map(|t| t.to_string()).unwrap_or_default(),
        };
        match self.scheduler.run_hosted(call).await {
            Ok(done) => WorkerRun {
                reply: done.reply,
                worker: Some(done.worker),
                environment_reset: None,
            },
            Err(err) => {
                let status = match err {
                    ScheduleError::Timeout { .. } => CallStatus::Timeout,
                    _ => CallStatus::Error,
                };
                WorkerRun {
                    reply: ToolReply::new(status, tool_error(err.to_string())),
                    worker: err.worker().map(str::to_owned),
                    environment_reset: None,
                }
            }
        }
    }

    /// The command timeout of a call, the one decision the worker obeys:
    /// a foreground `terminal` command's `timeout` (integer or float seconds,
    /// rounded up; missing or not positive = `terminal.timeout`, hermes'
    /// `timeout or default`), refused above the foreground maximum or when it
    /// is not a number (hermes' TypeError); `process` gets
    /// `terminal.timeout` as the longest `wait`. `None`: the tool has none.
    fn command_timeout(
        &self,
        entry: &ToolEntry,
        args: &Map<String, Value>,
    ) -> Result<Option<Duration>, ToolReply> {
        let default = self.config.terminal_timeout_secs.max(1);
        match entry.name.as_str() {
            "process" => return Ok(Some(Duration::from_secs(default))),
            crate::registry::execute_code::NAME => {
                return Ok(Some(Duration::from_secs(
                    self.config.code_timeout_secs.max(1),
                )));
            }
            "terminal" if args.get("background").and_then(Value::as_bool) != Some(true) => {}
            _ => return Ok(None),
        }
        let secs = match args.get("timeout") {
            None | Some(Value::Null | Value::Bool(false)) => default,
            Some(Value::Bool(true)) => 1,
            Some(Value::Number(n)) => match n.as_f64() {
                Some(f) if f.is_finite() && f > 0.0 => f.ceil().min(u64::MAX as f64) as u64,
                _ => default,
            },
            Some(other) => {
                // hermes compares `timeout > max` and raises.
                return Err(ToolReply::error(sanitize_tool_error(&format!(
                    "Tool execution failed: TypeError: '>' not supported between instances of '{}' and 'int'",
                    python_type(other)
                ))));
            }
        };
        let max = self.config.max_foreground_timeout_secs;
        if secs > max {
            return Err(ToolReply::error(format!(
                "Foreground timeout {secs}s exceeds the maximum of {max}s. Use background=true with notify_on_complete=true for long-running commands."
            )));
        }
        Ok(Some(Duration::from_secs(secs)))
    }

    /// A too-large result saved inside the task's sandbox, as the model reads
    /// it: the persisted preview, or a truncated one when it could not be saved.
    pub async fn previewed(&self, task_id: &str, id: &str, result: String) -> String {
        match self.scheduler.persist(task_id, id, &result).await {
            Some(path) => caduceus_common::persist::persisted_preview(&result, &path),
            None => caduceus_common::persist::unsaved_preview(&result),
        }
    }
}

/// The backend a call runs on: the configured one, or the one a `terminal`
/// call names in its `backend` argument (taken out of the arguments) when
/// `placement.backend_choice` allows it and a worker offers it. The error
/// is the result the model reads.
fn chosen_backend(
    snapshot: &ToolRegistry,
    entry: &ToolEntry,
    args: &mut Map<String, Value>,
) -> Result<String, ToolReply> {
    let configured = snapshot.terminal_backend();
    if entry.name != "terminal" {
        return Ok(configured.to_owned());
    }
    let asked = match args.remove("backend") {
        None | Some(Value::Null) => return Ok(configured.to_owned()),
        Some(Value::String(name)) if name.trim().is_empty() => return Ok(configured.to_owned()),
        Some(Value::String(name)) => name.trim().to_owned(),
        Some(other) => {
            return Err(ToolReply::error(format!(
                "backend must be a string naming a backend, not {}.",
                python_type(&other)
            )));
        }
    };
    if asked == configured {
        return Ok(asked);
    }
    let choosable = snapshot.choosable_backends();
    if !snapshot.backend_choice().contains(&asked) {
        return Err(ToolReply::error(if snapshot.backend_choice().is_empty() {
            format!(
                "This coordinator does not let calls choose a backend (placement.backend_choice is empty); leave out 'backend' to run on '{configured}'."
            )
        } else {
            format!(
                "Backend '{asked}' may not be chosen here; choose one of: {}.",
                snapshot
                    .backend_choice()
                    .iter()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }));
    }
    if !choosable.contains(&asked) {
        return Err(ToolReply::error(format!(
            "Backend '{asked}' is not offered by any attached worker right now; available: {}.",
            if choosable.is_empty() {
                configured.to_owned()
            } else {
                choosable.join(", ")
            }
        )));
    }
    Ok(asked)
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
    match &entry.availability {
        crate::registry::Availability::Hidden(reason) => {
            format!("Tool '{}' is not available right now: {reason}", entry.name)
        }
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

/// What a worker is asked to run: the tool, its parsed arguments, the cap on
/// the result kept in the transcript and the command timeout dispatch decided.
struct WorkerJob<'a> {
    tool: &'a str,
    args: &'a Map<String, Value>,
    result_cap_chars: u64,
    timeout: Option<Duration>,
}

/// What came back from a worker tool.
pub(crate) struct WorkerRun {
    reply: ToolReply,
    worker: Option<String>,
    environment_reset: Option<String>,
}

fn new_result_id() -> String {
    format!("result_{}", uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;
