//! [`ScriptedServer`]: an in-process OpenAI-compatible server for tests.
//!
//! It listens on `127.0.0.1:0`, answers `POST /v1/chat/completions` from a script of
//! [`ScriptedResponse`]s (assistant turns, error statuses, raw SSE, dropped
//! connections, each optionally delayed), honours the request's `stream` flag, and
//! records every request for assertions. Plain tokio and a minimal HTTP/1.1 handler:
//! one request per connection, answered with `Connection: close`.

mod http;
mod render;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::message::ToolCall;
use crate::turn::AssistantTurn;

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct ScriptedResponse {
    match_key: String,
    delay: Duration,
    chunk_delay: Duration,
    headers: Vec<(String, String)>,
    action: Action,
}

#[derive(Debug, Clone)]
enum Action {
    Turn(AssistantTurn),
    Status { status: u16, body: String },
    RawSse(String),
    CloseConnection,
}

impl ScriptedResponse {
    fn new(action: Action) -> Self {
        ScriptedResponse {
            match_key: String::new(),
            delay: Duration::ZERO,
            chunk_delay: Duration::ZERO,
            headers: Vec::new(),
            action,
        }
    }

    /// Answers with this turn: a `chat.completion`, or SSE chunks when the request
    /// asked for `stream: true` (usage included when it asked for `include_usage`).
    pub fn turn(turn: AssistantTurn) -> Self {
        Self::new(Action::Turn(turn))
    }

    pub fn text(text: impl Into<String>) -> Self {
        Self::turn(AssistantTurn::text(text))
    }

    pub fn tool_calls(calls: Vec<ToolCall>) -> Self {
        Self::turn(AssistantTurn::calling(calls))
    }

    /// An error status with an OpenAI error body `{"error":{"message",…}}`.
    pub fn error(status: u16, message: &str) -> Self {
        let body = json!({
            "error": { "message": message, "type": "scripted_error", "param": null, "code": null }
        });
        Self::status(status, body.to_string())
    }

    /// Any status with any body (served as `application/json`).
    pub fn status(status: u16, body: impl Into<String>) -> Self {
        Self::new(Action::Status {
            status,
            body: body.into(),
        })
    }

    /// A 200 `text/event-stream` with exactly this body, sent in small pieces.
    pub fn raw_sse(body: impl Into<String>) -> Self {
        Self::new(Action::RawSse(body.into()))
    }

    /// Reads the request, then closes the connection without answering.
    pub fn close_connection() -> Self {
        Self::new(Action::CloseConnection)
    }

    /// Waits this long before answering.
    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Waits this long before each SSE chunk of a streamed answer (a slow model).
    pub fn chunk_delay(mut self, delay: Duration) -> Self {
        self.chunk_delay = delay;
        self
    }

    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Serves this response only to conversations whose first user message contains
    /// `match_key`; among the scripted responses that fit a request, the one with the
    /// longest match wins, then the earliest (the replay-file rule).
    pub fn for_conversation(mut self, match_key: impl Into<String>) -> Self {
        self.match_key = match_key.into();
        self
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    /// The request target, query included.
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    /// The JSON body (`Value::Null` if it was not JSON).
    pub body: Value,
}

impl RecordedRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(header, _)| *header == name)
            .map(|(_, value)| value.as_str())
    }

    pub fn is_streaming(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// The text of the first user message (string content only).
    pub fn first_user_text(&self) -> String {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .and_then(|messages| {
                messages
                    .iter()
                    .find(|message| message.get("role").and_then(Value::as_str) == Some("user"))
            })
            .and_then(|message| message.get("content"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    }
}

#[derive(Debug, Default)]
struct Shared {
    script: Mutex<VecDeque<ScriptedResponse>>,
    requests: Mutex<Vec<RecordedRequest>>,
}

impl Shared {
    fn take_response(&self, first_user_text: &str) -> Option<ScriptedResponse> {
        let mut script = self.script.lock().unwrap_or_else(PoisonError::into_inner);
        let mut best: Option<(usize, usize)> = None;
        for (position, response) in script.iter().enumerate() {
            if !first_user_text.contains(response.match_key.as_str()) {
                continue;
            }
            let length = response.match_key.len();
            if best.is_none_or(|(_, best_length)| length > best_length) {
                best = Some((position, length));
            }
        }
        best.and_then(|(position, _)| script.remove(position))
    }
}

/// An OpenAI-compatible server on `127.0.0.1` that serves a script. Stops when
/// dropped.
#[derive(Debug)]
pub struct ScriptedServer {
    address: SocketAddr,
    shared: Arc<Shared>,
    accept_loop: JoinHandle<()>,
}

impl ScriptedServer {
    /// Binds `127.0.0.1:0` and starts serving `script` in order. Needs a tokio runtime.
    pub async fn start(
        script: impl IntoIterator<Item = ScriptedResponse>,
    ) -> std::io::Result<ScriptedServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let shared = Arc::new(Shared {
            script: Mutex::new(script.into_iter().collect()),
            requests: Mutex::new(Vec::new()),
        });
        let accept_shared = Arc::clone(&shared);
        let accept_loop = tokio::spawn(async move {
            while let Ok((socket, _peer)) = listener.accept().await {
                tokio::spawn(http::serve_connection(socket, Arc::clone(&accept_shared)));
            }
        });
        Ok(ScriptedServer {
            address,
            shared,
            accept_loop,
        })
    }

    /// `http://127.0.0.1:PORT/v1`: use as `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Appends to the script.
    pub fn push(&self, response: ScriptedResponse) {
        self.shared
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push_back(response);
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn request_count(&self) -> usize {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Scripted responses not served yet.
    pub fn remaining(&self) -> usize {
        self.shared
            .script
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.accept_loop.abort();
    }
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
