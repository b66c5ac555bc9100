//! The `Scheduler` actor: worker membership and placement.
//!
//! - Membership: a worker joins with its hello, gets a `WorkerLink` actor linked
//!   to the scheduler, and leaves when that link stops (stream closed, missed
//!   heartbeats). The registry is told which backends the fleet offers.
//! - Placement: task affinity — every call of a task goes to the worker that
//!   holds its environment — and least-loaded (running calls over capacity,
//!   then pinned tasks) for a task seen for the first time. A task whose worker
//!   went away is placed afresh and the caller learns its environment was reset.

pub mod link;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

use caduceus_proto::{EnvironmentSpec, Hello, RunCall, WorkerCommand, WorkerStatus};

use crate::registry::actor::RegistryHandle;
pub use link::{CallTable, LinkFailure, LinkMsg, NoticeSink, WorkerLink, WorkerShared};

/// A call for a worker tool, as the dispatcher hands it over.
#[derive(Debug)]
pub struct WorkerCall {
    pub task_id: String,
    pub session_id: String,
    pub tool: String,
    pub arguments_json: String,
    pub backend: String,
    pub settings_json: String,
    pub owner: String,
    pub result_cap_chars: u64,
    pub output: Option<mpsc::Sender<Bytes>>,
    /// After this long the call is cancelled on the worker and answered here.
    pub deadline: Duration,
}

#[derive(Debug, Clone)]
pub struct WorkerCallDone {
    pub result: String,
    pub worker: String,
    /// Set when the task's environment was lost with this worker (name given)
    /// and the call ran in a fresh one.
    pub reset_from: Option<String>,
    pub duration_us: u64,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ScheduleError {
    #[error(
        "No worker can run this call: no attached worker offers the '{backend}' backend. Attach one with `caduceus worker --coordinator URL --backends {backend}`."
    )]
    NoWorker { backend: String },
    #[error(
        "The worker '{worker}' running this call was lost ({reason}). The task's environment is gone; the next call starts a fresh one."
    )]
    WorkerLost { worker: String, reason: String },
    #[error("The worker '{worker}' is draining and takes no new calls; retry shortly.")]
    Draining { worker: String },
    #[error(
        "The call did not finish within {after_secs}s on worker '{worker}'; it was cancelled there."
    )]
    Timeout { worker: String, after_secs: u64 },
    #[error("The call was cancelled.")]
    Cancelled,
    #[error("The scheduler is not running.")]
    Unavailable,
}

impl ScheduleError {
    pub fn worker(&self) -> Option<&str> {
        match self {
            ScheduleError::WorkerLost { worker, .. }
            | ScheduleError::Draining { worker }
            | ScheduleError::Timeout { worker, .. } => Some(worker),
            _ => None,
        }
    }
}

/// Why a worker may not join.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AttachError {
    #[error(
        "a worker named '{0}' is already attached; pick another --name or stop the other worker"
    )]
    DuplicateName(String),
    #[error("the worker's hello is invalid: {0}")]
    InvalidHello(String),
    #[error("the coordinator is shutting down")]
    Unavailable,
}

/// Where a task's calls go.
#[derive(Clone)]
pub struct Placement {
    pub worker_id: String,
    pub worker_name: String,
    pub calls: Arc<CallTable>,
    pub reset_from: Option<String>,
}

pub struct AttachedWorker {
    pub worker_id: String,
    pub link: ActorRef<LinkMsg>,
    /// The worker's calls in flight; the stream reader completes them.
    pub calls: Arc<CallTable>,
}

/// task id -> its placement, read by callers without a message to the
/// scheduler (written only by the scheduler actor).
type PlacementView = Arc<std::sync::RwLock<HashMap<String, Placement>>>;

pub enum SchedulerMsg {
    Attach {
        hello: Hello,
        peer: String,
        commands: mpsc::Sender<Result<WorkerCommand, Status>>,
        reply: RpcReplyPort<Result<AttachedWorker, AttachError>>,
    },
    Place {
        task_id: String,
        backend: String,
        reply: RpcReplyPort<Result<Placement, ScheduleError>>,
    },
    /// A placement turned out dead (the link refused the call): forget it.
    Unplace {
        task_id: String,
        worker_id: String,
    },
    Release {
        task_id: String,
        reply: RpcReplyPort<bool>,
    },
    Status {
        reply: RpcReplyPort<Vec<WorkerStatus>>,
    },
    EnvironmentReleased {
        worker_id: String,
        task_id: String,
        reason: String,
    },
    FleetChanged,
    DrainAll,
}

struct WorkerRecord {
    worker_id: String,
    name: String,
    version: String,
    instance_id: String,
    labels: HashMap<String, String>,
    capacity: u32,
    peer: String,
    attached_at: Instant,
    link: ActorRef<LinkMsg>,
    calls: Arc<CallTable>,
    shared: Arc<WorkerShared>,
}

impl WorkerRecord {
    fn placement(&self, reset_from: Option<String>) -> Placement {
        Placement {
            worker_id: self.worker_id.clone(),
            worker_name: self.name.clone(),
            calls: self.calls.clone(),
            reset_from,
        }
    }
}

pub struct SchedulerConfig {
    pub coordinator_id: String,
    pub heartbeat_interval: Duration,
    pub notices: Option<NoticeSink>,
}

pub struct Scheduler;

pub struct SchedulerArgs {
    pub registry: RegistryHandle,
    pub config: SchedulerConfig,
    pub view: PlacementView,
}

pub struct SchedulerState {
    registry: RegistryHandle,
    config: SchedulerConfig,
    workers: HashMap<String, WorkerRecord>,
    /// task id -> worker id
    placements: HashMap<String, String>,
    /// task id -> name of the worker that held its environment when it was lost
    lost: HashMap<String, String>,
    next_worker: u64,
    view: PlacementView,
}

impl SchedulerState {
    /// Republishes the placements callers read without a message. Placements
    /// change when tasks start or workers come and go, not per call.
    fn publish_placements(&self) {
        let view: HashMap<String, Placement> = self
            .placements
            .iter()
            .filter_map(|(task, worker_id)| {
                let record = self.workers.get(worker_id)?;
                Some((task.clone(), record.placement(None)))
            })
            .collect();
        if let Ok(mut published) = self.view.write() {
            *published = view;
        }
    }

    async fn publish_fleet(&self) {
        let backends: BTreeSet<String> = self
            .workers
            .values()
            .filter(|w| !w.shared.draining.load(Ordering::Relaxed))
            .flat_map(|w| w.shared.backends())
            .collect();
        self.registry.set_fleet_backends(backends).await;
    }

    async fn remove_worker(&mut self, worker_id: &str, reason: &str) {
        let Some(record) = self.workers.remove(worker_id) else {
            return;
        };
        tracing::info!(worker = %record.name, %reason, "worker left");
        let lost: Vec<String> = self
            .placements
            .iter()
            .filter(|(_, w)| *w == worker_id)
            .map(|(t, _)| t.clone())
            .collect();
        for task in lost {
            self.placements.remove(&task);
            self.lost.insert(task, record.name.clone());
        }
        // Callers waiting on this worker are failed by its call table.
        record
            .calls
            .close(&format!("worker '{}' left ({reason})", record.name));
        self.publish_placements();
        self.publish_fleet().await;
    }

    fn place(&mut self, task_id: &str, backend: &str) -> Result<Placement, ScheduleError> {
        if let Some(worker_id) = self.placements.get(task_id)
            && let Some(record) = self.workers.get(worker_id)
        {
            if record.shared.draining.load(Ordering::Relaxed) {
                return Err(ScheduleError::Draining {
                    worker: record.name.clone(),
                });
            }
            return Ok(record.placement(None));
        }
        if backend.is_empty() {
            return Err(ScheduleError::NoWorker {
                backend: "(existing environment)".to_owned(),
            });
        }
        // A new task (or one whose worker went away): least-loaded worker that
        // offers the backend.
        let mut pinned: HashMap<&str, usize> = HashMap::new();
        for worker_id in self.placements.values() {
            *pinned.entry(worker_id.as_str()).or_default() += 1;
        }
        let chosen = self
            .workers
            .values()
            .filter(|w| !w.shared.draining.load(Ordering::Relaxed))
            .filter(|w| w.shared.backends().iter().any(|b| b == backend))
            .min_by(|a, b| {
                let load = |w: &WorkerRecord| {
                    f64::from(w.shared.running.load(Ordering::Relaxed))
                        / f64::from(w.capacity.max(1))
                };
                load(a)
                    .total_cmp(&load(b))
                    .then_with(|| {
                        pinned
                            .get(a.worker_id.as_str())
                            .cmp(&pinned.get(b.worker_id.as_str()))
                    })
                    .then_with(|| a.name.cmp(&b.name))
            })
            .ok_or_else(|| ScheduleError::NoWorker {
                backend: backend.to_owned(),
            })?;
        let placement = chosen.placement(self.lost.remove(task_id));
        self.placements
            .insert(task_id.to_owned(), placement.worker_id.clone());
        self.publish_placements();
        Ok(placement)
    }

    fn status(&self) -> Vec<WorkerStatus> {
        let mut out: Vec<WorkerStatus> = self
            .workers
            .values()
            .map(|w| WorkerStatus {
                worker_id: w.worker_id.clone(),
                name: w.name.clone(),
                version: w.version.clone(),
                labels: w.labels.clone(),
                backends: w.shared.backends(),
                capacity: w.capacity,
                running_calls: w.shared.running.load(Ordering::Relaxed),
                state: if w.shared.draining.load(Ordering::Relaxed) {
                    "draining"
                } else {
                    "ready"
                }
                .to_owned(),
                attached_ms: u64::try_from(w.attached_at.elapsed().as_millis()).unwrap_or(u64::MAX),
                last_heartbeat_ms: u64::try_from(w.shared.heartbeat_age().as_millis())
                    .unwrap_or(u64::MAX),
                environments: w.shared.environments(),
                peer: w.peer.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

impl Actor for Scheduler {
    type Msg = SchedulerMsg;
    type State = SchedulerState;
    type Arguments = SchedulerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<SchedulerMsg>,
        args: SchedulerArgs,
    ) -> Result<SchedulerState, ActorProcessingErr> {
        Ok(SchedulerState {
            registry: args.registry,
            config: args.config,
            workers: HashMap::new(),
            placements: HashMap::new(),
            lost: HashMap::new(),
            next_worker: 0,
            view: args.view,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SchedulerMsg>,
        message: SchedulerMsg,
        state: &mut SchedulerState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SchedulerMsg::Attach {
                hello,
                peer,
                commands,
                reply,
            } => {
                let outcome = attach(&myself, state, hello, peer, commands).await;
                let _ = reply.send(outcome);
            }
            SchedulerMsg::Place {
                task_id,
                backend,
                reply,
            } => {
                let _ = reply.send(state.place(&task_id, &backend));
            }
            SchedulerMsg::Unplace { task_id, worker_id } => {
                if state.placements.get(&task_id) == Some(&worker_id) {
                    state.placements.remove(&task_id);
                    state.publish_placements();
                }
            }
            SchedulerMsg::Release { task_id, reply } => {
                let released = match state.placements.remove(&task_id) {
                    Some(worker_id) => {
                        if let Some(record) = state.workers.get(&worker_id) {
                            let _ = record.link.cast(LinkMsg::Release {
                                task_id: task_id.clone(),
                            });
                        }
                        true
                    }
                    None => false,
                };
                state.lost.remove(&task_id);
                state.publish_placements();
                let _ = reply.send(released);
            }
            SchedulerMsg::Status { reply } => {
                let _ = reply.send(state.status());
            }
            SchedulerMsg::EnvironmentReleased {
                worker_id,
                task_id,
                reason,
            } => {
                if state.placements.get(&task_id) == Some(&worker_id) {
                    tracing::debug!(%task_id, %reason, "environment released by its worker");
                    state.placements.remove(&task_id);
                    state.publish_placements();
                    if reason == "sandbox_lost" {
                        let name = state
                            .workers
                            .get(&worker_id)
                            .map(|w| w.name.clone())
                            .unwrap_or_default();
                        state.lost.insert(task_id, name);
                    }
                }
            }
            SchedulerMsg::FleetChanged => state.publish_fleet().await,
            SchedulerMsg::DrainAll => {
                for record in state.workers.values() {
                    let _ = record.link.cast(LinkMsg::Drain);
                }
                state.publish_fleet().await;
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<SchedulerMsg>,
        event: SupervisionEvent,
        state: &mut SchedulerState,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                if let Some(worker_id) = worker_of(state, cell.get_id()) {
                    state
                        .remove_worker(&worker_id, reason.as_deref().unwrap_or("link stopped"))
                        .await;
                }
            }
            SupervisionEvent::ActorFailed(cell, err) => {
                if let Some(worker_id) = worker_of(state, cell.get_id()) {
                    state
                        .remove_worker(&worker_id, &format!("link failed: {err}"))
                        .await;
                }
            }
            _ => {}
        }
        Ok(())
    }
}

fn worker_of(state: &SchedulerState, actor: ractor::ActorId) -> Option<String> {
    state
        .workers
        .values()
        .find(|w| w.link.get_id() == actor)
        .map(|w| w.worker_id.clone())
}

async fn attach(
    myself: &ActorRef<SchedulerMsg>,
    state: &mut SchedulerState,
    hello: Hello,
    peer: String,
    commands: mpsc::Sender<Result<WorkerCommand, Status>>,
) -> Result<AttachedWorker, AttachError> {
    let name = hello.name.trim().to_owned();
    if name.is_empty() {
        return Err(AttachError::InvalidHello(
            "the worker has no name".to_owned(),
        ));
    }
    if let Some(existing) = state.workers.values().find(|w| w.name == name) {
        if !hello.instance_id.is_empty() && existing.instance_id == hello.instance_id {
            // The same process reconnected before we noticed its old stream die.
            let old = existing.worker_id.clone();
            existing.link.stop(Some(
                "replaced by a reconnect of the same worker".to_owned(),
            ));
            state.remove_worker(&old, "reconnected").await;
        } else {
            return Err(AttachError::DuplicateName(name));
        }
    }
    state.next_worker += 1;
    let worker_id = format!("{}-{}", name, state.next_worker);
    let shared = Arc::new(WorkerShared::new(
        hello.backends.clone(),
        hello.environments.clone(),
    ));
    let calls = Arc::new(CallTable::new(
        name.clone(),
        commands.clone(),
        shared.clone(),
    ));
    let args = link::LinkArgs {
        worker_id: worker_id.clone(),
        name: name.clone(),
        commands,
        shared: shared.clone(),
        calls: calls.clone(),
        heartbeat_interval: state.config.heartbeat_interval,
        scheduler: myself.clone(),
        notices: state.config.notices.clone(),
    };
    let (link, _join) = Actor::spawn_linked(None, WorkerLink, args, myself.get_cell())
        .await
        .map_err(|_| AttachError::Unavailable)?;
    // Environments that survived a reconnect stay pinned to this worker.
    for env in &hello.environments {
        state.lost.remove(&env.task_id);
        state
            .placements
            .insert(env.task_id.clone(), worker_id.clone());
    }
    tracing::info!(worker = %name, %peer, backends = ?hello.backends, capacity = hello.capacity, "worker attached");
    state.workers.insert(
        worker_id.clone(),
        WorkerRecord {
            worker_id: worker_id.clone(),
            name,
            version: hello.version,
            instance_id: hello.instance_id,
            labels: hello.labels,
            capacity: hello.capacity.max(1),
            peer,
            attached_at: Instant::now(),
            link: link.clone(),
            calls: calls.clone(),
            shared,
        },
    );
    state.publish_placements();
    state.publish_fleet().await;
    Ok(AttachedWorker {
        worker_id,
        link,
        calls,
    })
}

/// Handle for the rest of the coordinator.
#[derive(Clone)]
pub struct SchedulerHandle {
    actor: ActorRef<SchedulerMsg>,
    view: PlacementView,
}

impl SchedulerHandle {
    pub async fn start(
        registry: RegistryHandle,
        config: SchedulerConfig,
    ) -> Result<(Self, tokio::task::JoinHandle<()>), ractor::SpawnErr> {
        let view = PlacementView::default();
        let args = SchedulerArgs {
            registry,
            config,
            view: view.clone(),
        };
        let (actor, join) = Actor::spawn(None, Scheduler, args).await?;
        Ok((SchedulerHandle { actor, view }, join))
    }

    pub async fn attach(
        &self,
        hello: Hello,
        peer: String,
        commands: mpsc::Sender<Result<WorkerCommand, Status>>,
    ) -> Result<AttachedWorker, AttachError> {
        match self
            .actor
            .call(
                |reply| SchedulerMsg::Attach {
                    hello,
                    peer,
                    commands,
                    reply,
                },
                None,
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(outcome)) => outcome,
            _ => Err(AttachError::Unavailable),
        }
    }

    async fn place(&self, task_id: &str, backend: &str) -> Result<Placement, ScheduleError> {
        // A placed task on a live, non-draining worker: read it without a
        // message (the common case: every call after a task's first).
        let known = self
            .view
            .read()
            .ok()
            .and_then(|view| view.get(task_id).cloned());
        if let Some(placement) = known
            && !placement.calls.is_closed()
            && !placement.calls.shared().draining.load(Ordering::Relaxed)
        {
            return Ok(placement);
        }
        match self
            .actor
            .call(
                |reply| SchedulerMsg::Place {
                    task_id: task_id.to_owned(),
                    backend: backend.to_owned(),
                    reply,
                },
                None,
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(outcome)) => outcome,
            _ => Err(ScheduleError::Unavailable),
        }
    }

    /// Runs a worker tool call on the worker that holds (or will hold) the
    /// task's environment. Cancelled on the worker when the returned future is
    /// dropped or the deadline passes.
    pub async fn run_call(&self, call: WorkerCall) -> Result<WorkerCallDone, ScheduleError> {
        // One retry covers the race where the placed worker left between the
        // placement and the call.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let placement = self.place(&call.task_id, &call.backend).await?;
            let call_id = uuid::Uuid::new_v4().simple().to_string();
            let run = RunCall {
                call_id: call_id.clone(),
                task_id: call.task_id.clone(),
                tool: call.tool.clone(),
                arguments_json: call.arguments_json.clone(),
                environment: Some(EnvironmentSpec {
                    backend: call.backend.clone(),
                    settings_json: call.settings_json.clone(),
                    owner: call.owner.clone(),
                }),
                result_cap_chars: call.result_cap_chars,
                stream_output: call.output.is_some(),
                session_id: call.session_id.clone(),
            };
            let (reply, result) = oneshot::channel();
            if placement.calls.is_closed() {
                let _ = self.actor.cast(SchedulerMsg::Unplace {
                    task_id: call.task_id.clone(),
                    worker_id: placement.worker_id.clone(),
                });
                if attempt < 2 {
                    continue;
                }
                return Err(ScheduleError::WorkerLost {
                    worker: placement.worker_name,
                    reason: "its link is gone".to_owned(),
                });
            }
            placement.calls.run(run, call.output.clone(), reply);
            let mut guard = CancelOnDrop {
                calls: Some(placement.calls.clone()),
                call_id,
            };
            return match tokio::time::timeout(call.deadline, result).await {
                Ok(Ok(Ok(done))) => {
                    guard.calls = None;
                    Ok(WorkerCallDone {
                        result: done.result,
                        worker: placement.worker_name,
                        reset_from: placement.reset_from,
                        duration_us: done.duration_us,
                    })
                }
                Ok(Ok(Err(LinkFailure::Draining))) => {
                    guard.calls = None;
                    Err(ScheduleError::Draining {
                        worker: placement.worker_name,
                    })
                }
                Ok(Ok(Err(LinkFailure::Lost(reason)))) => {
                    guard.calls = None;
                    Err(ScheduleError::WorkerLost {
                        worker: placement.worker_name,
                        reason,
                    })
                }
                Ok(Err(_)) => {
                    guard.calls = None;
                    Err(ScheduleError::WorkerLost {
                        worker: placement.worker_name,
                        reason: "its link stopped".to_owned(),
                    })
                }
                Err(_) => Err(ScheduleError::Timeout {
                    worker: placement.worker_name,
                    after_secs: call.deadline.as_secs(),
                }),
            };
        }
    }

    /// Stores `content` inside the task's sandbox (the worker's internal
    /// `__persist_result` tool) and returns its path there.
    pub async fn persist_result(
        &self,
        task_id: &str,
        id: &str,
        content: &str,
        owner: &str,
    ) -> Option<String> {
        let args = serde_json::json!({"id": id, "content": content}).to_string();
        let call = WorkerCall {
            task_id: task_id.to_owned(),
            session_id: String::new(),
            tool: "__persist_result".to_owned(),
            arguments_json: args,
            backend: String::new(),
            settings_json: "{}".to_owned(),
            owner: owner.to_owned(),
            result_cap_chars: 0,
            output: None,
            deadline: Duration::from_secs(30),
        };
        // An empty backend means "only where the task already has an
        // environment": persisting must not create one.
        let done = self.run_call(call).await.ok()?;
        let value: serde_json::Value = serde_json::from_str(&done.result).ok()?;
        value
            .get("path")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    }

    pub async fn release(&self, task_id: &str) -> bool {
        matches!(
            self.actor
                .call(
                    |reply| SchedulerMsg::Release {
                        task_id: task_id.to_owned(),
                        reply
                    },
                    None
                )
                .await,
            Ok(ractor::rpc::CallResult::Success(true))
        )
    }

    pub async fn status(&self) -> Vec<WorkerStatus> {
        match self
            .actor
            .call(|reply| SchedulerMsg::Status { reply }, None)
            .await
        {
            Ok(ractor::rpc::CallResult::Success(workers)) => workers,
            _ => Vec::new(),
        }
    }

    pub fn drain_all(&self) {
        let _ = self.actor.cast(SchedulerMsg::DrainAll);
    }

    pub fn stop(&self) {
        self.actor.stop(None);
    }
}

/// Cancels the call on its worker unless disarmed (`calls = None`).
struct CancelOnDrop {
    calls: Option<Arc<CallTable>>,
    call_id: String,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if let Some(calls) = self.calls.take() {
            calls.cancel(&self.call_id, "the caller gave up");
        }
    }
}
