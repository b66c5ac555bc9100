//! The agent loop of one session (hermes `agent/conversation_loop.py`,
//! `agent/tool_executor.py`).
//!
//! Each iteration: take one unit of the iteration budget, send the
//! conversation and the session's tool definitions to the model, and either
//! finish (no tool calls) or run the turn's tool calls as a planned batch and
//! append their results — one `tool` message per call, in the model's order.
//! On the way:
//! - names are repaired (`TodoTool_tool` → `todo`); a turn whose calls all
//!   name unknown tools gets hermes' "does not exist" results, and three such
//!   turns in a row end the session; in a mixed turn only the unknown calls
//!   get that result and the others run;
//! - arguments that are not a JSON object are answered without running;
//! - results of web, browser and MCP tools are wrapped as untrusted content;
//! - when one turn's results together exceed the turn budget (200,000
//!   characters), the largest are saved in the task's sandbox and replaced
//!   by previews;
//! - environment notices (a background process finished) are injected as
//!   user messages before the next request; after its final answer a session
//!   waits for the processes it asked to be notified about, then carries on;
//! - when the budget is spent, one grace request without tools asks the
//!   model for a summary.
//!
//! `todo`, `clarify` and `delegate_task` are served here; every other call
//! goes through `Dispatcher::call`. Calls of a parallel segment run
//! concurrently (at most 8 at once); sequential calls run back to back with
//! no pause between them.
//!
//! Rooms: this file is the loop (requests, routing, notices, the summary,
//! the ending); `batch.rs` runs one turn's calls; `ask.rs` is `clarify`;
//! `children.rs` is `delegate_task` (children start through
//! `session::start_session`, the one way sessions start); `prompts.rs` holds
//! the root system prompt and the summary text cleaning.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use ractor::ActorRef;
use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use caduceus_common::persist::{ResultBudget, ResultSize, TurnBudget, is_persisted};
use caduceus_llm::{AssistantTurn, ChatMessage, ChatModel, ChatRequest, ToolCall};
use caduceus_proto::EnvironmentNotice;

use super::budget::{IterationBudget, Permit};
use super::clarify;
use super::delegate::{
    self, ChildEntry, ChildStatus, ChildTask, DelegateRequest, Tokens, TraceEntry, child_filter,
    child_system_prompt, depth_limit_error, effective_role,
};
use super::events::{self, EventStream, now_ms, preview};
use super::hub::{HubInner, new_session_id};
use super::messages::{
    NO_SUMMARY, SKIPPED_INVALID_SIBLING, SUMMARY_REQUEST, cancelled_content,
    invalid_tool_name_content, steer_message, summary_failed, tool_message, wrap_untrusted,
};
use super::notices::notice_message;
use super::output_schema::{self, OutputSchema, SchemaCheck};
use super::planner::{MAX_PARALLEL_CALLS, PlanCall, plan_batch};
use super::resume::{Next, Recovered, Restored};
use super::session::{
    EndStatus, SessionArgs, SessionMsg, SessionOutcome, SessionShared, SessionSpec, conclude,
    end_child_processes,
};
use super::store::{ResumeSpec, SessionRow};
use super::todo::TodoStore;
use crate::call::ToolFilter;
use crate::call::{CallContext, CallStatus, ToolReply};
use crate::dispatch::coerce::coerce_arguments;
use crate::dispatch::repair::repair_tool_name;
use crate::dispatch::{
    CallRequest, Dispatcher, RawArguments, invalid_arguments_result, parse_argument_text,
};
use crate::registry::{ParallelClass, ToolRegistry};

mod ask;
mod batch;
mod children;
mod prompts;

use batch::cancelled;
use children::{BackgroundChild, Delivery};
use prompts::{root_system_prompt, strip_think};

/// Turns in a row whose calls all name unknown tools before the session stops.
const MAX_INVALID_TURNS: u32 = 3;
/// Arguments longer than this are shown to clients as a preview.
const EVENT_ARGUMENTS_MAX_CHARS: usize = 4000;
/// Characters of a result shown in `tool_finished`.
const EVENT_RESULT_PREVIEW_CHARS: usize = 240;

/// How the conversation ended, before the bookkeeping.
struct Ending {
    status: EndStatus,
    text: Option<String>,
    error: Option<String>,
    exit_reason: &'static str,
}

impl Ending {
    fn completed(text: String) -> Self {
        Ending {
            status: EndStatus::Completed,
            text: Some(text),
            error: None,
            exit_reason: "completed",
        }
    }

    fn interrupted() -> Self {
        Ending {
            status: EndStatus::Interrupted,
            text: None,
            error: None,
            exit_reason: "interrupted",
        }
    }

    fn failed(error: String) -> Self {
        Ending {
            status: EndStatus::Failed,
            text: None,
            error: Some(error),
            exit_reason: "error",
        }
    }

    /// hermes' ending after [`MAX_INVALID_TURNS`] turns whose calls all named
    /// unknown tools; it names the first of the last turn.
    fn invalid_tool_calls(calls: &[ToolCall]) -> Self {
        let name = calls.first().map(|c| c.name.as_str()).unwrap_or_default();
        let shown = if name.chars().count() > 80 {
            format!("{}...", name.chars().take(80).collect::<String>())
        } else {
            name.to_owned()
        };
        let message = format!("Model generated invalid tool call: {shown}");
        Ending {
            status: EndStatus::Failed,
            text: Some(message.clone()),
            error: Some(message),
            exit_reason: "invalid_tool_calls",
        }
    }
}

/// Why a model request produced no turn.
enum Stop {
    Cancelled,
    Model(String),
}

/// Where a call goes.
#[derive(Debug, Clone)]
enum Route {
    /// Through the call pipeline (worker, coordinator and MCP tools).
    Dispatch(ParallelClass),
    Todo,
    Clarify,
    Delegate,
    /// Answered without running (delegation past the depth limit).
    Refused(ToolReply),
    /// The name is no tool of this session; the content says so.
    Invalid(String),
}

impl Route {
    fn class(&self) -> ParallelClass {
        match self {
            Route::Dispatch(class) => *class,
            Route::Clarify => ParallelClass::Never,
            _ => ParallelClass::Sequential,
        }
    }
}

/// One session's conversation and bookkeeping (see the module docs).
pub(crate) struct AgentLoop {
    hub: Arc<HubInner>,
    spec: SessionSpec,
    model: Arc<dyn ChatModel>,
    events: EventStream,
    myself: ActorRef<SessionMsg>,
    notices: mpsc::UnboundedReceiver<(String, EnvironmentNotice)>,
    shared: Arc<SessionShared>,
    messages: Vec<ChatMessage>,
    todo: TodoStore,
    budget: IterationBudget,
    api_calls: u32,
    tokens: Tokens,
    trace: Vec<TraceEntry>,
    workers: BTreeSet<String>,
    /// Background processes started with notify_on_complete, not yet finished.
    awaited_processes: HashSet<String>,
    invalid_turns: u32,
    questions: u32,
    started: Instant,
    /// After a restart: where the conversation carries on.
    resume_next: Option<Next>,
    /// After a restart: the interrupted turn's calls, by id.
    recovered: HashMap<String, Recovered>,
    /// The children of this session's background delegations, in start order.
    background: Vec<BackgroundChild>,
    /// Background delegations not yet delivered.
    outstanding: usize,
    /// Background delegations whose children still run (hermes' capacity
    /// counts these units against `max_concurrent_children`).
    background_running: Arc<std::sync::atomic::AtomicUsize>,
    deliveries_tx: mpsc::UnboundedSender<Delivery>,
    deliveries: mpsc::UnboundedReceiver<Delivery>,
    /// With an `output_schema`: the last check of a final answer, and
    /// whether the one correction turn was used.
    schema_check: Option<SchemaCheck>,
    schema_corrected: bool,
}

impl AgentLoop {
    pub(crate) fn new(
        hub: Arc<HubInner>,
        spec: SessionSpec,
        model: Arc<dyn ChatModel>,
        events: EventStream,
        myself: ActorRef<SessionMsg>,
        notices: mpsc::UnboundedReceiver<(String, EnvironmentNotice)>,
        shared: Arc<SessionShared>,
    ) -> Self {
        let budget = IterationBudget::new(spec.max_iterations);
        let (deliveries_tx, deliveries) = mpsc::unbounded_channel();
        AgentLoop {
            hub,
            spec,
            model,
            events,
            myself,
            notices,
            shared,
            messages: Vec::new(),
            todo: TodoStore::default(),
            budget,
            api_calls: 0,
            tokens: Tokens::default(),
            trace: Vec::new(),
            workers: BTreeSet::new(),
            awaited_processes: HashSet::new(),
            invalid_turns: 0,
            questions: 0,
            started: Instant::now(),
            resume_next: None,
            recovered: HashMap::new(),
            background: Vec::new(),
            outstanding: 0,
            background_running: Arc::default(),
            deliveries_tx,
            deliveries,
            schema_check: None,
            schema_corrected: false,
        }
    }

    /// Carries on from the state a restart left in the store.
    pub(crate) fn restore(&mut self, restored: Restored) {
        for message in &restored.messages {
            for call in message.tool_calls.iter().filter(|c| c.name == "todo") {
                if let Some(args) = parse_argument_text(&call.arguments) {
                    self.todo.call(&args);
                }
            }
        }
        for _ in 0..restored.api_calls {
            self.budget.consume();
        }
        // The one correction turn is spent once: a resumed child that had it
        // gets no second one.
        self.schema_corrected = output_schema::corrected_in(&restored.messages);
        self.messages = restored.messages;
        self.api_calls = restored.api_calls;
        self.shared
            .api_calls
            .store(self.api_calls, Ordering::Relaxed);
        self.tokens = restored.tokens;
        self.trace = restored.trace;
        self.workers = restored.workers;
        self.resume_next = Some(restored.next);
    }

    fn record_row(&self) {
        let Some(store) = self.hub.store() else {
            return;
        };
        let spec = &self.spec;
        store.session_started(SessionRow {
            id: spec.session_id.clone(),
            parent_id: spec.parent_id.clone(),
            root_id: spec.root_id.clone(),
            depth: spec.depth,
            task_id: spec.task_id.clone(),
            model: spec.model_label.clone(),
            prompt: spec.prompt.clone(),
            parent_call_id: spec.parent_call_id.clone(),
            task_index: spec.task_index,
            spec: ResumeSpec {
                release_task: spec.release_task,
                enabled_toolsets: spec.filter.enabled_toolsets.clone(),
                disabled_toolsets: spec.filter.disabled_toolsets.clone(),
                blocked_tools: spec.filter.blocked_tools.clone(),
                max_iterations: spec.max_iterations,
                role: spec.role.and_then(|r| {
                    serde_json::to_value(r)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                }),
                interactive: spec.interactive,
                output_schema: spec.output_schema.clone(),
                workdir: spec.workdir.clone(),
            },
        });
    }

    /// A session resumed after a restart: it says so, waits for its workers,
    /// finishes the interrupted turn, and carries on.
    async fn resume(&mut self, next: Next) -> Ending {
        self.record_row();
        let unknown: Vec<&String> = match &next {
            Next::Calls { recovered, .. } => recovered
                .iter()
                .filter(|(_, r)| **r == Recovered::Unknown)
                .map(|(id, _)| id)
                .collect(),
            _ => Vec::new(),
        };
        self.emit(
            events::SESSION_RESUMED,
            &json!({
                "parent_id": self.spec.parent_id,
                "depth": self.spec.depth,
                "task_id": self.spec.task_id,
                "messages": self.messages.len(),
                "api_calls": self.api_calls,
                "unknown_calls": unknown,
            }),
        );
        self.hub
            .wait_for_workers(&self.spec.task_id, &self.spec.cancel)
            .await;
        self.recover_background().await;
        match next {
            Next::Finished {
                text,
                max_iterations: false,
            } => {
                // It had answered and was waiting for its background
                // children: it waits again, and their results start a turn.
                if self.outstanding > 0 && self.wait_for_notices().await {
                    return self.converse().await;
                }
                if self.cancelled() {
                    return Ending::interrupted();
                }
                return Ending::completed(text);
            }
            Next::Finished { text, .. } => {
                return Ending {
                    status: EndStatus::MaxIterations,
                    text: Some(text),
                    error: None,
                    exit_reason: "max_iterations",
                };
            }
            Next::Request => {}
            Next::Calls {
                mut calls,
                recovered,
            } => {
                self.recovered = recovered;
                let snapshot = self.hub.dispatcher.registry().snapshot();
                let available = snapshot
                    .available_names(&self.spec.filter)
                    .unwrap_or_default();
                let routes = self.route(&mut calls, &snapshot, &available);
                let contents = self.run_batch(&calls, &routes).await;
                for (call, content) in calls.iter().zip(contents) {
                    self.push(
                        tool_message(&call.name, content, &call.id),
                        Some(&call.name),
                    );
                }
                self.recovered.clear();
            }
        }
        self.converse().await
    }

    pub(crate) async fn run(mut self) -> SessionOutcome {
        if let Some(next) = self.resume_next.take() {
            let ending = self.resume(next).await;
            return self.finish(ending).await;
        }
        let tool_names = self
            .hub
            .dispatcher
            .registry()
            .snapshot()
            .available_names(&self.spec.filter)
            .unwrap_or_default();
        self.emit(
            events::SESSION_STARTED,
            &json!({
                "parent_id": self.spec.parent_id,
                "depth": self.spec.depth,
                "task_index": self.spec.task_index,
                "task_id": self.spec.task_id,
                "model": self.spec.model_label,
                "role": self.spec.role,
                "prompt": self.spec.prompt,
                "tools": tool_names,
                "max_iterations": self.spec.max_iterations,
            }),
        );
        self.record_row();
        let system = self.spec.system_prompt.clone().unwrap_or_else(|| {
            let memory = self.hub.settings.memory.as_ref().and_then(|m| m.snapshot());
            root_system_prompt(&tool_names, memory.as_deref())
        });
        self.push(ChatMessage::system(system), None);
        self.push(ChatMessage::user(self.spec.prompt.clone()), None);
        let ending = self.converse().await;
        self.finish(ending).await
    }

    fn emit(&self, kind: &str, json: &Value) {
        self.events.emit(&self.spec.session_id, kind, json);
    }

    fn cancelled(&self) -> bool {
        self.spec.cancel.is_cancelled()
    }

    /// Appends a message and records it.
    fn push(&mut self, message: ChatMessage, tool_name: Option<&str>) {
        if let Some(store) = self.hub.store() {
            store.message(
                &self.spec.session_id,
                self.messages.len(),
                &message,
                tool_name,
            );
        }
        self.messages.push(message);
    }

    async fn converse(&mut self) -> Ending {
        loop {
            if self.cancelled() {
                return Ending::interrupted();
            }
            self.inject_queued_notices();
            self.inject_steers();
            if self.budget.permit() == Permit::Exhausted {
                return self.summarize().await;
            }
            self.count_request();
            let snapshot = self.hub.dispatcher.registry().snapshot();
            let (definitions, available) = match (
                snapshot.definitions(&self.spec.filter),
                snapshot.available_names(&self.spec.filter),
            ) {
                (Ok(definitions), Ok(available)) => (definitions, available),
                (Err(err), _) | (_, Err(err)) => return Ending::failed(err.to_string()),
            };
            let request = ChatRequest::new(self.messages.clone()).with_tools(definitions);
            let turn = match self.complete(request).await {
                Ok(turn) => turn,
                Err(Stop::Cancelled) => return Ending::interrupted(),
                Err(Stop::Model(error)) => return Ending::failed(error),
            };

            if !turn.has_tool_calls() {
                let text = turn.content.clone().unwrap_or_default();
                self.push(
                    ChatMessage::assistant(turn.content.clone(), Vec::new()),
                    None,
                );
                if !text.trim().is_empty() {
                    self.emit(
                        events::ASSISTANT_TEXT,
                        &json!({"iteration": self.api_calls, "text": text, "tool_calls": 0}),
                    );
                }
                if let Some(correction) = self.check_output(&text) {
                    self.push(ChatMessage::user(correction), None);
                    continue;
                }
                if self.wait_for_notices().await {
                    continue;
                }
                if self.cancelled() {
                    return Ending::interrupted();
                }
                return Ending::completed(text);
            }

            let mut calls = turn.tool_calls.clone();
            let routes = self.route(&mut calls, &snapshot, &available);
            let all_invalid = routes.iter().all(|r| matches!(r, Route::Invalid(_)));
            if all_invalid {
                self.invalid_turns += 1;
                if self.invalid_turns >= MAX_INVALID_TURNS {
                    return Ending::invalid_tool_calls(&calls);
                }
            } else {
                self.invalid_turns = 0;
            }

            self.push(
                ChatMessage::assistant(turn.content.clone(), calls.clone()),
                None,
            );
            if let Some(text) = turn.content.as_ref().filter(|t| !t.trim().is_empty()) {
                self.emit(
                    events::ASSISTANT_TEXT,
                    &json!({"iteration": self.api_calls, "text": text, "tool_calls": calls.len()}),
                );
            }

            let contents = if all_invalid {
                routes
                    .iter()
                    .map(|route| match route {
                        Route::Invalid(content) => content.clone(),
                        _ => SKIPPED_INVALID_SIBLING.to_owned(),
                    })
                    .collect()
            } else {
                self.run_batch(&calls, &routes).await
            };
            for (call, content) in calls.iter().zip(contents) {
                self.push(
                    tool_message(&call.name, content, &call.id),
                    Some(&call.name),
                );
            }
            // Turns that only ran code are free (hermes refunds execute_code).
            if calls.iter().all(|c| c.name == "execute_code") {
                self.budget.refund();
            }
        }
    }

    fn count_request(&mut self) {
        self.api_calls += 1;
        self.shared
            .api_calls
            .store(self.api_calls, Ordering::Relaxed);
    }

    /// One model request, abandoned when the session is cancelled. Each
    /// streamed chunk is a sign of progress for the stall monitor.
    async fn complete(&mut self, request: ChatRequest) -> Result<AssistantTurn, Stop> {
        let model = self.model.clone();
        let shared = self.shared.clone();
        shared.touch();
        let mut on_chunk = |_chunk| shared.touch();
        let turn = tokio::select! {
            biased;
            _ = self.spec.cancel.cancelled() => return Err(Stop::Cancelled),
            turn = model.complete(&request, &mut on_chunk) => turn,
        };
        self.shared.touch();
        match turn {
            Ok(turn) => {
                if let Some(usage) = &turn.usage {
                    self.tokens.input += usage.prompt_tokens;
                    self.tokens.output += usage.completion_tokens;
                }
                Ok(turn)
            }
            Err(err) => Err(Stop::Model(err.to_string())),
        }
    }

    /// Repairs names in place and decides where each call goes.
    fn route(
        &self,
        calls: &mut [ToolCall],
        snapshot: &ToolRegistry,
        available: &BTreeSet<String>,
    ) -> Vec<Route> {
        let selected = snapshot
            .selected_names(&self.spec.filter)
            .unwrap_or_default();
        calls
            .iter_mut()
            .map(|call| {
                if !available.contains(&call.name)
                    && !selected.contains(&call.name)
                    && let Some(repaired) = repair_tool_name(&call.name, available)
                {
                    tracing::debug!(given = %call.name, %repaired, "repaired tool name");
                    call.name = repaired;
                }
                let name = call.name.as_str();
                if name == "delegate_task" {
                    let max_depth = self.hub.settings.delegation.max_spawn_depth();
                    if self.spec.depth >= max_depth {
                        return Route::Refused(depth_limit_error(self.spec.depth, max_depth));
                    }
                }
                if !available.contains(name) && !selected.contains(name) {
                    return Route::Invalid(invalid_tool_name_content(name, available));
                }
                match name {
                    "todo" => Route::Todo,
                    "clarify" => Route::Clarify,
                    "delegate_task" => Route::Delegate,
                    // A selected tool that is unavailable right now goes to the
                    // pipeline, which says why (no worker offers its backend, …).
                    _ => Route::Dispatch(
                        snapshot
                            .get(name)
                            .map(|e| e.parallel)
                            .unwrap_or(ParallelClass::Sequential),
                    ),
                }
            })
            .collect()
    }

    /// Injects notices and background results that arrived meanwhile.
    fn inject_queued_notices(&mut self) {
        while let Ok((worker, notice)) = self.notices.try_recv() {
            self.inject_notice(&worker, &notice);
        }
        while let Ok(delivery) = self.deliveries.try_recv() {
            self.deliver(delivery);
        }
    }

    /// A final answer against the `output_schema`: the correction to send
    /// when it misses and the one correction turn is unused.
    fn check_output(&mut self, answer: &str) -> Option<String> {
        let schema = self.spec.output_schema.as_ref()?;
        let compiled = match OutputSchema::compile(schema) {
            Ok(compiled) => compiled,
            Err(err) => {
                tracing::warn!(session = %self.spec.session_id, "output_schema no longer compiles: {err}");
                return None;
            }
        };
        let check = compiled.check(answer);
        let correct = !check.valid && !self.schema_corrected;
        self.emit(
            events::SCHEMA_CHECKED,
            &json!({"valid": check.valid, "errors": check.errors, "correction": correct}),
        );
        let correction = correct.then(|| output_schema::correction(&check.errors));
        self.schema_corrected |= correct;
        self.schema_check = Some(check);
        correction
    }

    /// The parent's steers, read before the next model request.
    fn inject_steers(&mut self) {
        for text in self.shared.take_steers() {
            self.emit(events::STEER_RECEIVED, &json!({"message": text}));
            self.push(ChatMessage::user(steer_message(&text)), None);
        }
    }

    fn inject_notice(&mut self, worker: &str, notice: &EnvironmentNotice) {
        let text = notice_message(notice);
        if notice.kind == "process_exited" {
            self.awaited_processes.remove(&notice.process_id);
        }
        self.emit(
            events::NOTICE,
            &json!({
                "kind": notice.kind,
                "task_id": notice.task_id,
                "process_id": notice.process_id,
                "worker": worker,
                "message": text,
            }),
        );
        self.push(ChatMessage::user(text), None);
    }

    /// After a final answer: a notice that arrived, one for a process the
    /// model asked to be told about, or the results of a background
    /// delegation (waited for as long as its children run: the stall monitor
    /// bounds them) start a new turn. Returns whether one did.
    async fn wait_for_notices(&mut self) -> bool {
        if let Ok((worker, notice)) = self.notices.try_recv() {
            self.inject_notice(&worker, &notice);
            return true;
        }
        if let Ok(delivery) = self.deliveries.try_recv() {
            self.deliver(delivery);
            return true;
        }
        if self.awaited_processes.is_empty() && self.outstanding == 0 {
            return false;
        }
        let wait = self.hub.settings.notice_wait;
        let children_running = self.outstanding > 0;
        tokio::select! {
            biased;
            _ = self.spec.cancel.cancelled() => false,
            delivery = self.deliveries.recv(), if children_running => match delivery {
                Some(delivery) => {
                    self.deliver(delivery);
                    true
                }
                None => false,
            },
            notice = self.notices.recv() => match notice {
                Some((worker, notice)) => {
                    self.inject_notice(&worker, &notice);
                    true
                }
                None => false,
            },
            _ = tokio::time::sleep(wait), if !children_running => false,
        }
    }

    /// The grace request: no tools, asking for a summary.
    async fn summarize(&mut self) -> Ending {
        let max = self.budget.max_total();
        self.budget.grant_grace();
        let _grace = self.budget.permit();
        self.count_request();
        self.push(ChatMessage::user(SUMMARY_REQUEST), None);
        let request = ChatRequest::new(self.messages.clone());
        let text = match self.complete(request).await {
            Ok(turn) => {
                let text = strip_think(turn.content.as_deref().unwrap_or_default());
                if text.is_empty() {
                    NO_SUMMARY.to_owned()
                } else {
                    self.push(ChatMessage::assistant(Some(text.clone()), Vec::new()), None);
                    text
                }
            }
            Err(Stop::Cancelled) => return Ending::interrupted(),
            Err(Stop::Model(error)) => summary_failed(max, &error),
        };
        Ending {
            status: EndStatus::MaxIterations,
            text: Some(text),
            error: None,
            exit_reason: "max_iterations",
        }
    }

    async fn finish(mut self, ending: Ending) -> SessionOutcome {
        self.settle_background(ending.status).await;
        let killed_processes =
            end_child_processes(&self.hub, &self.spec, &self.events, &self.shared).await;
        let outcome = SessionOutcome {
            status: ending.status,
            final_text: ending.text,
            error: ending.error,
            api_calls: self.api_calls,
            duration: self.started.elapsed(),
            tokens: self.tokens,
            tool_trace: self.trace,
            workers: self.workers,
            missed_steer: self.shared.close_steering(),
            schema: self.schema_check,
            killed_processes,
        };
        conclude(
            &self.hub,
            &self.spec,
            &self.events,
            &outcome,
            ending.exit_reason,
        )
        .await;
        outcome
    }
}

#[cfg(test)]
#[path = "turn_tests.rs"]
mod tests;
