//! Hints the terminal tool derives from a command (pure functions, no state).

use std::sync::LazyLock;

use crate::pattern::Pattern;

/// Guidance when a foreground command wraps itself in `nohup`/`disown`/`setsid`.
pub const BACKGROUND_WRAPPER_GUIDANCE: &str = "Foreground command uses shell-level background wrappers (nohup/disown/setsid). Use terminal(background=true) so caduceus can track the process, then run readiness checks and tests in separate commands.";
/// Guidance when a foreground command backgrounds itself with `&`.
pub const AMPERSAND_GUIDANCE: &str = "Foreground command uses '&' backgrounding. Use terminal(background=true) for long-lived processes, then run health checks and tests in follow-up terminal calls.";
/// Guidance when a foreground command starts a server or watcher.
pub const LONG_LIVED_GUIDANCE: &str = "This foreground command appears to start a long-lived server/watch process. Run it with background=true, verify readiness (health endpoint/log signal), then execute tests in a separate command.";

static SINGLE_QUOTED: LazyLock<Pattern> = LazyLock::new(|| Pattern::new(r"'[^']*'"));
static DOUBLE_QUOTED: LazyLock<Pattern> = LazyLock::new(|| Pattern::new(r#""(?:[^"\\]|\\.)*""#));
static BACKTICKED: LazyLock<Pattern> = LazyLock::new(|| Pattern::new(r"`[^`]*`"));

static BACKGROUND_WRAPPER: LazyLock<Pattern> = LazyLock::new(|| {
    Pattern::new(r"(?im)(?:^\s*|[;&|]\s*|&&\s*|\|\|\s*|\$\(\s*)(?:nohup|disown|setsid)\b")
});
static INLINE_AMPERSAND: LazyLock<Pattern> = LazyLock::new(|| Pattern::new(r"\s&\s"));
static TRAILING_AMPERSAND: LazyLock<Pattern> = LazyLock::new(|| Pattern::new(r"\s&\s*(?:#.*)?$"));

static LONG_LIVED: LazyLock<[Pattern; 8]> = LazyLock::new(|| {
    [
        Pattern::new(r"(?i)\b(?:npm|pnpm|yarn|bun)\s+(?:run\s+)?(?:dev|start|serve|watch)\b"),
        Pattern::new(r"(?i)\bdocker\s+compose\s+up\b"),
        Pattern::new(r"(?i)\bnext\s+dev\b"),
        Pattern::new(r"(?i)\bvite(?:\s|$)"),
        Pattern::new(r"(?i)\bnodemon\b"),
        Pattern::new(r"(?i)\buvicorn\b"),
        Pattern::new(r"(?i)\bgunicorn\b"),
        Pattern::new(r"(?i)\bpython(?:3)?\s+-m\s+http\.server\b"),
    ]
});

/// Quoted text replaced by empty quotes, so keywords inside strings (`git commit -m
/// "… setsid …"`, `python3 -c "os.setsid()"`) do not count.
fn strip_quoted_text(command: &str) -> String {
    let mut text = command.to_string();
    for (pattern, empty) in [
        (&*SINGLE_QUOTED, "''"),
        (&*DOUBLE_QUOTED, "\"\""),
        (&*BACKTICKED, "``"),
    ] {
        if let Some(regex) = pattern.regex() {
            text = regex.replace_all(&text, empty).into_owned();
        }
    }
    text
}

/// `--help`, `--version`, or a trailing `-h`/`-v`: informational, never blocked.
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

/// hermes' foreground guard: the guidance to return (as the tool error) when a foreground
/// `terminal` command would background itself or start a server/watcher, else `None`.
///
/// Fires on `nohup`/`disown`/`setsid` at a command start, on ` & ` or a trailing `&`, and on
/// `npm|pnpm|yarn|bun [run] dev|start|serve|watch`, `docker compose up`, `next dev`, `vite`,
/// `nodemon`, `uvicorn`, `gunicorn`, `python -m http.server`. Quoted text is ignored;
/// `--help`/`-h`/`--version`/`-v` invocations are never flagged.
pub fn long_lived_foreground(command: &str) -> Option<&'static str> {
    if is_help_or_version(command) {
        return None;
    }
    let unquoted = strip_quoted_text(command);
    if BACKGROUND_WRAPPER.is_match(&unquoted) {
        return Some(BACKGROUND_WRAPPER_GUIDANCE);
    }
    if INLINE_AMPERSAND.is_match(&unquoted) || TRAILING_AMPERSAND.is_match(&unquoted) {
        return Some(AMPERSAND_GUIDANCE);
    }
    LONG_LIVED
        .iter()
        .any(|pattern| pattern.is_match(&unquoted))
        .then_some(LONG_LIVED_GUIDANCE)
}

static SEGMENT_SEPARATOR: LazyLock<Pattern> =
    LazyLock::new(|| Pattern::new(r"\s*(?:\|\||&&|[|;])\s*"));

/// What a non-zero exit code means when it is not an error, judged by the last command of
/// a pipeline or list (which determines the exit code): `grep`/`rg`/`ag`/`ack` 1 found
/// nothing, `diff` 1 found differences, `find` 1 skipped unreadable directories, `test` 1
/// was false, `curl` 6/7/22/28 are network outcomes, `git` 1 is often normal.
pub fn exit_code_meaning(command: &str, exit_code: i32) -> Option<&'static str> {
    if exit_code == 0 {
        return None;
    }
    let last_segment = match SEGMENT_SEPARATOR.regex() {
        Some(regex) => regex.split(command).last().unwrap_or(command),
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
