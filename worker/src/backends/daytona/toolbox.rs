//! The toolbox of one sandbox (`{toolboxProxyUrl}/{id}/…`). Every request of
//! the sandbox's processes and file tools goes through [`Toolbox`], which
//! keeps what those answers say about the sandbox:
//!
//! - **vanished**: a toolbox 404 or 400 is confirmed with the API (`GET
//!   /sandbox/{id}`: gone, or not `started`) — the toolbox also answers 404
//!   for a missing file or session, so the status alone proves nothing;
//! - **reached**: the start time of the latest request that may have
//!   reached the sandbox (answered, or lost in transport). A request refused
//!   because the sandbox was gone delivered nothing, so a sandbox found gone
//!   with nothing reached since a call began cannot have run that call
//!   ([`Toolbox::gone_before`]);
//! - **stalled**: a quick request (a poll, stdin, a signal) waiting longer
//!   than [`STALL`], or the last request lost in transport with no answer
//!   since. Quick control requests are then refused at once instead of each
//!   waiting out its own timeout (a frozen service would otherwise hold a
//!   timed-out command for minutes of signals), and the call says why
//!   ([`Toolbox::unreachable`]). Polls are always sent: the first answer
//!   clears the state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::api::{Api, DaytonaError, Payload};

/// How long a quick request may wait before the toolbox counts as stalled;
/// also the HTTP timeout of quick control requests.
pub const STALL: Duration = Duration::from_secs(10);

/// What a request is, for the stall rule (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Answers at once (stdin, signals, sessions): refused while stalled.
    Quick,
    /// An output poll: quick, and always sent (it is what notices the end
    /// of a stall).
    Poll,
    /// May run long by design (a file script, a search): never counted.
    Long,
}

#[derive(Default)]
struct Health {
    vanished: AtomicBool,
    /// Quick requests and polls in flight, by start.
    in_flight: Mutex<HashMap<u64, Instant>>,
    next: AtomicU64,
    /// The last transport failure, cleared by any answer.
    lost: Mutex<Option<String>>,
    /// Start of the latest request that may have reached the sandbox.
    reached: Mutex<Option<SystemTime>>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match mutex.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

/// One sandbox's toolbox; clones share what they learned.
#[derive(Clone)]
pub struct Toolbox {
    api: Api,
    /// `{toolboxProxyUrl}/{id}`.
    url: String,
    id: String,
    health: Arc<Health>,
}

impl Toolbox {
    pub fn new(api: Api, proxy: &str, id: &str) -> Self {
        Toolbox {
            api,
            url: format!("{}/{id}", proxy.trim_end_matches('/')),
            id: id.to_owned(),
            health: Arc::default(),
        }
    }

    pub fn api(&self) -> &Api {
        &self.api
    }

    pub fn vanished(&self) -> bool {
        self.health.vanished.load(Ordering::SeqCst)
    }

    pub fn mark_vanished(&self) {
        self.health.vanished.store(true, Ordering::SeqCst);
    }

    /// Gone, and nothing reached it since `at` (see the module doc).
    pub fn gone_before(&self, at: SystemTime) -> bool {
        self.vanished() && lock(&self.health.reached).is_none_or(|reached| reached < at)
    }

    /// Why the toolbox is not answering right now, if it is not.
    pub fn unreachable(&self) -> Option<String> {
        let oldest = lock(&self.health.in_flight).values().min().copied();
        if let Some(since) = oldest.filter(|since| since.elapsed() >= STALL) {
            return Some(format!(
                "Daytona: the toolbox of sandbox {} has not answered for {}s ({})",
                self.id,
                since.elapsed().as_secs(),
                self.url
            ));
        }
        lock(&self.health.lost).clone().map(|reason| {
            format!(
                "Daytona: the toolbox of sandbox {} is not answering ({reason})",
                self.id
            )
        })
    }

    /// A request to `{toolbox}{path}`.
    pub async fn send(
        &self,
        kind: Kind,
        method: Method,
        path: &str,
        payload: Payload<'_>,
        timeout: Duration,
    ) -> Result<(StatusCode, String), DaytonaError> {
        let url = format!("{}{path}", self.url);
        if kind == Kind::Quick
            && let Some(reason) = self.unreachable()
        {
            return Err(DaytonaError::Transport {
                url,
                reason: format!("not sent: {reason}"),
            });
        }
        let timeout = if kind == Kind::Quick {
            timeout.min(STALL)
        } else {
            timeout
        };
        let ticket = (kind != Kind::Long).then(|| {
            let ticket = self.health.next.fetch_add(1, Ordering::Relaxed);
            lock(&self.health.in_flight).insert(ticket, Instant::now());
            ticket
        });
        let started = SystemTime::now();
        let answer = self.api.send(method, &url, payload, timeout).await;
        if let Some(ticket) = ticket {
            lock(&self.health.in_flight).remove(&ticket);
        }
        let reached = match &answer {
            Ok(_) => true,
            Err(DaytonaError::Transport { reason, .. }) => {
                *lock(&self.health.lost) = Some(reason.clone());
                // It may have arrived.
                true
            }
            Err(err) => !(is_gone_status(err) && (self.vanished() || self.confirm_gone().await)),
        };
        if !matches!(answer, Err(DaytonaError::Transport { .. })) {
            *lock(&self.health.lost) = None;
        }
        if reached {
            let mut latest = lock(&self.health.reached);
            if latest.is_none_or(|at| at < started) {
                *latest = Some(started);
            }
        }
        answer
    }

    /// A JSON request whose answer is JSON (or empty).
    pub async fn json(
        &self,
        kind: Kind,
        method: Method,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Value, DaytonaError> {
        let payload = body.map_or(Payload::None, Payload::Json);
        let (_, text) = self.send(kind, method, path, payload, timeout).await?;
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text)
            .map_err(|e| DaytonaError::Protocol(format!("an answer that is not JSON ({e})")))
    }

    /// `POST /process/execute`: merged output and exit code. The timeout is
    /// always sent (the daemon applies none when it is missing).
    pub async fn execute(
        &self,
        kind: Kind,
        command: &str,
        timeout_secs: u64,
    ) -> Result<(i64, String), DaytonaError> {
        let answer = self
            .json(
                kind,
                Method::POST,
                "/process/execute",
                Some(&json!({"command": command, "timeout": timeout_secs})),
                Duration::from_secs(timeout_secs + 5),
            )
            .await?;
        let code = answer
            .get("exitCode")
            .and_then(Value::as_i64)
            .or_else(|| answer.get("code").and_then(Value::as_i64))
            .unwrap_or(-1);
        let result = answer
            .get("result")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        Ok((code, result))
    }

    /// `POST /files/upload-v2?path=` with `data` as the multipart part `file`.
    pub async fn upload(&self, path: &str, data: &[u8]) -> Result<(), DaytonaError> {
        let boundary = format!("caduceus-{}", uuid::Uuid::new_v4().simple());
        let mut body = Vec::with_capacity(data.len() + 256);
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"upload\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(data);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        self.send(
            Kind::Long,
            Method::POST,
            &format!("/files/upload-v2?path={}", super::api::percent_encode(path)),
            Payload::Raw {
                content_type: format!("multipart/form-data; boundary={boundary}"),
                bytes: &body,
            },
            Duration::from_secs(300),
        )
        .await
        .map(|_| ())
    }

    /// Asks the API whether the sandbox is still started; marks it vanished
    /// when it is not (or no longer exists). Unknown (no answer): not gone.
    pub async fn confirm_gone(&self) -> bool {
        let state = self
            .api
            .json(
                Method::GET,
                &format!("/sandbox/{}", self.id),
                None,
                Duration::from_secs(30),
            )
            .await;
        let gone = match &state {
            Ok(doc) => doc.get("state").and_then(Value::as_str) != Some("started"),
            Err(err) => err.status() == Some(StatusCode::NOT_FOUND),
        };
        if gone {
            self.mark_vanished();
        }
        gone
    }
}

/// The statuses a toolbox gives for a sandbox that is gone (404) or not
/// started (400): both also have other meanings, so they are confirmed.
fn is_gone_status(err: &DaytonaError) -> bool {
    matches!(
        err.status(),
        Some(StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST)
    )
}
