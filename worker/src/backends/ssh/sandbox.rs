//! One SSH environment: a directory on the remote host and the processes
//! started for it over the host's master connection.

#[cfg(test)]
#[path = "sandbox_tests.rs"]
mod tests;

use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use openssh::Session;
use tokio::io::AsyncReadExt;

use super::host::{SshHost, describe};
use super::scripts;
use super::{LeaseBook, portable_env};
use crate::sandbox::{ProcessHandle, Sandbox, SandboxError, SpawnSpec, SpawnedProcess, StopSignal};

/// How long a remote process may take to report its pid.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Timeout of the short scripts (signals, removal).
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(30);

pub struct SshSandbox {
    pub(super) host: Arc<SshHost>,
    pub(super) env_id: String,
    pub(super) id: String,
    pub(super) home: String,
    pub(super) cwd: String,
    pub(super) leases: Arc<LeaseBook>,
    /// File access: one remote script per primitive.
    pub(super) files: Arc<crate::backends::shell_fs::ShellFs>,
}

impl std::fmt::Debug for SshSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshSandbox").field("id", &self.id).finish()
    }
}

impl SshSandbox {
    /// The environment's directory on the remote host.
    pub fn env_dir(&self) -> String {
        format!("{}/{}/{}", self.home, scripts::ENVS_DIR, self.env_id)
    }

    pub fn env_id(&self) -> &str {
        &self.env_id
    }

    fn gone(&self, reason: &str) -> SandboxError {
        SandboxError::Gone(format!(
            "SSH environment {} on {}: {reason}",
            self.env_id,
            self.host.target()
        ))
    }
}

#[async_trait]
impl Sandbox for SshSandbox {
    fn backend(&self) -> &str {
        "ssh"
    }

    fn files(&self) -> Arc<dyn caduceus_files::FileSystem> {
        self.files.clone()
    }

    fn id(&self) -> &str {
        &self.id
    }

    async fn spawn(&self, spec: SpawnSpec) -> Result<SpawnedProcess, SandboxError> {
        let fail = |reason: String| SandboxError::Spawn {
            program: spec.program.clone(),
            reason,
        };
        // A shell is started rarely; make sure it lands on a live master
        // (this is where a dropped connection is re-established).
        let session = self
            .host
            .checked_session()
            .await
            .map_err(|e| fail(e.to_string()))?;
        let cwd = spec.cwd.clone().unwrap_or_else(|| self.cwd.clone());
        let line = scripts::spawn_wrapper(
            &self.env_id,
            &cwd,
            &portable_env(&spec.env),
            &spec.program,
            &spec.args,
        );
        let mut child = self
            .host
            .spawn(session.clone(), &line)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let stdin = child
            .stdin()
            .take()
            .ok_or_else(|| fail("no stdin pipe".to_owned()))?;
        let mut stdout = child
            .stdout()
            .take()
            .ok_or_else(|| fail("no stdout pipe".to_owned()))?;
        let mut stderr = child.stderr().take();

        // The first thing the wrapper prints is its pid.
        let mut head = Vec::new();
        let reported = tokio::time::timeout(START_TIMEOUT, async {
            let mut buf = [0u8; 1024];
            loop {
                if let Some(found) = parse_pid_line(&head) {
                    return Ok(found);
                }
                let n = stdout.read(&mut buf).await?;
                if n == 0 {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "no pid",
                    ));
                }
                head.extend_from_slice(&buf[..n]);
            }
        })
        .await;
        let Ok(Ok((pid, consumed))) = reported else {
            {
                let mut err_text = Vec::new();
                if let Some(stderr) = stderr.as_mut() {
                    let _ = tokio::time::timeout(
                        Duration::from_secs(2),
                        stderr.read_to_end(&mut err_text),
                    )
                    .await;
                }
                let status = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
                let err_text = String::from_utf8_lossy(&err_text).trim().to_owned();
                if matches!(status, Ok(Ok(s)) if s.code() == Some(125)) {
                    return Err(self.gone(&err_text));
                }
                let why = if err_text.is_empty() {
                    match status {
                        Ok(Err(err)) => describe(&err),
                        _ => "the remote process ended before it started".to_owned(),
                    }
                } else {
                    err_text
                };
                return Err(fail(format!("on SSH host {}: {why}", self.host.target())));
            }
        };
        // Drain ssh's own stderr (the remote side merges into stdout) so it
        // can never fill its pipe.
        if let Some(mut stderr) = stderr {
            let target = self.host.target();
            tokio::spawn(async move {
                let mut text = Vec::new();
                let _ = stderr.read_to_end(&mut text).await;
                let text = String::from_utf8_lossy(&text);
                if !text.trim().is_empty() {
                    tracing::debug!(%target, "ssh: {}", text.trim());
                }
            });
        }
        let rest = head.split_off(consumed);
        let output = Cursor::new(rest).chain(stdout);
        Ok(SpawnedProcess {
            stdin: Box::pin(stdin),
            output: Box::pin(output),
            pid: Some(pid),
            handle: Box::new(SshProcess {
                child: Some(child),
                host: self.host.clone(),
                pid,
            }),
        })
    }

    async fn signal_tree(
        &self,
        pid: u32,
        signal: StopSignal,
        include_root: bool,
    ) -> Result<(), SandboxError> {
        signal_remote_tree(&self.host, pid, signal, include_root).await
    }

    fn temp_dir(&self) -> String {
        format!("{}/tmp", self.env_dir())
    }

    fn home_dir(&self) -> String {
        self.home.clone()
    }

    fn initial_cwd(&self) -> String {
        self.cwd.clone()
    }

    async fn alive(&self) -> bool {
        let script = format!(
            "[ -d \"$HOME/{}/\"{} ]",
            scripts::ENVS_DIR,
            crate::shell::shell_quote(&self.env_id)
        );
        matches!(self.host.run(&script, b"", SCRIPT_TIMEOUT).await, Ok(out) if out.success())
    }

    async fn destroy(&self) -> Result<(), SandboxError> {
        self.leases.remove(&self.env_id);
        let out = self
            .host
            .run(&scripts::destroy_env(&self.env_id), b"", SCRIPT_TIMEOUT)
            .await
            .map_err(|e| SandboxError::Other(e.to_string()))?;
        if !out.success() {
            return Err(SandboxError::Other(format!(
                "removing SSH environment {} on {} failed: {}",
                self.env_id,
                self.host.target(),
                out.stderr_text()
            )));
        }
        Ok(())
    }
}

/// Finds `\x1ePID <n>\x1e\n` at the start of the output; returns the pid and
/// how many bytes it took.
pub fn parse_pid_line(head: &[u8]) -> Option<(u32, usize)> {
    const PREFIX: &[u8] = b"\x1ePID ";
    if head.len() < PREFIX.len() || !head.starts_with(PREFIX) {
        return None;
    }
    let rest = &head[PREFIX.len()..];
    let end = rest.iter().position(|b| *b == 0x1e)?;
    let pid = std::str::from_utf8(&rest[..end])
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let mut consumed = PREFIX.len() + end + 1;
    if head.get(consumed) == Some(&b'\n') {
        consumed += 1;
    } else if head.len() == consumed {
        // The newline has not arrived yet.
        return None;
    }
    Some((pid, consumed))
}

pub(super) async fn signal_remote_tree(
    host: &SshHost,
    pid: u32,
    signal: StopSignal,
    include_root: bool,
) -> Result<(), SandboxError> {
    let out = host
        .run(
            &scripts::signal_tree(pid, signal, include_root),
            b"",
            SCRIPT_TIMEOUT,
        )
        .await
        .map_err(|e| SandboxError::Other(e.to_string()))?;
    if out.success() {
        Ok(())
    } else {
        Err(SandboxError::Other(format!(
            "signalling process {pid} on {} failed: {}",
            host.target(),
            out.stderr_text()
        )))
    }
}

/// A remote process started over the master.
struct SshProcess {
    child: Option<openssh::Child<Arc<Session>>>,
    host: Arc<SshHost>,
    pid: u32,
}

#[async_trait]
impl ProcessHandle for SshProcess {
    async fn wait(&mut self) -> Option<i32> {
        let child = self.child.take()?;
        match child.wait().await {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                status.code().or_else(|| status.signal().map(|s| 128 + s))
            }
            Err(_) => None,
        }
    }

    async fn kill(&mut self) {
        // Closing the channel alone would leave the remote process running
        // (no pty, so no SIGHUP): kill its tree on the host first.
        let _ = signal_remote_tree(&self.host, self.pid, StopSignal::Kill, true).await;
        if let Some(child) = self.child.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
        }
    }
}
