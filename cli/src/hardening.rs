//! What the binary does before anything else so that its sandboxes cannot
//! read its secrets (see README "Secrets and sandboxes").
//!
//! - It makes itself non-dumpable: `/proc/<pid>/environ`, `mem`, `maps`,
//!   `fd/` and ptrace are then closed to every process without
//!   `CAP_SYS_PTRACE` — including sandbox commands of the same user. (Root
//!   has that capability, which is why a root worker runs its local sandboxes
//!   as another user.) `/proc/<pid>/cmdline` stays world-readable whatever
//!   the flag says, so a token given with `--token` is visible in `ps`; the
//!   binary warns about that.
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

/// Whether `--token` was given on the command line of the (nested)
/// subcommand, as opposed to the environment or the config file.
pub(crate) fn token_on_command_line(matches: &ArgMatches) -> bool {
    let mut current = matches;
    loop {
        if current.ids().any(|id| id.as_str() == "token")
            && current.value_source("token") == Some(ValueSource::CommandLine)
        {
            return true;
        }
        match current.subcommand() {
            Some((_, sub)) => current = sub,
            None => return false,
        }
    }
}

/// Logs what [`protect_process`] did and the warnings about how the token
/// was given.
pub(crate) fn report(protection: &Protection, token_on_command_line: bool) {
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
    if token_on_command_line {
        tracing::warn!(
            "a token given with --token is visible to every process on this host, sandboxes included (ps, /proc/<pid>/cmdline); set CADUCEUS_TOKEN instead"
        );
    }
}
