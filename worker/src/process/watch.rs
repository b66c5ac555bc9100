//! Watch patterns: which output lines match, and hermes' rate limits
//! (`tools/process_registry.py`).
//!
//! Per process: at most one notification every 15 s. A match inside that
//! cooldown is dropped and makes the window a "strike" (once per window);
//! three strike windows in a row disable the patterns and promote the process
//! to notify-on-exit. A cooldown that passes without a drop resets the count.
//!
//! Across all processes of the worker: at most 15 notifications per 10 s
//! window; the 16th trips a breaker that drops every match for 30 s, then
//! one summary says how many were dropped.
//!
//! Both limiters take `now` so tests can drive time.

use std::time::{Duration, Instant};

pub const WATCH_MIN_INTERVAL: Duration = Duration::from_secs(15);
pub const WATCH_STRIKE_LIMIT: u32 = 3;
pub const GLOBAL_MAX_PER_WINDOW: u32 = 15;
pub const GLOBAL_WINDOW: Duration = Duration::from_secs(10);
pub const GLOBAL_COOLDOWN: Duration = Duration::from_secs(30);

/// Lines kept in one match notification, and characters.
const MAX_MATCHED_LINES: usize = 20;
const MAX_MATCHED_CHARS: usize = 2000;
/// A line without newline longer than this is scanned and then forgotten.
const MAX_PARTIAL_CHARS: usize = 8192;

/// What a chunk of output caused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// Send a `watch_match` notice.
    Matched {
        pattern: String,
        output: String,
        suppressed: u64,
    },
    /// The strike limit was reached: patterns off, notify on exit instead.
    Disabled { suppressed: u64 },
}

/// Per-process watch state.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    patterns: Vec<String>,
    disabled: bool,
    hits: u64,
    suppressed: u64,
    cooldown_until: Option<Instant>,
    strike_candidate: bool,
    consecutive_strikes: u32,
    /// The current unfinished line, and whether it already matched.
    partial: String,
    partial_matched: bool,
}

impl Watch {
    pub fn new(patterns: Vec<String>) -> Self {
        Watch {
            patterns: patterns.into_iter().filter(|p| !p.is_empty()).collect(),
            ..Watch::default()
        }
    }

    /// Patterns still in force (empty once disabled).
    pub fn active_patterns(&self) -> &[String] {
        if self.disabled { &[] } else { &self.patterns }
    }

    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Scans new output (already ANSI-stripped) and applies the per-process
    /// limit. Lines split across chunks are matched once, when the pattern
    /// first appears in them.
    pub fn check(&mut self, text: &str, now: Instant) -> Option<WatchEvent> {
        if self.patterns.is_empty() || self.disabled {
            return None;
        }
        let (pattern, lines) = self.matching_lines(text);
        let pattern = pattern?;
        self.rate_limit(pattern, &lines, now)
    }

    fn matching_lines(&mut self, text: &str) -> (Option<String>, Vec<String>) {
        let mut found = Found::default();
        let mut rest = text;
        while let Some(at) = rest.find('\n') {
            let piece = &rest[..at];
            rest = &rest[at + 1..];
            let line = if self.partial.is_empty() {
                piece.to_owned()
            } else {
                std::mem::take(&mut self.partial) + piece
            };
            if !std::mem::take(&mut self.partial_matched) {
                found.consider(&self.patterns, line.trim_end_matches('\r'));
            }
        }
        if !rest.is_empty() {
            if self.partial.chars().count() < MAX_PARTIAL_CHARS {
                self.partial.push_str(rest);
            }
            if !self.partial_matched {
                self.partial_matched = found.consider(&self.patterns, &self.partial);
            }
        }
        (found.pattern, found.lines)
    }

    fn rate_limit(
        &mut self,
        pattern: String,
        lines: &[String],
        now: Instant,
    ) -> Option<WatchEvent> {
        if lines.is_empty() {
            return None;
        }
        if let Some(until) = self.cooldown_until
            && now < until
        {
            self.suppressed += lines.len() as u64;
            if !self.strike_candidate {
                self.strike_candidate = true;
                self.consecutive_strikes += 1;
                if self.consecutive_strikes >= WATCH_STRIKE_LIMIT {
                    self.disabled = true;
                    return Some(WatchEvent::Disabled {
                        suppressed: self.suppressed,
                    });
                }
            }
            return None;
        }
        if self.cooldown_until.is_some() && !self.strike_candidate {
            self.consecutive_strikes = 0;
        }
        self.strike_candidate = false;
        self.cooldown_until = Some(now + WATCH_MIN_INTERVAL);
        self.hits += 1;
        let suppressed = std::mem::take(&mut self.suppressed);
        let mut output = lines
            .iter()
            .take(MAX_MATCHED_LINES)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n");
        if output.chars().count() > MAX_MATCHED_CHARS {
            output =
                output.chars().take(MAX_MATCHED_CHARS).collect::<String>() + "\n...(truncated)";
        }
        Some(WatchEvent::Matched {
            pattern,
            output,
            suppressed,
        })
    }
}

/// Matching lines of one chunk and the first pattern that matched.
#[derive(Default)]
struct Found {
    pattern: Option<String>,
    lines: Vec<String>,
}

impl Found {
    /// Records `line` if a pattern occurs in it; returns whether one did.
    fn consider(&mut self, patterns: &[String], line: &str) -> bool {
        match patterns.iter().find(|p| line.contains(p.as_str())) {
            Some(p) => {
                if self.pattern.is_none() {
                    self.pattern = Some(p.clone());
                }
                self.lines.push(line.trim_end().to_owned());
                true
            }
            None => false,
        }
    }
}

/// What the global breaker says about one match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub admit: bool,
    /// The breaker just tripped: tell the session once.
    pub tripped: bool,
    /// The breaker just closed again after dropping this many.
    pub released_after: Option<u64>,
}

/// The worker-wide circuit breaker for watch notifications.
#[derive(Debug, Default)]
pub struct GlobalBreaker {
    state: std::sync::Mutex<BreakerState>,
}

#[derive(Debug, Default)]
struct BreakerState {
    window_start: Option<Instant>,
    window_hits: u32,
    tripped_until: Option<Instant>,
    suppressed_during_trip: u64,
}

impl GlobalBreaker {
    pub fn admit(&self, now: Instant) -> Admission {
        let Ok(mut s) = self.state.lock() else {
            return Admission {
                admit: true,
                tripped: false,
                released_after: None,
            };
        };
        let mut released_after = None;
        if let Some(until) = s.tripped_until
            && now >= until
        {
            let suppressed = std::mem::take(&mut s.suppressed_during_trip);
            s.tripped_until = None;
            s.window_start = Some(now);
            s.window_hits = 0;
            if suppressed > 0 {
                released_after = Some(suppressed);
            }
        }
        if s.tripped_until.is_some_and(|until| now < until) {
            s.suppressed_during_trip += 1;
            return Admission {
                admit: false,
                tripped: false,
                released_after,
            };
        }
        if s.window_start
            .is_none_or(|start| now.duration_since(start) >= GLOBAL_WINDOW)
        {
            s.window_start = Some(now);
            s.window_hits = 0;
        }
        if s.window_hits >= GLOBAL_MAX_PER_WINDOW {
            s.tripped_until = Some(now + GLOBAL_COOLDOWN);
            s.suppressed_during_trip += 1;
            return Admission {
                admit: false,
                tripped: true,
                released_after,
            };
        }
        s.window_hits += 1;
        Admission {
            admit: true,
            tripped: false,
            released_after,
        }
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
