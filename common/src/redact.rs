//! Secret redaction for tool output. (stub: to be completed)

use std::borrow::Cow;

/// Where the text is going, which decides how aggressively it is redacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedactMode<'a> {
    /// Logs and general text: every pattern.
    General,
    /// Output of a terminal command; env dumps get the assignment pass.
    TerminalOutput { command: Option<&'a str> },
    /// File content returned by read_file/search_files: prefix-matched secrets
    /// become a non-reusable sentinel, source-code false positives are skipped.
    FileRead,
}

/// Masks secrets in `text`.
pub fn redact<'t>(text: &'t str, _mode: RedactMode<'_>) -> Cow<'t, str> {
    Cow::Borrowed(text)
}
