//! Confinement of local environments without containers
//! (`terminal.local_isolation`), as codex does on Linux.
//!
//! A confined environment is one set of Linux namespaces, made when its
//! first process starts: `unshare` starts a small init (pid 1 of a new PID
//! namespace, with its own `/proc` and mount namespace, and in `strict` a
//! network namespace with nothing but a loopback). Before the init settles,
//! the mount namespace gets its file policy: every mount is remounted
//! read-only except bind mounts of the workspace and the temporary
//! directory (`/dev`, `/proc`, `/sys` keep their own flags). Every process
//! of the environment (live shell, background launcher, file tools through
//! the shell) joins those namespaces with `nsenter`, which also drops to the
//! sandbox user after entering. So the environment's processes see each
//! other, not the worker or other environments, and pids they report are
//! pids of that namespace: the worker signals them from inside it.
//!
//! Entering namespaces and remounting need root; the worker probes at start
//! that this kernel lets it do all of it, and refuses to start otherwise
//! (a configured isolation is never silently dropped).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::sandbox::SYSTEM_PATH;

/// `terminal.local_isolation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LocalIsolation {
    /// Processes of the worker's host, as the sandbox user.
    #[default]
    None,
    /// Own PID and mount namespace; writes only in the workspace and temp dir.
    Workspace,
    /// `workspace` and no network (own network namespace).
    Strict,
}

impl LocalIsolation {
    pub fn as_str(self) -> &'static str {
        match self {
            LocalIsolation::None => "none",
            LocalIsolation::Workspace => "workspace",
            LocalIsolation::Strict => "strict",
        }
    }
}

impl std::str::FromStr for LocalIsolation {
    type Err = IsolationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "none" | "off" => Ok(LocalIsolation::None),
            "workspace" => Ok(LocalIsolation::Workspace),
            "strict" => Ok(LocalIsolation::Strict),
            other => Err(IsolationError::Mode(other.to_owned())),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
    #[error("local isolation '{0}' is not one of none, workspace, strict")]
    Mode(String),
    #[error("local isolation '{mode}' is not available on this host: {reason}")]
    Unsupported { mode: &'static str, reason: String },
    #[error("cannot confine the environment: {0}")]
    Start(String),
}

/// A confinement this host was proven to support (see [`Confinement::probe`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confinement {
    pub mode: LocalIsolation,
    unshare: PathBuf,
    nsenter: PathBuf,
}

/// Mounts the file policy inside the new mount namespace, then becomes the
/// environment's init. `$@` are the writable directories. The init is bash:
/// it reaps the orphans the environment leaves behind.
///
/// A mount that cannot be made read-only ends the setup: the environment is
/// not made rather than made half-confined.
const SETUP_SCRIPT: &str = r#"
set -f
mount --make-rprivate / || exit 1
for d in "$@"; do mount --bind "$d" "$d" || exit 1; done
mounts=$(cut -d' ' -f5 /proc/self/mountinfo)
for mp in $mounts; do
  case "$mp" in /proc|/proc/*|/dev|/dev/*|/sys|/sys/*) continue;; esac
  skip=0
  for d in "$@"; do case "$mp" in "$d"|"$d"/*) skip=1;; esac; done
  [ "$skip" = 1 ] && continue
  mount -o remount,bind,ro "$mp" 2>/dev/null || { echo "caduceus-writable $mp"; exit 1; }
done
if [ "$CADUCEUS_ISOLATION_NET" = 1 ] && command -v ip >/dev/null; then ip link set lo up 2>/dev/null; fi
echo caduceus-confined
exec bash -c 'trap "" TERM INT HUP; while :; do sleep 3600 & wait $!; done'
"#;

impl Confinement {
    /// Checks that this host can confine environments in `mode` (the tools
    /// exist, the kernel lets this process make the namespaces and remount);
    /// `None` for `LocalIsolation::None`.
    pub fn probe(mode: LocalIsolation) -> Result<Option<Confinement>, IsolationError> {
        if mode == LocalIsolation::None {
            return Ok(None);
        }
        let unsupported = |reason: String| IsolationError::Unsupported {
            mode: mode.as_str(),
            reason,
        };
        let unshare = find_tool("unshare")
            .ok_or_else(|| unsupported("no unshare (util-linux) on PATH".into()))?;
        let nsenter = find_tool("nsenter")
            .ok_or_else(|| unsupported("no nsenter (util-linux) on PATH".into()))?;
        let confinement = Confinement {
            mode,
            unshare,
            nsenter,
        };
        let output = std::process::Command::new(&confinement.unshare)
            .args(confinement.unshare_args())
            .args([
                "bash",
                "-c",
                "mount --make-rprivate / && mount -o remount,bind,ro / && test $$ = 1",
            ])
            .env_clear()
            .env("PATH", SYSTEM_PATH)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| unsupported(format!("cannot run unshare: {e}")))?;
        if !output.status.success() {
            return Err(unsupported(format!(
                "unshare {} failed (the worker needs root, or a kernel that allows these namespaces): {}",
                confinement.unshare_args().join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(Some(confinement))
    }

    /// What confines the environments, for `status`.
    pub fn mechanism(&self) -> &'static str {
        match self.mode {
            LocalIsolation::Strict => "namespaces(pid,mount,net)+ro-remount",
            _ => "namespaces(pid,mount)+ro-remount",
        }
    }

    fn unshare_args(&self) -> Vec<&'static str> {
        let mut args = vec!["--pid", "--fork", "--mount-proc", "--mount", "--kill-child"];
        if self.mode == LocalIsolation::Strict {
            args.push("--net");
        }
        args.push("--");
        args
    }

    /// Starts the namespaces of one environment; `writable` are the
    /// directories its processes may write (missing ones are skipped).
    pub async fn start(
        &self,
        writable: &[String],
        env: Vec<(String, String)>,
    ) -> Result<Namespaces, IsolationError> {
        let mut dirs: Vec<String> = Vec::new();
        for dir in writable {
            if let Ok(real) = std::fs::canonicalize(dir) {
                let real = real.display().to_string();
                if real == "/" {
                    return Err(IsolationError::Start(format!(
                        "the writable directory {dir} is the root directory: nothing would be confined"
                    )));
                }
                if !dirs.contains(&real) {
                    dirs.push(real);
                }
            }
        }
        let mut child = Command::new(&self.unshare)
            .args(self.unshare_args())
            .args(["bash", "-c", SETUP_SCRIPT, "caduceus-confine"])
            .args(&dirs)
            .env_clear()
            .env("PATH", SYSTEM_PATH)
            .envs(env)
            .env(
                "CADUCEUS_ISOLATION_NET",
                if self.mode == LocalIsolation::Strict {
                    "1"
                } else {
                    "0"
                },
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| IsolationError::Start(format!("unshare: {e}")))?;
        let holder = child
            .id()
            .ok_or_else(|| IsolationError::Start("unshare exited at once".into()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| IsolationError::Start("no pipe from unshare".into()))?;
        let mut line = String::new();
        let ready = tokio::time::timeout(
            Duration::from_secs(20),
            BufReader::new(stdout).read_line(&mut line),
        )
        .await;
        if let Some(mount) = line.trim().strip_prefix("caduceus-writable ") {
            return Err(IsolationError::Start(format!(
                "the mount {mount} cannot be made read-only"
            )));
        }
        if !matches!(ready, Ok(Ok(_))) || line.trim() != "caduceus-confined" {
            return Err(IsolationError::Start(
                "the namespaces' setup did not finish (mount refused?)".into(),
            ));
        }
        let init = init_of(holder)
            .ok_or_else(|| IsolationError::Start("the environment's init is not running".into()))?;
        Ok(Namespaces {
            _holder: child,
            init,
            nsenter: self.nsenter.clone(),
            net: self.mode == LocalIsolation::Strict,
        })
    }
}

/// The namespaces of one confined environment; dropping it kills their init
/// and with it every process of the environment.
#[derive(Debug)]
pub struct Namespaces {
    _holder: Child,
    /// Host pid of the environment's init (pid 1 inside).
    init: u32,
    nsenter: PathBuf,
    net: bool,
}

impl Namespaces {
    /// A command that runs `program args` inside the namespaces, in `cwd`,
    /// as `user` (uid, gid) when given.
    pub fn command(
        &self,
        program: &str,
        args: &[String],
        cwd: &str,
        user: Option<(u32, u32)>,
    ) -> Command {
        let mut command = Command::new(&self.nsenter);
        command
            .arg(format!("--target={}", self.init))
            .args(["--pid", "--mount"])
            .args(self.net.then_some("--net"))
            .arg(format!("--wd={cwd}"));
        if let Some((uid, gid)) = user {
            // nsenter clears the supplementary groups when it sets the gid.
            command
                .arg(format!("--setuid={uid}"))
                .arg(format!("--setgid={gid}"));
        }
        command.arg("--").arg(program).args(args);
        command
    }

    /// Is the environment's init still there? Without it nothing can enter.
    /// A dead init stays a zombie until `unshare` reaps it, so its state is
    /// read, not just its existence.
    pub fn alive(&self) -> bool {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", self.init)) else {
            return false;
        };
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next());
        !matches!(state, None | Some("Z" | "X"))
    }

    /// Ends every process of the environment.
    pub fn kill(&self) {
        if let Ok(pid) = i32::try_from(self.init) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The one child of the `unshare` process `holder` (it forked the init).
fn init_of(holder: u32) -> Option<u32> {
    let children =
        std::fs::read_to_string(format!("/proc/{holder}/task/{holder}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

fn find_tool(name: &str) -> Option<PathBuf> {
    SYSTEM_PATH
        .split(':')
        .map(|dir| Path::new(dir).join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
#[path = "isolation_tests.rs"]
mod tests;
