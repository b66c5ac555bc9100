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

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

use caduceus_proto::{
    CallResult, CancelCall, Drain, EnvironmentInfo, ReleaseEnvironment, RunCall, WorkerCommand,
    WorkerEvent, worker_command, worker_event,
};

/// State of a worker shared with the Scheduler for placement and status,
/// updated by the link without a message round trip.
#[derive(Debug)]
pub struct WorkerShared {
    pub running: AtomicU32,
    pub draining: AtomicBool,
    pub last_heartbeat: Mutex<Instant>,
    pub environments: Mutex<Vec<EnvironmentInfo>>,
    pub backends: Mutex<Vec<String>>,
}

impl WorkerShared {
    pub fn new(backends: Vec<String>, environments: Vec<EnvironmentInfo>) -> Self {
        WorkerShared {
            running: AtomicU32::new(0),
            draining: AtomicBool::new(false),
            last_heartbeat: Mutex::new(Instant::now()),
            environments: Mutex::new(environments),
            backends: Mutex::new(backends),
        }
    }

    pub fn backends(&self) -> Vec<String> {
        self.backends.lock().map(|b| b.clone()).unwrap_or_default()
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

/// Environment events the link forwards to whoever listens (sessions).
pub type NoticeSink = mpsc::UnboundedSender<(String, caduceus_proto::EnvironmentNotice)>;

pub enum LinkMsg {
    Release { task_id: String },
    Drain,
    Inbound(WorkerEvent),
    StreamClosed { reason: String },
    CheckHeartbeat,
}

/// The calls in flight on one worker.
pub struct CallTable {
    name: String,
    commands: mpsc::Sender<Result<WorkerCommand, Status>>,
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
    pub fn new(
        name: String,
        commands: mpsc::Sender<Result<WorkerCommand, Status>>,
        shared: Arc<WorkerShared>,
    ) -> Self {
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

    /// Sends a call to the worker; its result (or the link's failure) arrives
    /// on `reply`.
    pub fn run(&self, call: RunCall, output: Option<mpsc::Sender<Bytes>>, reply: CallReply) {
        if self.shared.draining.load(Ordering::Relaxed) {
            let _ = reply.send(Err(LinkFailure::Draining));
            return;
        }
        let mut state = self.lock();
        if let Some(reason) = &state.closed {
            let _ = reply.send(Err(LinkFailure::Lost(reason.clone())));
            return;
        }
        let call_id = call.call_id.clone();
        // try_send: a worker that does not read its commands (64 queued) is
        // as good as gone, and the caller must not wait on it here.
        let sent = self.commands.try_send(Ok(WorkerCommand {
            command: Some(worker_command::Command::Run(call)),
        }));
        if sent.is_ok() {
            self.shared.running.fetch_add(1, Ordering::Relaxed);
            state.pending.insert(call_id, Pending { reply, output });
        } else {
            let _ = reply.send(Err(LinkFailure::Lost(format!(
                "worker '{}' is not reading its commands",
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

    fn send(&self, command: worker_command::Command) -> bool {
        self.commands
            .try_send(Ok(WorkerCommand {
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

    /// A piece of live output: best effort, a slow reader loses chunks, never
    /// the final result.
    pub fn output(&self, call_id: &str, chunk: Vec<u8>) {
        let state = self.lock();
        if let Some(Pending {
            output: Some(output),
            ..
        }) = state.pending.get(call_id)
        {
            let _ = output.try_send(Bytes::from(chunk));
        }
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
    pub commands: mpsc::Sender<Result<WorkerCommand, Status>>,
    pub shared: Arc<WorkerShared>,
    pub calls: Arc<CallTable>,
    pub heartbeat_interval: Duration,
    /// Tells the scheduler about backend changes and released environments.
    pub scheduler: ActorRef<super::SchedulerMsg>,
    pub notices: Option<NoticeSink>,
}

struct Pending {
    reply: CallReply,
    output: Option<mpsc::Sender<Bytes>>,
}

pub struct LinkState {
    args: LinkArgs,
}

impl LinkState {
    fn fail_all(&mut self, reason: &str) {
        self.args.calls.close(reason);
    }

    fn send(&self, command: worker_command::Command) -> bool {
        // try_send keeps the actor responsive: a worker that does not read its
        // commands (64 queued) is as good as gone.
        self.args
            .commands
            .try_send(Ok(WorkerCommand {
                command: Some(command),
            }))
            .is_ok()
    }
}

impl Actor for WorkerLink {
    type Msg = LinkMsg;
    type State = LinkState;
    type Arguments = LinkArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<LinkMsg>,
        args: LinkArgs,
    ) -> Result<LinkState, ActorProcessingErr> {
        let period = args.heartbeat_interval;
        myself.send_interval(period, || LinkMsg::CheckHeartbeat);
        Ok(LinkState { args })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<LinkMsg>,
        state: &mut LinkState,
    ) -> Result<(), ActorProcessingErr> {
        state.fail_all("the worker's link was closed");
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<LinkMsg>,
        message: LinkMsg,
        state: &mut LinkState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            LinkMsg::Release { task_id } => {
                state.send(worker_command::Command::Release(ReleaseEnvironment {
                    task_id,
                }));
            }
            LinkMsg::Drain => {
                state.args.shared.draining.store(true, Ordering::Relaxed);
                state.send(worker_command::Command::Drain(Drain {}));
            }
            LinkMsg::Inbound(event) => handle_event(state, event),
            LinkMsg::StreamClosed { reason } => {
                // A worker that closes its stream is leaving (shutdown, embedded
                // fleet stopping); a broken stream is worth a warning.
                if reason == "stream closed" {
                    tracing::info!(worker = %state.args.name, "worker left");
                } else {
                    tracing::warn!(worker = %state.args.name, %reason, "worker stream closed");
                }
                state.fail_all(&format!(
                    "worker '{}' disconnected ({reason})",
                    state.args.name
                ));
                myself.stop(Some(reason));
            }
            LinkMsg::CheckHeartbeat => {
                let age = state.args.shared.heartbeat_age();
                if age > state.args.heartbeat_interval * 3 {
                    let reason = format!("no heartbeat for {:.1}s", age.as_secs_f64());
                    tracing::warn!(worker = %state.args.name, %reason, "worker presumed dead");
                    state.fail_all(&format!(
                        "worker '{}' stopped answering ({reason})",
                        state.args.name
                    ));
                    myself.stop(Some(reason));
                }
            }
        }
        Ok(())
    }
}

fn handle_event(state: &mut LinkState, event: WorkerEvent) {
    let shared = &state.args.shared;
    shared.touch();
    match event.event {
        // The stream reader hands these to the call table directly; they
        // only arrive here from tests or older readers.
        Some(worker_event::Event::Output(chunk)) => {
            state.args.calls.output(&chunk.call_id, chunk.chunk)
        }
        Some(worker_event::Event::Result(result)) => state.args.calls.complete(result),
        Some(worker_event::Event::Heartbeat(heartbeat)) => {
            if let Ok(mut envs) = shared.environments.lock() {
                *envs = heartbeat.environments;
            }
            let changed = match shared.backends.lock() {
                Ok(mut backends) if *backends != heartbeat.backends => {
                    *backends = heartbeat.backends;
                    true
                }
                _ => false,
            };
            if changed {
                let _ = state.args.scheduler.cast(super::SchedulerMsg::FleetChanged);
            }
        }
        Some(worker_event::Event::Notice(notice)) => {
            if let Some(sink) = &state.args.notices {
                let _ = sink.send((state.args.name.clone(), notice));
            }
        }
        Some(worker_event::Event::Released(released)) => {
            if let Ok(mut envs) = shared.environments.lock() {
                envs.retain(|e| e.task_id != released.task_id);
            }
            let _ = state
                .args
                .scheduler
                .cast(super::SchedulerMsg::EnvironmentReleased {
                    worker_id: state.args.worker_id.clone(),
                    task_id: released.task_id,
                    reason: released.reason,
                });
        }
        Some(worker_event::Event::Hello(_)) => {
            tracing::warn!(worker = %state.args.name, "duplicate hello ignored");
        }
        None => {}
    }
}
