//! The worker's metrics (`caduceus worker --metrics ADDR`, see README
//! "Metrics"). Each counter has one owner, where what it counts is decided:
//!
//! | metric | owner |
//! |---|---|
//! | `caduceus_worker_calls_total{tool,status}`, `caduceus_worker_call_duration_seconds{tool}` | `Worker::run_call`, where a call's `CallResult` is made |
//! | `caduceus_worker_sandboxes_swept_total` | `Worker::sweep` (sandboxes whose owner is gone or whose lease expired) |
//! | `caduceus_worker_environments_reaped_total` | `Worker::reap_idle` (idle past `terminal.lifetime_seconds`) |
//! | `caduceus_worker_attaches_total` | the link, when a welcome arrives |
//!
//! Read at each scrape: `caduceus_worker_environments{backend}`,
//! `caduceus_worker_running_calls`, `caduceus_worker_attached` (1 while a
//! connection to the coordinator is up).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use caduceus_common::result::CallStatus;

use crate::Worker;

use caduceus_metrics::{Described, ToolCalls, UNKNOWN_TOOL, gauge_value, set_counts};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackendLabel {
    backend: String,
}

pub struct WorkerMetrics {
    registry: Registry,
    calls: ToolCalls,
    swept: Counter,
    reaped: Counter,
    attaches: Counter,
    environments: Family<BackendLabel, Gauge>,
    running_calls: Gauge,
    attached_gauge: Gauge,
    attached: AtomicBool,
    scrape: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for WorkerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerMetrics").finish_non_exhaustive()
    }
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerMetrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("caduceus_worker");
        let calls = ToolCalls::register(
            &mut registry,
            Described {
                name: "calls",
                help: "Tool calls this worker finished, by tool and how they ended",
            },
            Described {
                name: "call_duration_seconds",
                help: "Wall time of tool calls on this worker, by tool",
            },
        );
        let swept = Counter::default();
        registry.register(
            "sandboxes_swept",
            "Sandboxes removed by the sweeper (owner gone or lease expired)",
            swept.clone(),
        );
        let reaped = Counter::default();
        registry.register(
            "environments_reaped",
            "Environments ended for being idle too long",
            reaped.clone(),
        );
        let attaches = Counter::default();
        registry.register(
            "attaches",
            "Times this worker attached to its coordinator (the first, then reconnections)",
            attaches.clone(),
        );
        let environments = Family::<BackendLabel, Gauge>::default();
        registry.register(
            "environments",
            "Live environments by backend",
            environments.clone(),
        );
        let running_calls = Gauge::default();
        registry.register("running_calls", "Calls running now", running_calls.clone());
        let attached_gauge = Gauge::default();
        registry.register(
            "attached",
            "1 while this worker is attached to its coordinator",
            attached_gauge.clone(),
        );
        WorkerMetrics {
            registry,
            calls,
            swept,
            reaped,
            attaches,
            environments,
            running_calls,
            attached_gauge,
            attached: AtomicBool::new(false),
            scrape: tokio::sync::Mutex::new(()),
        }
    }

    pub fn call_finished(&self, tool: &str, status: CallStatus, duration: Duration) {
        let tool = if crate::tools::serves(tool) {
            tool
        } else {
            UNKNOWN_TOOL
        };
        self.calls.record(tool, status.as_str(), duration);
    }

    pub fn swept(&self, sandboxes: usize) {
        self.swept.inc_by(sandboxes as u64);
    }

    pub fn reaped(&self, environments: usize) {
        self.reaped.inc_by(environments as u64);
    }

    /// The link is up (`true`, after a welcome) or down.
    pub fn set_attached(&self, attached: bool) {
        if attached {
            self.attaches.inc();
        }
        self.attached.store(attached, Ordering::Relaxed);
    }

    async fn render(&self, worker: &Worker) -> String {
        let _one = self.scrape.lock().await;
        set_counts(
            &self.environments,
            worker.environments().infos().into_iter().map(|i| i.backend),
            |backend| BackendLabel { backend },
        );
        self.running_calls.set(gauge_value(worker.running_calls()));
        self.attached_gauge
            .set(i64::from(self.attached.load(Ordering::Relaxed)));
        caduceus_metrics::encode(&self.registry)
    }
}

struct Endpoint {
    worker: Arc<Worker>,
    token: String,
}

#[async_trait::async_trait]
impl caduceus_metrics::Exposition for Endpoint {
    fn authorize(&self, authorization: Option<&str>) -> Result<(), String> {
        match authorization.and_then(caduceus_proto::token_from_authorization) {
            Some(presented) if caduceus_proto::tokens_match(&self.token, presented) => Ok(()),
            Some(_) => Err("invalid token: scrape with the token this worker attaches with".to_owned()),
            None => Err("missing token: scrape with `authorization: Bearer <token>` (the token this worker attaches with)".to_owned()),
        }
    }

    async fn render(&self) -> String {
        self.worker.metrics().render(&self.worker).await
    }
}

/// Serves the worker's metrics on `listener` until `shutdown`; a scrape must
/// present `token` (the one the worker attaches with).
pub async fn serve_metrics(
    worker: Arc<Worker>,
    listener: TcpListener,
    token: String,
    shutdown: CancellationToken,
) {
    caduceus_metrics::serve(listener, Arc::new(Endpoint { worker, token }), shutdown).await;
}
