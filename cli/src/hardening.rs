//! What the binary does before anything else so that its sandboxes cannot
//! read its secrets (see README "Secrets and sandboxes").
//!
//! - It makes itself non-dumpable: `/proc/<pid>/environ`, `mem`, `maps`,
//!   `fd/` and ptrace are then closed to every process without
//!   `CAP_SYS_PTRACE` — including sandbox commands of the same user. (Root
//!   has that capability, which is why a root worker runs its local sandboxes
//!   as another user.) `/proc/<pid>/cmdline` stays world-readable whatever
//!   the flag says, so a token given with `--token` is visible in `ps`: the
//!   binary warns, and re-executes itself with the token moved from its
//!   arguments into `CADUCEUS_TOKEN` (the window is the few milliseconds
//!   before that, long before any sandbox exists).
//! - It withholds every secret-named variable from its own environment
//!   (`caduceus_common::process_env`), so that no program it starts inherits
//!   one by accident.

use std::ffi::OsString;

use clap::ArgMatches;
use clap::parser::ValueSource;

/// What [`protect_process`] did, to be logged once logging is up.
pub(crate) struct Protection {
    pub dumpable_error: Option<String>,
    pub withheld: Vec<OsString>,
}

/// Makes the process non-dumpable and withholds its secret variables. Must
/// run before any thread is started (see [`remove_vars`]).
pub(crate) fn protect_process() -> Protection {
    #[cfg(target_os = "linux")]
    let dumpable_error = nix::sys::prctl::set_dumpable(false)
        .err()
        .map(|errno| errno.to_string());
    #[cfg(not(target_os = "linux"))]
    let dumpable_error = None;
    let withheld = caduceus_common::process_env::withhold();
    remove_vars(&withheld);
    Protection {
        dumpable_error,
        withheld,
    }
}

/// Removes `names` from the process environment.
///
/// Called from `main` after argument parsing and before the tokio runtime,
/// logging or anything else that could start a thread: at that point this is
/// the only thread, so nothing can read the environment concurrently, which
/// is the whole safety condition of `remove_var`.
#[allow(unsafe_code)]
fn remove_vars(names: &[OsString]) {
    for name in names {
        // SAFETY: single-threaded (see above); no other code holds a
        // reference into the environment block while this runs.
        unsafe { std::env::remove_var(name) };
    }
}

/// The `--token` given on the command line of the (nested) subcommand, as
/// opposed to the environment or the config file.
pub(crate) fn token_on_command_line(matches: &ArgMatches) -> Option<String> {
    let mut current = matches;
    loop {
        if current.ids().any(|id| id.as_str() == "token")
            && current.value_source("token") == Some(ValueSource::CommandLine)
        {
            return current.get_one::<String>("token").cloned();
        }
        current = current.subcommand()?.1;
    }
}

/// The arguments without `--token VALUE` / `--token=VALUE`; `None` when
/// something token-like would remain.
pub(crate) fn args_without_token(args: &[OsString]) -> Option<Vec<OsString>> {
    let mut kept = Vec::new();
    let mut skip_value = false;
    for arg in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        let bytes = arg.as_encoded_bytes();
        if bytes == b"--token" {
            skip_value = true;
        } else if !bytes.starts_with(b"--token=") {
            kept.push(arg.clone());
        }
    }
    let left = kept
        .iter()
        .any(|a| a.as_encoded_bytes().starts_with(b"--token"));
    (!left).then_some(kept)
}

/// Warns about a token given as `--token`, and re-executes this program
/// with it in `CADUCEUS_TOKEN` instead, so that `ps` and
/// `/proc/<pid>/cmdline` stop showing it. Returns only when re-executing is
/// not possible (then the token stays visible).
pub(crate) fn hide_token(token: &str) {
    use std::os::unix::process::CommandExt;
    let mut args = std::env::args_os();
    let program = args.next().unwrap_or_else(|| OsString::from("caduceus"));
    let args: Vec<OsString> = args.collect();
    let Some(kept) = args_without_token(&args) else {
        tracing::warn!(
            "a token given with --token is visible to every process on this host, sandboxes included (ps, /proc/<pid>/cmdline); set CADUCEUS_TOKEN instead"
        );
        return;
    };
    tracing::warn!(
        "a token given with --token is visible to every process on this host (ps, /proc/<pid>/cmdline) while it is in the arguments; caduceus moves it into CADUCEUS_TOKEN now, but set CADUCEUS_TOKEN yourself instead"
    );
    let err = std::process::Command::new("/proc/self/exe")
        .arg0(&program)
        .args(kept)
        .env("CADUCEUS_TOKEN", token)
        // The flag outranked a token file named in the environment; the
        // variable now carries the flag's token, so the file must not clash.
        .env_remove("CADUCEUS_TOKEN_FILE")
        .exec();
    tracing::warn!("cannot re-execute without --token ({err}): the token stays visible in ps");
}

/// Logs what [`protect_process`] did.
pub(crate) fn report(protection: &Protection) {
    if let Some(err) = &protection.dumpable_error {
        tracing::warn!(
            "cannot make this process non-dumpable ({err}): its sandboxes may read its environment through /proc"
        );
    }
    if !protection.withheld.is_empty() {
        let names: Vec<String> = protection
            .withheld
            .iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        tracing::debug!(names = %names.join(","), "secret variables withheld from the process environment");
    }
}

#[cfg(test)]
#[path = "hardening_tests.rs"]
mod tests;
