//! The event stream of a session tree: every session of one `StartSession`
//! (the root and its delegated children) writes into one ordered stream of
//! `SessionEvent { session_id, seq, kind, json }`. `seq` counts from 1 over
//! the whole stream; `session_id` names the session the event belongs to.
//! The JSON of each kind is specified in the coordinator README.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::sync::mpsc;

use caduceus_proto::SessionEvent;

pub const SESSION_STARTED: &str = "session_started";
pub const ASSISTANT_TEXT: &str = "assistant_text";
pub const TOOL_STARTED: &str = "tool_started";
pub const TOOL_FINISHED: &str = "tool_finished";
pub const CHILD_STARTED: &str = "child_started";
pub const CHILD_FINISHED: &str = "child_finished";
pub const APPROVAL_NEEDED: &str = "approval_needed";
pub const CLARIFY: &str = "clarify";
pub const NOTICE: &str = "notice";
pub const FINAL: &str = "final";
pub const ERROR: &str = "error";

struct Inner {
    seq: u64,
    tx: mpsc::UnboundedSender<SessionEvent>,
}

/// The writing end of a session tree's event stream. Cheap to clone.
#[derive(Clone)]
pub struct EventStream {
    inner: Arc<Mutex<Inner>>,
}

impl EventStream {
    pub fn new() -> (EventStream, mpsc::UnboundedReceiver<SessionEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            EventStream {
                inner: Arc::new(Mutex::new(Inner { seq: 0, tx })),
            },
            rx,
        )
    }

    /// Appends one event. Sequence numbers and channel order agree because
    /// both are taken under one lock.
    pub fn emit(&self, session_id: &str, kind: &str, json: &Value) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.seq += 1;
        let event = SessionEvent {
            session_id: session_id.to_owned(),
            seq: inner.seq,
            kind: kind.to_owned(),
            json: json.to_string(),
        };
        let _ = inner.tx.send(event);
    }

    /// Whether someone still reads the stream.
    pub fn is_attached(&self) -> bool {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        !inner.tx.is_closed()
    }

    /// Resolves once nobody reads the stream any more.
    pub async fn closed(&self) {
        let tx = {
            let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            inner.tx.clone()
        };
        tx.closed().await;
    }
}

/// Milliseconds since the Unix epoch (event timestamps).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The first `max` characters of `text`, with `…` when cut.
pub fn preview(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
