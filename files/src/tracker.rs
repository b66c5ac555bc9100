//! Per-task memory of what the model read, for hermes' loop guards:
//! re-reads of an unchanged region get a stub and then a block, the same
//! read or search repeated back to back gets a warning and then a block, and
//! writes warn when the file changed since it was read.
//!
//! One `ReadTracker` per task; it is shared by concurrent tool calls, so the
//! state sits behind a mutex that is never held across an await.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

use crate::fs::FileStamp;

/// Entries kept per map before the oldest are dropped (hermes' caps).
const DEDUP_CAP: usize = 1000;
const STAMPS_CAP: usize = 1000;
const PATCH_FAILURES_CAP: usize = 64;

/// A region of a file: resolved path, first line, line count.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct RegionKey {
    pub path: String,
    pub offset: usize,
    pub limit: usize,
}

/// Read-loop and staleness state of one task.
#[derive(Debug, Default)]
pub struct ReadTracker {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The last read or search call, as given by the model.
    last_call: Option<String>,
    consecutive: u32,
    /// Stamp of each region when it was last returned in full.
    regions: Bounded<RegionKey, FileStamp>,
    /// Stubs returned per region since its last full read.
    stub_hits: HashMap<RegionKey, u32>,
    /// Stamp of each file when this task last read or wrote it.
    seen: Bounded<String, FileStamp>,
    patch_failures: Bounded<String, u32>,
}

impl ReadTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// The worker calls this whenever a tool other than `read_file` or
    /// `search_files` runs on the task: repeated reads are only "in a row"
    /// if nothing else happened in between.
    pub fn note_other_tool(&self) {
        let mut state = self.lock();
        state.last_call = None;
        state.consecutive = 0;
        state.stub_hits.clear();
    }

    /// Forgets which regions were returned, so the next read of any region
    /// returns content again. Call after the conversation was compressed
    /// (the earlier content is no longer in context).
    pub fn reset_dedup(&self) {
        let mut state = self.lock();
        state.regions.clear();
        state.stub_hits.clear();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain counters behind; keep going.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn region_stamp(&self, key: &RegionKey) -> Option<FileStamp> {
        self.lock().regions.get(key).copied()
    }

    /// Counts one more stub for `key`; returns how many were served.
    pub(crate) fn stub_served(&self, key: &RegionKey) -> u32 {
        let mut state = self.lock();
        let hits = state.stub_hits.entry(key.clone()).or_insert(0);
        *hits += 1;
        let hits = *hits;
        if state.stub_hits.len() > DEDUP_CAP {
            state.stub_hits.clear();
        }
        hits
    }

    /// Records a full read; returns how many times `call` was made in a row.
    pub(crate) fn full_read(&self, key: RegionKey, call: String, stamp: Option<FileStamp>) -> u32 {
        let mut state = self.lock();
        state.stub_hits.remove(&key);
        let count = state.bump(call);
        if let Some(stamp) = stamp {
            state.seen.insert(key.path.clone(), stamp, STAMPS_CAP);
            state.regions.insert(key, stamp, DEDUP_CAP);
        }
        count
    }

    /// Records a search; returns how many times `call` was made in a row.
    pub(crate) fn search(&self, call: String) -> u32 {
        self.lock().bump(call)
    }

    /// Stamp of `path` when this task last read or wrote it.
    pub(crate) fn seen_stamp(&self, path: &str) -> Option<FileStamp> {
        self.lock().seen.get(&path.to_owned()).copied()
    }

    /// After a write (or delete): cached regions of `path` are stale; the new
    /// stamp, when known, is what later writes compare against.
    pub(crate) fn wrote(&self, path: &str, stamp: Option<FileStamp>) {
        let mut state = self.lock();
        state.regions.retain(|key| key.path != path);
        match stamp {
            Some(stamp) => state.seen.insert(path.to_owned(), stamp, STAMPS_CAP),
            None => state.seen.remove(&path.to_owned()),
        }
    }

    pub(crate) fn patch_failed(&self, path: &str) -> u32 {
        let mut state = self.lock();
        let count = state
            .patch_failures
            .get(&path.to_owned())
            .copied()
            .unwrap_or(0)
            + 1;
        state
            .patch_failures
            .insert(path.to_owned(), count, PATCH_FAILURES_CAP);
        count
    }

    pub(crate) fn patch_succeeded(&self, path: &str) {
        self.lock().patch_failures.remove(&path.to_owned());
    }
}

impl State {
    fn bump(&mut self, call: String) -> u32 {
        if self.last_call.as_deref() == Some(call.as_str()) {
            self.consecutive += 1;
        } else {
            self.last_call = Some(call);
            self.consecutive = 1;
        }
        self.consecutive
    }
}

/// A map that drops its oldest insertions beyond a cap.
#[derive(Debug)]
struct Bounded<K, V> {
    entries: HashMap<K, (u64, V)>,
    next: u64,
}

impl<K, V> Default for Bounded<K, V> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            next: 0,
        }
    }
}

impl<K: Eq + Hash + Clone, V> Bounded<K, V> {
    fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|(_, value)| value)
    }

    fn insert(&mut self, key: K, value: V, cap: usize) {
        self.next += 1;
        self.entries.insert(key, (self.next, value));
        while self.entries.len() > cap {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (order, _))| *order)
                .map(|(key, _)| key.clone());
            match oldest {
                Some(key) => self.entries.remove(&key),
                None => break,
            };
        }
    }

    fn remove(&mut self, key: &K) {
        self.entries.remove(key);
    }

    fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.entries.retain(|key, _| keep(key));
    }

    fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
#[path = "tracker_tests.rs"]
mod tests;
