//! The coordinator's metrics (`caduceus serve --metrics ADDR`, see README
//! "Metrics"). Each counter has one owner: the place where the thing it counts
//! is decided.
//!
//! | metric | owner |
//! |---|---|
//! | `caduceus_tool_calls_total{tool,status}`, `caduceus_tool_call_duration_seconds{tool}` | the dispatch pipeline's exit, where a call's status is final |
//! | `caduceus_placement_wait_seconds{outcome}` | `SchedulerHandle::run_call`, from asking for a worker to having one (or giving up) |
//! | `caduceus_workers_lost_total{reason}` | the worker's link, when it declares the worker lost |
//! | `caduceus_environments_released_total{reason}` | the scheduler, when a worker reports an environment gone |
//!
//! The gauges (`caduceus_workers{state}`, `caduceus_environments{backend}`,
//! `caduceus_sessions{kind}`, `caduceus_approvals_pending`) are not kept
//! anywhere: each scrape reads them from their owners (scheduler, session hub,
//! approvals).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use caduceus_common::result::CallStatus;
use caduceus_metrics::{Described, ToolCalls, gauge_value, set_counts};

pub use caduceus_metrics::UNKNOWN_TOOL;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabel {
    backend: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Why a worker was declared lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LostReason {
    /// No heartbeat for the lost-after time (a hung or frozen worker, a
    /// partitioned network).
    Heartbeat,
    /// Its stream broke (the process died, the connection was reset).
    Stream,
}

/// What a scrape reads from the coordinator's live state.
#[derive(Debug, Default)]
pub struct LiveState {
    /// One entry per attached worker: its state (`ready`, `suspect`, …).
    pub worker_states: Vec<String>,
    /// One entry per environment: its backend.
    pub environment_backends: Vec<String>,
    pub top_level_sessions: usize,
    pub child_sessions: usize,
    pub approvals_pending: usize,
}

pub struct CoordinatorMetrics {
    registry: Registry,
    tool_calls: ToolCalls,
    placement_wait: HistogramFamily<OutcomeLabel>,
    workers_lost: Family<ReasonLabel, Counter>,
    environments_released: Family<ReasonLabel, Counter>,
    workers: Family<StateLabel, Gauge>,
    environments: Family<BackendLabel, Gauge>,
    sessions: Family<KindLabel, Gauge>,
    approvals_pending: Gauge,
    /// One scrape at a time sets the gauges and encodes.
    scrape: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for CoordinatorMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoordinatorMetrics").finish_non_exhaustive()
    }
}

impl Default for CoordinatorMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl CoordinatorMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("caduceus");
        let tool_calls = ToolCalls::register(
            &mut registry,
            Described {
                name: "tool_calls",
                help: "Tool calls finished, by tool and how they ended",
            },
            Described {
                name: "tool_call_duration_seconds",
                help: "Wall time of tool calls through the coordinator's pipeline, by tool",
            },
        );
        let placement_wait: HistogramFamily<OutcomeLabel> =
            Family::new_with_constructor(caduceus_metrics::latency_histogram);
        registry.register(
            "placement_wait_seconds",
            "Time a worker call waited for a worker (placed, or failed: none could take it)",
            placement_wait.clone(),
        );
        let workers_lost = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "workers_lost",
            "Workers declared lost: heartbeat (silent too long) or stream (connection broke)",
            workers_lost.clone(),
        );
        let environments_released = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "environments_released",
            "Environments their worker reported gone, by reason (idle: reaped; sandbox_lost; shutdown; released)",
            environments_released.clone(),
        );
        let workers = Family::<StateLabel, Gauge>::default();
        registry.register("workers", "Attached workers by state", workers.clone());
        let environments = Family::<BackendLabel, Gauge>::default();
        registry.register(
            "environments",
            "Live environments on attached workers, by backend",
            environments.clone(),
        );
        let sessions = Family::<KindLabel, Gauge>::default();
        registry.register(
            "sessions",
            "Running agent sessions (top-level, or delegated children)",
            sessions.clone(),
        );
        let approvals_pending = Gauge::default();
        registry.register(
            "approvals_pending",
            "Dangerous commands waiting for a person's approval",
            approvals_pending.clone(),
        );
        CoordinatorMetrics {
            registry,
            tool_calls,
            placement_wait,
            workers_lost,
            environments_released,
            workers,
            environments,
            sessions,
            approvals_pending,
            scrape: tokio::sync::Mutex::new(()),
        }
    }

    /// A finished call (`tool` is a registered tool's name or [`UNKNOWN_TOOL`]).
    pub fn call_finished(&self, tool: &str, status: CallStatus, duration: Duration) {
        self.tool_calls.record(tool, status.as_str(), duration);
    }

    /// How long a call waited for its placement.
    pub fn placement_waited(&self, waited: Duration, placed: bool) {
        self.placement_wait
            .get_or_create(&OutcomeLabel {
                outcome: if placed { "placed" } else { "failed" },
            })
            .observe(waited.as_secs_f64());
    }

    pub fn worker_lost(&self, reason: LostReason) {
        self.workers_lost
            .get_or_create(&ReasonLabel {
                reason: match reason {
                    LostReason::Heartbeat => "heartbeat",
                    LostReason::Stream => "stream",
                }
                .to_owned(),
            })
            .inc();
    }

    pub fn environment_released(&self, reason: &str) {
        // The reasons are the worker protocol's words; anything else is
        // folded so that a worker cannot grow the label set.
        let reason = match reason {
            "idle" | "sandbox_lost" | "shutdown" | "released" => reason,
            _ => "other",
        };
        self.environments_released
            .get_or_create(&ReasonLabel {
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// The exposition text with the gauges read from `live`.
    pub async fn render(&self, live: LiveState) -> String {
        let _one = self.scrape.lock().await;
        set_counts(&self.workers, live.worker_states, |state| StateLabel {
            state,
        });
        set_counts(&self.environments, live.environment_backends, |backend| {
            BackendLabel { backend }
        });
        self.sessions.clear();
        for (kind, count) in [
            ("top_level", live.top_level_sessions),
            ("child", live.child_sessions),
        ] {
            self.sessions
                .get_or_create(&KindLabel { kind })
                .set(gauge_value(count));
        }
        self.approvals_pending
            .set(gauge_value(live.approvals_pending));
        caduceus_metrics::encode(&self.registry)
    }
}

/// Shared by the pipeline, the scheduler and the links.
pub type Metrics = Arc<CoordinatorMetrics>;

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
