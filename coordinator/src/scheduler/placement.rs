//! Where a new environment goes: the one decision of placement, as a pure
//! function over what the scheduler knows of its workers.
//!
//! A worker is **eligible** for a request when it offers the requested
//! backend, carries every requested label (same value), takes new
//! environments (not cordoned, not draining), has been heard from recently
//! (not suspect) and has room (fewer placed environments than its
//! `--max-envs`). Among the eligible the least loaded wins: running calls
//! over call capacity, then fewer placed environments, then the name. When
//! none is eligible, [`Shortfall`] says why, in the words the caller reads.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// What a new environment needs.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub backend: &'a str,
    /// Every one must be on the worker with the same value.
    pub labels: &'a BTreeMap<String, String>,
}

/// Whether a worker takes new environments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Open,
    /// `caduceus workers cordon`: keeps its environments, gets no new ones.
    Cordoned,
    /// Leaving: finishing its calls.
    Draining,
    /// Silent past the suspect threshold: it is back soon or declared lost.
    Suspect,
}

/// One worker as placement sees it.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    pub name: &'a str,
    pub backends: &'a [String],
    pub labels: &'a HashMap<String, String>,
    pub admission: Admission,
    /// Environments (tasks) placed on it now.
    pub environments: usize,
    /// At most this many; 0 = no limit.
    pub max_environments: u32,
    pub running_calls: u32,
    pub call_capacity: u32,
}

impl Candidate<'_> {
    fn offers(&self, backend: &str) -> bool {
        self.backends.iter().any(|b| b == backend)
    }

    fn carries(&self, labels: &BTreeMap<String, String>) -> bool {
        labels.iter().all(|(k, v)| self.labels.get(k) == Some(v))
    }

    fn full(&self) -> bool {
        self.max_environments > 0 && self.environments >= self.max_environments as usize
    }

    fn load(&self) -> f64 {
        f64::from(self.running_calls) / f64::from(self.call_capacity.max(1))
    }
}

/// Why no worker could take a request: counts of the workers that came
/// closest, for the error the caller reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shortfall {
    pub backend: String,
    pub labels: BTreeMap<String, String>,
    /// Offer the backend and carry the labels, but are at `--max-envs`.
    pub full: usize,
    /// Offer the backend and carry the labels, but are cordoned or draining.
    pub closed: usize,
    /// Offer the backend and carry the labels, but are suspect.
    pub suspect: usize,
    /// Offer the backend but lack some label.
    pub unlabelled: usize,
}

impl Shortfall {
    /// True when a worker that would do is silent: it is heard from again
    /// or declared lost within the liveness thresholds, so the caller waits
    /// for that rather than for a fleet change.
    pub fn waits_on_silent(&self) -> bool {
        self.suspect > 0
    }
}

/// `k=v,k2=v2`, sorted by key.
pub fn format_labels(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn workers(n: usize) -> String {
    if n == 1 {
        "1 worker".to_owned()
    } else {
        format!("{n} workers")
    }
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no attached worker offers backend '{}'", self.backend)?;
        if !self.labels.is_empty() {
            write!(f, " with labels {}", format_labels(&self.labels))?;
        }
        write!(f, " and free capacity")?;
        let one = |n: usize, singular: &'static str, plural: &'static str| {
            if n == 1 { singular } else { plural }
        };
        let mut reasons = Vec::new();
        let them = if self.labels.is_empty() {
            "offer the backend"
        } else {
            "have the labels"
        };
        if self.full > 0 {
            let (verb, be) = if self.full == 1 {
                (
                    if self.labels.is_empty() {
                        "offers the backend"
                    } else {
                        "has the labels"
                    },
                    "is",
                )
            } else {
                (them, "are")
            };
            reasons.push(format!("{} {verb} but {be} full", workers(self.full)));
        }
        if self.closed > 0 {
            reasons.push(format!(
                "{} {} but {} cordoned or draining",
                workers(self.closed),
                if self.closed == 1 {
                    if self.labels.is_empty() {
                        "offers the backend"
                    } else {
                        "has the labels"
                    }
                } else {
                    them
                },
                one(self.closed, "is", "are")
            ));
        }
        if self.suspect > 0 {
            reasons.push(format!(
                "{} with them {} not answering heartbeats",
                workers(self.suspect),
                one(self.suspect, "is", "are")
            ));
        }
        if self.unlabelled > 0 {
            reasons.push(format!(
                "{} {} the backend without the labels",
                workers(self.unlabelled),
                one(self.unlabelled, "offers", "offer")
            ));
        }
        if !reasons.is_empty() {
            write!(f, "; {}", reasons.join(", "))?;
        }
        Ok(())
    }
}

/// The index of the worker a new environment goes to, or why there is none.
pub fn choose(request: Request<'_>, candidates: &[Candidate<'_>]) -> Result<usize, Shortfall> {
    let mut shortfall = Shortfall {
        backend: request.backend.to_owned(),
        labels: request.labels.clone(),
        full: 0,
        closed: 0,
        suspect: 0,
        unlabelled: 0,
    };
    let mut best: Option<usize> = None;
    for (index, worker) in candidates.iter().enumerate() {
        if !worker.offers(request.backend) {
            continue;
        }
        if !worker.carries(request.labels) {
            shortfall.unlabelled += 1;
            continue;
        }
        match worker.admission {
            Admission::Cordoned | Admission::Draining => {
                shortfall.closed += 1;
                continue;
            }
            Admission::Suspect => {
                shortfall.suspect += 1;
                continue;
            }
            Admission::Open => {}
        }
        if worker.full() {
            shortfall.full += 1;
            continue;
        }
        let better = best.is_none_or(|b| {
            let current = &candidates[b];
            worker
                .load()
                .total_cmp(&current.load())
                .then_with(|| worker.environments.cmp(&current.environments))
                .then_with(|| worker.name.cmp(current.name))
                .is_lt()
        });
        if better {
            best = Some(index);
        }
    }
    best.ok_or(shortfall)
}

#[cfg(test)]
#[path = "placement_tests.rs"]
mod tests;
