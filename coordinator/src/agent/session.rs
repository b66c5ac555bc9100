//! The `Session` actor: one per conversation. It owns the session's
//! mailbox — cancel, clarify answers, environment notices — and runs the
//! agent loop ([`super::turn::AgentLoop`]) on a task of its own, so that a
//! long model request or tool call never blocks the mailbox. A delegated
//! child is a Session actor spawned linked to its parent's actor; its
//! cancellation token is a child of the parent's, so cancelling a session
//! cancels its whole subtree.
//!
//! A loop that panics is caught here: the session ends `crashed` with an
//! `error` and a `final` event, and a child reports a failed entry to its
//! parent, which carries on.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use serde::Serialize;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use caduceus_llm::ChatModel;
use caduceus_proto::EnvironmentNotice;

use super::delegate::{Role, Tokens, TraceEntry};
use super::events::{self, EventStream};
use super::hub::HubInner;
use super::resume::Restored;
use super::store::SessionEnd;
use super::turn::AgentLoop;
use crate::call::{CallContext, ToolFilter};
use crate::dispatch::{CallRequest, RawArguments, SessionEvent, SessionEventKind};

/// Everything that defines one session.
#[derive(Debug, Clone)]
pub(crate) struct SessionSpec {
    pub session_id: String,
    pub parent_id: Option<String>,
    pub root_id: String,
    pub depth: u32,
    /// The environment key of the session's worker tools.
    pub task_id: String,
    /// Release the environment when the session ends (it was made for it).
    pub release_task: bool,
    /// The first user message (the prompt, or a child's goal).
    pub prompt: String,
    /// A child's system prompt; `None` builds the root prompt.
    pub system_prompt: Option<String>,
    pub filter: ToolFilter,
    /// The client token that started the root session (audit log).
    pub caller: Option<String>,
    pub max_iterations: u32,
    /// What the model is called in events and the store.
    pub model_label: String,
    pub role: Option<Role>,
    /// A client answers clarify questions.
    pub interactive: bool,
    pub cancel: CancellationToken,
    /// A child's position in its parent's batch.
    pub task_index: Option<usize>,
    /// A child's `delegate_task` call in its parent.
    pub parent_call_id: Option<String>,
    /// The JSON Schema a child's final answer must satisfy.
    pub output_schema: Option<serde_json::Value>,
    /// The directory its environment starts in (a cron job's `workdir`),
    /// recorded so a resumed session's environment starts there too.
    pub workdir: Option<String>,
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EndStatus {
    /// The model gave a final answer.
    Completed,
    /// The budget ran out; the final text is the model's summary.
    MaxIterations,
    /// Cancelled (CancelSession, the client went away, the parent was cancelled).
    Interrupted,
    /// The model failed (API error, three turns of invalid tool names, …).
    Failed,
    /// The agent loop panicked.
    Crashed,
}

impl EndStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            EndStatus::Completed => "completed",
            EndStatus::MaxIterations => "max_iterations",
            EndStatus::Interrupted => "interrupted",
            EndStatus::Failed => "failed",
            EndStatus::Crashed => "crashed",
        }
    }

    /// The status a stored state names (an unknown one reads as failed).
    pub fn parse(state: &str) -> Self {
        match state {
            "completed" => EndStatus::Completed,
            "max_iterations" => EndStatus::MaxIterations,
            "interrupted" => EndStatus::Interrupted,
            "crashed" => EndStatus::Crashed,
            _ => EndStatus::Failed,
        }
    }
}

/// What a session hands back when it ends (to its parent, for delegation).
#[derive(Debug, Clone)]
pub(crate) struct SessionOutcome {
    pub status: EndStatus,
    pub final_text: Option<String>,
    pub error: Option<String>,
    pub api_calls: u32,
    pub duration: Duration,
    pub tokens: Tokens,
    pub tool_trace: Vec<TraceEntry>,
    pub workers: BTreeSet<String>,
    /// Steers its parent queued that the session ended before reading.
    pub missed_steer: Vec<String>,
    /// With an `output_schema`: the check of its final answer.
    pub schema: Option<super::output_schema::SchemaCheck>,
    /// A child's background processes still running when it ended, which
    /// the runtime killed (hermes: they belong to the agent that started them).
    pub killed_processes: Vec<String>,
}

/// What a running session shares with its hub and its parent without a
/// message: its numbers, its signs of progress (read by the parent's stall
/// monitor) and its steer queue.
#[derive(Debug)]
pub(crate) struct SessionShared {
    pub api_calls: AtomicU32,
    /// Milliseconds since the epoch of the last sign of progress: a model
    /// request sent or answered, a streamed chunk, a tool call started or
    /// finished.
    last_activity_ms: AtomicU64,
    /// Tool calls running now (the stall monitor allows longer inside one).
    tools_running: AtomicU32,
    /// Waiting in a `delegate_task` call for its own children (an
    /// orchestrator): they are watched themselves, so it is not stalled.
    delegating: AtomicBool,
    /// Woken when `tools_running` or `delegating` change (not on every
    /// touch: streamed chunks are many).
    phase: tokio::sync::Notify,
    steer: Mutex<SteerBox>,
    /// Background processes the session started (held here, not in the
    /// loop, so a loop that panics still has its processes ended).
    processes: Mutex<Vec<String>>,
}

/// Steers queued by the parent. Queuing and closing take the same lock, so
/// a steer is either read by the session or handed back as missed when it
/// ends — never lost, never reported delivered when it was not.
#[derive(Debug, Default)]
struct SteerBox {
    queued: Vec<String>,
    closed: bool,
}

impl Default for SessionShared {
    fn default() -> Self {
        SessionShared {
            api_calls: AtomicU32::new(0),
            last_activity_ms: AtomicU64::new(events::now_ms()),
            tools_running: AtomicU32::new(0),
            delegating: AtomicBool::new(false),
            phase: tokio::sync::Notify::new(),
            steer: Mutex::new(SteerBox::default()),
            processes: Mutex::new(Vec::new()),
        }
    }
}

impl SessionShared {
    pub fn api_calls(&self) -> u32 {
        self.api_calls.load(Ordering::Relaxed)
    }

    /// A sign of progress.
    pub fn touch(&self) {
        self.last_activity_ms
            .fetch_max(events::now_ms(), Ordering::Relaxed);
    }

    pub fn last_activity_ms(&self) -> u64 {
        self.last_activity_ms.load(Ordering::Relaxed)
    }

    pub fn tools_started(&self, count: u32) {
        self.tools_running.fetch_add(count, Ordering::Relaxed);
        self.touch();
        self.phase.notify_waiters();
    }

    /// Resolves at the next change of phase (a tool call starting or
    /// ending, delegation starting or ending).
    pub fn phase_changed(&self) -> tokio::sync::futures::Notified<'_> {
        self.phase.notified()
    }

    pub fn tools_finished(&self, count: u32) {
        let _ = self
            .tools_running
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(count))
            });
        self.touch();
        self.phase.notify_waiters();
    }

    pub fn set_delegating(&self, waiting: bool) {
        self.delegating.store(waiting, Ordering::Relaxed);
        self.touch();
        self.phase.notify_waiters();
    }

    pub fn delegating(&self) -> bool {
        self.delegating.load(Ordering::Relaxed)
    }

    pub fn in_tool(&self) -> bool {
        self.tools_running.load(Ordering::Relaxed) > 0
    }

    /// A background process the session started.
    pub fn process_started(&self, process: String) {
        self.processes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(process);
    }

    /// The background processes started so far (emptied: each is ended once).
    pub fn take_processes(&self) -> Vec<String> {
        std::mem::take(&mut *self.processes.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Queues a steer; `false` when the session has already ended.
    pub fn steer(&self, text: String) -> bool {
        let mut steer = self.steer.lock().unwrap_or_else(|e| e.into_inner());
        if steer.closed {
            return false;
        }
        steer.queued.push(text);
        true
    }

    /// The steers queued since the last call.
    pub fn take_steers(&self) -> Vec<String> {
        let mut steer = self.steer.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut steer.queued)
    }

    pub fn accepting_steer(&self) -> bool {
        !self.steer.lock().unwrap_or_else(|e| e.into_inner()).closed
    }

    /// The session has ended: no steer is accepted any more; returns those
    /// it never read.
    pub fn close_steering(&self) -> Vec<String> {
        let mut steer = self.steer.lock().unwrap_or_else(|e| e.into_inner());
        steer.closed = true;
        std::mem::take(&mut steer.queued)
    }
}

pub(crate) enum SessionMsg {
    Cancel,
    /// The loop waits for the answer to `question_id`.
    AwaitClarify {
        question_id: String,
        answer: oneshot::Sender<String>,
    },
    /// A client answers; the reply says whether a question was waiting.
    AnswerClarify {
        question_id: String,
        answer: String,
        reply: RpcReplyPort<bool>,
    },
    Notice {
        worker: String,
        notice: EnvironmentNotice,
    },
    LoopEnded(Result<SessionOutcome, String>),
}

pub(crate) struct SessionArgs {
    pub hub: Arc<HubInner>,
    pub spec: SessionSpec,
    pub model: Arc<dyn ChatModel>,
    pub events: EventStream,
    /// Where a child's outcome goes.
    pub report: Option<oneshot::Sender<SessionOutcome>>,
    /// A session resumed after a restart: where it carries on.
    pub restored: Option<Restored>,
    /// Made by the starter, which may watch it (a parent's stall monitor).
    pub shared: Arc<SessionShared>,
}

pub(crate) struct SessionActor;

/// Starts a session actor: the one way sessions start. A child is linked to
/// its parent's actor (the parent outlives it and sees it stop); a root
/// session has no supervisor.
pub(crate) async fn start_session(
    args: SessionArgs,
    parent: Option<ractor::ActorCell>,
) -> Result<(), ractor::SpawnErr> {
    match parent {
        Some(parent) => Actor::spawn_linked(None, SessionActor, args, parent).await,
        None => Actor::spawn(None, SessionActor, args).await,
    }
    .map(|_| ())
}

pub(crate) struct SessionState {
    hub: Arc<HubInner>,
    spec: SessionSpec,
    events: EventStream,
    notices: mpsc::UnboundedSender<(String, EnvironmentNotice)>,
    clarify: HashMap<String, oneshot::Sender<String>>,
    report: Option<oneshot::Sender<SessionOutcome>>,
    shared: Arc<SessionShared>,
    started: std::time::Instant,
}

impl Actor for SessionActor {
    type Msg = SessionMsg;
    type State = SessionState;
    type Arguments = SessionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SessionMsg>,
        args: SessionArgs,
    ) -> Result<SessionState, ActorProcessingErr> {
        let (notices_tx, notices_rx) = mpsc::unbounded_channel();
        // A resumed session started before; its hooks heard that then.
        if args.restored.is_none() {
            lifecycle_started(&args.hub, &args.spec).await;
        }
        let shared = args.shared.clone();
        args.hub
            .register(&args.spec, myself.clone(), shared.clone());
        let mut agent = AgentLoop::new(
            args.hub.clone(),
            args.spec.clone(),
            args.model,
            args.events.clone(),
            myself.clone(),
            notices_rx,
            shared.clone(),
        );
        if let Some(restored) = args.restored {
            agent.restore(restored);
        }
        let handle = tokio::spawn(agent.run());
        let me = myself;
        tokio::spawn(async move {
            let ended = handle.await.map_err(|err| {
                if err.is_panic() {
                    let payload = err.into_panic();
                    payload
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".to_owned())
                } else {
                    "the agent loop was aborted".to_owned()
                }
            });
            let _ = me.cast(SessionMsg::LoopEnded(ended));
        });
        Ok(SessionState {
            hub: args.hub,
            spec: args.spec,
            events: args.events,
            notices: notices_tx,
            clarify: HashMap::new(),
            report: args.report,
            shared,
            started: std::time::Instant::now(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SessionMsg>,
        message: SessionMsg,
        state: &mut SessionState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SessionMsg::Cancel => state.spec.cancel.cancel(),
            SessionMsg::AwaitClarify {
                question_id,
                answer,
            } => {
                state.clarify.insert(question_id, answer);
            }
            SessionMsg::AnswerClarify {
                question_id,
                answer,
                reply,
            } => {
                let accepted = match state.clarify.remove(&question_id) {
                    Some(waiter) => waiter.send(answer).is_ok(),
                    None => false,
                };
                let _ = reply.send(accepted);
            }
            SessionMsg::Notice { worker, notice } => {
                let _ = state.notices.send((worker, notice));
            }
            SessionMsg::LoopEnded(ended) => {
                let outcome = match ended {
                    Ok(outcome) => outcome,
                    Err(panic) => crashed(state, &panic).await,
                };
                if let Some(report) = state.report.take() {
                    let _ = report.send(outcome);
                }
                myself.stop(None);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<SessionMsg>,
        event: SupervisionEvent,
        state: &mut SessionState,
    ) -> Result<(), ActorProcessingErr> {
        // A child's outcome travels on its report channel (a child actor that
        // dies without reporting drops the channel, which its parent's
        // delegation reads as an error entry); the parent never fails with it.
        if let SupervisionEvent::ActorFailed(cell, err) = event {
            tracing::warn!(session = %state.spec.session_id, child = ?cell.get_id(), "a child session failed: {err}");
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<SessionMsg>,
        state: &mut SessionState,
    ) -> Result<(), ActorProcessingErr> {
        state.spec.cancel.cancel();
        state.hub.unregister(&state.spec.session_id);
        Ok(())
    }
}

/// The outcome of a session whose loop panicked; tells the client.
async fn crashed(state: &SessionState, panic: &str) -> SessionOutcome {
    let message = format!("The agent loop of this session crashed: {panic}");
    tracing::error!(session = %state.spec.session_id, "{message}");
    let outcome = SessionOutcome {
        status: EndStatus::Crashed,
        final_text: None,
        error: Some(message),
        api_calls: state.shared.api_calls(),
        duration: state.started.elapsed(),
        tokens: Tokens::default(),
        tool_trace: Vec::new(),
        workers: BTreeSet::new(),
        missed_steer: state.shared.close_steering(),
        schema: None,
        killed_processes: end_child_processes(
            &state.hub,
            &state.spec,
            &state.events,
            &state.shared,
        )
        .await,
    };
    conclude(&state.hub, &state.spec, &state.events, &outcome, "error").await;
    outcome
}

/// A child's background processes die with it (hermes 0.21), however it
/// ended — a loop that panicked included: each one still running is killed
/// through the pipeline (the worker's `process` tool, in the child's
/// environment — which its parent may share, so only the child's own go).
/// Returns the ids of those it killed.
pub(crate) async fn end_child_processes(
    hub: &HubInner,
    spec: &SessionSpec,
    stream: &EventStream,
    shared: &SessionShared,
) -> Vec<String> {
    let processes = shared.take_processes();
    if spec.parent_id.is_none() {
        return Vec::new();
    }
    let mut killed = Vec::new();
    for process in processes {
        let request = CallRequest {
            tool: "process".to_owned(),
            arguments: RawArguments::Value(json!({"action": "kill", "session_id": process})),
            ctx: CallContext {
                task_id: spec.task_id.clone(),
                session_id: Some(spec.session_id.clone()),
                tool_call_id: None,
                from_agent_loop: true,
                // The runtime's call, not the model's: not bound by its toolsets.
                filter: ToolFilter::default(),
                caller: spec.caller.clone(),
                trace: None,
            },
        };
        let result = hub.dispatcher.call(request).await.render();
        let status = serde_json::from_str::<serde_json::Value>(&result)
            .ok()
            .and_then(|r| r.get("status").and_then(|s| s.as_str()).map(str::to_owned));
        if status.as_deref() == Some("killed") {
            killed.push(process);
        }
    }
    if !killed.is_empty() {
        stream.emit(
            &spec.session_id,
            events::PROCESSES_KILLED,
            &json!({"process_ids": killed}),
        );
    }
    killed
}

/// Ends a session the way its readers rely on, however it ended: the
/// environment made for it is released, its record is complete on disk, and
/// then `error` (when it failed) and `final` go out — a client that exits on
/// `final` finds the whole transcript in the database.
pub(crate) async fn conclude(
    hub: &HubInner,
    spec: &SessionSpec,
    stream: &EventStream,
    outcome: &SessionOutcome,
    exit_reason: &str,
) {
    if spec.release_task {
        hub.dispatcher.forget_task(&spec.task_id);
        hub.dispatcher.scheduler().release(&spec.task_id).await;
    }
    if let Some(store) = hub.store() {
        store.session_ended(SessionEnd {
            id: spec.session_id.clone(),
            state: outcome.status.as_str().to_owned(),
            api_calls: outcome.api_calls,
            exit_reason: exit_reason.to_owned(),
            final_response: outcome.final_text.clone(),
            error: outcome.error.clone(),
            input_tokens: outcome.tokens.input,
            output_tokens: outcome.tokens.output,
        });
        store.flush().await;
    }
    lifecycle_ended(hub, spec, outcome, exit_reason).await;
    if let Some(error) = &outcome.error {
        stream.emit(&spec.session_id, events::ERROR, &json!({"message": error}));
    }
    stream.emit(
        &spec.session_id,
        events::FINAL,
        &json!({
            "text": outcome.final_text,
            "status": outcome.status.as_str(),
            "exit_reason": exit_reason,
            "error": outcome.error,
            "api_calls": outcome.api_calls,
            "duration_seconds": super::delegate::round2(outcome.duration.as_secs_f64()),
            "tokens": outcome.tokens,
            "workers": outcome.workers,
        }),
    );
    if spec.parent_id.is_none() {
        hub.stream_ended(&spec.session_id);
    }
}

/// `on_session_start` (a top-level session) or `subagent_start` (a child).
async fn lifecycle_started(hub: &HubInner, spec: &SessionSpec) {
    let mut data = serde_json::Map::new();
    data.insert("model".to_owned(), json!(spec.model_label));
    data.insert("platform".to_owned(), json!("caduceus"));
    let kind = match &spec.parent_id {
        None => SessionEventKind::Start,
        Some(_) => {
            data.insert("child_session_id".to_owned(), json!(spec.session_id));
            data.insert("child_goal".to_owned(), json!(spec.prompt));
            data.insert("child_role".to_owned(), json!(role_name(spec.role)));
            SessionEventKind::SubagentStart
        }
    };
    hub.dispatcher
        .session_event(SessionEvent {
            kind,
            session_id: &spec.session_id,
            parent_session_id: spec.parent_id.as_deref(),
            task_id: &spec.task_id,
            data,
        })
        .await;
}

/// `on_session_end` (a top-level session) or `subagent_stop` (a child),
/// before the `final` event: a client that exits on it finds the hooks run.
async fn lifecycle_ended(
    hub: &HubInner,
    spec: &SessionSpec,
    outcome: &SessionOutcome,
    exit_reason: &str,
) {
    let mut data = serde_json::Map::new();
    let duration_ms = u64::try_from(outcome.duration.as_millis()).unwrap_or(u64::MAX);
    data.insert("model".to_owned(), json!(spec.model_label));
    data.insert("platform".to_owned(), json!("caduceus"));
    let kind = match &spec.parent_id {
        None => {
            data.insert(
                "completed".to_owned(),
                json!(outcome.status == EndStatus::Completed),
            );
            data.insert(
                "interrupted".to_owned(),
                json!(outcome.status == EndStatus::Interrupted),
            );
            data.insert("status".to_owned(), json!(outcome.status.as_str()));
            data.insert("exit_reason".to_owned(), json!(exit_reason));
            data.insert("api_calls".to_owned(), json!(outcome.api_calls));
            data.insert("duration_ms".to_owned(), json!(duration_ms));
            SessionEventKind::End
        }
        Some(_) => {
            data.insert("child_session_id".to_owned(), json!(spec.session_id));
            data.insert("child_role".to_owned(), json!(role_name(spec.role)));
            data.insert("child_summary".to_owned(), json!(outcome.final_text));
            data.insert("child_status".to_owned(), json!(outcome.status.as_str()));
            data.insert("duration_ms".to_owned(), json!(duration_ms));
            SessionEventKind::SubagentStop
        }
    };
    hub.dispatcher
        .session_event(SessionEvent {
            kind,
            session_id: &spec.session_id,
            parent_session_id: spec.parent_id.as_deref(),
            task_id: &spec.task_id,
            data,
        })
        .await;
}

fn role_name(role: Option<Role>) -> &'static str {
    role.unwrap_or(Role::Leaf).as_str()
}
