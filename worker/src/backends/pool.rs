//! Warm pools: sandboxes started ahead of demand, per backend and settings
//! (`terminal.warm_pool`), handed to new environments whose settings match,
//! refilled in the background. Pool entries carry leases like any sandbox
//! (renewed by the pool while idle, by the environment once handed out) and
//! are swept the same way when their worker dies.
//!
//! Matching is by the provider's [`pool_key`](super::Provider::pool_key): two
//! requests with the same key get interchangeable sandboxes. A provider
//! returns no key when its sandboxes are task-specific (Docker with
//! `container_persistent`, whose directories belong to one task): such
//! requests are always created cold.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde_json::Value;

use super::lease::LeaseRecord;
use super::{CreateRequest, Provider};
use crate::sandbox::Sandbox;

/// How many sandboxes to keep ready for one backend and settings.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSpec {
    pub backend: String,
    /// Backend settings of the pooled sandboxes, with the same keys the
    /// coordinator sends (e.g. `{"docker_image": "caduceus-base:bookworm"}`);
    /// empty means the worker's defaults.
    pub settings: Value,
    pub size: usize,
}

struct Slot {
    backend: String,
    key: String,
    target: usize,
    request: CreateRequest,
    idle: VecDeque<Arc<dyn Sandbox>>,
    /// Consecutive failed starts: refilling backs off instead of hammering.
    failures: u32,
}

/// The warm pools of one worker.
#[derive(Default)]
pub struct WarmPools {
    slots: Mutex<Vec<Slot>>,
    refill: tokio::sync::Notify,
    /// Held by a running refill. A drain waits for it: an entry still being
    /// started when the worker stops would otherwise be created after the
    /// process exited, and left behind until some sweep.
    refilling: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for WarmPools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmPools")
            .field("sizes", &self.sizes())
            .finish()
    }
}

impl WarmPools {
    /// Declares the pools; entries are started by [`refill`](Self::refill).
    /// Specs whose provider is missing or gives no key are reported back.
    pub fn configure(
        &self,
        specs: &[PoolSpec],
        providers: &[Arc<dyn Provider>],
        worker: &str,
        worker_instance: &str,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let mut slots = Vec::new();
        for spec in specs.iter().filter(|s| s.size > 0) {
            let Some(provider) = providers.iter().find(|p| p.name() == spec.backend) else {
                problems.push(format!(
                    "warm pool for '{}' ignored: this worker does not offer that backend",
                    spec.backend
                ));
                continue;
            };
            let request = CreateRequest {
                task_id: String::new(),
                owner: String::new(),
                worker: worker.to_owned(),
                worker_instance: worker_instance.to_owned(),
                settings: if spec.settings.is_null() {
                    Value::Object(Default::default())
                } else {
                    spec.settings.clone()
                },
            };
            let Some(key) = provider.pool_key(&request) else {
                problems.push(format!(
                    "warm pool for '{}' ignored: its sandboxes cannot be prepared ahead of a task with these settings (e.g. container_persistent binds per-task directories)",
                    spec.backend
                ));
                continue;
            };
            slots.push(Slot {
                backend: spec.backend.clone(),
                key,
                target: spec.size,
                request,
                idle: VecDeque::new(),
                failures: 0,
            });
        }
        if let Ok(mut current) = self.slots.lock() {
            *current = slots;
        }
        self.refill.notify_one();
        problems
    }

    /// (backend, key, ready) of each pool.
    pub fn sizes(&self) -> Vec<(String, String, usize)> {
        self.slots
            .lock()
            .map(|s| {
                s.iter()
                    .map(|s| (s.backend.clone(), s.key.clone(), s.idle.len()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A ready sandbox for `key` on `backend`, if the pool has one.
    pub fn take(&self, backend: &str, key: &str) -> Option<Arc<dyn Sandbox>> {
        let taken = self
            .slots
            .lock()
            .ok()?
            .iter_mut()
            .find(|s| s.backend == backend && s.key == key)?
            .idle
            .pop_front();
        if taken.is_some() {
            self.refill.notify_one();
        }
        taken
    }

    /// Ids of the idle entries (the sweeper keeps them).
    pub fn ids(&self) -> Vec<String> {
        self.slots
            .lock()
            .map(|s| {
                s.iter()
                    .flat_map(|s| s.idle.iter().map(|b| b.id().to_owned()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Resolves when an entry was taken or the pools were configured.
    pub async fn wanted(&self) {
        self.refill.notified().await;
    }

    /// Starts entries until every pool is full (one at a time, so a slow
    /// engine is not flooded). Returns how many were started.
    pub async fn refill(&self, providers: &[Arc<dyn Provider>], available: &[String]) -> usize {
        let _running = self.refilling.lock().await;
        let mut started = 0;
        loop {
            let job = self.slots.lock().ok().and_then(|slots| {
                slots
                    .iter()
                    .find(|s| {
                        s.idle.len() < s.target && s.failures < 3 && available.contains(&s.backend)
                    })
                    .map(|s| (s.backend.clone(), s.key.clone(), s.request.clone()))
            });
            let Some((backend, key, request)) = job else {
                return started;
            };
            let Some(provider) = providers.iter().find(|p| p.name() == backend) else {
                return started;
            };
            let created = provider.create_for_pool(&request, &key).await;
            let mut leftover = None;
            if let Ok(mut slots) = self.slots.lock() {
                match slots
                    .iter_mut()
                    .find(|s| s.backend == backend && s.key == key)
                {
                    Some(slot) => match created {
                        Ok(sandbox) => {
                            slot.failures = 0;
                            slot.idle.push_back(sandbox);
                            started += 1;
                        }
                        Err(err) => {
                            slot.failures += 1;
                            tracing::warn!(%backend, "warm pool: cannot start a sandbox ({err}); attempt {} of 3", slot.failures);
                        }
                    },
                    // The pool was reconfigured meanwhile.
                    None => leftover = created.ok(),
                }
            }
            if let Some(sandbox) = leftover {
                let _ = sandbox.destroy().await;
            }
        }
    }

    /// Lets failed pools try again (called now and then).
    pub fn reset_failures(&self) {
        if let Ok(mut slots) = self.slots.lock() {
            for slot in slots.iter_mut() {
                slot.failures = 0;
            }
        }
    }

    /// Renews the leases of idle entries; drops entries that died.
    pub async fn renew(&self) {
        let idle: Vec<(Arc<dyn Sandbox>, LeaseRecord)> = self
            .slots
            .lock()
            .map(|slots| {
                slots
                    .iter()
                    .flat_map(|s| {
                        s.idle.iter().map(|b| {
                            (
                                b.clone(),
                                LeaseRecord {
                                    owner: String::new(),
                                    worker: s.request.worker.clone(),
                                    worker_instance: s.request.worker_instance.clone(),
                                    task: String::new(),
                                    renewed_at: 0,
                                    ttl_secs: 0,
                                },
                            )
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        let now = SystemTime::now();
        let mut dead = Vec::new();
        for (sandbox, record) in idle {
            if !sandbox.alive().await {
                dead.push(sandbox.id().to_owned());
                continue;
            }
            if let Err(err) = sandbox.renew_lease(&record.renewed(now)).await {
                tracing::debug!(sandbox = %sandbox.id(), "pool lease renewal failed: {err}");
            }
        }
        if !dead.is_empty() {
            if let Ok(mut slots) = self.slots.lock() {
                for slot in slots.iter_mut() {
                    slot.idle.retain(|b| !dead.iter().any(|d| d == b.id()));
                }
            }
            self.refill.notify_one();
        }
    }

    /// Removes every idle entry (worker shutdown).
    pub async fn drain(&self) {
        // The pools go away with their entries: a refill still running finds
        // no pool for what it started and removes it (see `refill`), so
        // nothing is left behind after a drain.
        let all: Vec<Arc<dyn Sandbox>> = self
            .slots
            .lock()
            .map(|mut slots| {
                std::mem::take(&mut *slots)
                    .into_iter()
                    .flat_map(|s| s.idle)
                    .collect()
            })
            .unwrap_or_default();
        for sandbox in all {
            let _ = sandbox.destroy().await;
        }
        // A refill still starting an entry finds no pool for it and removes
        // it; wait for that before the worker may exit.
        drop(self.refilling.lock().await);
    }
}

/// Parses `terminal.warm_pool`: either a map of backend → size
/// (`{docker: 2}`) or a list of `{backend, size, <settings…>}` entries
/// (`[{backend: docker, docker_image: "debian:bookworm-slim", size: 2}]`).
pub fn parse_specs(value: &Value) -> Result<Vec<PoolSpec>, String> {
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Object(map) => map
            .iter()
            .map(|(backend, size)| {
                let size = size.as_u64().ok_or_else(|| {
                    format!("warm_pool.{backend}: expected a number of sandboxes")
                })?;
                Ok(PoolSpec {
                    backend: backend.clone(),
                    settings: Value::Object(Default::default()),
                    size: size as usize,
                })
            })
            .collect(),
        Value::Array(entries) => entries
            .iter()
            .map(|entry| {
                let map = entry
                    .as_object()
                    .ok_or("warm_pool entries must be objects with backend and size")?;
                let backend = map
                    .get("backend")
                    .and_then(Value::as_str)
                    .ok_or("warm_pool entry without a backend")?;
                let size = map
                    .get("size")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| format!("warm_pool entry for '{backend}' without a size"))?;
                let mut settings = map.clone();
                settings.remove("backend");
                settings.remove("size");
                // "image" is accepted as a short name for the backend's image key.
                if let Some(image) = settings.remove("image") {
                    settings.insert(format!("{backend}_image"), image);
                }
                Ok(PoolSpec {
                    backend: backend.to_owned(),
                    settings: Value::Object(settings),
                    size: size as usize,
                })
            })
            .collect(),
        _ => Err("warm_pool must be a map of backend to size or a list of entries".to_owned()),
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
