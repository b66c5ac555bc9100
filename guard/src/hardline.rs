//! The hardline floor: commands refused whatever the approval mode.
//!
//! Only what the shell would actually execute counts — a program at command position
//! (after `;`, `&&`, `||`, `|`, newlines, `(`, `{`, `$(`, backticks, reserved words and
//! wrappers such as `sudo`, `env`, `exec`, `nohup`, `setsid`, `time`, `timeout`, `xargs`),
//! in the top-level command and in every shell payload (`bash -c '…'`, `eval …`,
//! here-documents fed to a shell). Quoted prose such as `echo reboot` or
//! `git commit -m "rm -rf /"` never reaches this floor.

use std::sync::LazyLock;

use crate::analysis::{Analysis, Source};
use crate::lexer::Redirect;
use crate::normalize::PARSER_LIMIT_DESCRIPTION;
use crate::pattern::Pattern;
use crate::resolve::Invocation;
use crate::rm;

pub(crate) const FORMAT_FILESYSTEM: &str = "format filesystem (mkfs)";
pub(crate) const DD_RAW_DEVICE: &str = "dd to raw block device";
pub(crate) const REDIRECT_RAW_DEVICE: &str = "redirect to raw block device";
pub(crate) const FORK_BOMB: &str = "fork bomb";
pub(crate) const KILL_ALL: &str = "kill all processes";
pub(crate) const SHUTDOWN: &str = "system shutdown/reboot";
pub(crate) const INIT: &str = "init 0/6 (shutdown/reboot)";
pub(crate) const SYSTEMCTL: &str = "systemctl poweroff/reboot";
pub(crate) const TELINIT: &str = "telinit 0/6 (shutdown/reboot)";

/// Whole-disk and partition device nodes (Linux and macOS).
static RAW_BLOCK_DEVICE: LazyLock<Pattern> = LazyLock::new(|| {
    Pattern::new(r"(?i)^/dev/(?:(?:sd|nvme|hd|mmcblk|vd|xvd)[a-z0-9]*|r?disk[0-9][a-z0-9]*)$")
});

/// The classic `:(){ :|:& };:`.
static CLASSIC_FORK_BOMB: LazyLock<Pattern> =
    LazyLock::new(|| Pattern::new(r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:"));

/// A function definition: `name() { body }` or `function name { body }`.
static FUNCTION_DEFINITION: LazyLock<Pattern> = LazyLock::new(|| {
    Pattern::new(concat!(
        r"(?:^|[\s;&|(){}])",
        r"(?:function\s+([A-Za-z_:.][\w:.-]*)\s*(?:\(\s*\))?|([A-Za-z_:.][\w:.-]*)\s*\(\s*\))",
        r"\s*\{([^{}]*)\}",
    ))
});

/// The first hardline rule `analysis` breaks. Shell text the analysis had to leave
/// uninspected counts as a parser limit: the floor must not be skippable by nesting.
pub(crate) fn detect(analysis: &Analysis) -> Option<&'static str> {
    analysis
        .sources
        .iter()
        .find_map(detect_in_source)
        .or_else(|| analysis.truncated.then_some(PARSER_LIMIT_DESCRIPTION))
}

fn detect_in_source(source: &Source) -> Option<&'static str> {
    let mut cwd: Option<String> = None;
    source
        .invocations
        .iter()
        .find_map(|invocation| {
            let found = check_invocation(invocation, cwd.as_deref());
            track_directory_change(invocation, &mut cwd);
            found
        })
        .or_else(|| {
            source
                .parsed
                .commands
                .iter()
                .flat_map(|command| &command.redirects)
                .find_map(check_redirect)
        })
        .or_else(|| is_fork_bomb(&source.parsed.code_text).then_some(FORK_BOMB))
}

/// Follows `cd`/`pushd` so that `cd / && rm -rf *` is seen as deleting `/*`. Unknown
/// targets (`cd -`, `cd "$DIR"` relative to an unknown directory) forget the directory.
fn track_directory_change(invocation: &Invocation, cwd: &mut Option<String>) {
    match invocation.name.as_str() {
        "cd" | "pushd" => {
            let target = invocation
                .args
                .iter()
                .find(|arg| !arg.starts_with('-') || arg.as_str() == "-")
                .map_or("~", String::as_str);
            *cwd = if target == "-" {
                None
            } else if is_anchored(target) {
                Some(target.to_string())
            } else {
                cwd.as_ref().map(|dir| format!("{dir}/{target}"))
            };
        }
        "popd" => *cwd = None,
        _ => {}
    }
}

/// An absolute path, or one anchored at the home directory.
fn is_anchored(path: &str) -> bool {
    path.starts_with('/')
        || path.starts_with('~')
        || path.starts_with("$HOME")
        || path.starts_with("${HOME}")
}

fn check_invocation(invocation: &Invocation, cwd: Option<&str>) -> Option<&'static str> {
    let args = &invocation.args;
    match invocation.name.as_str() {
        "rm" => rm_operands(args).find_map(|operand| match cwd {
            Some(dir) if !is_anchored(operand) => rm::protected_target(&format!("{dir}/{operand}")),
            _ => rm::protected_target(operand),
        }),
        "mkfs" => Some(FORMAT_FILESYSTEM),
        name if name.starts_with("mkfs.") => Some(FORMAT_FILESYSTEM),
        "dd" => args
            .iter()
            .filter_map(|arg| arg.strip_prefix("of="))
            .any(is_raw_block_device)
            .then_some(DD_RAW_DEVICE),
        "kill" => kills_every_process(args).then_some(KILL_ALL),
        "shutdown" | "reboot" | "halt" | "poweroff" => Some(SHUTDOWN),
        "init" => runlevel_halts(args).then_some(INIT),
        "telinit" => runlevel_halts(args).then_some(TELINIT),
        "systemctl" => systemctl_halts(args).then_some(SYSTEMCTL),
        _ => None,
    }
}

/// `rm`'s operands: words not starting with `-`, and everything after `--`.
fn rm_operands(args: &[String]) -> impl Iterator<Item = &str> {
    let mut options_done = false;
    args.iter().filter_map(move |arg| {
        if !options_done && arg == "--" {
            options_done = true;
            return None;
        }
        (options_done || !arg.starts_with('-') || arg == "-").then_some(arg.as_str())
    })
}

fn check_redirect(redirect: &Redirect) -> Option<&'static str> {
    let target = redirect.target.as_ref()?;
    (redirect.writes() && is_raw_block_device(&target.value)).then_some(REDIRECT_RAW_DEVICE)
}

fn is_raw_block_device(path: &str) -> bool {
    path.starts_with("/dev/") && RAW_BLOCK_DEVICE.is_match(path)
}

/// `kill … -1`: PID -1 means every process the caller may signal. A leading `-1` followed
/// by PIDs is a signal number (`kill -1 1234` sends SIGHUP) and is not this.
fn kills_every_process(args: &[String]) -> bool {
    let mut i = 0;
    match args.first().map(String::as_str) {
        None => return false,
        Some("-l" | "-L" | "--list" | "--table") => return false,
        Some("-s" | "-n" | "--signal") => i = 2,
        Some("--") => i = 1,
        Some(first) if first.starts_with("--signal=") => i = 1,
        Some(first) if first.starts_with('-') && args.len() > 1 => i = 1,
        Some(_) => {}
    }
    if args.get(i).is_some_and(|arg| arg == "--") {
        i += 1;
    }
    args.iter().skip(i).any(|arg| arg == "-1")
}

fn runlevel_halts(args: &[String]) -> bool {
    args.first()
        .is_some_and(|level| level == "0" || level == "6")
}

const SYSTEMCTL_OPTIONS_WITH_ARG: &[&str] = &[
    "-H",
    "--host",
    "-M",
    "--machine",
    "-t",
    "--type",
    "-p",
    "--property",
    "-s",
    "--signal",
    "-n",
    "--lines",
    "-o",
    "--output",
    "--root",
    "--job-mode",
    "--kill-whom",
    "--state",
    "--what",
    "--boot-loader-entry",
    "--boot-loader-menu",
    "--reboot-argument",
];

fn systemctl_halts(args: &[String]) -> bool {
    let mut i = 0;
    while i < args.len() && args[i].starts_with('-') {
        i += if SYSTEMCTL_OPTIONS_WITH_ARG.contains(&args[i].as_str()) {
            2
        } else {
            1
        };
    }
    let Some(verb) = args.get(i).map(|verb| verb.to_ascii_lowercase()) else {
        return false;
    };
    match verb.as_str() {
        "poweroff" | "reboot" | "halt" | "kexec" | "soft-reboot" => true,
        "start" | "isolate" => args[i + 1..].iter().any(|unit| {
            matches!(
                unit.to_ascii_lowercase().as_str(),
                "poweroff.target" | "reboot.target" | "halt.target" | "kexec.target"
            )
        }),
        _ => false,
    }
}

/// The classic fork bomb, or any function that pipes itself into itself (`f(){ f|f& };f`).
pub(crate) fn is_fork_bomb(code: &str) -> bool {
    if !code.contains('(') && !code.contains("function") {
        return false;
    }
    if CLASSIC_FORK_BOMB.is_match(code) {
        return true;
    }
    let Some(regex) = FUNCTION_DEFINITION.regex() else {
        return true;
    };
    regex.captures_iter(code).any(|caps| {
        let name = caps
            .get(1)
            .or_else(|| caps.get(2))
            .map_or("", |m| m.as_str());
        let body = caps.get(3).map_or("", |m| m.as_str());
        !name.is_empty() && pipes_into_itself(name, body)
    })
}

fn pipes_into_itself(name: &str, body: &str) -> bool {
    let is_word_char = |c: char| c.is_ascii_alphanumeric() || "_:.-".contains(c);
    body.match_indices('|').any(|(at, _)| {
        let left = body[..at].trim_end();
        let right = body[at + 1..].trim_start();
        let left_is_name = left
            .strip_suffix(name)
            .is_some_and(|before| !before.ends_with(is_word_char));
        let right_is_name = right
            .strip_prefix(name)
            .is_some_and(|after| !after.starts_with(is_word_char));
        left_is_name && right_is_name
    })
}

#[cfg(test)]
pub(crate) fn all_patterns_compile() -> bool {
    [
        &*RAW_BLOCK_DEVICE,
        &*CLASSIC_FORK_BOMB,
        &*FUNCTION_DEFINITION,
    ]
    .iter()
    .all(|pattern| pattern.compiled())
}
