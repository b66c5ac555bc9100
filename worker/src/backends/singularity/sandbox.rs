//! One Singularity/Apptainer instance as a sandbox: processes run through
//! `exec instance://<name>`, inside the instance's PID namespace.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backends::preamble::{self, exec_with_env};
use tokio::io::AsyncReadExt;
use tokio::process::Child;

use super::LeaseFiles;
use super::cli::Cli;
use crate::backends::ssh::portable_env;
use crate::sandbox::{
    ProcessHandle, SIGNAL_TREE_SCRIPT, Sandbox, SandboxError, SpawnSpec, SpawnedProcess, StopSignal,
};
use crate::shell::shell_quote;

const START_TIMEOUT: Duration = Duration::from_secs(60);
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(30);

pub struct SingularitySandbox {
    pub(super) cli: Cli,
    pub(super) name: String,
    pub(super) id: String,
    pub(super) home: String,
    pub(super) cwd: String,
    pub(super) leases: Arc<LeaseFiles>,
    /// File access: one `exec instance://…` script per primitive.
    pub(super) files: Arc<crate::backends::shell_fs::ShellFs>,
}

impl std::fmt::Debug for SingularitySandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SingularitySandbox")
            .field("instance", &self.name)
            .finish()
    }
}

impl SingularitySandbox {
    /// The instance name (see the module docs for its format).
    pub fn instance_name(&self) -> &str {
        &self.name
    }
}

/// The `bash -c` script that reports its pid, enters `cwd` and execs the
/// program with `env` added and stderr merged.
fn spawn_script(cwd: &str, env: &[(String, String)], program: &str, args: &[String]) -> String {
    let exec = exec_with_env(env, program, args);
    format!(
        "printf '\\036PID %s\\036\\n' \"$$\"\ncd -- {} 2>/dev/null || cd\n{exec} 2>&1\n",
        shell_quote(cwd)
    )
}

#[async_trait]
impl Sandbox for SingularitySandbox {
    fn backend(&self) -> &str {
        "singularity"
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
        let cwd = spec.cwd.clone().unwrap_or_else(|| self.cwd.clone());
        let mut env = portable_env(&spec.env);
        env.push(("HOME".to_owned(), self.home.clone()));
        let script = spawn_script(&cwd, &env, &spec.program, &spec.args);
        let mut command = self
            .cli
            .exec_command(&self.name, "bash", &["-c".to_owned(), script]);
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| fail(format!("cannot run {}: {e}", self.cli.exe.display())))?;
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| fail("no stdin pipe".to_owned()))?;
        let mut stdout = child
            .stdout
            .take()
            .ok_or_else(|| fail("no stdout pipe".to_owned()))?;
        let mut stderr = child.stderr.take();

        let Some((pid, rest)) = preamble::read_pid(&mut stdout, START_TIMEOUT).await else {
            let text = preamble::read_error(stderr.as_mut(), Duration::from_secs(2)).await;
            let _ = child.kill().await;
            if text.contains("no instance found") {
                return Err(SandboxError::Gone(format!(
                    "instance {} is gone: {text}",
                    self.name
                )));
            }
            return Err(fail(format!(
                "in instance {}: {}",
                self.name,
                if text.is_empty() { "no output" } else { &text }
            )));
        };
        preamble::drain_stderr(stderr, format!("apptainer exec {}", self.name));
        Ok(SpawnedProcess {
            stdin: Box::pin(stdin),
            output: Box::pin(rest.chain(stdout)),
            pid: Some(pid),
            handle: Box::new(InstanceProcess {
                child,
                cli: self.cli.clone(),
                name: self.name.clone(),
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
        signal_in_instance(&self.cli, &self.name, pid, signal, include_root).await
    }

    fn temp_dir(&self) -> String {
        // --containall gives every instance a private /tmp.
        "/tmp".to_owned()
    }

    fn home_dir(&self) -> String {
        self.home.clone()
    }

    fn initial_cwd(&self) -> String {
        self.cwd.clone()
    }

    async fn alive(&self) -> bool {
        matches!(self.cli.list(&self.name).await, Ok(list) if list.iter().any(|i| i.instance == self.name))
    }

    async fn destroy(&self) -> Result<(), SandboxError> {
        self.leases.forget(&self.name);
        let result = self
            .cli
            .stop(&self.name)
            .await
            .map_err(|e| SandboxError::Other(e.to_string()));
        if result.is_ok() {
            self.leases.remove_file(&self.name);
        }
        result
    }
}

async fn signal_in_instance(
    cli: &Cli,
    name: &str,
    pid: u32,
    signal: StopSignal,
    include_root: bool,
) -> Result<(), SandboxError> {
    let script = format!(
        "set -- {pid} {} {}\n{SIGNAL_TREE_SCRIPT}",
        signal.number(),
        if include_root { 1 } else { 0 }
    );
    let out = cli
        .exec_script(name, &script, SCRIPT_TIMEOUT)
        .await
        .map_err(|e| SandboxError::Other(e.to_string()))?;
    if out.status == Some(0) {
        Ok(())
    } else {
        Err(SandboxError::Other(format!(
            "signalling process {pid} in instance {name} failed: {}",
            out.stderr
        )))
    }
}

/// A process started with `exec instance://`.
struct InstanceProcess {
    child: Child,
    cli: Cli,
    name: String,
    pid: u32,
}

#[async_trait]
impl ProcessHandle for InstanceProcess {
    async fn wait(&mut self) -> Option<i32> {
        let status = self.child.wait().await.ok()?;
        use std::os::unix::process::ExitStatusExt;
        status.code().or_else(|| status.signal().map(|s| 128 + s))
    }

    async fn kill(&mut self) {
        // Killing the local `apptainer exec` leaves the process inside the
        // instance running: kill its tree in there first.
        let _ = signal_in_instance(&self.cli, &self.name, self.pid, StopSignal::Kill, true).await;
        let _ = self.child.kill().await;
    }
}
