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

use crate::GuardContext;
use crate::lexer::decode_ansi_c;
use crate::pattern::Pattern;

/// Description of shell text the analysis could not reach (nesting beyond its limits).
pub(crate) const PARSER_LIMIT_DESCRIPTION: &str = "command parser limit exceeded";
/// Description of a command too large to inspect: it needs approval.
pub(crate) const SIZE_LIMIT_DESCRIPTION: &str = "command too large to inspect";

/// Far above real commands (a 6.5 KB commit message, a 120 KB here-document): 1 MiB.
const MAX_COMMAND_BYTES: usize = 1 << 20;
/// Separators (`;`, `&`, `|`, newline) beyond which the command is not analysed.
const MAX_SEPARATORS: usize = 100_000;

/// More than 1 MiB, or more than 100,000 separators: the command is not analysed and
/// needs approval (never hardline: a long command is not a dangerous one). hermes
/// refused 4,096 characters without a separator as hardline, which no one could approve.
pub(crate) fn size_limit_exceeded(command: &str) -> bool {
    if command.len() > MAX_COMMAND_BYTES {
        return true;
    }
    command.len() > MAX_SEPARATORS
        && command
            .bytes()
            .filter(|b| matches!(b, b';' | b'&' | b'|' | b'\n'))
            .count()
            > MAX_SEPARATORS
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

/// Files and directories that are sensitive in any home directory.
static HOME_SENSITIVE: LazyLock<Pattern> = LazyLock::new(|| {
    Pattern::new(concat!(
        r#"(^|[\s'"=:(`<>|])/(?:[^\s'"`;|&<>()]*/)?"#,
        r#"((?i:\.ssh(?:/|$|[\s"'])|\.(?:bashrc|zshrc|profile|bash_profile|bash_login|zprofile|zshenv|netrc|pgpass|npmrc|pypirc)\b|\.(?:hermes|caduceus)/))"#,
    ))
});

/// Rewrites home directories to `~/`: `/root/`, `/home/<user>/`, `/Users/<user>/`, the
/// homes of `context` (the sandbox's real `$HOME`), and any directory holding `.ssh/`,
/// a shell rc file, a credential file or an agent home (`/srv/agent/.bashrc` →
/// `~/.bashrc`). The agent homes of `context` (`$CADUCEUS_HOME` as an absolute path)
/// become `$CADUCEUS_HOME/`.
pub(crate) fn fold_home<'t>(text: &'t str, context: &GuardContext) -> Cow<'t, str> {
    let mut text = Cow::Borrowed(text);
    for (homes, spelling) in [
        (&context.agent_homes, "$CADUCEUS_HOME/"),
        (&context.homes, "~/"),
    ] {
        for home in homes {
            let home = home.trim_end_matches('/');
            if home.len() > 1 && text.contains(home) {
                text = Cow::Owned(replace_directory(&text, home, spelling));
            }
        }
    }
    let candidate = text.contains("/root/") || text.contains("/home/") || text.contains("/Users/");
    if candidate && let Some(regex) = ABSOLUTE_HOME.regex() {
        text = Cow::Owned(regex.replace_all(&text, "${1}~/").into_owned());
    }
    if text.contains("/.")
        && let Some(regex) = HOME_SENSITIVE.regex()
    {
        text = Cow::Owned(regex.replace_all(&text, "${1}~/${2}").into_owned());
    }
    text
}

/// Replaces `directory/` with `spelling` where the directory starts a path (at the start,
/// after a space, a quote, `=` or `:`).
fn replace_directory(text: &str, directory: &str, spelling: &str) -> String {
    let needle = format!("{directory}/");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(&needle) {
        let before = rest[..at]
            .chars()
            .next_back()
            .or_else(|| out.chars().next_back());
        let starts_path = before.is_none_or(|c| c.is_whitespace() || "'\"=:(`<>|".contains(c));
        out.push_str(&rest[..at]);
        out.push_str(if starts_path { spelling } else { &needle });
        rest = &rest[at + needle.len()..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
#[path = "normalize_tests.rs"]
mod tests;
