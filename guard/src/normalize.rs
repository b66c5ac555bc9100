//! Text normalization applied before any matching.
//!
//! Two stages, mirroring hermes' `_normalize_command_for_detection`:
//!
//! * [`prepare`] turns what the model sent into what the shell would read: ANSI escape
//!   sequences and NUL bytes removed, Unicode NFKC (fullwidth `ｒｍ` → `rm`), backslash-newline
//!   continuations joined, `$IFS`/`${IFS…}` replaced by a space. The shell lexer works on
//!   this text, so it still sees the quotes and backslashes.
//! * [`detection_text`] is the flat text the dangerous-pattern regexes read: additionally
//!   `$'…'` strings decoded, backslash escapes removed (`r\m` → `rm`), empty quotes `''`/`""`
//!   dropped (`r''m` → `rm`).
//!
//! [`fold_home`] rewrites absolute home paths (`/root/…`, `/home/<user>/…`,
//! `/Users/<user>/…`) to `~/…` so the sensitive-file rules see one spelling.

use std::borrow::Cow;
use std::sync::LazyLock;

use unicode_normalization::UnicodeNormalization;

use crate::lexer::decode_ansi_c;
use crate::pattern::Pattern;

/// Description used when a command is too large or too flat to inspect.
pub(crate) const PARSER_LIMIT_DESCRIPTION: &str = "command parser limit exceeded";

const MAX_COMMAND_CHARS: usize = 128_000;
const MAX_SEPARATOR_FREE_CHARS: usize = 4_096;
const MAX_SEGMENTS: usize = 25_000;

/// hermes' parser limits: more than 128,000 characters, more than 4,096 characters with
/// no `;`, `&`, `|` or newline, or 25,000 or more separators. Such a command cannot be
/// inspected, so it is refused rather than run unseen.
pub(crate) fn parser_limit_exceeded(command: &str) -> bool {
    // A string of at most 4,096 bytes has at most 4,096 characters and separators.
    if command.len() <= MAX_SEPARATOR_FREE_CHARS {
        return false;
    }
    let chars = command.chars().count();
    if chars > MAX_COMMAND_CHARS {
        return true;
    }
    let separators = command
        .bytes()
        .filter(|b| matches!(b, b';' | b'&' | b'|' | b'\n'))
        .count();
    (chars > MAX_SEPARATOR_FREE_CHARS && separators == 0) || separators >= MAX_SEGMENTS
}

/// ECMA-48 escape sequences: CSI, OSC, DCS/SOS/PM/APC, nF, Fp/Fe/Fs, and 8-bit C1 forms.
static ANSI_ESCAPE: LazyLock<Pattern> = LazyLock::new(|| {
    Pattern::new(concat!(
        r"\x1b(?:\[[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]",
        r"|\][\s\S]*?(?:\x07|\x1b\\)",
        r"|[PX^_][\s\S]*?\x1b\\",
        r"|[\x20-\x2f]+[\x30-\x7e]",
        r"|[\x30-\x7e])",
        r"|\x{9b}[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]",
        r"|\x{9d}[\s\S]*?(?:\x07|\x{9c})",
        r"|[\x{80}-\x{9f}]",
    ))
});

static IFS: LazyLock<Pattern> = LazyLock::new(|| Pattern::new(r"\$\{IFS\b[^}]*\}|\$IFS\b"));

static ANSI_C_STRING: LazyLock<Pattern> =
    LazyLock::new(|| Pattern::new(r"\$'((?:[^'\\]|\\[\s\S])*)'"));

static BACKSLASH_ESCAPE: LazyLock<Pattern> = LazyLock::new(|| Pattern::new(r"\\([^\n])"));

static ABSOLUTE_HOME: LazyLock<Pattern> = LazyLock::new(|| {
    Pattern::new(concat!(
        r#"(^|[\s'"=:(`<>|])"#,
        r#"(?:/root|/home/[^/\s'"`;|&<>()]+|/Users/[^/\s'"`;|&<>()]+)/"#,
    ))
});

/// Removes ANSI escape sequences (full ECMA-48, including 8-bit C1 controls).
pub(crate) fn strip_ansi(text: &str) -> Cow<'_, str> {
    let has_escape = text.contains('\x1b')
        || (!text.is_ascii() && text.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)));
    match ANSI_ESCAPE.regex() {
        Some(regex) if has_escape => regex.replace_all(text, ""),
        _ => Cow::Borrowed(text),
    }
}

/// The text the shell would read: no ANSI escapes or NUL, NFKC, continuations joined,
/// `$IFS` as a space.
pub(crate) fn prepare(command: &str) -> String {
    let text = strip_ansi(command);
    let text = if text.contains('\0') {
        Cow::Owned(text.replace('\0', ""))
    } else {
        text
    };
    let text: Cow<'_, str> = if text.is_ascii() {
        text
    } else {
        Cow::Owned(text.nfkc().collect())
    };
    let text = if text.contains("\\\n") || text.contains("\\\r\n") {
        Cow::Owned(text.replace("\\\r\n", "").replace("\\\n", ""))
    } else {
        text
    };
    match IFS.regex() {
        Some(regex) if text.contains("$IFS") || text.contains("${IFS") => {
            regex.replace_all(&text, " ").into_owned()
        }
        _ => text.into_owned(),
    }
}

/// The flat text the dangerous patterns read (see the module docs).
pub(crate) fn detection_text(prepared: &str) -> String {
    let mut text = Cow::Borrowed(prepared);
    if text.contains("$'")
        && let Some(regex) = ANSI_C_STRING.regex()
    {
        let decoded = regex.replace_all(&text, |caps: &regex::Captures<'_>| {
            decode_ansi_c(caps.get(1).map_or("", |m| m.as_str()))
        });
        text = Cow::Owned(decoded.into_owned());
    }
    if text.contains('\\')
        && let Some(regex) = BACKSLASH_ESCAPE.regex()
    {
        text = Cow::Owned(regex.replace_all(&text, "$1").into_owned());
    }
    if text.contains("''") || text.contains("\"\"") {
        text = Cow::Owned(text.replace("''", "").replace("\"\"", ""));
    }
    text.into_owned()
}

/// Rewrites absolute home directories (`/root/`, `/home/<user>/`, `/Users/<user>/`) to `~/`.
pub(crate) fn fold_home(text: &str) -> Cow<'_, str> {
    let candidate = text.contains("/root/") || text.contains("/home/") || text.contains("/Users/");
    match ABSOLUTE_HOME.regex() {
        Some(regex) if candidate => regex.replace_all(text, "${1}~/"),
        _ => Cow::Borrowed(text),
    }
}

#[cfg(test)]
#[path = "normalize_tests.rs"]
mod tests;
