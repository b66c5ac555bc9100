//! Hints the terminal tool derives from a command: hermes' foreground guard
//! (`_foreground_background_guidance`) and exit-code meanings
//! (`_interpret_exit_code`).
//!
//! The same API is being added to `caduceus_guard::hints` (branch `guard`);
//! once it is on main this module becomes a re-export of it.

use std::sync::LazyLock;

use regex::Regex;

/// Guidance when a foreground command wraps itself in `nohup`/`disown`/`setsid`.
pub const BACKGROUND_WRAPPER_GUIDANCE: &str = "Foreground command uses shell-level background wrappers (nohup/disown/setsid). Use terminal(background=true) so caduceus can track the process, then run readiness checks and tests in separate commands.";
/// Guidance when a foreground command backgrounds itself with `&`.
pub const AMPERSAND_GUIDANCE: &str = "Foreground command uses '&' backgrounding. Use terminal(background=true) for long-lived processes, then run health checks and tests in follow-up terminal calls.";
/// Guidance when a foreground command starts a server or watcher.
pub const LONG_LIVED_GUIDANCE: &str = "This foreground command appears to start a long-lived server/watch process. Run it with background=true, verify readiness (health endpoint/log signal), then execute tests in a separate command.";

fn regex(pattern: &str) -> Option<Regex> {
    match Regex::new(pattern) {
        Ok(re) => Some(re),
        Err(err) => {
            tracing::error!("bad built-in pattern {pattern}: {err}");
            None
        }
    }
}

static SINGLE_QUOTED: LazyLock<Option<Regex>> = LazyLock::new(|| regex(r"'[^']*'"));
static DOUBLE_QUOTED: LazyLock<Option<Regex>> = LazyLock::new(|| regex(r#""(?:[^"\\]|\\.)*""#));
static BACKTICKED: LazyLock<Option<Regex>> = LazyLock::new(|| regex(r"`[^`]*`"));
static BACKGROUND_WRAPPER: LazyLock<Option<Regex>> =
    LazyLock::new(|| regex(r"(?im)(?:^|[;&|]\s*|&&\s*|\|\|\s*|\$\(\s*)(?:nohup|disown|setsid)\b"));
static INLINE_AMPERSAND: LazyLock<Option<Regex>> = LazyLock::new(|| regex(r"\s&\s"));
static TRAILING_AMPERSAND: LazyLock<Option<Regex>> = LazyLock::new(|| regex(r"\s&\s*(?:#.*)?$"));
static LONG_LIVED: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    [
        r"(?i)\b(?:npm|pnpm|yarn|bun)\s+(?:run\s+)?(?:dev|start|serve|watch)\b",
        r"(?i)\bdocker\s+compose\s+up\b",
        r"(?i)\bnext\s+dev\b",
        r"(?i)\bvite(?:\s|$)",
        r"(?i)\bnodemon\b",
        r"(?i)\buvicorn\b",
        r"(?i)\bgunicorn\b",
        r"(?i)\bpython(?:3)?\s+-m\s+http\.server\b",
    ]
    .iter()
    .filter_map(|p| regex(p))
    .collect()
});
static SEGMENT_SEPARATOR: LazyLock<Option<Regex>> =
    LazyLock::new(|| regex(r"\s*(?:\|\||&&|[|;])\s*"));

fn is_match(re: &LazyLock<Option<Regex>>, text: &str) -> bool {
    re.as_ref().is_some_and(|re| re.is_match(text))
}

/// Quoted text replaced by empty quotes, so keywords inside strings do not count.
fn strip_quoted_text(command: &str) -> String {
    let mut text = command.to_owned();
    for (re, empty) in [
        (&SINGLE_QUOTED, "''"),
        (&DOUBLE_QUOTED, "\"\""),
        (&BACKTICKED, "``"),
    ] {
        if let Some(re) = re.as_ref() {
            text = re.replace_all(&text, empty).into_owned();
        }
    }
    text
}

fn is_help_or_version(command: &str) -> bool {
    let normalized = command
        .to_lowercase()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    normalized.contains(" --help")
        || normalized.ends_with(" -h")
        || normalized.contains(" --version")
        || normalized.ends_with(" -v")
}

/// hermes' foreground guard: the guidance to return (as the tool error) when a
/// foreground command would background itself or start a server/watcher.
pub fn long_lived_foreground(command: &str) -> Option<&'static str> {
    if is_help_or_version(command) {
        return None;
    }
    let unquoted = strip_quoted_text(command);
    if is_match(&BACKGROUND_WRAPPER, &unquoted) {
        return Some(BACKGROUND_WRAPPER_GUIDANCE);
    }
    if is_match(&INLINE_AMPERSAND, &unquoted) || is_match(&TRAILING_AMPERSAND, &unquoted) {
        return Some(AMPERSAND_GUIDANCE);
    }
    LONG_LIVED
        .iter()
        .any(|re| re.is_match(&unquoted))
        .then_some(LONG_LIVED_GUIDANCE)
}

/// What a non-zero exit code means when it is not an error, judged by the
/// last command of a pipeline or list.
pub fn exit_code_meaning(command: &str, exit_code: i32) -> Option<&'static str> {
    if exit_code == 0 {
        return None;
    }
    let last_segment = match SEGMENT_SEPARATOR.as_ref() {
        Some(re) => re.split(command).last().unwrap_or(command),
        None => command,
    }
    .trim();
    let word = last_segment
        .split_whitespace()
        .find(|word| !word.contains('=') || word.starts_with('-'))?;
    let base = word.rsplit('/').next().unwrap_or(word);
    const NO_MATCHES: &str = "No matches found (not an error)";
    const FILES_DIFFER: &str = "Files differ (expected, not an error)";
    const CONDITION_FALSE: &str = "Condition evaluated to false (expected, not an error)";
    match (base, exit_code) {
        ("grep" | "egrep" | "fgrep" | "rg" | "ag" | "ack", 1) => Some(NO_MATCHES),
        ("diff" | "colordiff", 1) => Some(FILES_DIFFER),
        ("find", 1) => {
            Some("Some directories were inaccessible (partial results may still be valid)")
        }
        ("test" | "[", 1) => Some(CONDITION_FALSE),
        ("curl", 6) => Some("Could not resolve host"),
        ("curl", 7) => Some("Failed to connect to host"),
        ("curl", 22) => Some("HTTP response code indicated error (e.g. 404, 500)"),
        ("curl", 28) => Some("Operation timed out"),
        ("git", 1) => {
            Some("Non-zero exit (often normal — e.g. 'git diff' returns 1 when files differ)")
        }
        _ => None,
    }
}

#[cfg(test)]
#[path = "hints_tests.rs"]
mod tests;
