//! Background processes of one environment (`terminal(background=true)`),
//! managed by the `process` tool.
//!
//! Each process is started through [`Sandbox::spawn`] (so it works on every
//! backend) from the live shell's cwd and state snapshot, with a stdin pipe
//! (so `write`/`submit`/`close` work for every process, not only PTY ones as
//! in hermes). A supervisor task per process keeps the last 200,000
//! characters of its output, applies watch patterns, and on exit stops
//! whatever the command left running in its session and sends the exit
//! notice. Limits are hermes': 64 processes tracked per environment (the
//! oldest finished one is dropped first; with 64 running a new one is
//! refused), finished processes forgotten after 1,800 s.

pub mod background;
pub mod clean;
pub mod launch;
pub mod notice;
pub mod watch;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use background::{BackgroundProcess, Identity};
use clean::OutputCleaner;
use notice::NoticeHub;

use crate::sandbox::{Sandbox, SandboxError};

/// Processes tracked per environment (hermes `MAX_PROCESSES`).
pub const MAX_TRACKED: usize = 64;
/// Finished processes are forgotten this long after they ended
/// (hermes `FINISHED_TTL_SECONDS`).
pub const FINISHED_TTL: Duration = Duration::from_secs(1800);
/// How long the launcher may take to report its pid.
const LAUNCH_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error(
        "{0} background processes are already running in this environment (the limit is {MAX_TRACKED}); kill or wait for some first"
    )]
    TooMany(usize),
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("{0}")]
    Start(String),
}

/// A background command to start.
#[derive(Debug, Clone)]
pub struct SpawnRequest {
    pub command: String,
    pub cwd: String,
    /// The live shell's state snapshot, restored before the command runs.
    pub snapshot: Option<String>,
    /// Base environment (sanitized); the snapshot's exports replace it.
    pub env: Vec<(String, String)>,
    /// The session that started it: notices go there.
    pub session_id: String,
    pub pty: bool,
    pub notify_on_complete: bool,
    pub watch_patterns: Vec<String>,
}

/// A started process and whether the pty it asked for was available.
pub struct Started {
    pub process: Arc<BackgroundProcess>,
    pub pty_unavailable: bool,
}

pub struct ProcessRegistry {
    task_id: String,
    sandbox: Arc<dyn Sandbox>,
    hub: Arc<NoticeHub>,
    cleaner: Arc<OutputCleaner>,
    procs: std::sync::Mutex<Vec<Arc<BackgroundProcess>>>,
}

impl ProcessRegistry {
    pub fn new(
        task_id: String,
        sandbox: Arc<dyn Sandbox>,
        hub: Arc<NoticeHub>,
        cleaner: Arc<OutputCleaner>,
    ) -> Self {
        ProcessRegistry {
            task_id,
            sandbox,
            hub,
            cleaner,
            procs: std::sync::Mutex::new(Vec::new()),
        }
    }

    pub fn cleaner(&self) -> &Arc<OutputCleaner> {
        &self.cleaner
    }

    pub fn sandbox(&self) -> &Arc<dyn Sandbox> {
        &self.sandbox
    }

    /// Starts a background process.
    pub async fn spawn(&self, request: SpawnRequest) -> Result<Started, SpawnError> {
        self.prune();
        let running = self.running();
        if running >= MAX_TRACKED {
            return Err(SpawnError::TooMany(running));
        }
        let exit_token = uuid::Uuid::new_v4().simple().to_string();
        let spec = launch::spec(
            &exit_token,
            &request.command,
            &request.cwd,
            request.snapshot.as_deref(),
            request.env.clone(),
            request.pty,
        );
        let mut spawned = self.sandbox.spawn(spec).await?;

        // The launcher's first line carries the pid inside the sandbox.
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        let marker = tokio::time::timeout(LAUNCH_TIMEOUT, async {
            loop {
                let n = spawned.output.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    return None;
                }
                seen.extend_from_slice(&buf[..n]);
                if let Some(found) = launch::parse_pid_marker(&seen) {
                    return Some(found);
                }
            }
        })
        .await;
        let Ok(Some((pid, pty, used))) = marker else {
            spawned.handle.kill().await;
            let said = String::from_utf8_lossy(&seen).trim().to_owned();
            return Err(SpawnError::Start(if said.is_empty() {
                "the process launcher did not start (is bash installed in the sandbox?)".to_owned()
            } else {
                format!("the process launcher failed: {said}")
            }));
        };
        let early = seen[used..].to_vec();
        let process = BackgroundProcess::new(
            Identity {
                id: format!("proc_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
                command: request.command,
                cwd: request.cwd,
                task_id: self.task_id.clone(),
                session_id: request.session_id,
                pid,
                pty,
                notify_on_complete: request.notify_on_complete,
                watch_patterns: request.watch_patterns,
            },
            spawned.stdin,
        );
        if let Ok(mut procs) = self.procs.lock() {
            procs.push(process.clone());
        }
        tokio::spawn(background::supervise(
            process.clone(),
            spawned.output,
            spawned.handle,
            background::Start {
                early_output: early,
                exit_token,
            },
            self.sandbox.clone(),
            self.hub.clone(),
            self.cleaner.clone(),
        ));
        tracing::info!(task = %self.task_id, process = %process.id, pid, "background process started");
        Ok(Started {
            process,
            pty_unavailable: request.pty && !pty,
        })
    }

    pub fn get(&self, id: &str) -> Option<Arc<BackgroundProcess>> {
        self.procs.lock().ok()?.iter().find(|p| p.id == id).cloned()
    }

    /// Every tracked process, oldest first.
    pub fn all(&self) -> Vec<Arc<BackgroundProcess>> {
        self.prune();
        self.procs.lock().map(|p| p.clone()).unwrap_or_default()
    }

    pub fn running(&self) -> usize {
        self.procs
            .lock()
            .map(|p| p.iter().filter(|p| p.is_running()).count())
            .unwrap_or(0)
    }

    /// When the most recent process ended (the environment was busy until then).
    pub fn last_exit(&self) -> Option<Instant> {
        self.procs
            .lock()
            .ok()?
            .iter()
            .filter_map(|p| p.finished_at())
            .max()
    }

    /// Kills every running process (the environment ends). Their exit
    /// notices are sent: nobody saw these exits.
    pub async fn kill_all(&self, source: &str) -> usize {
        let running: Vec<Arc<BackgroundProcess>> = self
            .procs
            .lock()
            .map(|p| p.iter().filter(|p| p.is_running()).cloned().collect())
            .unwrap_or_default();
        let kills = running.iter().map(|p| p.kill(&self.sandbox, source, false));
        futures::future::join_all(kills)
            .await
            .into_iter()
            .filter(|killed| *killed)
            .count()
    }

    /// Forgets finished processes past their time-to-live, then the oldest
    /// finished ones while the registry is full.
    fn prune(&self) {
        let Ok(mut procs) = self.procs.lock() else {
            return;
        };
        procs.retain(|p| {
            p.finished_at()
                .is_none_or(|at| at.elapsed() <= FINISHED_TTL)
        });
        while procs.len() >= MAX_TRACKED {
            let oldest = procs
                .iter()
                .enumerate()
                .filter_map(|(i, p)| p.finished_at().map(|at| (i, at)))
                .min_by_key(|(_, at)| *at);
            match oldest {
                Some((i, _)) => {
                    procs.remove(i);
                }
                None => break,
            }
        }
    }
}

#[cfg(test)]
#[path = "process_tests.rs"]
mod tests;
