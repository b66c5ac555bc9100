//! Skill files in the environments that use them, on whichever worker they
//! run. `skill_view(name)` in a task copies that skill's files into the
//! task's environment (under `<the sandbox's temp dir>/caduceus-skills/`,
//! written by the worker's internal `skill_sync` command through the
//! backend's file system) and keeps them there: before a later worker call
//! of the task, a change made with `skill_manage` since the last copy sends
//! the files whose digest changed and removes the ones that are gone —
//! unchanged files are not sent again, and nothing is copied while nothing
//! changed (one counter compare per call).
//!
//! The record of what an environment holds is kept here, per environment,
//! with the placement it was made for: an environment that moved to
//! another worker, or was recreated (a reset notice), gets everything again.
//! Files changed on disk by hand, not through `skill_manage`, are noticed at
//! the skill's next `skill_view`, which always compares digests.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::SkillStore;

/// The worker's internal command that writes and removes skill files in an
/// environment (`worker/src/tools/skills.rs`).
pub const SYNC_TOOL: &str = "skill_sync";

/// Content bytes per `skill_sync` command: larger skills go in several.
const BATCH_BYTES: usize = 8 << 20;

/// Where an environment's record was made: the worker and placement epoch.
pub type Place = (String, u64);

#[derive(Default)]
struct EnvRecord {
    /// `None`: nothing copied yet (or the copy was lost).
    place: Option<Place>,
    /// The store's generation the copy matches; 0 = none.
    generation: u64,
    /// The skills used in this environment (directories relative to the
    /// skills root, e.g. `basics/greet`).
    skills: BTreeSet<String>,
    /// Path relative to the skills root -> SHA-256 of the copy.
    files: HashMap<String, [u8; 32]>,
    /// The skills root inside the environment, as the worker answered.
    root: Option<String>,
}

/// The copies of skills in environments.
pub struct SkillSync {
    store: Arc<SkillStore>,
    /// How many environments have a record: with none (most calls of most
    /// coordinators) a call costs one atomic load.
    tracked: AtomicUsize,
    envs: Mutex<HashMap<String, EnvRecord>>,
}

/// What one synchronisation sends, and the record it leaves once sent.
pub struct SyncPlan {
    /// The arguments of each `skill_sync` command, in order.
    pub batches: Vec<Map<String, Value>>,
    generation: u64,
    files: HashMap<String, [u8; 32]>,
    /// The skills the plan looked at, and those of them still on disk.
    considered: BTreeSet<String>,
    skills: BTreeSet<String>,
}

impl SyncPlan {
    /// Whether there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }
}

impl SkillSync {
    pub fn new(store: Arc<SkillStore>) -> Self {
        SkillSync {
            store,
            tracked: AtomicUsize::new(0),
            envs: Mutex::new(HashMap::new()),
        }
    }

    fn envs(&self) -> std::sync::MutexGuard<'_, HashMap<String, EnvRecord>> {
        self.envs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether any environment holds skills (the hot path's first question).
    pub fn tracking(&self) -> bool {
        self.tracked.load(Ordering::Acquire) > 0
    }

    /// Whether `env` holds skills whose copy is out of date: changed since,
    /// or made for another placement than `place` (the task's current one).
    pub fn stale(&self, env: &str, place: Option<&Place>) -> bool {
        if !self.tracking() {
            return false;
        }
        self.envs().get(env).is_some_and(|record| {
            record.generation != self.store.generation() || record.place.as_ref() != place
        })
    }

    /// The skill in `rel_dir` is used in `env` from now on.
    pub fn use_skill(&self, env: &str, rel_dir: &str) {
        let mut envs = self.envs();
        if !envs.contains_key(env) {
            self.tracked.fetch_add(1, Ordering::AcqRel);
        }
        envs.entry(env.to_owned())
            .or_default()
            .skills
            .insert(rel_dir.to_owned());
    }

    /// What `env` needs to match the store, for the placement `place`: the
    /// changed files of its skills (all of them when the record was made for
    /// another placement) and the removed ones. Reads the skill files.
    pub fn plan(&self, env: &str, place: Option<&Place>) -> Option<SyncPlan> {
        // The generation is read before the files: a change made while they
        // are read leaves the record behind, so the next call sends it.
        let generation = self.store.generation();
        let (skills, held) = {
            let envs = self.envs();
            let record = envs.get(env)?;
            let held = if record.place.as_ref() == place {
                record.files.clone()
            } else {
                HashMap::new()
            };
            (record.skills.clone(), held)
        };
        let mut files = HashMap::new();
        let mut writes = Vec::new();
        let mut present = BTreeSet::new();
        for skill in &skills {
            let Some(current) = self.store.skill_files(skill) else {
                continue;
            };
            present.insert(skill.clone());
            for (path, bytes) in current {
                let digest: [u8; 32] = Sha256::digest(&bytes).into();
                if held.get(&path) != Some(&digest) {
                    writes.push((path.clone(), bytes));
                }
                files.insert(path, digest);
            }
        }
        let mut removes: Vec<String> = held
            .keys()
            .filter(|path| !files.contains_key(*path))
            .cloned()
            .collect();
        removes.sort();
        writes.sort_by(|a, b| a.0.cmp(&b.0));
        Some(SyncPlan {
            batches: batches(writes, &removes),
            generation,
            files,
            considered: skills,
            skills: present,
        })
    }

    /// The plan was carried out in `env`, now placed at `place`, whose
    /// skills root is `root`.
    pub fn commit(&self, env: &str, plan: SyncPlan, place: Option<Place>, root: Option<String>) {
        let mut envs = self.envs();
        let Some(record) = envs.get_mut(env) else {
            return;
        };
        record.place = place;
        record.generation = plan.generation;
        record.files = plan.files;
        // A skill deleted meanwhile is no longer used here (its files were
        // removed); one used since the plan was made stays.
        record
            .skills
            .retain(|s| plan.skills.contains(s) || !plan.considered.contains(s));
        if root.is_some() {
            record.root = root;
        }
    }

    /// The skills root inside `env`, once something was copied there.
    pub fn root(&self, env: &str) -> Option<String> {
        self.envs().get(env).and_then(|r| r.root.clone())
    }

    /// `env` was recreated: what it held is gone, the next call copies again.
    pub fn invalidate(&self, env: &str) {
        if let Some(record) = self.envs().get_mut(env) {
            record.place = None;
            record.generation = 0;
            record.files.clear();
        }
    }

    /// The task ended: its environments (`task`, `task@backend`) are gone.
    pub fn forget(&self, task: &str) {
        if !self.tracking() {
            return;
        }
        let mut envs = self.envs();
        let before = envs.len();
        let prefix = format!("{task}@");
        envs.retain(|env, _| env != task && !env.starts_with(&prefix));
        self.tracked
            .fetch_sub(before - envs.len(), Ordering::AcqRel);
    }
}

/// The `skill_sync` commands for `writes` and `removes`, each carrying at
/// most [`BATCH_BYTES`] of content (a single larger file goes alone).
fn batches(writes: Vec<(String, Vec<u8>)>, removes: &[String]) -> Vec<Map<String, Value>> {
    let mut out = Vec::new();
    let mut current = Vec::new();
    let mut size = 0;
    for (path, bytes) in writes {
        if size + bytes.len() > BATCH_BYTES && !current.is_empty() {
            out.push(std::mem::take(&mut current));
            size = 0;
        }
        size += bytes.len();
        current.push(json!({
            "path": path,
            "content_base64": base64::engine::general_purpose::STANDARD.encode(&bytes),
        }));
    }
    let mut batches: Vec<Map<String, Value>> =
        out.into_iter().map(|write| command(write, &[])).collect();
    if !current.is_empty() || !removes.is_empty() {
        batches.push(command(current, removes));
    }
    batches
}

fn command(write: Vec<Value>, remove: &[String]) -> Map<String, Value> {
    let mut args = Map::new();
    args.insert("write".into(), Value::Array(write));
    args.insert("remove".into(), json!(remove));
    args
}

#[cfg(test)]
#[path = "sync_tests.rs"]
mod tests;
