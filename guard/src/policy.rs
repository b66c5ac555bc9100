//! Pure helpers for the user's approval configuration. The coordinator owns the state
//! (config, session approvals); these functions only answer questions about a command.

use std::sync::LazyLock;

use crate::analysis;
use crate::fnmatch::fnmatch;
use crate::pattern::Pattern;

/// Description returned by [`sudo_stdin_guard`].
pub const SUDO_STDIN_DESCRIPTION: &str = "sudo password guessing via stdin (sudo -S)";

/// The first `approvals.deny` glob that matches the command, as written in the config
/// (trimmed).
///
/// Globs are `fnmatch`-style (`*`, `?`, `[seq]`, `[!seq]`), matched case-insensitively
/// against the whole command and against every de-obfuscated variant the dangerous-pattern
/// detector reads, so `r\m`, `git st""atus` or `bash -c 'git push'` cannot sidestep a rule
/// the plain spelling would hit. Blank entries are ignored.
pub fn deny_rule_match<'p>(command: &str, patterns: &'p [String]) -> Option<&'p str> {
    let globs: Vec<(&str, String)> = patterns
        .iter()
        .map(|pattern| pattern.trim())
        .filter(|pattern| !pattern.is_empty())
        .map(|pattern| (pattern, pattern.to_lowercase()))
        .collect();
    if globs.is_empty() {
        return None;
    }
    let variants = analysis::analyze(command, &crate::NO_CONTEXT).variants;
    std::iter::once(command)
        .chain(variants.iter().map(String::as_str))
        .find_map(|variant| {
            let candidate = variant.to_lowercase();
            let candidate = candidate.trim();
            globs
                .iter()
                .find(|(_, lowered)| fnmatch(candidate, lowered))
                .map(|(original, _)| *original)
        })
}

/// Shell operators that make a command too compound for the allowlist shortcut.
static ALLOWLIST_OPERATOR: LazyLock<Pattern> =
    LazyLock::new(|| Pattern::new(r"(?:\n|&&|\|\||[;&|<>`]|\$\()"));

/// Whether `command_allowlist` permits the command outright.
///
/// An entry matches when it equals the trimmed command, or — if it contains `*`, `?` or
/// `[` — when it matches as a case-sensitive `fnmatch` glob (`podman *`). Commands with any
/// of the operators newline, `&&`, `||`, `;`, `&`, `|`, `<`, `>`, backtick or `$(` never
/// match, so `podman ps; rm -rf ~` cannot ride on `podman *`.
///
/// Entries that are approval keys (descriptions such as `recursive delete`, stored by
/// "always" answers) are matched by the coordinator against [`crate::Match::pattern_key`].
pub fn allowlisted(command: &str, allowlist: &[String]) -> bool {
    let command = command.trim();
    if command.is_empty() || ALLOWLIST_OPERATOR.is_match(command) {
        return false;
    }
    allowlist.iter().map(|entry| entry.trim()).any(|entry| {
        !entry.is_empty()
            && (entry == command || (entry.contains(['*', '?', '[']) && fnmatch(command, entry)))
    })
}

/// hermes' sudo-stdin guard: `sudo -S` (password on standard input) is how a model guesses
/// passwords. When no sudo password is configured the coordinator refuses such commands
/// outright with this description. Only `-S` / `--stdin` count — not `-s` (a shell).
pub fn sudo_stdin_guard(command: &str) -> Option<&'static str> {
    analysis::analyze(command, &crate::NO_CONTEXT)
        .sources
        .iter()
        .flat_map(|source| &source.invocations)
        .any(|invocation| invocation.sudo_stdin)
        .then_some(SUDO_STDIN_DESCRIPTION)
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
