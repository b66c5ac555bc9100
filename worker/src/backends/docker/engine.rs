//! The connection to the Docker engine: made lazily (bollard checks the
//! socket eagerly and fails when there is no engine), version-negotiated (old
//! engines speak older API versions), and probed with a short timeout whose
//! answer is cached so availability checks stay cheap.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use bollard::Docker;

use crate::sandbox::SandboxError;

/// How long one availability answer is trusted.
const PROBE_TTL: Duration = Duration::from_secs(10);
/// How long a probe may take before the engine counts as unreachable.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Timeout of ordinary engine requests (create, inspect, remove, archive).
const REQUEST_TIMEOUT_SECS: u64 = 120;

pub struct Engine {
    host: Option<String>,
    client: Mutex<Option<Docker>>,
    probe: Mutex<Option<(Instant, Result<(), String>)>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("host", &self.host).finish()
    }
}

impl Engine {
    pub fn new(host: Option<String>) -> Self {
        Engine {
            host,
            client: Mutex::new(None),
            probe: Mutex::new(None),
        }
    }

    /// Where the engine is expected, for messages.
    pub fn address(&self) -> String {
        self.host
            .clone()
            .or_else(|| std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| "unix:///var/run/docker.sock".to_owned())
    }

    /// A connected client (connecting on first use).
    pub async fn client(&self) -> Result<Docker, SandboxError> {
        if let Some(client) = self.client.lock().ok().and_then(|c| c.clone()) {
            return Ok(client);
        }
        let unavailable = |reason: String| {
            SandboxError::Other(format!(
                "the Docker engine at {} is not reachable: {reason}",
                self.address()
            ))
        };
        let connected = match &self.host {
            Some(host) => Docker::connect_with_host(host),
            None => Docker::connect_with_defaults(),
        }
        .map_err(|e| unavailable(e.to_string()))?
        .with_timeout(Duration::from_secs(REQUEST_TIMEOUT_SECS));
        let client =
            match tokio::time::timeout(PROBE_TIMEOUT * 2, connected.negotiate_version()).await {
                Ok(Ok(client)) => client,
                Ok(Err(err)) => return Err(unavailable(err.to_string())),
                Err(_) => return Err(unavailable("no answer".to_owned())),
            };
        if let Ok(mut slot) = self.client.lock() {
            *slot = Some(client.clone());
        }
        Ok(client)
    }

    /// Forgets the client (the engine went away; the next use reconnects).
    fn forget(&self) {
        if let Ok(mut slot) = self.client.lock() {
            *slot = None;
        }
    }

    /// Is the engine reachable? Cached for a few seconds.
    pub async fn available(&self) -> Result<(), String> {
        if let Some((at, answer)) = self.probe.lock().ok().and_then(|p| p.clone())
            && at.elapsed() < PROBE_TTL
        {
            return answer;
        }
        let answer = self.probe_now().await;
        if let Ok(mut slot) = self.probe.lock() {
            *slot = Some((Instant::now(), answer.clone()));
        }
        answer
    }

    async fn probe_now(&self) -> Result<(), String> {
        let client = self.client().await.map_err(|e| e.to_string())?;
        match tokio::time::timeout(PROBE_TIMEOUT, client.ping()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(err)) => {
                self.forget();
                Err(format!(
                    "the Docker engine at {} did not answer: {err}",
                    self.address()
                ))
            }
            Err(_) => {
                self.forget();
                Err(format!(
                    "the Docker engine at {} did not answer within {}s",
                    self.address(),
                    PROBE_TIMEOUT.as_secs()
                ))
            }
        }
    }
}

/// The engine's status code and message, when it answered with an error.
pub fn server_error(err: &bollard::errors::Error) -> Option<(u16, &str)> {
    match err {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message,
        } => Some((*status_code, message.as_str())),
        _ => None,
    }
}

/// "No such container", "is not running", "is restarting", "is paused":
/// the container cannot run anything any more.
pub fn is_gone(err: &bollard::errors::Error) -> bool {
    match server_error(err) {
        Some((404, _)) => true,
        Some((409, message)) => {
            let m = message.to_ascii_lowercase();
            m.contains("not running")
                || m.contains("is paused")
                || m.contains("is restarting")
                || m.contains("removal")
        }
        _ => false,
    }
}
