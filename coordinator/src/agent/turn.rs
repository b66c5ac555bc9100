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
//! goes through `Dispatcher::call_streaming`. Calls of a parallel segment run
//! concurrently (at most 8 at once); sequential calls run back to back with
//! no pause between them.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use ractor::{Actor, ActorRef};
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
    invalid_tool_name_content, summary_failed, tool_message, wrap_untrusted,
};
use super::notices::notice_message;
use super::planner::{MAX_PARALLEL_CALLS, PlanCall, plan_batch};
use super::resume::{self, Next, Recovered, Restored};
use super::session::{
    EndStatus, SessionActor, SessionArgs, SessionMsg, SessionOutcome, SessionShared, SessionSpec,
    conclude,
};
use super::store::{CallResult, CallStart, ResumeSpec, SessionRow, SessionStore};
use super::todo::TodoStore;
use crate::dispatch::coerce::coerce_arguments;
use crate::dispatch::repair::repair_tool_name;
use crate::dispatch::{
    CallContext, CallRequest, CallStatus, Dispatcher, RawArguments, invalid_arguments_result,
    parse_arguments, status_of,
};
use crate::registry::{ParallelClass, ToolFilter, ToolRegistry};

/// Turns in a row whose calls all name unknown tools before the session stops.
const MAX_INVALID_TURNS: u32 = 3;
/// Arguments longer than this are shown to clients as a preview.
const EVENT_ARGUMENTS_MAX_CHARS: usize = 4000;
/// Characters of a result shown in `tool_finished`.
const EVENT_RESULT_PREVIEW_CHARS: usize = 240;
/// How long a timed-out child gets to wind down before it is given up on.
const CHILD_STOP_GRACE: Duration = Duration::from_secs(10);

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
    Refused(String),
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

/// A call's result before it becomes a message.
struct Finished {
    content: String,
    status: CallStatus,
    worker: Option<String>,
}

/// What every call of one session needs; cloned into parallel calls.
#[derive(Clone)]
struct CallSite {
    dispatcher: Arc<Dispatcher>,
    events: EventStream,
    session_id: String,
    task_id: String,
    filter: ToolFilter,
    iteration: u32,
    cancel: CancellationToken,
    store: Option<SessionStore>,
    /// Index of the assistant message whose calls these are.
    turn: usize,
}

impl CallSite {
    /// The write-ahead record: on disk before the call is dispatched.
    async fn record_start(&self, call: &ToolCall) {
        if let Some(store) = &self.store {
            store
                .call_started(CallStart {
                    session_id: self.session_id.clone(),
                    turn: self.turn,
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    arguments: call.arguments.clone(),
                    task_id: self.task_id.clone(),
                })
                .await;
        }
    }

    fn record_end(&self, call: &ToolCall, done: &Finished) {
        if let Some(store) = &self.store {
            store.call_finished(CallResult {
                session_id: self.session_id.clone(),
                turn: self.turn,
                call_id: call.id.clone(),
                result: done.content.clone(),
                status: serde_json::to_value(done.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                worker: done.worker.clone(),
            });
            if let Some(worker) = &done.worker {
                store.placement(&self.task_id, worker);
            }
        }
    }

    /// A recovered call's answer, with the `tool_finished` it never got.
    fn recovered(&self, call: &ToolCall, recovered: Recovered) -> Finished {
        let status = recovered.status();
        let done = match recovered {
            Recovered::Done { result, worker } => Finished {
                content: result,
                status,
                worker,
            },
            Recovered::Unknown | Recovered::Adopt => {
                let done = Finished {
                    content: resume::unknown_outcome(),
                    status,
                    worker: None,
                };
                // The record now says what the model was told.
                self.record_end(call, &done);
                done
            }
        };
        self.finished(call, (Instant::now(), now_ms()), &done);
        done
    }

    fn started(
        &self,
        call: &ToolCall,
        parsed: Option<&Map<String, Value>>,
        parallel: bool,
    ) -> (Instant, u64) {
        let at = now_ms();
        let emoji = self
            .dispatcher
            .registry()
            .snapshot()
            .get(&call.name)
            .map(|e| e.emoji.clone())
            .unwrap_or_default();
        let arguments = match parsed {
            Some(args) if call.arguments.chars().count() <= EVENT_ARGUMENTS_MAX_CHARS => {
                Value::Object(args.clone())
            }
            _ => Value::String(preview(&call.arguments, EVENT_ARGUMENTS_MAX_CHARS)),
        };
        self.events.emit(
            &self.session_id,
            events::TOOL_STARTED,
            &json!({
                "call_id": call.id,
                "tool": call.name,
                "emoji": emoji,
                "arguments": arguments,
                "iteration": self.iteration,
                "parallel": parallel,
                "started_at_ms": at,
            }),
        );
        (Instant::now(), at)
    }

    fn finished(&self, call: &ToolCall, started: (Instant, u64), done: &Finished) {
        let finished_at = now_ms();
        self.events.emit(
            &self.session_id,
            events::TOOL_FINISHED,
            &json!({
                "call_id": call.id,
                "tool": call.name,
                "status": done.status,
                "worker": done.worker,
                "duration_ms": u64::try_from(started.0.elapsed().as_millis()).unwrap_or(u64::MAX),
                "started_at_ms": started.1,
                "finished_at_ms": finished_at,
                "result_chars": done.content.chars().count(),
                "preview": preview(&done.content, EVENT_RESULT_PREVIEW_CHARS),
            }),
        );
    }

    /// One call through the pipeline, with its events. Cancelled with the session.
    async fn dispatch(
        &self,
        call: &ToolCall,
        parsed: Option<&Map<String, Value>>,
        parallel: bool,
    ) -> Finished {
        let started = self.started(call, parsed, parallel);
        self.record_start(call).await;
        let request = CallRequest {
            tool: call.name.clone(),
            arguments: RawArguments::Text(call.arguments.clone()),
            ctx: CallContext {
                task_id: self.task_id.clone(),
                session_id: Some(self.session_id.clone()),
                tool_call_id: Some(call.id.clone()),
                from_agent_loop: true,
                filter: self.filter.clone(),
            },
        };
        let done = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Finished { content: cancelled_content(&call.name), status: CallStatus::Cancelled, worker: None },
            outcome = self.dispatcher.call_streaming(request, None) => Finished { content: outcome.result, status: outcome.status, worker: outcome.worker },
        };
        self.record_end(call, &done);
        self.finished(call, started, &done);
        done
    }
}

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
        }
    }

    /// Carries on from the state a restart left in the store.
    pub(crate) fn restore(&mut self, restored: Restored) {
        for message in &restored.messages {
            for call in message.tool_calls.iter().filter(|c| c.name == "todo") {
                if let Some(args) = parse_arguments(&RawArguments::Text(call.arguments.clone())) {
                    self.todo.call(&args);
                }
            }
        }
        for _ in 0..restored.api_calls {
            self.budget.consume();
        }
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
        match next {
            Next::Finished {
                text,
                max_iterations: false,
            } => return Ending::completed(text),
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
        let system = self
            .spec
            .system_prompt
            .clone()
            .unwrap_or_else(|| root_system_prompt(&tool_names));
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

    /// One model request, abandoned when the session is cancelled.
    async fn complete(&mut self, request: ChatRequest) -> Result<AssistantTurn, Stop> {
        let model = self.model.clone();
        let turn = tokio::select! {
            biased;
            _ = self.spec.cancel.cancelled() => return Err(Stop::Cancelled),
            turn = model.complete_quietly(&request) => turn,
        };
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

    fn call_site(&self, parallel_iteration: u32) -> CallSite {
        CallSite {
            dispatcher: self.hub.dispatcher.clone(),
            events: self.events.clone(),
            session_id: self.spec.session_id.clone(),
            task_id: self.spec.task_id.clone(),
            filter: self.spec.filter.clone(),
            iteration: parallel_iteration,
            cancel: self.spec.cancel.clone(),
            store: self.hub.store().cloned(),
            turn: self.messages.len().saturating_sub(1),
        }
    }

    /// Runs one turn's calls as planned segments; results in call order.
    async fn run_batch(&mut self, calls: &[ToolCall], routes: &[Route]) -> Vec<String> {
        let parsed: Vec<Option<Map<String, Value>>> = calls
            .iter()
            .map(|c| parse_arguments(&RawArguments::Text(c.arguments.clone())))
            .collect();
        let mut results: Vec<Option<Finished>> = calls.iter().map(|_| None).collect();
        let mut runnable = Vec::new();
        let site = self.call_site(self.api_calls);
        for (index, route) in routes.iter().enumerate() {
            // After a restart, a call with a record is answered from it.
            if let Some(recovered) = self.take_recovered(&calls[index].id) {
                results[index] = Some(site.recovered(&calls[index], recovered));
                continue;
            }
            match route {
                Route::Invalid(content) => {
                    results[index] = Some(Finished {
                        content: content.clone(),
                        status: CallStatus::Error,
                        worker: None,
                    });
                }
                _ => runnable.push(index),
            }
        }
        let plan_input: Vec<PlanCall<'_>> = runnable
            .iter()
            .map(|&i| PlanCall {
                class: routes[i].class(),
                args: parsed[i].as_ref(),
            })
            .collect();
        let cwd = if plan_input
            .iter()
            .any(|c| c.class == ParallelClass::PathScoped)
        {
            self.task_cwd().await
        } else {
            None
        };
        let segments = plan_batch(&plan_input, cwd.as_deref());

        for segment in &segments {
            if self.cancelled() {
                break;
            }
            let indices: Vec<usize> = segment.calls().iter().map(|&k| runnable[k]).collect();
            if segment.is_parallel() {
                let site = &site;
                let dispatched: Vec<Finished> = futures::stream::iter(
                    indices
                        .iter()
                        .copied()
                        .map(|i| site.dispatch(&calls[i], parsed[i].as_ref(), true)),
                )
                .buffered(MAX_PARALLEL_CALLS)
                .collect()
                .await;
                for (&i, done) in indices.iter().zip(dispatched) {
                    results[i] = Some(done);
                }
            } else {
                for &i in &indices {
                    if self.cancelled() {
                        break;
                    }
                    let done = match &routes[i] {
                        Route::Dispatch(_) => {
                            site.dispatch(&calls[i], parsed[i].as_ref(), false).await
                        }
                        route => {
                            self.run_loop_tool(&site, &calls[i], route, parsed[i].as_ref())
                                .await
                        }
                    };
                    results[i] = Some(done);
                }
            }
        }

        let mut contents = Vec::with_capacity(calls.len());
        for (index, call) in calls.iter().enumerate() {
            let done = results[index].take().unwrap_or_else(|| Finished {
                content: cancelled_content(&call.name),
                status: CallStatus::Cancelled,
                worker: None,
            });
            contents.push(self.after_call(call, done));
        }
        self.enforce_turn_budget(calls, &mut contents).await;
        contents
    }

    /// The record of an interrupted call, unless it is a `delegate_task`
    /// that runs again to adopt its children.
    fn take_recovered(&mut self, call_id: &str) -> Option<Recovered> {
        match self.recovered.get(call_id)? {
            Recovered::Adopt => None,
            _ => self.recovered.remove(call_id),
        }
    }

    /// Bookkeeping of one result; returns the content the model reads.
    fn after_call(&mut self, call: &ToolCall, done: Finished) -> String {
        if let Some(worker) = &done.worker {
            self.workers.insert(worker.clone());
        }
        // One parse serves the trace, the awaited processes and the approval event.
        let parsed = result_object(&done.content);
        self.trace.push(TraceEntry {
            tool: call.name.clone(),
            args_bytes: call.arguments.len(),
            result_bytes: Some(done.content.len()),
            status: Some(if looks_like_error(&done.content, parsed.as_ref()) {
                "error"
            } else {
                "ok"
            }),
        });
        if let Some(result) = &parsed {
            if call.name == "terminal"
                && result.get("notify_on_complete").and_then(Value::as_bool) == Some(true)
            {
                let process = result
                    .get("session_id")
                    .or_else(|| result.get("process_id"))
                    .and_then(Value::as_str);
                if let Some(process) = process {
                    self.awaited_processes.insert(process.to_owned());
                }
            }
            if done.status == CallStatus::PendingApproval {
                let field = |key: &str| result.get(key).cloned().unwrap_or(Value::Null);
                self.emit(
                    events::APPROVAL_NEEDED,
                    &json!({
                        "call_id": call.id,
                        "tool": call.name,
                        "command": field("command"),
                        "description": field("description"),
                        "pattern_key": field("pattern_key"),
                        "approval_id": field("approval_id"),
                    }),
                );
            }
        }
        wrap_untrusted(&call.name, done.content)
    }

    /// hermes `enforce_turn_budget`: persist the largest results until the
    /// turn fits.
    async fn enforce_turn_budget(&self, calls: &[ToolCall], contents: &mut [String]) {
        let sizes: Vec<ResultSize> = contents
            .iter()
            .map(|c| ResultSize {
                chars: c.chars().count(),
                persisted: is_persisted(c),
            })
            .collect();
        let mut plan = TurnBudget::new(&sizes, ResultBudget::default().per_turn);
        while let Some(index) = plan.next_to_persist() {
            let content = std::mem::take(&mut contents[index]);
            let replacement = self
                .hub
                .dispatcher
                .previewed(&self.spec.task_id, &calls[index].id, content)
                .await;
            plan.replaced(index, replacement.chars().count());
            contents[index] = replacement;
        }
    }

    /// `todo`, `clarify`, `delegate_task`, and refusals, with their events.
    async fn run_loop_tool(
        &mut self,
        site: &CallSite,
        call: &ToolCall,
        route: &Route,
        parsed: Option<&Map<String, Value>>,
    ) -> Finished {
        let started = site.started(call, parsed, false);
        site.record_start(call).await;
        let content = match (route, self.loop_tool_args(&call.name, parsed)) {
            (Route::Refused(content), _) => content.clone(),
            (_, Err(content)) => content,
            (Route::Todo, Ok(args)) => self.todo.call(&args),
            (Route::Clarify, Ok(args)) => self.clarify(&call.id, &args).await,
            (Route::Delegate, Ok(args)) => self.delegate(&call.id, &args).await,
            (_, Ok(_)) => cancelled_content(&call.name),
        };
        let status = if self.cancelled() && content.starts_with("[Tool execution cancelled") {
            CallStatus::Cancelled
        } else {
            status_of(&content)
        };
        let done = Finished {
            content,
            status,
            worker: None,
        };
        site.record_end(call, &done);
        site.finished(call, started, &done);
        done
    }

    /// Arguments of an agent-loop tool: a JSON object, coerced to its schema.
    fn loop_tool_args(
        &self,
        tool: &str,
        parsed: Option<&Map<String, Value>>,
    ) -> Result<Map<String, Value>, String> {
        let Some(args) = parsed else {
            return Err(invalid_arguments_result());
        };
        let mut args = args.clone();
        if let Some(parameters) = self
            .hub
            .dispatcher
            .registry()
            .snapshot()
            .get(tool)
            .and_then(|e| e.schema.get("parameters").cloned())
        {
            coerce_arguments(&mut args, &parameters);
        }
        Ok(args)
    }

    async fn clarify(&mut self, call_id: &str, args: &Map<String, Value>) -> String {
        let question = match clarify::parse(args) {
            Ok(question) => question,
            Err(result) => return result,
        };
        if !self.spec.interactive || !self.events.is_attached() {
            return clarify::unavailable();
        }
        self.questions += 1;
        let question_id = format!("q{}", self.questions);
        let (answer_tx, answer_rx) = oneshot::channel();
        if self
            .myself
            .cast(SessionMsg::AwaitClarify {
                question_id: question_id.clone(),
                answer: answer_tx,
            })
            .is_err()
        {
            return clarify::unavailable();
        }
        self.emit(
            events::CLARIFY,
            &json!({"question_id": question_id, "call_id": call_id, "question": question.question, "choices": question.choices}),
        );
        let timeout = self.hub.settings.clarify_timeout;
        tokio::select! {
            biased;
            _ = self.spec.cancel.cancelled() => cancelled_content("clarify"),
            _ = tokio::time::sleep(timeout) => clarify::timed_out(timeout.as_secs()),
            answer = answer_rx => match answer {
                Ok(answer) => clarify::answered(&question, &answer),
                Err(_) => clarify::unavailable(),
            },
        }
    }

    /// The working directory of the task's environment, from the workers' heartbeats.
    async fn task_cwd(&self) -> Option<String> {
        let workers = self.hub.dispatcher.scheduler().status().await;
        workers
            .iter()
            .flat_map(|w| w.environments.iter())
            .find(|e| e.task_id == self.spec.task_id)
            .map(|e| e.cwd.clone())
            .filter(|cwd| !cwd.is_empty())
    }

    /// `delegate_task`: runs the children as linked Session actors and waits
    /// for all of them. (At the depth limit the call never gets here:
    /// [`Self::route`] refuses it.)
    async fn delegate(&mut self, call_id: &str, args: &Map<String, Value>) -> String {
        let config = self.hub.settings.delegation.clone();
        let max_depth = config.max_spawn_depth();
        let DelegateRequest {
            tasks,
            share_environment,
        } = match delegate::parse_request(args, config.max_concurrent_children()) {
            Ok(request) => request,
            Err(result) => return result,
        };
        let started = Instant::now();
        let child_model = match self.hub.child_model(&self.model) {
            Ok(model) => model,
            Err(err) => {
                return caduceus_common::result::tool_error(format!(
                    "cannot use delegation.model: {err}"
                ));
            }
        };
        let model_label = config
            .model
            .clone()
            .filter(|m| !m.trim().is_empty())
            .unwrap_or_else(|| self.spec.model_label.clone());
        let workspace = if share_environment {
            self.task_cwd().await
        } else {
            None
        };
        let child_depth = self.spec.depth + 1;
        let timeout = config.child_timeout();

        let mut adopted = self.adopted_children(call_id);
        let mut waits = Vec::with_capacity(tasks.len());
        for task in tasks {
            if let Some(child) = adopted.remove(&task.index) {
                let (cancel, end) = self.adopt_child(&child, &child_model).await;
                waits.push((task, child.id, child.task_id, cancel, end));
                continue;
            }
            let role = effective_role(task.role, child_depth, &config);
            let session_id = new_session_id();
            let task_id = if share_environment {
                self.spec.task_id.clone()
            } else {
                format!(
                    "{}-sub{}-{}",
                    self.spec.task_id,
                    task.index + 1,
                    &session_id[5..13]
                )
            };
            let spec = SessionSpec {
                session_id: session_id.clone(),
                parent_id: Some(self.spec.session_id.clone()),
                root_id: self.spec.root_id.clone(),
                depth: child_depth,
                task_id: task_id.clone(),
                release_task: !share_environment,
                prompt: task.goal.clone(),
                system_prompt: Some(child_system_prompt(
                    &task,
                    role,
                    workspace.as_deref(),
                    max_depth,
                    child_depth,
                )),
                filter: child_filter(&self.spec.filter, role),
                max_iterations: config.max_iterations(),
                model_label: model_label.clone(),
                role: Some(role),
                interactive: false,
                cancel: self.spec.cancel.child_token(),
                task_index: Some(task.index),
                parent_call_id: Some(call_id.to_owned()),
            };
            self.emit(
                events::CHILD_STARTED,
                &json!({
                    "call_id": call_id,
                    "child_session_id": session_id,
                    "task_index": task.index,
                    "goal": task.goal,
                    "role": role,
                    "task_id": task_id,
                    "shared_environment": share_environment,
                }),
            );
            let cancel = spec.cancel.clone();
            let end = self.spawn_child(spec, &child_model, None).await;
            waits.push((task, session_id, task_id, cancel, end));
        }

        let parent_session = self.spec.session_id.as_str();
        let events = &self.events;
        let label = model_label.as_str();
        let futures =
            waits
                .into_iter()
                .map(|(task, session_id, task_id, cancel, wait)| async move {
                    let end = wait.finish(timeout, &cancel).await;
                    let entry = child_entry(&task, &session_id, &task_id, label, end);
                    events.emit(
                        parent_session,
                        events::CHILD_FINISHED,
                        &child_finished_json(&entry, call_id),
                    );
                    entry
                });
        let mut entries: Vec<ChildEntry> = futures::future::join_all(futures).await;
        self.apply_summary_budget(&mut entries).await;
        for entry in &entries {
            self.workers.extend(entry.workers.iter().cloned());
        }
        delegate::results_json(&entries, started.elapsed())
    }

    /// Starts a child session actor linked to this session's.
    async fn spawn_child(
        &self,
        spec: SessionSpec,
        model: &Arc<dyn ChatModel>,
        restored: Option<Restored>,
    ) -> ChildWait {
        let (report_tx, report_rx) = oneshot::channel();
        let args = SessionArgs {
            hub: self.hub.clone(),
            spec,
            model: model.clone(),
            events: self.events.clone(),
            report: Some(report_tx),
            restored,
        };
        match Actor::spawn_linked(None, SessionActor, args, self.myself.get_cell()).await {
            Ok(_) => ChildWait::Running(report_rx),
            Err(err) => ChildWait::NotStarted(format!("the subagent could not start: {err}")),
        }
    }

    /// After a restart, the children an interrupted `delegate_task` had
    /// started, by their position in it.
    fn adopted_children(&mut self, call_id: &str) -> HashMap<usize, super::store::StoredSession> {
        if self.recovered.remove(call_id) != Some(Recovered::Adopt) {
            return HashMap::new();
        }
        let Some(store) = self.hub.store() else {
            return HashMap::new();
        };
        match super::store::read_children(store.path(), &self.spec.session_id, call_id) {
            Ok(children) => children
                .into_iter()
                .filter_map(|c| c.task_index.map(|i| (i, c)))
                .collect(),
            Err(err) => {
                tracing::warn!(session = %self.spec.session_id, "cannot read the children to adopt: {err}");
                HashMap::new()
            }
        }
    }

    /// An adopted child: one that ended reports its stored outcome; one that
    /// was running resumes and reports when it ends.
    async fn adopt_child(
        &self,
        child: &super::store::StoredSession,
        model: &Arc<dyn ChatModel>,
    ) -> (CancellationToken, ChildWait) {
        let cancel = self.spec.cancel.child_token();
        let Some(store) = self.hub.store() else {
            return (
                cancel,
                ChildWait::NotStarted("sessions are not recorded".to_owned()),
            );
        };
        if child.state != "running" {
            return (
                cancel,
                ChildWait::Ended(resume::outcome_of(store.path(), child)),
            );
        }
        match resume::restore(store.path(), child) {
            Ok(restored) => {
                let spec = resume::spec_of(child, cancel.clone());
                let wait = self.spawn_child(spec, model, Some(restored)).await;
                (cancel, wait)
            }
            Err(err) => (
                cancel,
                ChildWait::NotStarted(format!("the subagent could not resume: {err}")),
            ),
        }
    }

    /// Trims summaries above `delegation.max_summary_chars`, saving the full
    /// text in this session's sandbox so `read_file` can page through it.
    async fn apply_summary_budget(&self, entries: &mut [ChildEntry]) {
        let Some(cap) = self.hub.settings.delegation.max_summary_chars() else {
            return;
        };
        for entry in entries.iter_mut() {
            let Some(summary) = entry.summary.as_ref().filter(|s| s.chars().count() > cap) else {
                continue;
            };
            let id = format!("subagent-summary-{}-{}", entry.task_index, now_ms());
            let spill = self
                .hub
                .dispatcher
                .persist_result(&self.spec.task_id, &id, summary)
                .await;
            let trimmed = delegate::trim_summary(summary, cap, spill.as_deref());
            entry.summary = Some(trimmed);
            entry.summary_truncated = Some(true);
            entry.summary_full_path = spill;
        }
    }

    /// Injects notices that arrived meanwhile.
    fn inject_queued_notices(&mut self) {
        while let Ok((worker, notice)) = self.notices.try_recv() {
            self.inject_notice(&worker, &notice);
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

    /// After a final answer: a notice that arrived, or one for a process the
    /// model asked to be told about, starts a new turn. Returns whether it did.
    async fn wait_for_notices(&mut self) -> bool {
        if let Ok((worker, notice)) = self.notices.try_recv() {
            self.inject_notice(&worker, &notice);
            return true;
        }
        if self.awaited_processes.is_empty() {
            return false;
        }
        let wait = self.hub.settings.notice_wait;
        let received = tokio::select! {
            biased;
            _ = self.spec.cancel.cancelled() => None,
            _ = tokio::time::sleep(wait) => None,
            notice = self.notices.recv() => notice,
        };
        match received {
            Some((worker, notice)) => {
                self.inject_notice(&worker, &notice);
                true
            }
            None => false,
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

    async fn finish(self, ending: Ending) -> SessionOutcome {
        let outcome = SessionOutcome {
            status: ending.status,
            final_text: ending.text,
            error: ending.error,
            api_calls: self.api_calls,
            duration: self.started.elapsed(),
            tokens: self.tokens,
            tool_trace: self.trace,
            workers: self.workers,
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

/// A child being waited for.
enum ChildWait {
    Running(oneshot::Receiver<SessionOutcome>),
    /// Ended before a restart; its stored outcome.
    Ended(SessionOutcome),
    NotStarted(String),
}

/// How the wait for a child ended.
enum ChildEnd {
    Finished(SessionOutcome),
    TimedOut {
        after: Duration,
        outcome: Option<SessionOutcome>,
    },
    /// The child actor went away without a report.
    Vanished,
    NotStarted(String),
}

impl ChildWait {
    async fn finish(self, timeout: Option<Duration>, cancel: &CancellationToken) -> ChildEnd {
        let mut report = match self {
            ChildWait::Running(report) => report,
            ChildWait::Ended(outcome) => return ChildEnd::Finished(outcome),
            ChildWait::NotStarted(reason) => return ChildEnd::NotStarted(reason),
        };
        let Some(limit) = timeout else {
            return match report.await {
                Ok(outcome) => ChildEnd::Finished(outcome),
                Err(_) => ChildEnd::Vanished,
            };
        };
        match tokio::time::timeout(limit, &mut report).await {
            Ok(Ok(outcome)) => ChildEnd::Finished(outcome),
            Ok(Err(_)) => ChildEnd::Vanished,
            Err(_) => {
                cancel.cancel();
                let outcome = tokio::time::timeout(CHILD_STOP_GRACE, report)
                    .await
                    .ok()
                    .and_then(Result::ok);
                ChildEnd::TimedOut {
                    after: limit,
                    outcome,
                }
            }
        }
    }
}

/// The result entry of one child (hermes `_run_single_child`).
fn child_entry(
    task: &ChildTask,
    session_id: &str,
    task_id: &str,
    model: &str,
    end: ChildEnd,
) -> ChildEntry {
    let mut entry = ChildEntry {
        task_index: task.index,
        status: ChildStatus::Error,
        summary: None,
        api_calls: 0,
        duration_seconds: 0.0,
        model: Some(model.to_owned()),
        exit_reason: "error".to_owned(),
        tokens: None,
        tool_trace: Vec::new(),
        error: None,
        summary_truncated: None,
        summary_full_path: None,
        session_id: session_id.to_owned(),
        task_id: task_id.to_owned(),
        workers: Vec::new(),
    };
    match end {
        ChildEnd::Finished(outcome) => {
            let summary = outcome
                .final_text
                .clone()
                .filter(|s| !s.trim().is_empty() && s.trim() != "(empty)");
            let (status, exit_reason) = match outcome.status {
                EndStatus::Interrupted => (ChildStatus::Interrupted, "interrupted"),
                EndStatus::Crashed => (ChildStatus::Error, "error"),
                EndStatus::Failed => (ChildStatus::Failed, "error"),
                EndStatus::Completed if summary.is_some() => (ChildStatus::Completed, "completed"),
                EndStatus::MaxIterations if summary.is_some() => {
                    (ChildStatus::Completed, "max_iterations")
                }
                EndStatus::Completed => (ChildStatus::Failed, "completed"),
                EndStatus::MaxIterations => (ChildStatus::Failed, "max_iterations"),
            };
            entry.status = status;
            entry.exit_reason = exit_reason.to_owned();
            entry.api_calls = outcome.api_calls;
            entry.duration_seconds = delegate::round2(outcome.duration.as_secs_f64());
            entry.tokens = Some(outcome.tokens);
            entry.tool_trace = outcome.tool_trace;
            entry.workers = outcome.workers.into_iter().collect();
            entry.summary = summary;
            if matches!(status, ChildStatus::Failed | ChildStatus::Error) {
                entry.error = Some(
                    outcome
                        .error
                        .unwrap_or_else(|| "Subagent did not produce a response.".to_owned()),
                );
            }
        }
        ChildEnd::TimedOut { after, outcome } => {
            let api_calls = outcome.as_ref().map(|o| o.api_calls).unwrap_or(0);
            entry.status = ChildStatus::Timeout;
            entry.exit_reason = "timeout".to_owned();
            entry.api_calls = api_calls;
            entry.duration_seconds = delegate::round2(after.as_secs_f64());
            entry.error = Some(delegate::timeout_error(after, api_calls));
            if let Some(outcome) = outcome {
                entry.tool_trace = outcome.tool_trace;
                entry.workers = outcome.workers.into_iter().collect();
            }
        }
        ChildEnd::Vanished => {
            entry.error = Some("The subagent stopped without reporting a result.".to_owned())
        }
        ChildEnd::NotStarted(reason) => entry.error = Some(reason),
    }
    entry
}

fn child_finished_json(entry: &ChildEntry, call_id: &str) -> Value {
    json!({
        "call_id": call_id,
        "child_session_id": entry.session_id,
        "task_index": entry.task_index,
        "status": entry.status,
        "summary": entry.summary,
        "error": entry.error,
        "api_calls": entry.api_calls,
        "duration_seconds": entry.duration_seconds,
        "exit_reason": entry.exit_reason,
        "task_id": entry.task_id,
        "workers": entry.workers,
    })
}

/// A result that is a JSON object, parsed.
fn result_object(content: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str::<Value>(content) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// hermes `_looks_like_error_output`: a JSON object result (`object`, see
/// [`result_object`]) with a truthy `error` or an error-ish `status`, or a
/// first line that starts like an error.
fn looks_like_error(content: &str, object: Option<&Map<String, Value>>) -> bool {
    if let Some(map) = object {
        let truthy_error = match map.get("error") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::String(s)) => !s.is_empty(),
            Some(_) => true,
        };
        let status = map
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .trim()
            .to_lowercase();
        if truthy_error || matches!(status.as_str(), "error" | "failed" | "failure" | "timeout") {
            return true;
        }
    }
    let first = content
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_lowercase();
    ["error:", "failed:", "traceback ", "exception:"]
        .iter()
        .any(|p| first.starts_with(p))
}

/// Drops `<think>…</think>` blocks some models put before their answer.
fn strip_think(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<think>") {
        out.push_str(&rest[..start]);
        match rest[start..].find("</think>") {
            Some(end) => rest = rest[start + end + "</think>".len()..].trim_start(),
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out.trim().to_owned()
}

/// The system prompt of a top-level session.
fn root_system_prompt(tools: &BTreeSet<String>) -> String {
    let mut prompt = String::from(
        "You are an AI agent run by caduceus. You complete the user's task by calling the tools you are given. Worker tools run on worker hosts inside this session's environment, which persists between calls: files, the working directory and shell variables stay.\n\n\
- Act rather than describe: inspect, change, verify.\n\
- Several tool calls in one turn are fine: read-only calls and file edits on different paths run in parallel; everything else runs in order.\n",
    );
    if tools.contains("delegate_task") {
        prompt.push_str(
            "- delegate_task hands independent subtasks to subagents that run in parallel, each in its own environment (possibly on another worker host). The call returns when all of them have finished.\n",
        );
    }
    if tools.contains("todo") {
        prompt.push_str("- For work with three or more steps, keep a plan with the todo tool.\n");
    }
    prompt.push_str(
        "\nWhen you are done, answer with a concise summary of what you did and what you found.",
    );
    prompt
}

#[cfg(test)]
#[path = "turn_tests.rs"]
mod tests;
