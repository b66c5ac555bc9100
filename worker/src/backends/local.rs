//! The local backend: processes on the worker's own host, each environment's
//! shell in its own session (no controlling terminal, own process group).
//!
//! A worker running as root runs its local sandboxes as an unprivileged
//! [`SandboxUser`] (`worker --run-as`): root could read the worker's
//! environment and memory through `/proc` whatever the worker does. Such a
//! sandbox's file tools then go through its shell too ([`ShellFs`]), so they
//! see exactly what its commands see, with the same user's rights.
//!
//! With `terminal.local_isolation` a sandbox's processes also run inside its
//! own namespaces ([`Confinement`], `isolation.rs`); its pids are then those
//! of its PID namespace, and it is signalled from inside.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use caduceus_files::{FileSystem, LocalFs};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::net::unix::pipe;
use tokio::process::{Child, Command};

use super::isolation::{Confinement, Namespaces};
use super::ledger::HostLedger;
use crate::backends::served_files;
use crate::sandbox::{
    ProcessHandle, SIGNAL_TREE_SCRIPT, SYSTEM_PATH, Sandbox, SandboxError, SpawnSpec,
    SpawnedProcess, StopSignal,
};

/// The account local sandbox commands run as, instead of the worker's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// `HOME` of its commands (a directory it can write).
    pub home: String,
}

pub struct LocalSandbox {
    id: String,
    cwd: String,
    home: String,
    temp: String,
    user: Option<SandboxUser>,
    files: Arc<dyn FileSystem>,
    /// The worker's ledger: its processes carry the tag, its private
    /// directories are listed (see `ledger.rs`).
    ledger: Option<Arc<HostLedger>>,
    /// `terminal.local_isolation` other than none: the environment's
    /// namespaces, made with its first process (see `isolation.rs`).
    confinement: Option<Confinement>,
    namespaces: tokio::sync::OnceCell<Namespaces>,
}

impl std::fmt::Debug for LocalSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSandbox")
            .field("id", &self.id)
            .field("cwd", &self.cwd)
            .finish_non_exhaustive()
    }
}

impl LocalSandbox {
    pub fn new(id: String, cwd: String) -> Self {
        let home = std::env::var("HOME").unwrap_or_else(|_| "/".to_owned());
        LocalSandbox {
            id,
            cwd,
            home,
            temp: host_temp_dir(),
            user: None,
            files: Arc::new(LocalFs::new()),
            ledger: None,
            confinement: None,
            namespaces: tokio::sync::OnceCell::new(),
        }
    }

    /// A sandbox whose commands and file tools run as `user` (the worker's
    /// own when `None`) and, with a `confinement`, inside its namespaces.
    /// The file tools of either go through the shell, so they see and may
    /// write exactly what its commands may.
    ///
    /// `file_server` is a program that serves them (`<it> __file-server`,
    /// see `caduceus_files::served`): started once, as the user and inside
    /// the namespaces, it answers each primitive over a pipe instead of a
    /// shell script per primitive, which stays the fallback.
    pub fn for_user(
        id: String,
        cwd: String,
        user: Option<SandboxUser>,
        confinement: Option<Confinement>,
        ledger: Option<Arc<HostLedger>>,
        file_server: Option<String>,
    ) -> Arc<Self> {
        Arc::new_cyclic(|me: &Weak<LocalSandbox>| {
            let me: Weak<dyn Sandbox> = me.clone();
            let mut sandbox = LocalSandbox::new(id, cwd).with_ledger(ledger);
            if user.is_some() || confinement.is_some() {
                sandbox.files = served_files::files(me, file_server);
            }
            if let Some(user) = &user {
                sandbox.home = user.home.clone();
            }
            sandbox.user = user;
            sandbox.confinement = confinement;
            sandbox
        })
    }

    /// The environment's namespaces, made on first use; `None` unconfined.
    async fn namespaces(&self) -> Result<Option<&Namespaces>, SandboxError> {
        let Some(confinement) = &self.confinement else {
            return Ok(None);
        };
        let writable = [self.cwd.clone(), self.temp.clone()];
        // The init carries the ledger's tag: sweeps of a dead worker end it.
        let tag: Vec<(String, String)> =
            self.ledger.as_ref().map(|l| l.tag()).into_iter().collect();
        self.namespaces
            .get_or_try_init(|| confinement.start(&writable, tag))
            .await
            .map(Some)
            .map_err(|e| SandboxError::Other(e.to_string()))
    }

    pub fn with_ledger(mut self, ledger: Option<Arc<HostLedger>>) -> Self {
        self.ledger = ledger;
        self
    }
}

/// The host's temporary directory (`TMPDIR`, `TMP`, `TEMP`, else `/tmp`),
/// without a trailing slash.
pub fn host_temp_dir() -> String {
    let temp = ["TMPDIR", "TMP", "TEMP"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| "/tmp".to_owned());
    let temp = temp.trim_end_matches('/').to_owned();
    if temp.is_empty() {
        "/".to_owned()
    } else {
        temp
    }
}

#[async_trait]
impl Sandbox for LocalSandbox {
    fn backend(&self) -> &str {
        "local"
    }

    fn network_cut(&self) -> Option<&'static str> {
        self.confinement
            .as_ref()
            .is_some_and(|c| c.mode == super::isolation::LocalIsolation::Strict)
            .then_some("terminal.local_isolation: strict")
    }

    fn id(&self) -> &str {
        &self.id
    }

    async fn spawn(&self, spec: SpawnSpec) -> Result<SpawnedProcess, SandboxError> {
        let fail = |reason: String| SandboxError::Spawn {
            program: spec.program.clone(),
            reason,
        };
        // stdout and stderr share one pipe so their order is kept.
        let (reader, writer) = std::io::pipe().map_err(|e| fail(format!("pipe: {e}")))?;
        let writer_err = writer.try_clone().map_err(|e| fail(format!("pipe: {e}")))?;
        let cwd = spec.cwd.as_deref().unwrap_or(&self.cwd);
        let namespaces = self.namespaces().await?;
        let mut command = match namespaces {
            // nsenter enters as root and then becomes the sandbox user.
            Some(ns) => ns.command(
                &spec.program,
                &spec.args,
                cwd,
                self.user.as_ref().map(|u| (u.uid, u.gid)),
            ),
            None => {
                let mut command = Command::new(&spec.program);
                command.args(&spec.args);
                if let Some(user) = &self.user {
                    // std drops the supplementary groups too (setgroups(0)
                    // before setuid), so no group of the worker's account is kept.
                    command.uid(user.uid).gid(user.gid);
                }
                command
            }
        };
        command
            .env_clear()
            .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            // Last, so that a tag inherited from an outer worker is replaced.
            .envs(self.ledger.as_ref().map(|l| l.tag()))
            .current_dir(if namespaces.is_some() { "/" } else { cwd })
            .stdin(Stdio::piped())
            .stdout(Stdio::from(writer))
            .stderr(Stdio::from(writer_err))
            .kill_on_drop(true);
        detach_from_terminal(&mut command);
        let mut child = command.spawn().map_err(|e| fail(e.to_string()))?;
        // Our copies of the pipe's write end go with the Command: without this
        // the reader never sees end-of-file.
        drop(command);
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| fail("no stdin pipe".to_owned()))?;
        let output = pipe::Receiver::from_owned_fd(OwnedFd::from(reader))
            .map_err(|e| fail(format!("pipe: {e}")))?;
        let pid = child.id();
        Ok(SpawnedProcess {
            stdin: Box::pin(stdin),
            output: Box::pin(output),
            pid,
            handle: Box::new(LocalProcess { child, pid }),
        })
    }

    async fn signal_tree(
        &self,
        pid: u32,
        signal: StopSignal,
        include_root: bool,
    ) -> Result<(), SandboxError> {
        if self.confinement.is_some() {
            // The pid is one of the environment's namespace.
            return self
                .run_inside(
                    "bash",
                    vec![
                        "-c".to_owned(),
                        SIGNAL_TREE_SCRIPT.to_owned(),
                        "signal-tree".to_owned(),
                        pid.to_string(),
                        signal.number().to_string(),
                        u8::from(include_root).to_string(),
                    ],
                )
                .await;
        }
        signal_local_tree(pid, signal, include_root);
        Ok(())
    }

    async fn signal_process(&self, pid: u32, signal: StopSignal) -> Result<(), SandboxError> {
        if self.confinement.is_some() {
            return self
                .run_inside(
                    "kill",
                    vec![format!("-{}", signal.number()), pid.to_string()],
                )
                .await;
        }
        if let Ok(pid) = i32::try_from(pid) {
            let _ = kill(Pid::from_raw(pid), nix_signal(signal));
        }
        Ok(())
    }

    fn record_private_dir(&self, path: &str) {
        if let Some(ledger) = &self.ledger {
            ledger.record_dir(path);
        }
    }

    fn files(&self) -> Arc<dyn FileSystem> {
        self.files.clone()
    }

    fn temp_dir(&self) -> String {
        self.temp.clone()
    }

    fn home_dir(&self) -> String {
        self.home.clone()
    }

    fn shell_env(&self, worker_env: &[(String, String)]) -> Vec<(String, String)> {
        let Some(user) = &self.user else {
            return worker_env.to_vec();
        };
        let mut env: Vec<(String, String)> = worker_env
            .iter()
            .filter(|(name, _)| !matches!(name.as_str(), "HOME" | "USER" | "LOGNAME"))
            .cloned()
            .collect();
        env.extend([
            ("HOME".to_owned(), user.home.clone()),
            ("USER".to_owned(), user.name.clone()),
            ("LOGNAME".to_owned(), user.name.clone()),
        ]);
        env
    }

    fn initial_cwd(&self) -> String {
        self.cwd.clone()
    }

    async fn alive(&self) -> bool {
        !self.vanished()
    }

    /// A confined environment whose init died (killed from outside, OOM)
    /// can run nothing more: the worker makes a fresh one.
    fn vanished(&self) -> bool {
        self.namespaces.get().is_some_and(|ns| !ns.alive())
    }

    async fn destroy(&self) -> Result<(), SandboxError> {
        if let Some(ns) = self.namespaces.get() {
            ns.kill();
        }
        Ok(())
    }
}

impl LocalSandbox {
    /// Runs one helper inside a confined environment and waits for it.
    async fn run_inside(&self, program: &str, args: Vec<String>) -> Result<(), SandboxError> {
        let spec = SpawnSpec {
            program: program.to_owned(),
            args,
            cwd: None,
            env: vec![("PATH".to_owned(), SYSTEM_PATH.to_owned())],
        };
        let mut process = self.spawn(spec).await?;
        drop(process.stdin);
        let _ =
            tokio::time::timeout(std::time::Duration::from_secs(10), process.handle.wait()).await;
        Ok(())
    }
}

/// New session: no controlling terminal (a command that opens /dev/tty fails
/// at once instead of stopping the job), own process group for group kills.
#[allow(unsafe_code)]
fn detach_from_terminal(command: &mut Command) {
    // SAFETY: setsid() is async-signal-safe and touches no memory of the
    // parent; it is the documented way to start a child in a new session.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid()
                .map(|_| ())
                .map_err(std::io::Error::from)
        });
    }
}

struct LocalProcess {
    child: Child,
    pid: Option<u32>,
}

#[async_trait]
impl ProcessHandle for LocalProcess {
    async fn wait(&mut self) -> Option<i32> {
        let status = self.child.wait().await.ok()?;
        use std::os::unix::process::ExitStatusExt;
        status.code().or_else(|| status.signal().map(|s| 128 + s))
    }

    async fn kill(&mut self) {
        if let Some(pid) = self.pid {
            signal_local_tree(pid, StopSignal::Kill, true);
            if let Ok(pid) = i32::try_from(pid) {
                // The whole session's process group, for children that
                // re-parented away from the tree.
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        let _ = self.child.kill().await;
    }
}

/// Signals the descendants of `root`, parents first (read from /proc), then
/// `root` itself when asked.
pub fn signal_local_tree(root: u32, signal: StopSignal, include_root: bool) {
    let signal = nix_signal(signal);
    let table = process_table();
    let mut order = Vec::new();
    collect_descendants(root, &table.children, &mut order, 0);
    // Processes that left the tree (re-parented to init) but stayed in the
    // root's session: a shell we started with setsid leads its own session.
    if let Some(members) = table.sessions.get(&root) {
        for pid in members {
            if *pid != root && !order.contains(pid) {
                order.push(*pid);
            }
        }
    }
    for pid in order {
        if let Ok(pid) = i32::try_from(pid) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }
    if include_root && let Ok(pid) = i32::try_from(root) {
        let _ = kill(Pid::from_raw(pid), signal);
    }
}

fn nix_signal(signal: StopSignal) -> Signal {
    match signal {
        StopSignal::Interrupt => Signal::SIGINT,
        StopSignal::Terminate => Signal::SIGTERM,
        StopSignal::Kill => Signal::SIGKILL,
        StopSignal::Abort => Signal::SIGUSR2,
    }
}

/// Descendants of `pid`, parents before their children: a parent shell that
/// dies first cannot print "Terminated" for its child into the output, and
/// every child's pid is already known.
fn collect_descendants(
    pid: u32,
    children: &HashMap<u32, Vec<u32>>,
    out: &mut Vec<u32>,
    depth: usize,
) {
    if depth > 512 {
        return;
    }
    if let Some(kids) = children.get(&pid) {
        for kid in kids {
            out.push(*kid);
            collect_descendants(*kid, children, out, depth + 1);
        }
    }
}

/// Who is whose child, and who is in which session, from /proc/*/stat.
#[derive(Default)]
pub struct ProcessTable {
    /// parent pid -> child pids
    pub children: HashMap<u32, Vec<u32>>,
    /// session id -> member pids
    pub sessions: HashMap<u32, Vec<u32>>,
}

pub fn process_table() -> ProcessTable {
    let mut table = ProcessTable::default();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return table;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // The command name may contain spaces and parentheses: parse after the last ')'.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let _state = fields.next();
        let ppid = fields.next().and_then(|p| p.parse::<u32>().ok());
        let _pgrp = fields.next();
        let session = fields.next().and_then(|p| p.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            table.children.entry(ppid).or_default().push(pid);
        }
        if let Some(session) = session {
            table.sessions.entry(session).or_default().push(pid);
        }
    }
    table
}
