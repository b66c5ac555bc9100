//! The event stream of a session tree: every session of one `StartSession`
//! (the root and its delegated children) writes into one ordered stream of
//! `SessionEvent { session_id, seq, kind, json }`. `seq` counts from 1 over
//! the whole stream; `session_id` names the session the event belongs to.
//! The JSON of each kind is specified in the coordinator README.
//!
//! The stream has one primary reader (the client that started the session;
//! clarify questions and approval requests go to it) and any number of
//! observers ([`EventStream::observe`]: clients that reattached). When the
//! session database is on, every event is also recorded there, so a client
//! can read a finished stream, or the part it missed, after the fact.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::sync::mpsc;

use caduceus_proto::SessionEvent;

use super::store::{SessionStore, StoredEvent};

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
/// A background delegation's results entered its parent's conversation.
pub const DELEGATION_FINISHED: &str = "delegation_finished";
/// After a restart, a resumed parent took its background delegation back.
pub const DELEGATION_RESUMED: &str = "delegation_resumed";
/// A parent queued a steer for one of its background children…
pub const STEER_QUEUED: &str = "steer_queued";
/// …and the child read it (before its next model request).
pub const STEER_RECEIVED: &str = "steer_received";
/// A child's final answer was checked against its `output_schema`.
pub const SCHEMA_CHECKED: &str = "schema_checked";
/// A child's background processes still running when it ended were killed.
pub const PROCESSES_KILLED: &str = "processes_killed";
/// A session resumed after a coordinator restart.
pub const SESSION_RESUMED: &str = "session_resumed";

struct Inner {
    seq: u64,
    tx: mpsc::UnboundedSender<SessionEvent>,
    observers: Vec<mpsc::UnboundedSender<SessionEvent>>,
    /// Where events are recorded, and the root they are recorded under.
    record: Option<(SessionStore, String)>,
}

/// The writing end of a session tree's event stream. Cheap to clone.
#[derive(Clone)]
pub struct EventStream {
    inner: Arc<Mutex<Inner>>,
}

impl EventStream {
    /// A stream read by the returned receiver, not recorded.
    pub fn new() -> (EventStream, mpsc::UnboundedReceiver<SessionEvent>) {
        Self::recorded(None, 0)
    }

    /// A stream recorded in `record` (the store and the root session id)
    /// whose next event gets `last_seq + 1`.
    pub fn recorded(
        record: Option<(SessionStore, String)>,
        last_seq: u64,
    ) -> (EventStream, mpsc::UnboundedReceiver<SessionEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            EventStream {
                inner: Arc::new(Mutex::new(Inner {
                    seq: last_seq,
                    tx,
                    observers: Vec::new(),
                    record,
                })),
            },
            rx,
        )
    }

    /// Appends one event. Sequence numbers, channel order and recording order
    /// agree because all are taken under one lock.
    pub fn emit(&self, session_id: &str, kind: &str, json: &Value) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.seq += 1;
        let event = SessionEvent {
            session_id: session_id.to_owned(),
            seq: inner.seq,
            kind: kind.to_owned(),
            json: json.to_string(),
        };
        if let Some((store, root_id)) = &inner.record {
            store.event(StoredEvent {
                root_id: root_id.clone(),
                seq: event.seq,
                session_id: event.session_id.clone(),
                kind: event.kind.clone(),
                json: event.json.clone(),
            });
        }
        inner.observers.retain(|o| o.send(event.clone()).is_ok());
        let _ = inner.tx.send(event);
    }

    /// A new observer: the events after the returned `seq` arrive on the
    /// receiver (the ones up to it are recorded, or were never recorded).
    pub fn observe(&self) -> (u64, mpsc::UnboundedReceiver<SessionEvent>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.observers.push(tx);
        (inner.seq, rx)
    }

    /// Whether the primary reader still reads the stream.
    pub fn is_attached(&self) -> bool {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        !inner.tx.is_closed()
    }

    /// Resolves once the primary reader has gone away.
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
