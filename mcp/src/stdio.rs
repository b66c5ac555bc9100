//! A stdio server's process: started with a small host environment plus the
//! configuration's `env` (hermes: PATH, HOME, USER, LANG, LC_ALL, TERM,
//! SHELL, TMPDIR, XDG_*), in its own session (and process group) so that
//! ending it ends whatever it started, its stderr forwarded to our log line by line.

use std::collections::BTreeMap;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::McpError;

/// Host variables a server gets besides its configured `env`; secrets are
/// never among them (a server that needs a key names it in `env`).
const BASE_VARS: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TERM", "SHELL", "TMPDIR",
];

pub(crate) fn base_env() -> Vec<(String, String)> {
    caduceus_common::process_env::vars()
        .into_iter()
        .filter(|(name, _)| BASE_VARS.contains(&name.as_str()) || name.starts_with("XDG_"))
        .collect()
}

pub(crate) struct Spawned {
    pub child: Child,
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
}

pub(crate) fn spawn(
    server: &str,
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
) -> Result<Spawned, McpError> {
    let mut cmd = Command::new(command);
    cmd.args(args)
        .env_clear()
        .envs(base_env())
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    new_session(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| McpError::Spawn {
        server: server.to_owned(),
        message: format!("{command}: {e}"),
    })?;
    let missing = || McpError::Spawn {
        server: server.to_owned(),
        message: "no pipe to the process".to_owned(),
    };
    let stdin = child.stdin.take().ok_or_else(missing)?;
    let stdout = child.stdout.take().ok_or_else(missing)?;
    if let Some(stderr) = child.stderr.take() {
        let server = server.to_owned();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(target: "caduceus_mcp::stderr", server = %server, "{line}");
            }
        });
    }
    Ok(Spawned {
        child,
        stdin,
        stdout,
    })
}

/// A session of its own (and so a process group, for [`kill_group`]): no
/// terminal's signals reach it, and a worker's ledger sweep, which ends the
/// sessions of the processes carrying its tag, ends only the server's.
#[allow(unsafe_code)]
fn new_session(cmd: &mut Command) {
    // SAFETY: setsid() is async-signal-safe and touches no memory of the
    // parent; it is the documented way to start a child in a new session.
    unsafe {
        cmd.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
}

/// Ends the server's whole process group (it may have started helpers); a
/// group already gone is fine.
pub(crate) fn kill_group(child: &Child) {
    if let Some(pid) = child.id()
        && let Ok(pid) = i32::try_from(pid)
    {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}
