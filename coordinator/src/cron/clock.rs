//! The time the Cron actor reads: the system's, or one a test moves.
//!
//! Schedules are decided in whole Unix seconds (UTC). The actor never sleeps
//! on tokio's timer directly: it asks its clock to wait until a deadline, so
//! a [`ManualClock`] can move a test across minutes without a test sleeping
//! minutes.

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use tokio::sync::watch;

/// Where "now" comes from.
#[async_trait]
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Unix seconds.
    fn now(&self) -> i64;
    /// Returns once `now() >= deadline`, or after `at_most` of real time,
    /// whichever comes first (the actor re-reads the database then, for
    /// jobs other processes changed).
    async fn wait_until(&self, deadline: i64, at_most: Duration);
}

/// The system clock.
#[derive(Debug, Default)]
pub struct SystemClock;

#[async_trait]
impl Clock for SystemClock {
    fn now(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }

    async fn wait_until(&self, deadline: i64, at_most: Duration) {
        let left = u64::try_from(deadline.saturating_sub(self.now())).unwrap_or(0);
        tokio::time::sleep(Duration::from_secs(left).min(at_most)).await;
    }
}

/// A clock that moves only when told to ([`ManualClock::advance`]); waiters
/// wake at once when it passes their deadline.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<i64>,
    moved: watch::Sender<i64>,
}

impl ManualClock {
    pub fn new(start: i64) -> Self {
        ManualClock {
            now: Mutex::new(start),
            moved: watch::Sender::new(start),
        }
    }

    /// Moves the clock forward by `seconds`.
    pub fn advance(&self, seconds: i64) {
        let now = {
            let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
            *now += seconds;
            *now
        };
        self.moved.send_replace(now);
    }
}

#[async_trait]
impl Clock for ManualClock {
    fn now(&self) -> i64 {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn wait_until(&self, deadline: i64, at_most: Duration) {
        let mut moved = self.moved.subscribe();
        let reached = moved.wait_for(|now| *now >= deadline);
        let _ = tokio::time::timeout(at_most, reached).await;
    }
}
