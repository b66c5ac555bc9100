//! W3C Trace Context (`traceparent`) for tool calls: one trace id per call,
//! from the client (gRPC metadata `traceparent` on `Control.CallTool`, or one
//! the coordinator generates) through the coordinator to the worker
//! (`RunCall.traceparent`: the attach stream is one gRPC call for all of a
//! worker's calls, so per-call metadata cannot ride on it).
//!
//! Format (version 00): `00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>`,
//! lowercase; an all-zero trace or parent id is invalid.

use std::fmt;

/// The metadata key (and `RunCall` field) that carries it.
pub const TRACEPARENT: &str = "traceparent";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    pub trace_id: u128,
    /// The span that made the request this header rides on.
    pub parent_id: u64,
    /// Bit 0: sampled.
    pub flags: u8,
}

impl TraceParent {
    /// A new trace (the caller sent none, or one that does not parse), sampled.
    pub fn new_root() -> Self {
        TraceParent {
            trace_id: nonzero_u128(),
            parent_id: nonzero_u64(),
            flags: 0x01,
        }
    }

    /// The same trace, with `self` as a new span's context: what a hop sends
    /// on (same trace id and flags, a fresh parent id).
    pub fn child(&self) -> Self {
        TraceParent {
            parent_id: nonzero_u64(),
            ..*self
        }
    }

    /// Parses a `traceparent` value. Versions other than 00 are read as 00
    /// (the spec's rule for a higher version) when their first four fields
    /// have 00's shape; `ff` is invalid.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let mut parts = text.split('-');
        let (version, trace, parent, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let rest = parts.next();
        if version.len() != 2 || !is_lower_hex(version) || version == "ff" {
            return None;
        }
        if version == "00" && rest.is_some() {
            return None;
        }
        if trace.len() != 32 || parent.len() != 16 || flags.len() != 2 {
            return None;
        }
        if !(is_lower_hex(trace) && is_lower_hex(parent) && is_lower_hex(flags)) {
            return None;
        }
        let trace_id = u128::from_str_radix(trace, 16).ok()?;
        let parent_id = u64::from_str_radix(parent, 16).ok()?;
        let flags = u8::from_str_radix(flags, 16).ok()?;
        (trace_id != 0 && parent_id != 0).then_some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// The trace id as logs show it (32 lowercase hex digits).
    pub fn trace_id_hex(&self) -> String {
        format!("{:032x}", self.trace_id)
    }

    /// The parent (span) id as logs show it (16 lowercase hex digits).
    pub fn span_id_hex(&self) -> String {
        format!("{:016x}", self.parent_id)
    }
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{:032x}-{:016x}-{:02x}",
            self.trace_id, self.parent_id, self.flags
        )
    }
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn nonzero_u128() -> u128 {
    loop {
        let id = (u128::from(random_u64()) << 64) | u128::from(random_u64());
        if id != 0 {
            return id;
        }
    }
}

fn nonzero_u64() -> u64 {
    loop {
        let id = random_u64();
        if id != 0 {
            return id;
        }
    }
}

/// Trace ids must be unique, not secret: a per-thread splitmix64 stream,
/// seeded once from the OS's randomness (a `getrandom` per id cost a system
/// call on every tool call).
fn random_u64() -> u64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(uuid::Uuid::new_v4().as_u128() as u64);
    }
    STATE.with(|state| {
        let next = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        state.set(next);
        let mut z = next;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

#[cfg(test)]
#[path = "trace_tests.rs"]
mod tests;
