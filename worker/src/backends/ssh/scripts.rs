//! The bash scripts the SSH backend runs on the remote host. Each is one
//! `bash -c` over the shared master connection; all of them use the remote
//! clock, so a worker with a skewed clock cannot expire a lease early.
//!
//! Layout on the remote host, per environment:
//!
//! ```text
//! ~/.caduceus/envs/<env-id>/lease       "expires=<epoch> instance=<worker instance> worker=<name> owner=<coordinator> task=<task>"
//! ~/.caduceus/envs/<env-id>/pids/<pid>  start time of process <pid> (field 22 of /proc/<pid>/stat)
//! ~/.caduceus/envs/<env-id>/tmp/        the environment's temp dir (shell snapshots)
//! ```
//!
//! A pid file records the start time so that a sweep never signals an
//! unrelated process that reused the pid.

#[cfg(test)]
#[path = "scripts_tests.rs"]
mod tests;

use crate::backends::lease::{lease_watchdog, lease_word, watchdog_step};
use crate::backends::preamble::exec_with_env;
use crate::sandbox::{SIGNAL_TREE_SCRIPT, StopSignal};
use crate::shell::shell_quote;

/// Where environment directories live, relative to the remote `$HOME`.
pub const ENVS_DIR: &str = ".caduceus/envs";

/// Who owns an environment; written into its lease file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseOwner {
    pub instance: String,
    pub worker: String,
    pub owner: String,
    pub task: String,
}

/// The lease line, with `$exp` standing for the expiry (expanded remotely).
fn lease_line(owner: &LeaseOwner) -> String {
    format!(
        "expires=$exp instance={} worker={} owner={} task={}",
        lease_word(&owner.instance),
        lease_word(&owner.worker),
        lease_word(&owner.owner),
        lease_word(&owner.task)
    )
}

/// Creates the environment directory (atomically: built under a dot name the
/// sweeper ignores, then renamed), writes its lease, and prints `$HOME`.
pub fn create_env(env_id: &str, owner: &LeaseOwner, lease_secs: u64) -> String {
    let id = shell_quote(env_id);
    format!(
        "set -e\nbase=\"$HOME/{ENVS_DIR}\"\nmkdir -p \"$base\"\nchmod 700 \"$HOME/.caduceus\" 2>/dev/null || true\n\
         tmp=\"$base/.new-\"{id}\nrm -rf \"$tmp\"\nmkdir -p \"$tmp/pids\" \"$tmp/tmp\"\n\
         exp=$(( $(date +%s) + {lease_secs} ))\nprintf '%s\\n' \"{line}\" > \"$tmp/lease\"\n\
         mv -T \"$tmp\" \"$base/\"{id}\nprintf '%s\\n' \"$HOME\"\n",
        line = lease_line(owner),
    )
}

/// Starts the environment's remote watchdog, detached (`setsid -f`) so that
/// it outlives the SSH channel and the worker: when the lease is not renewed
/// it kills everything the environment started and removes its directory,
/// with no worker needed. Prints nothing; never fails the script.
pub fn start_watchdog(env_id: &str, lease_secs: u64) -> String {
    let watchdog = format!(
        "{}{}",
        kill_env_function(),
        lease_watchdog("kill_env \"${lease%/lease}\"")
    );
    format!(
        "setsid -f bash -c {watchdog} caduceus-watchdog \"$HOME/{ENVS_DIR}/\"{id}/lease {step} </dev/null >/dev/null 2>&1 || true\n",
        watchdog = shell_quote(&watchdog),
        id = shell_quote(env_id),
        step = watchdog_step(std::time::Duration::from_secs(lease_secs)),
    )
}

/// Pushes the expiry of every listed environment `lease_secs` into the
/// future (environments whose directory is gone are skipped).
pub fn renew_leases(envs: &[(String, LeaseOwner)], lease_secs: u64) -> String {
    let mut script = format!("base=\"$HOME/{ENVS_DIR}\"\nexp=$(( $(date +%s) + {lease_secs} ))\n");
    for (env_id, owner) in envs {
        let id = shell_quote(env_id);
        script.push_str(&format!(
            "if [ -d \"$base/\"{id} ]; then printf '%s\\n' \"{line}\" > \"$base/\"{id}/lease.new && mv -f \"$base/\"{id}/lease.new \"$base/\"{id}/lease; fi\n",
            line = lease_line(owner),
        ));
    }
    script
}

/// The command line that starts `program args…` in the environment: the
/// process records its pid (and start time) in the environment's `pids/`,
/// prints `\x1ePID <pid>\x1e` as its first output, enters `cwd` and execs the
/// program with `env` added, stderr merged into stdout.
///
/// The wrapper runs under bash whatever the account's login shell is; `exec`
/// keeps the pid, so the program leads the session sshd gave it.
pub fn spawn_wrapper(
    env_id: &str,
    cwd: &str,
    env: &[(String, String)],
    program: &str,
    args: &[String],
) -> String {
    let exec = exec_with_env(env, program, args);
    let inner = format!(
        "d=\"$HOME/{ENVS_DIR}/\"{id}\n\
         if [ ! -d \"$d/pids\" ]; then echo \"caduceus: environment directory $d is gone\" >&2; exit 125; fi\n\
         IFS= read -r st < /proc/$$/stat; st=${{st##*) }}; set -- $st; printf '%s\\n' \"${{20}}\" > \"$d/pids/$$\"\n\
         printf '\\036PID %s\\036\\n' \"$$\"\n\
         cd -- {cwd} 2>/dev/null || cd\n\
         {exec} 2>&1\n",
        id = shell_quote(env_id),
        cwd = shell_quote(cwd),
    );
    format!("exec bash -c {} caduceus-spawn", shell_quote(&inner))
}

/// [`SIGNAL_TREE_SCRIPT`] with its arguments set, as one script.
pub fn signal_tree(pid: u32, signal: StopSignal, include_root: bool) -> String {
    format!(
        "set -- {pid} {} {}\n{SIGNAL_TREE_SCRIPT}",
        signal.number(),
        if include_root { 1 } else { 0 }
    )
}

/// A bash function `kill_env DIR` that kills the recorded process trees of an
/// environment and removes the directory. A recorded pid that still runs is
/// only signalled when its start time matches; one that exited is still
/// searched for as a session id, since its orphans (`nohup … &`) stay in the
/// session it led, and Linux does not reuse a pid still in use as a session id.
fn kill_env_function() -> String {
    format!(
        "sigtree={script}\n\
         kill_env() {{\n\
           local d=$1 f pid want st\n\
           for f in \"$d\"/pids/*; do\n\
             [ -f \"$f\" ] || continue\n\
             pid=${{f##*/}}; IFS= read -r want < \"$f\" || want=\n\
             if IFS= read -r st < /proc/$pid/stat 2>/dev/null; then\n\
               st=${{st##*) }}; set -- $st\n\
               [ \"${{20}}\" = \"$want\" ] || continue\n\
             fi\n\
             bash -c \"$sigtree\" caduceus-signal \"$pid\" 9 1\n\
           done\n\
           rm -rf \"$d\"\n\
         }}\n",
        script = shell_quote(SIGNAL_TREE_SCRIPT),
    )
}

/// Kills everything the environment started and removes its directory.
pub fn destroy_env(env_id: &str) -> String {
    format!(
        "{}kill_env \"$HOME/{ENVS_DIR}/\"{}\n",
        kill_env_function(),
        shell_quote(env_id)
    )
}

/// Removes environments whose lease expired, or that this worker instance
/// created but no longer has (`live` lists the ones it keeps), and half-made
/// `.new-*` directories older than a minute. Prints each removed id on its
/// own line.
pub fn sweep(instance: &str, live: &[String]) -> String {
    let live_words: String = live
        .iter()
        .map(|id| format!(" {}", lease_word(id)))
        .collect();
    format!(
        "{kill}base=\"$HOME/{ENVS_DIR}\"\n[ -d \"$base\" ] || exit 0\nnow=$(date +%s)\nmine={mine}\nlive=\"{live_words} \"\n\
         for d in \"$base\"/*/; do\n\
           d=${{d%/}}; id=${{d##*/}}\n\
           [ -d \"$d\" ] || continue\n\
           case \"$live\" in *\" $id \"*) continue;; esac\n\
           exp=0 inst=\n\
           if IFS= read -r line < \"$d/lease\" 2>/dev/null; then\n\
             for kv in $line; do case $kv in expires=*) exp=${{kv#expires=}};; instance=*) inst=${{kv#instance=}};; esac; done\n\
           fi\n\
           case $exp in ''|*[!0-9]*) exp=0;; esac\n\
           if [ \"$inst\" = \"$mine\" ] || [ \"$exp\" -lt \"$now\" ]; then kill_env \"$d\"; printf '%s\\n' \"$id\"; fi\n\
         done\n\
         for d in \"$base\"/.new-*; do\n\
           [ -d \"$d\" ] || continue\n\
           if [ $(( now - $(stat -c %Y \"$d\" 2>/dev/null || echo \"$now\") )) -gt 60 ]; then rm -rf \"$d\"; fi\n\
         done\n\
         exit 0\n",
        kill = kill_env_function(),
        mine = shell_quote(&lease_word(instance)),
    )
}
