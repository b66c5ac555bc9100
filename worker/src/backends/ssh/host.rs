//! One SSH host: its multiplexed master connection (shared by every
//! environment on the host), re-established when it drops, and the remote
//! commands run over it.

use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openssh::{ControlPersist, KnownHosts, Session, SessionBuilder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Mutex;

use super::SshSettings;

/// Failures talking to the host. Every message names the host.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error("cannot connect to SSH host {target}: {reason}")]
    Connect { target: String, reason: String },
    #[error("SSH host {target}: {reason}")]
    Command { target: String, reason: String },
    #[error("SSH host {target}: the remote command did not finish within {secs}s")]
    Timeout { target: String, secs: u64 },
}

/// What a remote command printed and how it ended.
#[derive(Debug)]
pub struct RemoteOutput {
    pub status: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl RemoteOutput {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }

    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).trim().to_owned()
    }
}

/// The host and its master connection.
pub struct SshHost {
    settings: SshSettings,
    session: Mutex<Option<Arc<Session>>>,
    /// Result of the last reachability probe, for `available()`.
    probe: std::sync::Mutex<Option<(Instant, bool)>>,
}

impl std::fmt::Debug for SshHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshHost")
            .field("target", &self.target())
            .finish()
    }
}

impl SshHost {
    pub fn new(settings: SshSettings) -> Self {
        SshHost {
            settings,
            session: Mutex::new(None),
            probe: std::sync::Mutex::new(None),
        }
    }

    pub fn settings(&self) -> &SshSettings {
        &self.settings
    }

    /// `user@host:port`, for messages and ids.
    pub fn target(&self) -> String {
        self.settings.target()
    }

    /// The live master session, connecting when there is none.
    pub async fn session(&self) -> Result<Arc<Session>, SshError> {
        let mut slot = self.session.lock().await;
        if let Some(session) = slot.as_ref() {
            return Ok(session.clone());
        }
        let session = Arc::new(self.connect().await?);
        *slot = Some(session.clone());
        Ok(session)
    }

    /// A session known to be alive right now: the current one if `ssh -O
    /// check` passes, else a new one (the master dropped: host rebooted,
    /// network flapped, master killed).
    pub async fn checked_session(&self) -> Result<Arc<Session>, SshError> {
        let session = self.session().await?;
        if session.check().await.is_ok() {
            return Ok(session);
        }
        tracing::info!(target = %self.target(), "SSH master connection dropped; reconnecting");
        self.forget(&session).await;
        self.session().await
    }

    /// Drops `stale` as the current session (if it still is).
    async fn forget(&self, stale: &Arc<Session>) {
        let mut slot = self.session.lock().await;
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, stale)) {
            *slot = None;
        }
    }

    async fn connect(&self) -> Result<Session, SshError> {
        let s = &self.settings;
        std::fs::create_dir_all(&s.control_dir).map_err(|e| {
            self.connect_error(format!(
                "cannot create the control directory {}: {e}",
                s.control_dir.display()
            ))
        })?;
        restrict_permissions(&s.control_dir);
        let mut builder = SessionBuilder::default();
        builder
            .known_hosts_check(KnownHosts::Add)
            .connect_timeout(s.connect_timeout)
            .server_alive_interval(Duration::from_secs(15))
            .control_directory(&s.control_dir)
            .clean_history_control_directory(true)
            // A master left behind by a killed worker goes away by itself once
            // its last channel closes.
            .control_persist(idle_persist())
            .port(s.port);
        if let Some(user) = &s.user {
            builder.user(user.clone());
        }
        if let Some(key) = &s.key {
            builder.keyfile(key);
        }
        if let Some(known_hosts) = &s.known_hosts {
            builder.user_known_hosts_file(known_hosts);
        }
        let started = Instant::now();
        // ConnectTimeout covers TCP only; a host that accepts and then stalls
        // (or an auth agent that hangs) is bounded here.
        let limit = s.connect_timeout + Duration::from_secs(5);
        match tokio::time::timeout(limit, builder.connect(&s.host)).await {
            Ok(Ok(session)) => {
                tracing::info!(target = %self.target(), ms = started.elapsed().as_millis() as u64, "SSH master connected");
                Ok(session)
            }
            Ok(Err(err)) => Err(self.connect_error(describe(&err))),
            Err(_) => Err(self.connect_error(format!("no answer within {}s", limit.as_secs()))),
        }
    }

    fn connect_error(&self, reason: String) -> SshError {
        SshError::Connect {
            target: self.target(),
            reason,
        }
    }

    fn command_error(&self, reason: String) -> SshError {
        SshError::Command {
            target: self.target(),
            reason,
        }
    }

    /// Can the host be reached? Cached for `probe_ttl`; a live master
    /// answers without a new connection.
    pub async fn reachable(&self) -> bool {
        let ttl = self.settings.probe_ttl;
        if let Ok(probe) = self.probe.lock()
            && let Some((at, ok)) = *probe
            && at.elapsed() < ttl
        {
            return ok;
        }
        let ok = match self.checked_session().await {
            Ok(_) => true,
            Err(err) => {
                tracing::warn!("{err}");
                false
            }
        };
        if let Ok(mut probe) = self.probe.lock() {
            *probe = Some((Instant::now(), ok));
        }
        ok
    }

    /// Starts `command_line` (interpreted by the remote login shell) with
    /// piped stdio on the current master. Callers that must not land on a
    /// dead master use [`checked_session`](Self::checked_session) first.
    pub async fn spawn(
        &self,
        session: Arc<Session>,
        command_line: &str,
    ) -> Result<openssh::Child<Arc<Session>>, SshError> {
        Session::to_raw_command(session, command_line)
            .stdin(openssh::Stdio::piped())
            .stdout(openssh::Stdio::piped())
            .stderr(openssh::Stdio::piped())
            .spawn()
            .await
            .map_err(|e| self.command_error(describe(&e)))
    }

    /// Runs `bash -c script` with `stdin` as its input and collects its
    /// output. When the master turns out to be dead (the command could not
    /// even start), reconnects and tries once more.
    pub async fn run(
        &self,
        script: &str,
        stdin: &[u8],
        timeout: Duration,
    ) -> Result<RemoteOutput, SshError> {
        let command_line = format!("exec bash -c {}", crate::shell::shell_quote(script));
        let session = self.session().await?;
        let first = self
            .run_once(session.clone(), &command_line, stdin, timeout)
            .await;
        match first {
            // 255 is ssh's own failure (or a remote exit 255): ask the master.
            Ok(out) if out.status == Some(255) || out.status.is_none() => {
                if session.check().await.is_ok() {
                    return Ok(out);
                }
                self.forget(&session).await;
                let session = self.session().await?;
                self.run_once(session, &command_line, stdin, timeout).await
            }
            other => other,
        }
    }

    async fn run_once(
        &self,
        session: Arc<Session>,
        command_line: &str,
        stdin: &[u8],
        timeout: Duration,
    ) -> Result<RemoteOutput, SshError> {
        let mut child = self.spawn(session, command_line).await?;
        let mut input = child.stdin().take();
        let mut stdout = child.stdout().take();
        let mut stderr = child.stderr().take();
        let work = async {
            let write = async {
                if let Some(mut input) = input.take() {
                    // A script that exits without reading its input closes the pipe.
                    let _ = input.write_all(stdin).await;
                    let _ = input.shutdown().await;
                }
            };
            let read_out = async {
                let mut buf = Vec::new();
                if let Some(out) = stdout.as_mut() {
                    let _ = out.read_to_end(&mut buf).await;
                }
                buf
            };
            let read_err = async {
                let mut buf = Vec::new();
                if let Some(err) = stderr.as_mut() {
                    let _ = err.read_to_end(&mut buf).await;
                }
                buf
            };
            let ((), out, err) = tokio::join!(write, read_out, read_err);
            let status = child.wait().await;
            (out, err, status)
        };
        match tokio::time::timeout(timeout, work).await {
            Ok((stdout, stderr, status)) => {
                let status = match status {
                    Ok(status) => exit_code(status),
                    Err(openssh::Error::RemoteProcessTerminated) => None,
                    Err(openssh::Error::Disconnected) => Some(255),
                    Err(err) => return Err(self.command_error(describe(&err))),
                };
                Ok(RemoteOutput {
                    status,
                    stdout,
                    stderr,
                })
            }
            Err(_) => Err(SshError::Timeout {
                target: self.target(),
                secs: timeout.as_secs(),
            }),
        }
    }

    /// Closes the master (worker shutdown).
    pub async fn close(&self) {
        let session = self.session.lock().await.take();
        if let Some(session) = session
            && let Ok(session) = Arc::try_unwrap(session)
        {
            let _ = session.close().await;
        }
    }
}

fn exit_code(status: ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|s| 128 + s))
}

/// An idle master outlives its last channel by 300 s (hermes' ControlPersist).
fn idle_persist() -> ControlPersist {
    match std::num::NonZeroUsize::new(300) {
        Some(secs) => ControlPersist::IdleFor(secs),
        None => ControlPersist::ClosedAfterInitialConnection,
    }
}

/// The error with its causes, one line (openssh's own messages are terse:
/// "failed to connect to the remote host" plus the ssh client's words).
pub fn describe(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let words = cause.to_string();
        if !words.is_empty() && !text.contains(&words) {
            text.push_str(": ");
            text.push_str(words.trim());
        }
        source = cause.source();
    }
    text.replace(['\n', '\r'], " ")
}

/// The control directory holds sockets that grant shell access: owner only.
fn restrict_permissions(dir: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
}

/// Local `ssh` binary present?
pub fn ssh_client_present() -> bool {
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| is_executable(&dir.join("ssh"))))
        .unwrap_or(false)
}

fn is_executable(path: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
