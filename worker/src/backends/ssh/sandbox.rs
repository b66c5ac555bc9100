//! One SSH environment: a directory on the remote host and the processes
//! started for it over the host's master connection.

#[cfg(test)]
#[path = "sandbox_tests.rs"]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use openssh::Session;
use tokio::io::AsyncReadExt;

use super::host::{SshHost, describe};
use super::scripts;
use super::{LeaseBook, portable_env};
use crate::backends::preamble;
pub use crate::backends::preamble::parse_pid_line;
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
        let Some((pid, rest)) = preamble::read_pid(&mut stdout, START_TIMEOUT).await else {
            let err_text = preamble::read_error(stderr.as_mut(), Duration::from_secs(2)).await;
            let status = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
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
        };
        preamble::drain_stderr(stderr, format!("ssh {}", self.host.target()));
        let output = rest.chain(stdout);
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
