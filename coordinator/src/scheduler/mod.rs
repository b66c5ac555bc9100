//! The `Scheduler` actor: worker membership and placement.
//!
//! - Membership: a worker joins with its hello, gets a `WorkerLink` actor linked
//!   to the scheduler, and leaves when that link stops (stream closed, missed
//!   heartbeats). The registry is told which backends the fleet offers.
//! - Placement: task affinity — every call of a task goes to the worker that
//!   holds its environment — and, for a task seen for the first time, the
//!   least-loaded worker that offers the backend, carries the task's labels
//!   and has room ([`placement::choose`], the one place that decides). With
//!   none eligible the call waits (`placement.wait_seconds`), woken when the
//!   fleet changes (a worker attaches, frees an environment, is uncordoned),
//!   then fails naming what was missing. A task whose worker went away is
//!   placed afresh and the caller learns its environment was reset.
//! - Hosted providers ([`hosted`]): MCP servers configured to run on
//!   workers with given labels; their tools are routed to a hosting worker.
//! - Operations: a cordoned worker keeps its environments and gets no new
//!   ones; a drained one is cordoned, finishes its calls, ends its
//!   environments and exits.
//! - Fencing: every fresh placement of a task gets a new, larger epoch. A
//!   worker returning with an environment older than its task's latest epoch
//!   is told (in its welcome) that it is stale and ends it; nothing is ever
//!   answered from it, and a task has at most one live environment.

pub mod hosted;
pub mod link;
pub mod placement;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, RwLock, RwLockWriteGuard};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::{oneshot, watch};

use caduceus_proto::{
    CallResult, Drain, EnvironmentSpec, Hello, HostProviders, HostedTools, PersistResult,
    ReleaseEnvironment, RunCall, StaleEnvironment, WorkerStatus, worker_command,
};

use crate::ask;
use crate::auth::HostGrant;
use crate::call::{CallStatus, ToolReply};
use crate::registry::actor::RegistryHandle;
pub use link::{
    CallCommand, CallTable, LinkFailure, LinkMsg, NoticeSink, ScriptAnswer, ScriptRequest,
    WorkerLink, WorkerShared,
};

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
    /// The tool's own timeout, decided by dispatch; the worker obeys it.
    pub timeout: Option<Duration>,
    /// The call's W3C trace context, for the worker's logs ("" = none).
    pub traceparent: String,
    /// After this long the call is cancelled on the worker and answered here.
    pub deadline: Duration,
    /// `execute_code`: the tools its script may call and where its calls go.
    pub script: Option<ScriptCalls>,
}

/// The script side of an `execute_code` run.
#[derive(Debug)]
pub struct ScriptCalls {
    /// The sandbox tools the script's module offers.
    pub tools: Vec<String>,
    pub requests: link::ScriptSink,
}

#[derive(Debug, Clone)]
pub struct WorkerCallDone {
    /// The tool's answer as the worker sent it.
    pub reply: ToolReply,
    pub worker: String,
    /// Set when the task's environment was lost with this worker (name given)
    /// and the call ran in a fresh one.
    pub reset_from: Option<String>,
    /// What the model is told about a recreated environment: lost with its
    /// worker (`reset_from`), or its sandbox vanished on this worker.
    pub environment_reset: Option<String>,
    /// Wall time the worker spent on the call.
    pub worker_duration: Duration,
}

/// The notice for a task whose environment was lost with its worker.
fn lost_worker_notice(previous_worker: &str) -> String {
    format!(
        "The previous environment of this task was lost (worker '{previous_worker}' went away); this call ran in a fresh environment. Files, the working directory, variables and background processes from earlier calls are gone."
    )
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ScheduleError {
    #[error(
        "No worker can run this call: no attached worker offers the '{backend}' backend. Attach one with `caduceus worker --coordinator URL --backends {backend}`."
    )]
    NoWorker { backend: String },
    /// No worker offers the backend with the labels and room (after waiting).
    #[error("{0}")]
    NoEligible(placement::Shortfall),
    #[error(
        "The worker '{worker}' running this call was lost ({reason}). The task's environment is gone; the next call starts a fresh one."
    )]
    WorkerLost { worker: String, reason: String },
    #[error(
        "The worker '{worker}' running the MCP server '{provider}' was lost during this call ({reason}). The call was not retried (it may have taken effect there); the next call goes to a host that is still attached."
    )]
    HostLost {
        worker: String,
        provider: String,
        reason: String,
    },
    #[error("The worker '{worker}' is draining and takes no new calls; retry shortly.")]
    Draining { worker: String },
    #[error(
        "The worker '{worker}' holding this task has not been heard from for {silent_secs:.1}s (suspect); the call was not sent. Retry shortly: it is either back or declared lost by then."
    )]
    Suspect { worker: String, silent_secs: f64 },
    #[error(
        "The call did not finish within {after_secs}s on worker '{worker}'; it was cancelled there."
    )]
    Timeout { worker: String, after_secs: u64 },
    #[error(
        "No attached worker serves the tool '{tool}' of the MCP server '{provider}' right now (it runs on workers with the labels its `on:` names); it is offered again once one does."
    )]
    NotHosted { provider: String, tool: String },
    #[error("The scheduler is not running.")]
    Unavailable,
}

impl ScheduleError {
    pub fn worker(&self) -> Option<&str> {
        match self {
            ScheduleError::WorkerLost { worker, .. }
            | ScheduleError::HostLost { worker, .. }
            | ScheduleError::Draining { worker }
            | ScheduleError::Suspect { worker, .. }
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
    /// The placement's epoch, carried by every call (see the module docs).
    pub epoch: u64,
}

pub struct AttachedWorker {
    pub worker_id: String,
    pub link: ActorRef<LinkMsg>,
    /// The worker's calls in flight; the stream reader completes them.
    pub calls: Arc<CallTable>,
    /// Environments of its hello that it must end (sent in the welcome).
    pub stale: Vec<StaleEnvironment>,
    /// The providers it is to host (sent right after the welcome).
    pub host: HostProviders,
}

/// task id -> its placement: the scheduler's placement table, read by callers
/// without a message to the scheduler (written only by the scheduler actor).
pub(crate) type Placements = Arc<RwLock<HashMap<String, Placement>>>;

pub enum SchedulerMsg {
    Attach {
        hello: Hello,
        peer: String,
        commands: crate::CommandSender,
        /// The hosted providers its credential may run.
        host: HostGrant,
        reply: RpcReplyPort<Result<AttachedWorker, AttachError>>,
    },
    Place {
        task_id: String,
        backend: String,
        reply: RpcReplyPort<Result<Placement, ScheduleError>>,
    },
    /// The labels a task's new environments need (empty: the configured
    /// default); forgotten when the task is released.
    SetTaskLabels {
        task_id: String,
        labels: BTreeMap<String, String>,
    },
    /// The labels a task's environments are placed with.
    TaskLabels {
        task_id: String,
        reply: RpcReplyPort<BTreeMap<String, String>>,
    },
    Cordon {
        name: String,
        cordon: bool,
        reply: RpcReplyPort<Result<WorkerStatus, OperationError>>,
    },
    Drain {
        name: String,
        reply: RpcReplyPort<Result<WorkerStatus, OperationError>>,
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
    /// A worker's heartbeat reported other backends than before.
    BackendsChanged {
        worker_id: String,
        backends: Vec<String>,
    },
    /// A worker announced what a provider it hosts offers now.
    Hosted {
        worker_id: String,
        tools: HostedTools,
    },
    DrainAll,
}

/// Why an operation on a worker was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OperationError {
    #[error("no attached worker is named '{0}'")]
    NoSuchWorker(String),
    #[error("the worker '{0}' is draining: it is leaving and cannot be uncordoned")]
    Draining(String),
    #[error("the scheduler is not running")]
    Unavailable,
}

struct WorkerRecord {
    worker_id: String,
    name: String,
    version: String,
    instance_id: String,
    labels: HashMap<String, String>,
    backends: Vec<String>,
    /// Toolsets it serves beyond the environment tools.
    toolsets: Vec<String>,
    capacity: u32,
    /// Environments it holds at most (0 = no limit).
    max_environments: u32,
    peer: String,
    attached_at: Instant,
    link: ActorRef<LinkMsg>,
    calls: Arc<CallTable>,
    /// The hosted providers it was given (labels and grant matched); an
    /// announcement for any other is dropped.
    hosting: BTreeSet<String>,
}

impl WorkerRecord {
    fn shared(&self) -> &WorkerShared {
        self.calls.shared()
    }

    fn is_draining(&self) -> bool {
        self.shared().draining.load(Ordering::Relaxed)
    }

    fn is_cordoned(&self) -> bool {
        self.shared().cordoned.load(Ordering::Relaxed)
    }

    /// Whether it takes new environments, as placement sees it.
    fn admission(&self, liveness: &Liveness) -> placement::Admission {
        if self.is_draining() || self.calls.is_closed() {
            placement::Admission::Draining
        } else if self.is_cordoned() {
            placement::Admission::Cordoned
        } else if self.suspect(liveness).is_some() {
            placement::Admission::Suspect
        } else {
            placement::Admission::Open
        }
    }

    fn suspect(&self, liveness: &Liveness) -> Option<ScheduleError> {
        let silent = self.shared().heartbeat_age();
        (silent > liveness.suspect_after).then(|| ScheduleError::Suspect {
            worker: self.name.clone(),
            silent_secs: silent.as_secs_f64(),
        })
    }

    fn placement(&self, reset_from: Option<String>, epoch: u64) -> Placement {
        Placement {
            worker_id: self.worker_id.clone(),
            worker_name: self.name.clone(),
            calls: self.calls.clone(),
            reset_from,
            epoch,
        }
    }
}

/// When a silent worker is suspect and when it is lost: the one owner of
/// these thresholds (the link applies them, placement and status read them,
/// the welcome tells the worker).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// How often workers heartbeat.
    pub heartbeat_interval: Duration,
    /// Silent this long: `suspect` — shown in status, no new placements.
    pub suspect_after: Duration,
    /// Silent this long: lost — its calls are answered with an error, its
    /// tasks are placed afresh.
    pub lost_after: Duration,
}

impl Liveness {
    /// Suspect after 1.5 intervals of silence, lost after 3.
    pub fn from_interval(heartbeat_interval: Duration) -> Self {
        Liveness {
            heartbeat_interval,
            suspect_after: heartbeat_interval * 3 / 2,
            lost_after: heartbeat_interval * 3,
        }
    }

    /// How often a link looks at its worker's silence: often enough that a
    /// lost worker is noticed well within a heartbeat interval of the threshold.
    pub fn check_every(&self) -> Duration {
        (self.suspect_after / 6).clamp(Duration::from_millis(20), Duration::from_millis(250))
    }
}

impl Default for Liveness {
    /// Heartbeat every second; suspect after 1.5 s, lost after 3 s.
    fn default() -> Self {
        Liveness::from_interval(Duration::from_secs(1))
    }
}

pub struct SchedulerConfig {
    pub liveness: Liveness,
    pub notices: Option<NoticeSink>,
    pub placement: PlacementConfig,
    /// Placement waits, lost workers and released environments are counted here.
    pub metrics: crate::metrics::Metrics,
    /// Providers (MCP servers) that run on workers with given labels.
    pub hosted: Vec<hosted::HostedProviderConfig>,
}

/// `placement:` in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementConfig {
    /// Labels every task's environment needs unless its request names its
    /// own (`placement.labels`).
    pub labels: BTreeMap<String, String>,
    /// How long a call waits for an eligible worker (`placement.wait_seconds`, 30).
    pub wait: Duration,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        PlacementConfig {
            labels: BTreeMap::new(),
            wait: Duration::from_secs(30),
        }
    }
}

/// The key of the environment a task's calls on another backend than the
/// configured one run in (`terminal`'s `backend` argument): one environment
/// per task and backend. The scheduler releases them with their task.
pub fn backend_environment(task_id: &str, backend: &str) -> String {
    format!("{task_id}@{backend}")
}

/// The task an environment key belongs to (see [`backend_environment`]).
fn task_of(key: &str) -> &str {
    key.rsplit_once('@').map_or(key, |(task, _)| task)
}

pub struct Scheduler;

pub struct SchedulerArgs {
    pub registry: RegistryHandle,
    pub config: SchedulerConfig,
    pub placements: Placements,
    pub changes: watch::Sender<u64>,
    pub hosted: hosted::HostedTable,
}

pub struct SchedulerState {
    registry: RegistryHandle,
    config: SchedulerConfig,
    workers: HashMap<String, WorkerRecord>,
    /// Shared with [`SchedulerHandle`]; changes when tasks start or workers
    /// come and go, not per call.
    placements: Placements,
    /// task id -> name of the worker that held its environment when it was lost
    lost: HashMap<String, String>,
    /// task id -> its latest epoch, kept after the task's worker is lost or
    /// its environment released: an environment older than this is stale for
    /// ever.
    epochs: HashMap<String, u64>,
    /// The last epoch handed out; starts at the wall clock (microseconds) so
    /// that a restarted coordinator's epochs are newer than its predecessor's.
    last_epoch: u64,
    next_worker: u64,
    /// task id -> the labels its new environments need (set by sessions,
    /// delegated children and labelled calls; dropped with the task).
    task_labels: HashMap<String, BTreeMap<String, String>>,
    /// Bumped whenever a waiting placement might now succeed.
    changes: watch::Sender<u64>,
    /// Providers hosted on workers: who hosts what, and their tools.
    hosted: hosted::Hosted,
}

/// The placement table for writing (a poisoned lock still holds a usable map).
fn write(placements: &Placements) -> RwLockWriteGuard<'_, HashMap<String, Placement>> {
    placements.write().unwrap_or_else(PoisonError::into_inner)
}

impl SchedulerState {
    /// A new epoch for `task_id`, newer than every environment of it.
    fn new_epoch(&mut self, task_id: &str) -> u64 {
        self.last_epoch += 1;
        self.epochs.insert(task_id.to_owned(), self.last_epoch);
        self.last_epoch
    }

    async fn publish_fleet(&self) {
        let backends: BTreeSet<String> = self
            .workers
            .values()
            .filter(|w| !w.is_draining())
            .flat_map(|w| w.backends.iter().cloned())
            .collect();
        self.registry.set_fleet_backends(backends).await;
        let toolsets: BTreeSet<String> = self
            .workers
            .values()
            .filter(|w| !w.is_draining())
            .flat_map(|w| w.toolsets.iter().cloned())
            .collect();
        self.registry.set_fleet_toolsets(toolsets).await;
    }

    /// Wakes the calls waiting for an eligible worker.
    fn fleet_changed(&self) {
        self.changes.send_modify(|generation| *generation += 1);
    }

    /// The labels the environment `key` needs.
    fn labels_for(&self, key: &str) -> &BTreeMap<String, String> {
        self.task_labels
            .get(key)
            .or_else(|| self.task_labels.get(task_of(key)))
            .unwrap_or(&self.config.placement.labels)
    }

    /// Placed environments per worker id.
    fn placed_counts(placements: &HashMap<String, Placement>) -> HashMap<String, usize> {
        let mut placed: HashMap<String, usize> = HashMap::new();
        for placement in placements.values() {
            *placed.entry(placement.worker_id.clone()).or_default() += 1;
        }
        placed
    }

    fn worker_named(&self, name: &str) -> Result<&WorkerRecord, OperationError> {
        self.workers
            .values()
            .find(|w| w.name == name)
            .ok_or_else(|| OperationError::NoSuchWorker(name.to_owned()))
    }

    async fn cordon(&mut self, name: &str, cordon: bool) -> Result<WorkerStatus, OperationError> {
        let record = self.worker_named(name)?;
        if !cordon && record.is_draining() {
            return Err(OperationError::Draining(name.to_owned()));
        }
        let was = record.shared().cordoned.swap(cordon, Ordering::Relaxed);
        let worker_id = record.worker_id.clone();
        if was != cordon {
            tracing::info!(worker = %name, cordoned = cordon, "worker {}", if cordon { "cordoned" } else { "uncordoned" });
            self.fleet_changed();
        }
        Ok(self.status_of(&worker_id))
    }

    /// Cordons the worker and tells it to drain: it finishes its running
    /// calls, ends its environments and exits (its stream closes, and it
    /// leaves the fleet as any worker does).
    async fn drain(&mut self, name: &str) -> Result<WorkerStatus, OperationError> {
        let record = self.worker_named(name)?;
        let worker_id = record.worker_id.clone();
        if !record.is_draining() {
            tracing::info!(worker = %name, "draining worker");
            record.shared().cordoned.store(true, Ordering::Relaxed);
            record.shared().draining.store(true, Ordering::Relaxed);
            record.calls.send(worker_command::Command::Drain(Drain {}));
            self.publish_fleet().await;
        }
        Ok(self.status_of(&worker_id))
    }

    fn status_of(&self, worker_id: &str) -> WorkerStatus {
        self.status()
            .into_iter()
            .find(|w| w.worker_id == worker_id)
            .unwrap_or_default()
    }

    async fn remove_worker(&mut self, worker_id: &str, reason: &str) {
        let Some(record) = self.workers.remove(worker_id) else {
            return;
        };
        tracing::info!(worker = %record.name, %reason, "worker left");
        write(&self.placements).retain(|task, placement| {
            if placement.worker_id != worker_id {
                return true;
            }
            self.lost.insert(task.clone(), record.name.clone());
            false
        });
        // Callers waiting on this worker are failed by its call table.
        record
            .calls
            .close(&format!("worker '{}' left ({reason})", record.name));
        self.hosted.worker_left(&self.registry, worker_id).await;
        self.publish_fleet().await;
        self.fleet_changed();
    }

    fn place(&mut self, task_id: &str, backend: &str) -> Result<Placement, ScheduleError> {
        let mut placements = write(&self.placements);
        if let Some(placed) = placements.get(task_id)
            && let Some(record) = self.workers.get(&placed.worker_id)
        {
            if record.is_draining() {
                return Err(ScheduleError::Draining {
                    worker: record.name.clone(),
                });
            }
            if !record.calls.is_closed() {
                // A suspect worker keeps its tasks; their calls wait until it
                // is heard from again or declared lost.
                if let Some(suspect) = record.suspect(&self.config.liveness) {
                    return Err(suspect);
                }
                return Ok(placed.clone());
            }
            // The worker's link is gone (the scheduler has not heard yet): so
            // is the task's environment, and the caller must learn it.
            self.lost.insert(task_id.to_owned(), record.name.clone());
            placements.remove(task_id);
        }
        if backend.is_empty() {
            return Err(ScheduleError::NoWorker {
                backend: "(existing environment)".to_owned(),
            });
        }
        // A new task (or one whose worker went away): the one decision of
        // placement (backend, labels, room, load).
        let placed_counts = Self::placed_counts(&placements);
        let liveness = self.config.liveness;
        let records: Vec<&WorkerRecord> = self.workers.values().collect();
        let candidates: Vec<placement::Candidate<'_>> = records
            .iter()
            .map(|w| placement::Candidate {
                name: &w.name,
                backends: &w.backends,
                labels: &w.labels,
                admission: w.admission(&liveness),
                environments: placed_counts.get(&w.worker_id).copied().unwrap_or(0),
                max_environments: w.max_environments,
                running_calls: w.shared().running.load(Ordering::Relaxed),
                call_capacity: w.capacity,
            })
            .collect();
        let request = placement::Request {
            backend,
            labels: self.labels_for(task_id),
        };
        let chosen = match placement::choose(request, &candidates) {
            Ok(index) => records[index],
            Err(shortfall) if shortfall.waits_on_silent() => {
                // A silent worker that would do: the caller waits for it to
                // be heard from or lost.
                return Err(records
                    .iter()
                    .find_map(|w| {
                        (w.backends.iter().any(|b| b == backend)
                            && !w.is_cordoned()
                            && !w.is_draining())
                        .then(|| w.suspect(&liveness))
                        .flatten()
                    })
                    .unwrap_or(ScheduleError::NoEligible(shortfall)));
            }
            Err(shortfall) => return Err(ScheduleError::NoEligible(shortfall)),
        };
        let placed = chosen.placement(None, 0);
        drop(placements);
        let epoch = self.new_epoch(task_id);
        write(&self.placements).insert(
            task_id.to_owned(),
            Placement {
                epoch,
                ..placed.clone()
            },
        );
        Ok(Placement {
            epoch,
            reset_from: self.lost.remove(task_id),
            ..placed
        })
    }

    fn status(&self) -> Vec<WorkerStatus> {
        let placed = Self::placed_counts(
            &self
                .placements
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        );
        let mut out: Vec<WorkerStatus> = self
            .workers
            .values()
            .map(|w| WorkerStatus {
                worker_id: w.worker_id.clone(),
                name: w.name.clone(),
                version: w.version.clone(),
                labels: w.labels.clone(),
                backends: w.backends.clone(),
                capacity: w.capacity,
                running_calls: w.shared().running.load(Ordering::Relaxed),
                state: if w.is_draining() {
                    "draining"
                } else if w.suspect(&self.config.liveness).is_some() {
                    "suspect"
                } else if w.is_cordoned() {
                    "cordoned"
                } else {
                    "ready"
                }
                .to_owned(),
                attached_ms: u64::try_from(w.attached_at.elapsed().as_millis()).unwrap_or(u64::MAX),
                last_heartbeat_ms: u64::try_from(w.shared().heartbeat_age().as_millis())
                    .unwrap_or(u64::MAX),
                environments: w.shared().environments(),
                peer: w.peer.clone(),
                max_environments: w.max_environments,
                placed_environments: u32::try_from(placed.get(&w.worker_id).copied().unwrap_or(0))
                    .unwrap_or(u32::MAX),
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
        mut args: SchedulerArgs,
    ) -> Result<SchedulerState, ActorProcessingErr> {
        let hosted = hosted::Hosted::new(std::mem::take(&mut args.config.hosted), args.hosted);
        Ok(SchedulerState {
            task_labels: HashMap::new(),
            changes: args.changes,
            hosted,
            registry: args.registry,
            config: args.config,
            workers: HashMap::new(),
            placements: args.placements,
            lost: HashMap::new(),
            epochs: HashMap::new(),
            last_epoch: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
                .unwrap_or(1),
            next_worker: 0,
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
                host,
                reply,
            } => {
                let outcome = attach(&myself, state, hello, peer, commands, &host).await;
                if outcome.is_ok() {
                    state.fleet_changed();
                }
                let _ = reply.send(outcome);
            }
            SchedulerMsg::Place {
                task_id,
                backend,
                reply,
            } => {
                let _ = reply.send(state.place(&task_id, &backend));
            }
            SchedulerMsg::SetTaskLabels { task_id, labels } => {
                if labels.is_empty() {
                    state.task_labels.remove(&task_id);
                } else {
                    state.task_labels.insert(task_id, labels);
                }
            }
            SchedulerMsg::TaskLabels { task_id, reply } => {
                let _ = reply.send(state.labels_for(&task_id).clone());
            }
            SchedulerMsg::Cordon {
                name,
                cordon,
                reply,
            } => {
                let _ = reply.send(state.cordon(&name, cordon).await);
            }
            SchedulerMsg::Drain { name, reply } => {
                let _ = reply.send(state.drain(&name).await);
            }
            SchedulerMsg::Release { task_id, reply } => {
                // The task's environment, and those of its calls on other
                // backends (`backend_environment`).
                let derived = format!("{task_id}@");
                let keys: Vec<String> = {
                    let placements = write(&state.placements);
                    std::iter::once(task_id.clone())
                        .chain(
                            placements
                                .keys()
                                .filter(|k| k.starts_with(&derived))
                                .cloned(),
                        )
                        .collect()
                };
                let mut released = false;
                for key in keys {
                    let placed = write(&state.placements).remove(&key);
                    if let Some(record) = placed
                        .as_ref()
                        .and_then(|p| state.workers.get(&p.worker_id))
                    {
                        record
                            .calls
                            .send(worker_command::Command::Release(ReleaseEnvironment {
                                task_id: key.clone(),
                            }));
                    }
                    released |= placed.is_some() && key == task_id;
                    state.lost.remove(&key);
                    // An environment of it that a disconnected worker still
                    // holds is stale from now on.
                    state.new_epoch(&key);
                }
                state.task_labels.remove(&task_id);
                state.fleet_changed();
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
                let mut placements = write(&state.placements);
                if placements
                    .get(&task_id)
                    .is_some_and(|p| p.worker_id == worker_id)
                {
                    tracing::debug!(%task_id, %reason, "environment released by its worker");
                    state.config.metrics.environment_released(&reason);
                    placements.remove(&task_id);
                    // The environment is gone either way: the task's next
                    // call tells the model so.
                    if matches!(reason.as_str(), "sandbox_lost" | "shutdown" | "drain") {
                        let name = state
                            .workers
                            .get(&worker_id)
                            .map(|w| w.name.clone())
                            .unwrap_or_default();
                        state.lost.insert(task_id, name);
                    }
                    drop(placements);
                    // A slot is free.
                    state.fleet_changed();
                }
            }
            SchedulerMsg::BackendsChanged {
                worker_id,
                backends,
            } => {
                if let Some(record) = state.workers.get_mut(&worker_id) {
                    record.backends = backends;
                    state.publish_fleet().await;
                    state.fleet_changed();
                }
            }
            SchedulerMsg::Hosted { worker_id, tools } => {
                if let Some(record) = state.workers.get(&worker_id) {
                    let worker = (
                        record.worker_id.as_str(),
                        record.name.as_str(),
                        &record.hosting,
                    );
                    state
                        .hosted
                        .announce(&state.registry, worker, &record.calls, tools)
                        .await;
                }
            }
            SchedulerMsg::DrainAll => {
                // Marked here, before the fleet is republished without them.
                for record in state.workers.values() {
                    record.shared().draining.store(true, Ordering::Relaxed);
                    record.calls.send(worker_command::Command::Drain(Drain {}));
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
    commands: crate::CommandSender,
    host_grant: &HostGrant,
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
    let shared = Arc::new(WorkerShared::new(hello.environments.clone()));
    let calls = Arc::new(CallTable::new(name.clone(), commands, shared));
    let args = link::LinkArgs {
        worker_id: worker_id.clone(),
        name: name.clone(),
        calls: calls.clone(),
        backends: hello.backends.clone(),
        liveness: state.config.liveness,
        last_check: Instant::now(),
        judge_after: Instant::now(),
        scheduler: myself.clone(),
        notices: state.config.notices.clone(),
        placements: state.placements.clone(),
        metrics: state.config.metrics.clone(),
    };
    let (link, _join) = Actor::spawn_linked(None, WorkerLink, args, myself.get_cell())
        .await
        .map_err(|_| AttachError::Unavailable)?;
    tracing::info!(worker = %name, %peer, backends = ?hello.backends, capacity = hello.capacity, "worker attached");
    let mut record = WorkerRecord {
        worker_id: worker_id.clone(),
        name,
        version: hello.version,
        instance_id: hello.instance_id,
        labels: hello.labels,
        backends: hello.backends,
        toolsets: hello.toolsets,
        capacity: hello.capacity.max(1),
        max_environments: hello.max_environments,
        peer,
        attached_at: Instant::now(),
        link: link.clone(),
        calls: calls.clone(),
        hosting: BTreeSet::new(),
    };
    let stale = adopt_environments(state, &record, &hello.environments);
    let host = state
        .hosted
        .for_worker(&record.name, &record.labels, host_grant);
    record.hosting = host.providers.iter().map(|p| p.name.clone()).collect();
    state.workers.insert(worker_id.clone(), record);
    state.publish_fleet().await;
    Ok(AttachedWorker {
        worker_id,
        link,
        calls,
        stale,
        host,
    })
}

/// Environments that survived a reconnect stay pinned to their worker if
/// they are their task's latest (nothing placed it elsewhere or released it
/// meanwhile); the others are stale. Returns the stale ones.
fn adopt_environments(
    state: &mut SchedulerState,
    record: &WorkerRecord,
    environments: &[caduceus_proto::EnvironmentInfo],
) -> Vec<StaleEnvironment> {
    let mut stale = Vec::new();
    for env in environments {
        let task = &env.task_id;
        let placed = write(&state.placements).get(task).cloned();
        let newest = match &placed {
            Some(placed) => env.epoch > placed.epoch,
            None => state
                .epochs
                .get(task)
                .is_none_or(|latest| env.epoch >= *latest),
        };
        if !newest {
            tracing::info!(task = %task, worker = %record.name, epoch = env.epoch, "stale environment: the task was placed elsewhere or released meanwhile");
            stale.push(StaleEnvironment {
                task_id: task.clone(),
                epoch: env.epoch,
            });
            continue;
        }
        if let Some(placed) = placed
            && let Some(other) = state.workers.get(&placed.worker_id)
        {
            // Only after a coordinator restart can two workers hold one
            // task; the older environment goes.
            other
                .calls
                .send(worker_command::Command::Release(ReleaseEnvironment {
                    task_id: task.clone(),
                }));
        }
        state.lost.remove(task);
        state.epochs.insert(task.clone(), env.epoch);
        state.last_epoch = state.last_epoch.max(env.epoch);
        write(&state.placements).insert(task.clone(), record.placement(None, env.epoch));
    }
    stale
}

/// Handle for the rest of the coordinator.
#[derive(Clone)]
pub struct SchedulerHandle {
    actor: ActorRef<SchedulerMsg>,
    placements: Placements,
    liveness: Liveness,
    /// Changes when a waiting placement might succeed (see `fleet_changed`).
    changes: watch::Receiver<u64>,
    /// How long a call waits for an eligible worker.
    placement_wait: Duration,
    metrics: crate::metrics::Metrics,
    /// Which workers serve the hosted providers' tools.
    hosted: hosted::HostedTable,
    /// provider -> its per-call timeout (the worker enforces it).
    hosted_timeouts: Arc<HashMap<String, Duration>>,
}

/// A call of a hosted provider's tool, as the dispatcher hands it over.
#[derive(Debug)]
pub struct HostedCall {
    pub provider: String,
    pub tool: String,
    pub arguments_json: String,
    pub task_id: String,
    pub session_id: String,
    pub traceparent: String,
}

impl SchedulerHandle {
    pub async fn start(
        registry: RegistryHandle,
        config: SchedulerConfig,
    ) -> Result<(Self, tokio::task::JoinHandle<()>), ractor::SpawnErr> {
        let placements = Placements::default();
        let liveness = config.liveness;
        let placement_wait = config.placement.wait;
        let (changes_tx, changes) = watch::channel(0);
        let metrics = config.metrics.clone();
        let hosted = hosted::HostedTable::default();
        let hosted_timeouts = Arc::new(
            config
                .hosted
                .iter()
                .map(|p| (p.name.clone(), p.call_timeout))
                .collect(),
        );
        let args = SchedulerArgs {
            registry,
            config,
            placements: placements.clone(),
            changes: changes_tx,
            hosted: hosted.clone(),
        };
        let (actor, join) = Actor::spawn(None, Scheduler, args).await?;
        Ok((
            SchedulerHandle {
                actor,
                placements,
                liveness,
                changes,
                placement_wait,
                metrics,
                hosted,
                hosted_timeouts,
            },
            join,
        ))
    }

    /// Attaches a worker whose credential may run the hosted providers
    /// `host` allows (its labels were checked against its grant before).
    pub async fn attach(
        &self,
        hello: Hello,
        peer: String,
        commands: crate::CommandSender,
        host: HostGrant,
    ) -> Result<AttachedWorker, AttachError> {
        ask(&self.actor, |reply| SchedulerMsg::Attach {
            hello,
            peer,
            commands,
            host,
            reply,
        })
        .await
        .unwrap_or(Err(AttachError::Unavailable))
    }

    async fn place(&self, task_id: &str, backend: &str) -> Result<Placement, ScheduleError> {
        // A placed task on a live, non-draining worker: read it without a
        // message (the common case: every call after a task's first).
        let known = self
            .placements
            .read()
            .ok()
            .and_then(|placements| placements.get(task_id).cloned());
        if let Some(placement) = known
            && !placement.calls.is_closed()
            && !placement.calls.shared().draining.load(Ordering::Relaxed)
            && placement.calls.shared().heartbeat_age() <= self.liveness.suspect_after
        {
            return Ok(placement);
        }
        ask(&self.actor, |reply| SchedulerMsg::Place {
            task_id: task_id.to_owned(),
            backend: backend.to_owned(),
            reply,
        })
        .await
        .unwrap_or(Err(ScheduleError::Unavailable))
    }

    /// Where `call` runs: its task's placement, waiting while the only
    /// workers for it are suspect.
    async fn placement_for(&self, call: &WorkerCall) -> Result<Placement, ScheduleError> {
        // A suspect worker is either heard from again or lost within
        // `lost_after`; the margin covers a coordinator that was itself slow.
        let wait_until = Instant::now() + self.liveness.lost_after + self.liveness.suspect_after;
        // No eligible worker: wait until the fleet changes (a worker
        // attaches, an environment is freed, a worker is uncordoned), at
        // most `placement.wait_seconds`; never polled.
        let eligible_by = tokio::time::Instant::now() + self.placement_wait;
        let mut changes = self.changes.clone();
        let placement = loop {
            // Seen before placing: a change after this wakes the wait below.
            changes.borrow_and_update();
            match self.place(&call.task_id, &call.backend).await {
                Err(ScheduleError::Suspect { .. }) if Instant::now() < wait_until => {
                    tokio::time::sleep(self.liveness.check_every()).await;
                }
                Err(ScheduleError::NoEligible(shortfall))
                    if tokio::time::Instant::now() < eligible_by =>
                {
                    tracing::debug!(task = %call.task_id, %shortfall, "waiting for an eligible worker");
                    match tokio::time::timeout_at(eligible_by, changes.changed()).await {
                        Ok(Ok(())) => {}
                        // The wait is over: one last look decides.
                        Err(_) => break self.place(&call.task_id, &call.backend).await?,
                        Ok(Err(_)) => return Err(ScheduleError::Unavailable),
                    }
                }
                placed => break placed?,
            }
        };
        if placement.calls.is_closed() {
            // The worker left between the placement and now: placing again
            // records the loss and picks another worker.
            return self.place(&call.task_id, &call.backend).await;
        }
        Ok(placement)
    }

    /// Runs a worker tool call on the worker that holds (or will hold) the
    /// task's environment. Cancelled on the worker when the returned future is
    /// dropped or the deadline passes.
    pub async fn run_call(&self, call: WorkerCall) -> Result<WorkerCallDone, ScheduleError> {
        let placing = Instant::now();
        let placed = self.placement_for(&call).await;
        self.metrics
            .placement_waited(placing.elapsed(), placed.is_ok());
        let placement = placed?;
        let deadline = call.deadline;
        let run = RunCall {
            call_id: uuid::Uuid::new_v4().simple().to_string(),
            task_id: call.task_id,
            tool: call.tool,
            arguments_json: call.arguments_json,
            environment: Some(EnvironmentSpec {
                backend: call.backend,
                settings_json: call.settings_json,
                owner: call.owner,
            }),
            result_cap_chars: call.result_cap_chars,
            session_id: call.session_id,
            epoch: placement.epoch,
            timeout_ms: call
                .timeout
                .map_or(0, |t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            traceparent: call.traceparent,
            script_tools: call
                .script
                .as_ref()
                .map(|s| s.tools.clone())
                .unwrap_or_default(),
            provider: String::new(),
        };
        let done = send_and_wait(
            &placement.calls,
            &placement.worker_name,
            CallCommand::Run(run),
            call.script.map(|s| s.requests),
            deadline,
        )
        .await?;
        let environment_reset = match &placement.reset_from {
            Some(previous) => Some(lost_worker_notice(previous)),
            None => Some(done.environment_reset.clone()).filter(|n| !n.is_empty()),
        };
        Ok(WorkerCallDone {
            reply: ToolReply::new(caduceus_proto::call_status(done.status), done.body),
            worker: placement.worker_name,
            reset_from: placement.reset_from,
            environment_reset,
            worker_duration: Duration::from_micros(done.duration_us),
        })
    }

    /// Runs a hosted provider's tool on a worker hosting it (the task's own
    /// worker when it is one), in no environment. Cancelled on the worker
    /// when the returned future is dropped or the deadline passes.
    pub async fn run_hosted(&self, call: HostedCall) -> Result<WorkerCallDone, ScheduleError> {
        let task_worker = self
            .placements
            .read()
            .ok()
            .and_then(|p| p.get(&call.task_id).map(|p| p.worker_id.clone()));
        let Some(route) = self.hosted.route(
            &call.provider,
            &call.tool,
            task_worker.as_deref(),
            self.liveness.suspect_after,
        ) else {
            return Err(ScheduleError::NotHosted {
                provider: call.provider,
                tool: call.tool,
            });
        };
        let deadline = self
            .hosted_timeouts
            .get(&call.provider)
            .copied()
            .unwrap_or(Duration::from_secs(300))
            + Duration::from_secs(30);
        let run = RunCall {
            call_id: uuid::Uuid::new_v4().simple().to_string(),
            task_id: call.task_id,
            tool: call.tool,
            arguments_json: call.arguments_json,
            session_id: call.session_id,
            traceparent: call.traceparent,
            provider: call.provider.clone(),
            ..RunCall::default()
        };
        let done = send_and_wait(
            &route.calls,
            &route.worker_name,
            CallCommand::Run(run),
            None,
            deadline,
        )
        .await
        .map_err(|err| match err {
            // No environment was involved: say what a lost host means here.
            ScheduleError::WorkerLost { worker, reason } => ScheduleError::HostLost {
                worker,
                provider: call.provider,
                reason,
            },
            other => other,
        })?;
        Ok(WorkerCallDone {
            reply: ToolReply::new(caduceus_proto::call_status(done.status), done.body),
            worker: route.worker_name,
            reset_from: None,
            environment_reset: None,
            worker_duration: Duration::from_micros(done.duration_us),
        })
    }

    /// Saves `content` inside the task's existing environment (never creates
    /// one) and returns its path there; `None` when the task has no live
    /// placement or the worker could not save it within 30 s.
    pub async fn persist(&self, task_id: &str, result_id: &str, content: &str) -> Option<String> {
        let placement = self
            .placements
            .read()
            .ok()
            .and_then(|placements| placements.get(task_id).cloned())?;
        let call_id = uuid::Uuid::new_v4().simple().to_string();
        let persist = PersistResult {
            call_id: call_id.clone(),
            task_id: task_id.to_owned(),
            result_id: result_id.to_owned(),
            content: content.to_owned(),
        };
        let (reply, result) = oneshot::channel();
        placement
            .calls
            .run(CallCommand::Persist(persist), None, reply);
        let _cancel = CancelOnDrop {
            calls: placement.calls.clone(),
            call_id,
        };
        let done = tokio::time::timeout(Duration::from_secs(30), result)
            .await
            .ok()?
            .ok()?
            .ok()?;
        (caduceus_proto::call_status(done.status) == CallStatus::Ok).then_some(done.body)
    }

    /// The worker and epoch a task's environment is placed at now, read
    /// from the published placements (no message).
    pub fn placement_of(&self, task_id: &str) -> Option<(String, u64)> {
        self.placements.read().ok().and_then(|placements| {
            placements
                .get(task_id)
                .map(|p| (p.worker_name.clone(), p.epoch))
        })
    }

    pub async fn release(&self, task_id: &str) -> bool {
        ask(&self.actor, |reply| SchedulerMsg::Release {
            task_id: task_id.to_owned(),
            reply,
        })
        .await
        .unwrap_or(false)
    }

    pub async fn status(&self) -> Vec<WorkerStatus> {
        ask(&self.actor, |reply| SchedulerMsg::Status { reply })
            .await
            .unwrap_or_default()
    }

    /// Sets the labels the task's new environments need (empty: the
    /// configured `placement.labels`). An environment the task already has
    /// stays where it is.
    pub fn set_task_labels(&self, task_id: &str, labels: BTreeMap<String, String>) {
        let _ = self.actor.cast(SchedulerMsg::SetTaskLabels {
            task_id: task_id.to_owned(),
            labels,
        });
    }

    /// The labels the task's environments are placed with.
    pub async fn task_labels(&self, task_id: &str) -> BTreeMap<String, String> {
        ask(&self.actor, |reply| SchedulerMsg::TaskLabels {
            task_id: task_id.to_owned(),
            reply,
        })
        .await
        .unwrap_or_default()
    }

    /// Cordons (no new environments) or uncordons the worker named `name`.
    pub async fn cordon(&self, name: &str, cordon: bool) -> Result<WorkerStatus, OperationError> {
        ask(&self.actor, |reply| SchedulerMsg::Cordon {
            name: name.to_owned(),
            cordon,
            reply,
        })
        .await
        .unwrap_or(Err(OperationError::Unavailable))
    }

    /// Drains the worker named `name`: cordoned, its running calls finish,
    /// its environments end and the worker process exits.
    pub async fn drain(&self, name: &str) -> Result<WorkerStatus, OperationError> {
        ask(&self.actor, |reply| SchedulerMsg::Drain {
            name: name.to_owned(),
            reply,
        })
        .await
        .unwrap_or(Err(OperationError::Unavailable))
    }

    pub fn drain_all(&self) {
        let _ = self.actor.cast(SchedulerMsg::DrainAll);
    }

    pub fn stop(&self) {
        self.actor.stop(None);
    }
}

/// Sends a `run` to a worker and waits for its result, at most `deadline`;
/// the call is cancelled on the worker if this future is dropped or times
/// out (a no-op once the call has finished).
async fn send_and_wait(
    calls: &Arc<CallTable>,
    worker: &str,
    command: CallCommand,
    script: Option<link::ScriptSink>,
    deadline: Duration,
) -> Result<CallResult, ScheduleError> {
    let call_id = match &command {
        CallCommand::Run(run) => run.call_id.clone(),
        CallCommand::Persist(persist) => persist.call_id.clone(),
    };
    let (reply, result) = oneshot::channel();
    calls.run(command, script, reply);
    let _cancel = CancelOnDrop {
        calls: calls.clone(),
        call_id,
    };
    let Ok(answer) = tokio::time::timeout(deadline, result).await else {
        return Err(ScheduleError::Timeout {
            worker: worker.to_owned(),
            after_secs: deadline.as_secs(),
        });
    };
    match answer {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(LinkFailure::Draining)) => Err(ScheduleError::Draining {
            worker: worker.to_owned(),
        }),
        Ok(Err(LinkFailure::Lost(reason))) => Err(ScheduleError::WorkerLost {
            worker: worker.to_owned(),
            reason,
        }),
        Err(_) => Err(ScheduleError::WorkerLost {
            worker: worker.to_owned(),
            reason: "its link stopped".to_owned(),
        }),
    }
}

/// Asks the worker to stop a call that is still in flight when dropped.
struct CancelOnDrop {
    calls: Arc<CallTable>,
    call_id: String,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.calls.cancel(&self.call_id, "the caller gave up");
    }
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;
