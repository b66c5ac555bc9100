//! Sandbox leases: who owns a sandbox and until when, and the sweeper's rule.
//!
//! Every sandbox a worker creates carries two records (see `README.md`):
//!
//! - **labels**, fixed at creation: the creating worker's name and instance id,
//!   the coordinator and task it was made for, when it was made and the lease
//!   length ([`LeaseLabels`]);
//! - a **lease record**, renewed while its environment lives: the current
//!   owner, task and the time of the last renewal ([`LeaseRecord`]). Where it is
//!   kept is the backend's business (Docker: a small file inside the container,
//!   written and read through the engine's archive API).
//!
//! A sweeper ([`judge`]) removes a sandbox once its lease expired: last renewal
//! (or creation, when it was never renewed) plus the lease length is in the
//! past, and never one its own worker holds. The rule is the same for a
//! sandbox of a dead worker, of a live worker that leaked it, or of this very
//! worker: nothing renews it, so it goes one lease after it was let go. (A
//! faster "mine and not held, remove now" rule races with hand-overs from the
//! warm pool to an environment, so there is none.) Renewal times in the
//! future are not believed beyond a small clock skew (a sandbox cannot
//! extend its own lease by writing a date far ahead).

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Keeps a lease value (a worker, owner or task name in a label or a lease
/// line) to characters that survive `read` and word splitting; at most 80.
pub fn lease_word(value: &str) -> String {
    let cleaned: String = value
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.:@".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(80)
        .collect();
    if cleaned.is_empty() {
        "-".to_owned()
    } else {
        cleaned
    }
}

use super::SweepContext;

/// Label keys every caduceus sandbox carries (Docker labels; other backends
/// use the same names wherever they keep metadata).
pub mod label {
    /// Present on every caduceus sandbox ("1"): what sweepers list.
    pub const MANAGED: &str = "caduceus.managed";
    /// The coordinator id the sandbox was created for ("" for a warm-pool entry).
    pub const OWNER: &str = "caduceus.owner";
    /// Name of the worker that created it.
    pub const WORKER: &str = "caduceus.worker";
    /// Instance id of the worker process that created it (new each start).
    pub const WORKER_INSTANCE: &str = "caduceus.worker-instance";
    /// The task it was created for ("" for a warm-pool entry).
    pub const TASK: &str = "caduceus.task";
    /// Creation time, seconds since the epoch.
    pub const CREATED: &str = "caduceus.created";
    /// Lease length in seconds: a sandbox not renewed for this long is swept.
    pub const LEASE_SECONDS: &str = "caduceus.lease-seconds";
    /// Warm-pool key, on sandboxes started for a pool.
    pub const POOL: &str = "caduceus.pool";
}

/// How long leases last and how often they are renewed and swept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasePolicy {
    /// Lease length written on every sandbox.
    pub ttl: Duration,
    /// How often live environments and pool entries renew their leases
    /// (a third of the lease by default, so two renewals may fail in a row).
    pub renew_every: Duration,
    /// How often the sweeper runs (it also runs when the worker starts).
    pub sweep_every: Duration,
}

impl LeasePolicy {
    /// A policy with the lease `ttl`, renewed every `ttl / 3`, swept every `sweep_every`.
    pub fn new(ttl: Duration, sweep_every: Duration) -> Self {
        let ttl = ttl.max(Duration::from_secs(1));
        LeasePolicy {
            ttl,
            renew_every: (ttl / 3).max(Duration::from_millis(200)),
            sweep_every: sweep_every.max(Duration::from_millis(200)),
        }
    }
}

impl Default for LeasePolicy {
    /// 90 s leases renewed every 30 s, swept every 60 s: a sandbox whose owner
    /// died is gone at most 90 + 60 s after the owner's last renewal.
    fn default() -> Self {
        LeasePolicy::new(Duration::from_secs(90), Duration::from_secs(60))
    }
}

/// Seconds since the epoch.
pub fn epoch_secs(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The fixed labels of a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseLabels {
    pub owner: String,
    pub worker: String,
    pub worker_instance: String,
    pub task: String,
    pub created: u64,
    pub lease_seconds: u64,
    /// Warm-pool key when started for a pool.
    pub pool: Option<String>,
}

impl LeaseLabels {
    pub fn to_map(&self) -> HashMap<String, String> {
        let mut map = HashMap::from([
            (label::MANAGED.to_owned(), "1".to_owned()),
            (label::OWNER.to_owned(), self.owner.clone()),
            (label::WORKER.to_owned(), self.worker.clone()),
            (
                label::WORKER_INSTANCE.to_owned(),
                self.worker_instance.clone(),
            ),
            (label::TASK.to_owned(), self.task.clone()),
            (label::CREATED.to_owned(), self.created.to_string()),
            (
                label::LEASE_SECONDS.to_owned(),
                self.lease_seconds.to_string(),
            ),
        ]);
        if let Some(pool) = &self.pool {
            map.insert(label::POOL.to_owned(), pool.clone());
        }
        map
    }

    /// Reads the labels back; `None` unless the sandbox is caduceus-managed.
    pub fn from_map(map: &HashMap<String, String>) -> Option<Self> {
        if map.get(label::MANAGED).map(String::as_str) != Some("1") {
            return None;
        }
        let text = |key: &str| map.get(key).cloned().unwrap_or_default();
        let number = |key: &str| {
            map.get(key)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Some(LeaseLabels {
            owner: text(label::OWNER),
            worker: text(label::WORKER),
            worker_instance: text(label::WORKER_INSTANCE),
            task: text(label::TASK),
            created: number(label::CREATED),
            lease_seconds: number(label::LEASE_SECONDS),
            pool: map.get(label::POOL).cloned(),
        })
    }
}

/// The renewable part of a lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LeaseRecord {
    /// Coordinator id owning the task.
    pub owner: String,
    pub worker: String,
    pub worker_instance: String,
    /// The task the sandbox serves now (a pool entry's task once leased out).
    pub task: String,
    /// Last renewal, seconds since the epoch.
    pub renewed_at: u64,
    /// Lease length in seconds.
    pub ttl_secs: u64,
}

impl LeaseRecord {
    /// The same lease, renewed now.
    pub fn renewed(&self, now: SystemTime) -> Self {
        LeaseRecord {
            renewed_at: epoch_secs(now),
            ..self.clone()
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    pub fn from_json(text: &str) -> Option<Self> {
        serde_json::from_str(text.trim()).ok()
    }
}

/// One sandbox as a sweeper sees it.
#[derive(Debug, Clone)]
pub struct SweepCandidate {
    /// Backend id (`Sandbox::id`).
    pub id: String,
    pub labels: LeaseLabels,
    /// The renewable record, when it could be read.
    pub record: Option<LeaseRecord>,
}

/// What the sweeper does with one sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    Remove(String),
}

/// Clock skew tolerated between workers writing and reading renewal times.
const FUTURE_SKEW_SECS: u64 = 30;

/// The sweeper's rule for one sandbox (see the module doc).
pub fn judge(candidate: &SweepCandidate, context: &SweepContext, now: SystemTime) -> Verdict {
    if context.live.contains(&candidate.id) {
        return Verdict::Keep;
    }
    let labels = &candidate.labels;
    let now_secs = epoch_secs(now);
    let ttl = if labels.lease_seconds > 0 {
        labels.lease_seconds
    } else {
        candidate.record.as_ref().map(|r| r.ttl_secs).unwrap_or(0)
    };
    let renewed = candidate
        .record
        .as_ref()
        .map(|r| r.renewed_at)
        .filter(|at| *at <= now_secs + FUTURE_SKEW_SECS)
        .unwrap_or(0)
        .max(labels.created);
    let expires = renewed.saturating_add(ttl);
    if expires < now_secs {
        let who = candidate
            .record
            .as_ref()
            .map(|r| r.worker.as_str())
            .filter(|w| !w.is_empty())
            .unwrap_or(&labels.worker);
        Verdict::Remove(format!(
            "lease expired {}s ago (last renewed by worker '{who}')",
            now_secs - expires
        ))
    } else {
        Verdict::Keep
    }
}

/// A bash watchdog that ends a sandbox whose lease is not renewed, whether or
/// not any worker is left to sweep it (SSH: on the remote host; Singularity:
/// on the worker's host). `$1` is the lease file (a line beginning
/// `expires=<epoch seconds>`), `$2` the seconds between looks; `on_expiry`
/// runs once the expiry has passed. The watchdog exits quietly when the lease
/// file is gone (the sandbox was released or swept).
pub fn lease_watchdog(on_expiry: &str) -> String {
    format!(
        r#"trap '' HUP INT
lease=$1 step=$2
while :; do
  sleep "$step"
  l=
  IFS= read -r l < "$lease" 2>/dev/null || [ -n "$l" ] || exit 0
  e=${{l#expires=}}; e=${{e%% *}}
  case $e in ''|*[!0-9]*) continue;; esac
  [ "$(date +%s)" -gt "$e" ] && break
done
{on_expiry}
"#
    )
}

/// How often a watchdog looks: a tenth of the lease, 1–30 s, so a sandbox
/// outlives its last renewal by at most 1.1 leases.
pub fn watchdog_step(lease: Duration) -> u64 {
    (lease.as_secs() / 10).clamp(1, 30)
}
