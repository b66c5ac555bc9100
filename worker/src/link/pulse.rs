//! Heartbeats from a thread of their own, and the worker's sense of having
//! been frozen.
//!
//! Tool work (output processing, file tools, many calls at once) runs on the
//! worker's main runtime, and a loaded host can keep that runtime busy for
//! seconds. Heartbeats must not wait behind it — a coordinator declares a
//! worker lost after a few silent seconds — so they are sent from a
//! dedicated thread, [`runtime`], which also carries the gRPC connection
//! itself (see `connect_once`).
//!
//! The same loop notices when the whole process was frozen (SIGSTOP, a
//! suspended VM): its sleep then overshoots. A freeze longer than the
//! coordinator's `lost_after` means the coordinator has answered this
//! worker's calls with an error and may have placed its tasks elsewhere, so
//! the connection is fenced: commands that arrived on it are not run, and
//! the worker attaches afresh (its hello lists its environments; the
//! coordinator says which are stale).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use caduceus_proto::{WorkerEvent, worker_event};

use crate::Worker;

/// The link thread's runtime (one per process, started on first use).
/// `None` when the thread cannot be started; callers then use the current
/// runtime.
pub(crate) fn runtime() -> Option<&'static tokio::runtime::Handle> {
    static LINK: OnceLock<Option<tokio::runtime::Handle>> = OnceLock::new();
    LINK.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("caduceus-link".to_owned())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .ok()?;
        Some(handle)
    })
    .as_ref()
}

/// Spawns `future` on the link thread (or the current runtime without one).
pub(crate) fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    match runtime() {
        Some(handle) => handle.spawn(future),
        None => tokio::spawn(future),
    }
}

/// One connection's heartbeat loop and what it saw.
pub(crate) struct Pulse {
    origin: Instant,
    /// When the loop last ran, in ms since `origin`.
    last_beat_ms: AtomicU64,
    /// The longest freeze seen (ms), 0 = none. Written before `last_beat_ms`.
    frozen_ms: AtomicU64,
    lost_after: Duration,
    /// Woken when a freeze is seen.
    frozen: Notify,
}

impl Pulse {
    /// Starts heartbeating `worker` on `events` every `interval` until `stop`
    /// (or until the events channel closes).
    pub(crate) fn start(
        worker: Arc<Worker>,
        events: mpsc::Sender<WorkerEvent>,
        interval: Duration,
        lost_after: Duration,
        stop: CancellationToken,
    ) -> Arc<Pulse> {
        let pulse = Arc::new(Pulse {
            origin: Instant::now(),
            last_beat_ms: AtomicU64::new(0),
            frozen_ms: AtomicU64::new(0),
            lost_after,
            frozen: Notify::new(),
        });
        let beating = pulse.clone();
        spawn(async move {
            loop {
                let heartbeat = WorkerEvent {
                    event: Some(worker_event::Event::Heartbeat(worker.heartbeat())),
                };
                if events.try_send(heartbeat).is_err() && events.is_closed() {
                    break;
                }
                tokio::select! {
                    () = tokio::time::sleep(interval) => {}
                    () = stop.cancelled() => break,
                }
                beating.beat();
            }
        });
        pulse
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Records a turn of the loop; a gap longer than `lost_after` is a freeze.
    fn beat(&self) {
        let now = self.now_ms();
        let gap = now.saturating_sub(self.last_beat_ms.load(Ordering::SeqCst));
        if Duration::from_millis(gap) > self.lost_after {
            self.frozen_ms.fetch_max(gap, Ordering::SeqCst);
            self.frozen.notify_one();
        }
        self.last_beat_ms.store(now, Ordering::SeqCst);
    }

    /// How long the worker was frozen, if longer than `lost_after`: either
    /// the loop saw it, or it has not run for that long (the process was just
    /// resumed and this thread ran first). Reads `last_beat_ms` before
    /// `frozen_ms`, the reverse of [`beat`](Self::beat)'s writes, so a freeze
    /// is never missed between the two.
    pub(crate) fn frozen_for(&self) -> Option<Duration> {
        let last = self.last_beat_ms.load(Ordering::SeqCst);
        let seen = self.frozen_ms.load(Ordering::SeqCst);
        if seen > 0 {
            return Some(Duration::from_millis(seen));
        }
        let silent = Duration::from_millis(self.now_ms().saturating_sub(last));
        (silent > self.lost_after).then_some(silent)
    }

    /// Resolves when the loop sees a freeze.
    pub(crate) async fn frozen(&self) {
        self.frozen.notified().await;
    }
}
