//! The command guard that stands in front of the `terminal` tool.
//!
//! [`check_command`] gives one of three verdicts:
//!
//! * **hardline** — on the unconditional blocklist (recursive delete of `/`, a system
//!   directory or the home directory, `mkfs`, `dd`/redirects to raw disks, fork bombs,
//!   `kill -1`, shutdown/reboot, …). Refused in every approval mode.
//! * **approve** — matches one of hermes' dangerous patterns or structural checks
//!   (`rm -r`, `git push --force`, `curl … | sh`, `python -c`, `bash -c`, …). Runs only with
//!   approval.
//! * **allow** — nothing matched.
//!
//! Matching happens after de-obfuscation (ANSI escapes, NUL, fullwidth Unicode, quotes and
//! backslashes inside words, `$IFS`, `$'\x72m'`, literal `$(echo rm)`, shell payloads of
//! `bash -c`/`eval`). See the crate README for the full specification and the deliberate
//! differences from hermes.
//!
//! [`policy`] holds the pure helpers for `approvals.deny` and `command_allowlist`;
//! [`hints`] the terminal tool's foreground-guard, exit-code and env-dump helpers.

mod analysis;
mod computed;
mod dangerous;
mod fnmatch;
mod hardline;
pub mod hints;
mod lexer;
mod normalize;
mod pattern;
pub mod policy;
pub use script::check_script_in;
mod resolve;
mod rm;
mod script;
mod structural;
mod system_paths;
mod verdict;

pub use verdict::{Match, Verdict};

use analysis::Analysis;

/// Checks a command: hardline rules first, then the dangerous patterns, then the
/// structural checks.
///
/// ```
/// use caduceus_guard::{check_command, Verdict};
/// use serde_json::json;
///
/// assert_eq!(check_command("git branch -d feat"), Verdict::Allow);
/// assert_eq!(
///     check_command("git branch -D feat").to_json(),
///     json!({"verdict": "approve", "description": "git branch force delete"})
/// );
/// assert_eq!(
///     check_command("rm${IFS}-rf${IFS}/").description(),
///     Some("recursive delete of root filesystem")
/// );
/// ```
pub fn check_command(command: &str) -> Verdict {
    check_command_in(command, &NO_CONTEXT)
}

/// Where a command will run, as far as the guard's rules care: the home directories to
/// read as `~` besides `/root`, `/home/<user>` and `/Users/<user>`, and the agent's own
/// home directories (`$CADUCEUS_HOME` as an absolute path).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardContext {
    /// The sandbox user's real `$HOME` (`/srv/agent`).
    pub homes: Vec<String>,
    /// caduceus' (or hermes') home directories, read as `$CADUCEUS_HOME/`.
    pub agent_homes: Vec<String>,
}

/// No homes beyond the generic ones.
pub(crate) const NO_CONTEXT: GuardContext = GuardContext {
    homes: Vec::new(),
    agent_homes: Vec::new(),
};

/// [`check_command`] with the homes of `context` folded like `~` and `$CADUCEUS_HOME`:
///
/// ```
/// use caduceus_guard::{check_command, check_command_in, GuardContext};
///
/// let command = "sed -i s/a/b/ /srv/caduceus/config.yaml";
/// assert_eq!(check_command(command).kind(), "allow");
/// let context = GuardContext {
///     agent_homes: vec!["/srv/caduceus".into()],
///     ..GuardContext::default()
/// };
/// assert_eq!(
///     check_command_in(command, &context).description(),
///     Some("in-place edit of Hermes config/env")
/// );
/// ```
pub fn check_command_in(command: &str, context: &GuardContext) -> Verdict {
    if normalize::size_limit_exceeded(command) {
        return Verdict::from(Some(Match::new(normalize::SIZE_LIMIT_DESCRIPTION)));
    }
    let analysis = analysis::analyze(command, context);
    if let Some(description) = hardline::detect(&analysis) {
        return Verdict::Hardline {
            description: description.to_string(),
        };
    }
    Verdict::from(dangerous_in(&analysis))
}

/// The hardline rule the command breaks, if any. A command too large to inspect (see
/// the README's size limit) breaks none: it needs approval.
pub fn detect_hardline(command: &str) -> Option<Match> {
    if normalize::size_limit_exceeded(command) {
        return None;
    }
    hardline::detect(&analysis::analyze(command, &NO_CONTEXT)).map(Match::new)
}

/// The dangerous pattern or structural check the command matches, if any (hardline rules
/// are not consulted; use [`check_command`] for the full verdict).
pub fn detect_dangerous(command: &str) -> Option<Match> {
    if normalize::size_limit_exceeded(command) {
        return Some(Match::new(normalize::SIZE_LIMIT_DESCRIPTION));
    }
    dangerous_in(&analysis::analyze(command, &NO_CONTEXT))
}

/// The de-obfuscated text variants the dangerous patterns and deny rules are matched
/// against: for the command and for every shell payload in it, the normalized text, the
/// same with home paths folded to `~/`, and a copy with shell words written plainly.
pub fn normalized_variants(command: &str) -> Vec<String> {
    analysis::analyze(command, &NO_CONTEXT).variants
}

/// [`check_command_in`] without the structural checks (`bash -c`, heredocs to an
/// interpreter, computed command words): for command text that is not what a shell
/// receives as is, but a script's literal (see `script.rs`).
pub(crate) fn check_patterns_in(command: &str, context: &GuardContext) -> Verdict {
    if normalize::size_limit_exceeded(command) {
        return Verdict::Allow;
    }
    let analysis = analysis::analyze(command, context);
    if let Some(description) = hardline::detect(&analysis) {
        return Verdict::Hardline {
            description: description.to_string(),
        };
    }
    Verdict::from(
        analysis
            .variants
            .iter()
            .find_map(|variant| dangerous::first_match(variant))
            .map(Match::new),
    )
}

fn dangerous_in(analysis: &Analysis) -> Option<Match> {
    analysis
        .variants
        .iter()
        .find_map(|variant| dangerous::first_match(variant))
        .map(Match::new)
        .or_else(|| structural::detect(analysis).map(Match::new))
}

#[cfg(test)]
#[path = "lib_tests.rs"]
mod tests;
