//! Splits one assistant turn's tool calls into segments that run one after
//! the other; the calls of a `Parallel` segment run concurrently (hermes
//! `_plan_tool_batch_segments`).
//!
//! Walking the calls in order:
//! - `Never` (`clarify`), arguments that are not a JSON object, `Sequential`
//!   tools and path-scoped calls without a string `path` are barriers: they
//!   close the current parallel run and run on their own, in order.
//! - `Safe` calls join the current parallel run.
//! - `PathScoped` calls (`read_file`, `write_file`, `patch`) join it unless
//!   their canonical path overlaps a path already reserved in the run; an
//!   overlap closes the run, so the conflicting call starts a new run after
//!   the first one has finished.
//!
//! Parallel runs of fewer than two calls become sequential and adjacent
//! sequential segments merge. The original order is never crossed: results
//! and side effects are ordered exactly as in a fully sequential run.

use serde_json::{Map, Value};

use crate::registry::ParallelClass;
use caduceus_files::paths::{canonical_path, paths_overlap};

/// Most calls of one parallel segment in flight at once (hermes `_MAX_TOOL_WORKERS`).
pub const MAX_PARALLEL_CALLS: usize = 8;

/// What the planner needs to know about one call.
#[derive(Debug, Clone, Copy)]
pub struct PlanCall<'a> {
    pub class: ParallelClass,
    /// The arguments, or `None` when they are not a JSON object.
    pub args: Option<&'a Map<String, Value>>,
}

/// A run of calls, by index into the planned batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Parallel(Vec<usize>),
    Sequential(Vec<usize>),
}

impl Segment {
    pub fn calls(&self) -> &[usize] {
        match self {
            Segment::Parallel(calls) | Segment::Sequential(calls) => calls,
        }
    }

    pub fn is_parallel(&self) -> bool {
        matches!(self, Segment::Parallel(_))
    }
}

/// A reserved path. Without a known cwd, relative paths cannot be compared
/// with absolute ones, so such a pair counts as overlapping.
struct Scope {
    path: String,
    anchored: bool,
}

impl Scope {
    fn of(raw: &str, cwd: Option<&str>) -> Scope {
        match cwd {
            Some(cwd) if !cwd.is_empty() => Scope {
                path: canonical_path(cwd, raw, None),
                anchored: !raw.starts_with('~'),
            },
            _ => {
                let anchored = raw.starts_with('/');
                Scope {
                    path: canonical_path("", raw, None),
                    anchored,
                }
            }
        }
    }

    fn overlaps(&self, other: &Scope) -> bool {
        if self.anchored != other.anchored {
            return true;
        }
        paths_overlap(&self.path, &other.path)
    }
}

/// Plans a batch. `cwd` is the working directory of the task's environment
/// (relative paths resolve against it), when known.
pub fn plan_batch(calls: &[PlanCall<'_>], cwd: Option<&str>) -> Vec<Segment> {
    let mut raw: Vec<(bool, Vec<usize>)> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut reserved: Vec<Scope> = Vec::new();

    fn close(
        raw: &mut Vec<(bool, Vec<usize>)>,
        current: &mut Vec<usize>,
        reserved: &mut Vec<Scope>,
    ) {
        if !current.is_empty() {
            raw.push((true, std::mem::take(current)));
            reserved.clear();
        }
    }

    for (index, call) in calls.iter().enumerate() {
        let parallel_ok = match (call.class, call.args) {
            (ParallelClass::Never | ParallelClass::Sequential, _) | (_, None) => false,
            (ParallelClass::Safe, Some(_)) => true,
            (ParallelClass::PathScoped, Some(args)) => match args
                .get("path")
                .and_then(Value::as_str)
                .filter(|p| !p.trim().is_empty())
            {
                Some(path) => {
                    let scope = Scope::of(path, cwd);
                    if reserved.iter().any(|r| r.overlaps(&scope)) {
                        close(&mut raw, &mut current, &mut reserved);
                    }
                    reserved.push(scope);
                    true
                }
                None => false,
            },
        };
        if parallel_ok {
            current.push(index);
        } else {
            close(&mut raw, &mut current, &mut reserved);
            match raw.last_mut() {
                Some((false, calls)) => calls.push(index),
                _ => raw.push((false, vec![index])),
            }
        }
    }
    close(&mut raw, &mut current, &mut reserved);

    let mut segments: Vec<Segment> = Vec::new();
    for (parallel, calls) in raw {
        let parallel = parallel && calls.len() >= 2;
        match (parallel, segments.last_mut()) {
            (false, Some(Segment::Sequential(previous))) => previous.extend(calls),
            (false, _) => segments.push(Segment::Sequential(calls)),
            (true, _) => segments.push(Segment::Parallel(calls)),
        }
    }
    segments
}

#[cfg(test)]
#[path = "planner_tests.rs"]
mod tests;
