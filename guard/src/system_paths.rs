//! Deletion and overwrite of system paths by tools other than `rm`: `rsync --delete`,
//! `mv`, `truncate`, `cp`/`install`/`ln` (`cp /dev/null /etc/passwd`), and `crontab -r`.
//! The paths are those where an `rm` needs approval or is refused: `/`, the top-level
//! system directories and trees, and the home directory itself.

use crate::resolve::Invocation;
use crate::rm;

pub(crate) const RSYNC_DELETE: &str = "rsync --delete into system path";
pub(crate) const MOVE_SYSTEM_PATH: &str = "move of system path";
pub(crate) const TRUNCATE_SYSTEM_FILE: &str = "truncate of system file";
pub(crate) const OVERWRITE_SYSTEM_PATH: &str = "overwrite of system path";
pub(crate) const CRONTAB_REMOVE: &str = "crontab removal (deletes every cron job)";

/// Device files that are written to as a matter of course.
const HARMLESS_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/stdout",
    "/dev/stderr",
    "/dev/stdin",
    "/dev/tty",
    "/dev/full",
];

pub(crate) fn detect(invocation: &Invocation) -> Option<&'static str> {
    let args = &invocation.args;
    match invocation.name.as_str() {
        "rsync" => {
            let deletes = args
                .iter()
                .any(|a| a.starts_with("--del") || a == "--remove-source-files");
            let destination = operands(args, &[]).last().copied();
            (deletes && destination.is_some_and(is_system_path)).then_some(RSYNC_DELETE)
        }
        "mv" => operands(args, &["-t", "-S", "--suffix"])
            .iter()
            .chain(option_value(args, "-t", "--target-directory").iter())
            .any(|p| is_system_path(p))
            .then_some(MOVE_SYSTEM_PATH),
        "truncate" => operands(args, &["-s", "--size", "-r", "--reference"])
            .iter()
            .any(|p| is_system_path(p))
            .then_some(TRUNCATE_SYSTEM_FILE),
        "cp" | "install" | "ln" => {
            let operands = operands(args, &["-t", "-m", "-o", "-g", "-S", "--suffix", "--mode"]);
            let destination = option_value(args, "-t", "--target-directory").or_else(|| {
                (operands.len() > 1)
                    .then(|| operands.last().copied())
                    .flatten()
            });
            let from_null = invocation.name == "cp" && operands.first() == Some(&"/dev/null");
            (destination.is_some_and(is_system_path)
                || (from_null && operands.iter().skip(1).any(|p| is_system_path(p))))
            .then_some(OVERWRITE_SYSTEM_PATH)
        }
        "crontab" => args
            .iter()
            .any(|a| {
                a.len() > 1
                    && a.starts_with('-')
                    && !a.starts_with("--")
                    && a.contains('r')
                    && !a.contains('i')
            })
            .then_some(CRONTAB_REMOVE),
        _ => None,
    }
}

/// Arguments that are not options nor the values of `with_value` options.
fn operands<'a>(args: &'a [String], with_value: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut options_done = false;
    let mut skip_next = false;
    for arg in args {
        if skip_next {
            skip_next = false;
            continue;
        }
        if options_done || !arg.starts_with('-') || arg == "-" {
            out.push(arg.as_str());
        } else if arg == "--" {
            options_done = true;
        } else if with_value.contains(&arg.as_str()) {
            skip_next = true;
        }
    }
    out
}

/// The value of `-t DIR`, `-tDIR`, `--target-directory=DIR` or `--target-directory DIR`.
fn option_value<'a>(args: &'a [String], short: &str, long: &str) -> Option<&'a str> {
    args.iter().enumerate().find_map(|(i, arg)| {
        if arg == short || arg == long {
            args.get(i + 1).map(String::as_str)
        } else if let Some(value) = arg.strip_prefix(long).and_then(|v| v.strip_prefix('=')) {
            Some(value)
        } else {
            arg.strip_prefix(short)
                .filter(|v| !v.is_empty() && !short.starts_with("--"))
        }
    })
}

/// `/`, a top-level system directory or anything in a system tree, or the home directory.
fn is_system_path(path: &str) -> bool {
    !HARMLESS_DEVICES.contains(&path) && !path.starts_with("/dev/fd/") && rm::is_system_path(path)
}
