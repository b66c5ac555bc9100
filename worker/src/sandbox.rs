//! The `Sandbox` trait: what every backend (local, Docker, SSH, Singularity,
//! Modal, Daytona) provides, so that the shell, process and file tools work
//! unchanged on all of them.

use std::fmt;
use std::pin::Pin;

use std::sync::Arc;

use async_trait::async_trait;
use caduceus_files::FileSystem;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::backends::lease::LeaseRecord;

pub type BoxedReader = Pin<Box<dyn AsyncRead + Send>>;
pub type BoxedWriter = Pin<Box<dyn AsyncWrite + Send>>;

/// A process to start inside the sandbox.
#[derive(Debug, Clone, Default)]
pub struct SpawnSpec {
    pub program: String,
    pub args: Vec<String>,
    /// Working directory inside the sandbox; the backend's default when `None`.
    pub cwd: Option<String>,
    /// The complete environment of the process (already sanitized).
    pub env: Vec<(String, String)>,
}

/// A process started inside a sandbox.
pub struct SpawnedProcess {
    /// Its stdin (a pipe). Dropping it closes the pipe: the process reads end
    /// of file (`shutdown` alone may only flush).
    pub stdin: BoxedWriter,
    /// Its stdout; stderr is merged into it where the backend can merge at the
    /// descriptor level (local). Shells we start merge with `exec 2>&1` anyway.
    pub output: BoxedReader,
    /// Its pid inside the sandbox's namespace, when the backend knows it.
    pub pid: Option<u32>,
    pub handle: Box<dyn ProcessHandle>,
}

/// Waits for or kills one spawned process.
#[async_trait]
pub trait ProcessHandle: Send {
    /// Waits for the process to end; its exit code (128+signal when killed),
    /// `None` when the backend cannot tell.
    async fn wait(&mut self) -> Option<i32>;
    /// Kills the process (and, where the backend can, everything it started).
    async fn kill(&mut self);
}

/// Signals used to stop process trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    Interrupt,
    Terminate,
    Kill,
    /// SIGUSR2, sent to a live shell alone: its trap abandons the rest of
    /// the running command (see `shell/script.rs`).
    Abort,
}

impl StopSignal {
    pub fn number(self) -> i32 {
        match self {
            StopSignal::Interrupt => 2,
            StopSignal::Terminate => 15,
            StopSignal::Kill => 9,
            StopSignal::Abort => 12,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot start '{program}' in the sandbox: {reason}")]
    Spawn { program: String, reason: String },
    #[error("the sandbox is gone: {0}")]
    Gone(String),
    #[error("the '{0}' backend is not available on this worker")]
    Unavailable(String),
    #[error("{0}")]
    Other(String),
}

/// One isolated place where a task's commands run.
#[async_trait]
pub trait Sandbox: Send + Sync + fmt::Debug {
    /// Backend name ("local", "docker", …).
    fn backend(&self) -> &str;
    /// Backend-specific id (container id, instance name, host).
    fn id(&self) -> &str;
    /// Starts a process with piped stdio.
    async fn spawn(&self, spec: SpawnSpec) -> Result<SpawnedProcess, SandboxError>;
    /// Signals the descendants of `pid` (and `pid` itself when `include_root`),
    /// parents first, so that a command's whole process tree stops.
    async fn signal_tree(
        &self,
        pid: u32,
        signal: StopSignal,
        include_root: bool,
    ) -> Result<(), SandboxError>;
    /// Signals the one process `pid` (none of its children). The default
    /// runs `kill` inside the sandbox; backends that can signal directly
    /// override it.
    async fn signal_process(&self, pid: u32, signal: StopSignal) -> Result<(), SandboxError> {
        let spec = SpawnSpec {
            program: "kill".to_owned(),
            args: vec![format!("-{}", signal.number()), pid.to_string()],
            cwd: None,
            env: vec![("PATH".to_owned(), SYSTEM_PATH.to_owned())],
        };
        let mut process = self.spawn(spec).await?;
        drop(process.stdin);
        let _ =
            tokio::time::timeout(std::time::Duration::from_secs(10), process.handle.wait()).await;
        Ok(())
    }
    /// A shell made a private directory at `path`. A backend whose sandboxes
    /// can outlive their worker on its host (local) notes it, so that it is
    /// removed even when the worker dies without cleaning up.
    fn record_private_dir(&self, _path: &str) {}
    /// The setting that leaves the sandbox's processes without network
    /// (`terminal.local_isolation: strict`, `docker_network: false`), if
    /// any. The outside-world tools run in the worker, outside every
    /// sandbox, so for such an environment they refuse instead of reaching
    /// the network on its behalf.
    fn network_cut(&self) -> Option<&'static str> {
        None
    }
    /// File access inside the sandbox, for the file tools (one round trip per
    /// call where the backend allows).
    fn files(&self) -> Arc<dyn FileSystem>;
    /// The directory for temporary files inside the sandbox (no trailing slash).
    fn temp_dir(&self) -> String;
    /// The home directory inside the sandbox.
    fn home_dir(&self) -> String;
    /// The directory a fresh shell starts in.
    fn initial_cwd(&self) -> String;
    /// Is the sandbox still there (container running, host reachable)?
    async fn alive(&self) -> bool;
    /// Removes the sandbox and everything running in it.
    async fn destroy(&self) -> Result<(), SandboxError>;

    /// The environment of a new shell, given the worker's (sanitized) one.
    /// Local: all of it. Backends with their own system (containers, remote
    /// hosts) pass only the variables configured to cross, so the sandbox
    /// keeps its own PATH, HOME, …
    fn shell_env(&self, worker_env: &[(String, String)]) -> Vec<(String, String)> {
        worker_env.to_vec()
    }

    /// Renews the sandbox's lease (see `backends/lease.rs`): a sandbox that
    /// is not renewed for its lease length is removed by any worker's
    /// sweeper. The default does nothing (nothing sweeps local processes).
    async fn renew_lease(&self, _record: &LeaseRecord) -> Result<(), SandboxError> {
        Ok(())
    }

    /// Does the backend already know the sandbox is gone (stopped, removed,
    /// OOM-killed)? Must be cheap (no I/O): the worker asks before and after
    /// every call and recreates a vanished environment once, telling the
    /// model. The default never knows; `alive()` is the thorough check.
    fn vanished(&self) -> bool {
        false
    }

    /// Why the sandbox's service is not answering right now, when the
    /// backend knows (cheap, no I/O): a command that timed out or lost its
    /// shell then says so instead of leaving it to look like the command's
    /// fault. The default never knows.
    fn unreachable(&self) -> Option<String> {
        None
    }
    /// Was the sandbox already gone at `at`? Asked only after a call found it
    /// vanished: a call that started after the sandbox died cannot have run,
    /// so the worker runs it again in the fresh environment. The default
    /// cannot tell (and the call is not repeated).
    async fn gone_before(&self, _at: std::time::SystemTime) -> bool {
        false
    }

    /// Paths whose content outlives the sandbox (persistent directories),
    /// named when the environment has to be reset.
    fn persistent_paths(&self) -> Vec<String> {
        Vec::new()
    }
}

/// PATH for the worker's own helper processes inside a sandbox.
pub const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// A bash script that signals every descendant of `$1` (parents first) with
/// signal `$2`, and `$1` itself when `$3` is 1. It reads /proc with builtins
/// only, so it works in minimal images without procps.
///
/// Processes that left the tree but stayed in `$1`'s session (when `$1` leads
/// one) are signalled too.
pub const SIGNAL_TREE_SCRIPT: &str = r#"
root=$1 sig=$2 self=$3
declare -A kids
insession=
for s in /proc/[0-9]*/stat; do
  IFS= read -r line < "$s" 2>/dev/null || continue
  rest=${line##*) }
  set -- $rest
  pid=${s#/proc/}; pid=${pid%/stat}
  kids[$2]="${kids[$2]} $pid"
  if [ "$4" = "$root" ] && [ "$pid" != "$root" ]; then insession="$insession $pid"; fi
done
walk() { local p; for p in ${kids[$1]}; do kill -"$sig" "$p" 2>/dev/null; walk "$p"; done; }
walk "$root"
for p in $insession; do kill -"$sig" "$p" 2>/dev/null; done
if [ "$self" = 1 ]; then kill -"$sig" "$root" 2>/dev/null; fi
exit 0
"#;
