//! What a worker leaves on its own host, and who cleans it up when the
//! worker dies without a word (`kill -9`, OOM).
//!
//! Local environments run on the worker's host, in their own sessions, so
//! nothing kills them with their worker. Each worker process therefore
//! keeps a **ledger**, a lease file `<tmp>/caduceus-ledger-<uid>/<instance>.lease`
//! (directory 0700, checked to be ours):
//!
//! ```text
//! pid 48211 9125731
//! dir /tmp/caduceus-login-5b0e…
//! dir /tmp/caduceus-3f9a…
//! ```
//!
//! — the worker's pid and start time (so a reused pid is not mistaken for
//! it), then every private directory its local shells made. Every local
//! process carries `CADUCEUS_LEDGER=<instance>` in its environment, and so
//! does what it starts.
//!
//! Two things act on a ledger, with one script ([`SWEEP_SCRIPT`]):
//! - the worker's **guardian**, a small bash started with the worker in its
//!   own session, blocked reading a pipe only the worker holds. When the
//!   worker dies the pipe closes: the guardian stops every process carrying
//!   the tag (and whatever shares a session with one; TERM, then KILL a
//!   second later), removes the listed directories and the ledger, and exits. A graceful stop ends everything
//!   first and removes the ledger itself; the guardian then finds nothing.
//! - the **sweep** of any worker starting on the host (and every sweep
//!   interval): a ledger whose worker is gone (pid dead or reused) is swept
//!   the same way — for when the guardian died too (a `kill -9` of the whole
//!   process group, a reboot that left the directories).

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;

use crate::sandbox::SYSTEM_PATH;

/// The environment variable that marks a worker's local processes.
pub const TAG_VAR: &str = "CADUCEUS_LEDGER";

/// `$1` ledger file, `$2` the tag's value. Signals every process whose
/// environment holds the tag and every member of their sessions: TERM first
/// (a process killed outright cannot clean up: pyenv's rehash lock, a half
/// written file), KILL a second later, and KILL again for what was forked
/// meanwhile; then removes the listed directories and the ledger. Builtins
/// and grep only.
pub const SWEEP_SCRIPT: &str = r#"
ledger=$1 tag="CADUCEUS_LEDGER=$2"
signal_all() {
  local sig=$1 sids=" " e p s line
  for e in $(grep -lzxF -- "$tag" /proc/[0-9]*/environ 2>/dev/null); do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" = "$$" ] && continue
    IFS= read -r line < "/proc/$p/stat" 2>/dev/null || continue
    set -- ${line##*) }
    sids="$sids$4 "
    kill -"$sig" "$p" 2>/dev/null
  done
  [ "$sids" = " " ] && return 1
  for s in /proc/[0-9]*/stat; do
    IFS= read -r line < "$s" 2>/dev/null || continue
    set -- ${line##*) }
    p=${s#/proc/}; p=${p%/stat}
    case "$sids" in *" $4 "*) [ "$p" != "$$" ] && kill -"$sig" "$p" 2>/dev/null;; esac
  done
  return 0
}
if signal_all TERM; then
  sleep 1
  signal_all KILL
  signal_all KILL
fi
if [ -f "$ledger" ]; then
  while IFS= read -r line; do
    case $line in "dir /"?*) rm -rf -- "${line#dir }";; esac
  done < "$ledger"
  rm -f -- "$ledger"
fi
exit 0
"#;

/// The guardian: waits for the worker's end of its stdin to close, then
/// sweeps. Signals a terminal or a stopping service sends the worker's
/// group must not end it first.
const GUARDIAN_SCRIPT: &str = r#"trap '' INT TERM HUP QUIT
while IFS= read -r _; do :; done
"#;

#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("ledger directory {0}: {1}")]
    Dir(PathBuf, String),
    #[error("ledger {0}: {1}")]
    File(PathBuf, std::io::Error),
    #[error("cannot start the guardian: {0}")]
    Guardian(std::io::Error),
}

/// One worker process's ledger and guardian.
pub struct HostLedger {
    dir: PathBuf,
    path: PathBuf,
    instance: String,
    file: Mutex<Option<std::fs::File>>,
    /// The guardian's stdin: closing it (this process ending, or
    /// [`HostLedger::close`]) wakes the guardian.
    guardian: Mutex<Option<ChildStdin>>,
}

impl std::fmt::Debug for HostLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostLedger")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl HostLedger {
    /// Writes this worker's ledger under `temp` and starts its guardian.
    pub fn open(temp: &Path, instance: &str) -> Result<Self, LedgerError> {
        let dir = ledger_dir(temp)?;
        let path = dir.join(format!("{instance}.lease"));
        let me = std::process::id();
        let start = start_time(me).unwrap_or_default();
        let mut file = std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(|e| LedgerError::File(path.clone(), e))?;
        writeln!(file, "pid {me} {start}").map_err(|e| LedgerError::File(path.clone(), e))?;
        let guardian = spawn_guardian(&path, instance).map_err(LedgerError::Guardian)?;
        Ok(HostLedger {
            dir,
            path,
            instance: instance.to_owned(),
            file: Mutex::new(Some(file)),
            guardian: Mutex::new(Some(guardian)),
        })
    }

    /// The variable every local process of this worker carries.
    pub fn tag(&self) -> (String, String) {
        (TAG_VAR.to_owned(), self.instance.clone())
    }

    /// Notes a directory that must not outlive this worker.
    pub fn record_dir(&self, path: &str) {
        if !path.starts_with('/') || path.contains('\n') {
            return;
        }
        if let Ok(mut file) = self.file.lock()
            && let Some(file) = file.as_mut()
            && let Err(err) = writeln!(file, "dir {path}")
        {
            tracing::warn!("ledger {}: {err}", self.path.display());
        }
    }

    /// Sweeps the ledgers of workers of this host that are gone; returns
    /// their instance ids.
    pub async fn sweep_dead(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut swept = Vec::new();
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(instance) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".lease"))
                .map(str::to_owned)
            else {
                continue;
            };
            if instance == self.instance || owner_alive(&path) {
                continue;
            }
            tracing::info!(ledger = %path.display(), "sweeping what a dead worker left on this host");
            let status = tokio::process::Command::new("bash")
                .arg("-c")
                .arg(SWEEP_SCRIPT)
                .arg("caduceus-sweep")
                .arg(&path)
                .arg(&instance)
                .env_clear()
                .env("PATH", SYSTEM_PATH)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await;
            match status {
                Ok(status) if status.success() => swept.push(format!("local:{instance}")),
                Ok(status) => tracing::warn!("sweeping {} failed: {status}", path.display()),
                Err(err) => tracing::warn!("sweeping {} failed: {err}", path.display()),
            }
        }
        swept
    }

    /// A graceful end, after every environment ended: the ledger goes and
    /// the guardian, woken, finds nothing left.
    pub fn close(&self) {
        if let Ok(mut file) = self.file.lock() {
            file.take();
        }
        let _ = std::fs::remove_file(&self.path);
        if let Ok(mut guardian) = self.guardian.lock() {
            guardian.take();
        }
    }
}

impl Drop for HostLedger {
    fn drop(&mut self) {
        self.close();
    }
}

/// `<temp>/caduceus-ledger-<uid>`, created 0700, refused unless ours and
/// private (a directory another user planted would let them name what we
/// remove).
fn ledger_dir(temp: &Path) -> Result<PathBuf, LedgerError> {
    let uid = nix::unistd::getuid().as_raw();
    let dir = temp.join(format!("caduceus-ledger-{uid}"));
    let fail = |reason: String| LedgerError::Dir(dir.clone(), reason);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(err) => return Err(fail(err.to_string())),
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| fail(e.to_string()))?;
    if !meta.is_dir() || meta.uid() != uid || meta.permissions().mode() & 0o077 != 0 {
        return Err(fail(
            "not a private directory of this user; local processes of a dead worker will not be swept"
                .to_owned(),
        ));
    }
    Ok(dir)
}

fn spawn_guardian(ledger: &Path, instance: &str) -> std::io::Result<ChildStdin> {
    let script = format!("{GUARDIAN_SCRIPT}{SWEEP_SCRIPT}");
    let guardian = |program: &str, prefix: &[&str]| -> std::io::Result<Child> {
        Command::new(program)
            .args(prefix)
            .arg("bash")
            .arg("-c")
            .arg(&script)
            .arg("caduceus-guardian")
            .arg(ledger)
            .arg(instance)
            .env_clear()
            .env("PATH", SYSTEM_PATH)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
    };
    // `setsid -f`: its own session (a signal to the worker's group does not
    // reach it) and no child of ours left to reap.
    let mut child = match guardian("setsid", &["-f"]) {
        Ok(child) => child,
        Err(_) => guardian("env", &[])?,
    };
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin pipe"))?;
    // `setsid -f` exits at once; without setsid the child is the guardian
    // itself, and this thread reaps it when it ends.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(stdin)
}

/// Is the worker that wrote this ledger still running?
fn owner_alive(ledger: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(ledger) else {
        // Unreadable: leave it to its owner.
        return true;
    };
    let mut first = text.lines().next().unwrap_or_default().split_whitespace();
    let (Some("pid"), Some(pid), start) = (first.next(), first.next(), first.next()) else {
        // Still being written (the first line comes with the file).
        return true;
    };
    let Ok(pid) = pid.parse::<u32>() else {
        return false;
    };
    match start_time(pid) {
        Some(now) => start.is_none_or(|s| s == now.to_string()),
        None => false,
    }
}

/// A process's start time in clock ticks since boot (`/proc/<pid>/stat`
/// field 22).
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}
