//! `WorkerLink`: one actor per attached worker. It supervises the worker's
//! stream: when the stream ends or the heartbeats stop, every call in flight
//! gets an error and the actor stops; the Scheduler (its supervisor) then
//! forgets the worker.
//!
//! The calls in flight live in a [`CallTable`] shared with the callers and the
//! stream reader: a call is sent and its result delivered without a hop
//! through the actor's mailbox (each hop is a thread wake-up, and the hot path
//! of a tool call had four of them). The table's lock also orders a call
//! against the link closing, so no call is ever left unanswered.
//!
//! [`read_events`] is the stream reader: results and script calls go to the table,
//! everything else (heartbeats, notices, releases) to the link actor.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures::StreamExt;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{mpsc, oneshot};

use caduceus_proto::{
    CallResult, CancelCall, EnvironmentInfo, PersistResult, RunCall, ScriptToolCall,
    ScriptToolResult, WorkerCommand, WorkerEvent, worker_command, worker_event,
};

/// State of a worker shared with the Scheduler for placement and status,
/// updated by the link and the call table without a message round trip.
/// (The worker's backends change only with a heartbeat and are sent to the
/// scheduler, which owns them.)
#[derive(Debug)]
pub struct WorkerShared {
    pub running: AtomicU32,
    pub draining: AtomicBool,
    /// No new environments (`caduceus workers cordon`); its tasks carry on.
    pub cordoned: AtomicBool,
    pub last_heartbeat: Mutex<Instant>,
    pub environments: Mutex<Vec<EnvironmentInfo>>,
}

impl WorkerShared {
    pub fn new(environments: Vec<EnvironmentInfo>) -> Self {
        WorkerShared {
            running: AtomicU32::new(0),
            draining: AtomicBool::new(false),
            cordoned: AtomicBool::new(false),
            last_heartbeat: Mutex::new(Instant::now()),
            environments: Mutex::new(environments),
        }
    }

    pub fn environments(&self) -> Vec<EnvironmentInfo> {
        self.environments
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default()
    }

    /// Records traffic from the worker: any event proves it alive.
    pub fn touch(&self) {
        if let Ok(mut at) = self.last_heartbeat.lock() {
            *at = Instant::now();
        }
    }

    pub fn heartbeat_age(&self) -> Duration {
        self.last_heartbeat
            .lock()
            .map(|t| t.elapsed())
            .unwrap_or_default()
    }
}

/// Why a call did not get a result from its worker.
#[derive(Debug, Clone)]
pub enum LinkFailure {
    /// The stream to the worker is gone (process died, network cut, stopped heartbeating).
    Lost(String),
    /// The worker is draining and takes no new calls.
    Draining,
}

pub type CallReply = oneshot::Sender<Result<CallResult, LinkFailure>>;

/// The commands a worker answers with a `CallResult`.
pub enum CallCommand {
    Run(RunCall),
    Persist(PersistResult),
}

/// A tool call of a running `execute_code` script, for the caller that
/// sent the run (it owns the pipeline the call goes through), with the way
/// back to the script.
#[derive(Debug)]
pub struct ScriptRequest {
    pub call: ScriptToolCall,
    pub answer: ScriptAnswer,
}

/// Answers one script tool call on the worker that asked it.
pub struct ScriptAnswer {
    table: Weak<CallTable>,
    call_id: String,
    seq: u32,
}

impl std::fmt::Debug for ScriptAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptAnswer")
            .field("call_id", &self.call_id)
            .field("seq", &self.seq)
            .finish()
    }
}

impl ScriptAnswer {
    /// Sends the answer; `counted` when the call went through the pipeline
    /// (the script's result reports how many did). Dropped when the run has
    /// ended or its worker is gone.
    pub fn send(self, body: String, counted: bool) {
        let Some(table) = self.table.upgrade() else {
            return;
        };
        if table.lock().pending.contains_key(&self.call_id) {
            table.send(worker_command::Command::ScriptResult(ScriptToolResult {
                call_id: self.call_id,
                seq: self.seq,
                body,
                counted,
            }));
        }
    }
}

pub type ScriptSink = mpsc::UnboundedSender<ScriptRequest>;

/// Environment events the link forwards to whoever listens (sessions).
pub type NoticeSink = mpsc::UnboundedSender<(String, caduceus_proto::EnvironmentNotice)>;

pub enum LinkMsg {
    /// A heartbeat, notice or release from the worker.
    Inbound(WorkerEvent),
    StreamClosed {
        reason: String,
    },
    CheckHeartbeat,
}

/// The calls in flight on one worker.
pub struct CallTable {
    name: String,
    commands: crate::CommandSender,
    shared: Arc<WorkerShared>,
    state: Mutex<TableState>,
}

#[derive(Default)]
struct TableState {
    pending: HashMap<String, Pending>,
    /// Why the link closed; no call is accepted after that.
    closed: Option<String>,
}

impl CallTable {
    pub fn new(name: String, commands: crate::CommandSender, shared: Arc<WorkerShared>) -> Self {
        CallTable {
            name,
            commands,
            shared,
            state: Mutex::new(TableState::default()),
        }
    }

    pub fn shared(&self) -> &Arc<WorkerShared> {
        &self.shared
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TableState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn is_closed(&self) -> bool {
        self.lock().closed.is_some()
    }

    /// Sends a call (a `run` or a `persist`) to the worker; its result (or
    /// the link's failure) arrives on `reply`.
    pub fn run(&self, call: CallCommand, script: Option<ScriptSink>, reply: CallReply) {
        if self.shared.draining.load(Ordering::Relaxed) {
            let _ = reply.send(Err(LinkFailure::Draining));
            return;
        }
        let mut state = self.lock();
        if let Some(reason) = &state.closed {
            let _ = reply.send(Err(LinkFailure::Lost(reason.clone())));
            return;
        }
        let (call_id, command) = match call {
            CallCommand::Run(run) => (run.call_id.clone(), worker_command::Command::Run(run)),
            CallCommand::Persist(persist) => (
                persist.call_id.clone(),
                worker_command::Command::Persist(persist),
            ),
        };
        if self.send(command) {
            self.shared.running.fetch_add(1, Ordering::Relaxed);
            state.pending.insert(call_id, Pending { reply, script });
        } else {
            let _ = reply.send(Err(LinkFailure::Lost(format!(
                "worker '{}' has closed its command stream",
                self.name
            ))));
        }
    }

    /// Asks the worker to stop a call still in flight.
    pub fn cancel(&self, call_id: &str, reason: &str) {
        if self.lock().pending.contains_key(call_id) {
            self.send(worker_command::Command::Cancel(CancelCall {
                call_id: call_id.to_owned(),
                reason: reason.to_owned(),
            }));
        }
    }

    /// Never waits: a worker that stops reading is found out by liveness
    /// (see [`crate::CommandSender`]); false once its stream has ended.
    pub(crate) fn send(&self, command: worker_command::Command) -> bool {
        self.commands
            .send(Ok(WorkerCommand {
                command: Some(command),
            }))
            .is_ok()
    }

    /// A result from the worker: answers its caller.
    pub fn complete(&self, result: CallResult) {
        let pending = self.lock().pending.remove(&result.call_id);
        match pending {
            Some(pending) => {
                let _ =
                    self.shared
                        .running
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                            Some(n.saturating_sub(1))
                        });
                let _ = pending.reply.send(Ok(result));
            }
            None => {
                tracing::debug!(call_id = %result.call_id, "result for a call nobody waits for (cancelled or timed out)")
            }
        }
    }

    /// A tool call of a running script: handed to whoever sent its run.
    /// One for a call that is not running `execute_code` is dropped.
    pub fn script_call(self: &Arc<Self>, call: ScriptToolCall) {
        let state = self.lock();
        let Some(Pending {
            script: Some(sink), ..
        }) = state.pending.get(&call.call_id)
        else {
            tracing::debug!(call_id = %call.call_id, "script call for a run nobody serves dropped");
            return;
        };
        let answer = ScriptAnswer {
            table: Arc::downgrade(self),
            call_id: call.call_id.clone(),
            seq: call.seq,
        };
        let _ = sink.send(ScriptRequest { call, answer });
    }

    /// Fails every call in flight and refuses new ones.
    pub fn close(&self, reason: &str) {
        let drained: Vec<Pending> = {
            let mut state = self.lock();
            if state.closed.is_none() {
                state.closed = Some(reason.to_owned());
            }
            state.pending.drain().map(|(_, p)| p).collect()
        };
        for pending in drained {
            let _ = pending
                .reply
                .send(Err(LinkFailure::Lost(reason.to_owned())));
        }
        self.shared.running.store(0, Ordering::Relaxed);
    }
}

pub struct WorkerLink;

pub struct LinkArgs {
    pub worker_id: String,
    pub name: String,
    /// The worker's calls in flight; also its command channel and shared state.
    pub calls: Arc<CallTable>,
    /// The backends the worker offers, as last reported.
    pub backends: Vec<String>,
    pub liveness: super::Liveness,
    /// When the link last looked at the worker's silence.
    pub last_check: Instant,
    /// No worker is judged lost before this (see `CheckHeartbeat`).
    pub judge_after: Instant,
    /// Tells the scheduler about backend changes and released environments.
    pub scheduler: ActorRef<super::SchedulerMsg>,
    pub notices: Option<NoticeSink>,
    /// The scheduler's placements: notices are forwarded only for tasks
    /// placed on this worker (a stale environment answers nothing).
    pub placements: super::Placements,
    /// A worker declared lost here is counted here.
    pub metrics: crate::metrics::Metrics,
}

impl LinkArgs {
    fn shared(&self) -> &WorkerShared {
        self.calls.shared()
    }
}

struct Pending {
    reply: CallReply,
    script: Option<ScriptSink>,
}

impl Actor for WorkerLink {
    type Msg = LinkMsg;
    type State = LinkArgs;
    type Arguments = LinkArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<LinkMsg>,
        args: LinkArgs,
    ) -> Result<LinkArgs, ActorProcessingErr> {
        myself.send_interval(args.liveness.check_every(), || LinkMsg::CheckHeartbeat);
        Ok(args)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<LinkMsg>,
        state: &mut LinkArgs,
    ) -> Result<(), ActorProcessingErr> {
        state.calls.close("the worker's link was closed");
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<LinkMsg>,
        message: LinkMsg,
        state: &mut LinkArgs,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            LinkMsg::Inbound(event) => handle_event(state, event),
            LinkMsg::StreamClosed { reason } => {
                // A worker that closes its stream is leaving (shutdown, embedded
                // fleet stopping); a broken stream is worth a warning.
                if reason == "stream closed" {
                    tracing::info!(worker = %state.name, "worker left");
                } else {
                    tracing::warn!(worker = %state.name, %reason, "worker stream closed");
                    state
                        .metrics
                        .worker_lost(crate::metrics::LostReason::Stream);
                }
                state
                    .calls
                    .close(&format!("worker '{}' disconnected ({reason})", state.name));
                myself.stop(Some(reason));
            }
            LinkMsg::CheckHeartbeat => {
                let now = Instant::now();
                let since_check = now.duration_since(state.last_check);
                state.last_check = now;
                if since_check > state.liveness.suspect_after {
                    // The coordinator itself was not running (a loaded or
                    // stopped host): heartbeats may sit unread in the stream,
                    // and the checks missed meanwhile arrive in a burst.
                    // Judge the worker only once its next heartbeat has had
                    // time to be read.
                    state.judge_after = now + state.liveness.suspect_after;
                }
                if now < state.judge_after {
                    return Ok(());
                }
                let age = state.shared().heartbeat_age();
                if age > state.liveness.lost_after {
                    let reason = format!("no heartbeat for {:.1}s", age.as_secs_f64());
                    tracing::warn!(worker = %state.name, %reason, "worker presumed dead");
                    state
                        .metrics
                        .worker_lost(crate::metrics::LostReason::Heartbeat);
                    state.calls.close(&format!(
                        "worker '{}' stopped answering ({reason})",
                        state.name
                    ));
                    myself.stop(Some(reason));
                }
            }
        }
        Ok(())
    }
}

/// Everything but results and script calls, which [`read_events`] hands to the
/// call table itself.
fn handle_event(state: &mut LinkArgs, event: WorkerEvent) {
    let shared = state.shared();
    shared.touch();
    match event.event {
        Some(worker_event::Event::Heartbeat(heartbeat)) => {
            if let Ok(mut envs) = shared.environments.lock() {
                *envs = heartbeat.environments;
            }
            if state.backends != heartbeat.backends {
                state.backends = heartbeat.backends;
                let _ = state.scheduler.cast(super::SchedulerMsg::BackendsChanged {
                    worker_id: state.worker_id.clone(),
                    backends: state.backends.clone(),
                });
            }
        }
        Some(worker_event::Event::Notice(notice)) => {
            let placed_here = state
                .placements
                .read()
                .map(|p| {
                    p.get(&notice.task_id)
                        .is_some_and(|p| p.worker_id == state.worker_id)
                })
                .unwrap_or(false);
            if !placed_here {
                tracing::debug!(worker = %state.name, task = %notice.task_id, kind = %notice.kind, "notice from an environment not placed here dropped");
            } else if let Some(sink) = &state.notices {
                let _ = sink.send((state.name.clone(), notice));
            }
        }
        Some(worker_event::Event::Released(released)) => {
            if let Ok(mut envs) = shared.environments.lock() {
                envs.retain(|e| e.task_id != released.task_id);
            }
            let _ = state
                .scheduler
                .cast(super::SchedulerMsg::EnvironmentReleased {
                    worker_id: state.worker_id.clone(),
                    task_id: released.task_id,
                    reason: released.reason,
                });
        }
        Some(worker_event::Event::Hosted(tools)) => {
            let _ = state.scheduler.cast(super::SchedulerMsg::Hosted {
                worker_id: state.worker_id.clone(),
                tools,
            });
        }
        Some(worker_event::Event::Hello(_)) => {
            tracing::warn!(worker = %state.name, "duplicate hello ignored");
        }
        Some(worker_event::Event::Result(_) | worker_event::Event::ScriptCall(_)) | None => {}
    }
}

/// Reads a worker's events until its stream ends: results and script calls go
/// straight to their callers through the call table; the link actor sees the
/// rest and, at the end, why the stream closed.
pub async fn read_events(
    mut events: crate::WorkerEventStream,
    link: ActorRef<LinkMsg>,
    calls: Arc<CallTable>,
) {
    let reason = loop {
        match events.next().await {
            Some(Ok(WorkerEvent {
                event: Some(worker_event::Event::Result(result)),
            })) => {
                calls.shared().touch();
                calls.complete(result);
            }
            Some(Ok(WorkerEvent {
                event: Some(worker_event::Event::ScriptCall(call)),
            })) => {
                calls.shared().touch();
                calls.script_call(call);
            }
            Some(Ok(event)) => {
                if link.cast(LinkMsg::Inbound(event)).is_err() {
                    break "the link stopped".to_owned();
                }
            }
            Some(Err(status)) => break format!("stream error: {}", status.message()),
            None => break "stream closed".to_owned(),
        }
    };
    let _ = link.cast(LinkMsg::StreamClosed { reason });
}
