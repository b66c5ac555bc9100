//! Compiled regular expressions with two guard-specific properties.
//!
//! * `\b` means an ASCII word boundary. The text we match has been NFKC-normalized, and an
//!   ASCII boundary keeps every pattern on the fast lazy-DFA path even for non-ASCII input.
//! * A pattern that failed to compile fails *closed*: [`Pattern::is_match`] reports a match,
//!   so a broken rule makes commands need approval instead of letting them through. The
//!   `every_pattern_compiles` test keeps that from ever shipping.

use regex::Regex;

pub(crate) struct Pattern {
    regex: Option<Regex>,
}

impl Pattern {
    pub(crate) fn new(pattern: &str) -> Self {
        Self {
            regex: Regex::new(&ascii_word_boundaries(pattern)).ok(),
        }
    }

    /// The compiled regex, or `None` if the pattern is invalid.
    pub(crate) fn regex(&self) -> Option<&Regex> {
        self.regex.as_ref()
    }

    /// Whether `text` matches; an invalid pattern counts as matching (fail closed).
    pub(crate) fn is_match(&self, text: &str) -> bool {
        self.regex.as_ref().is_none_or(|regex| regex.is_match(text))
    }

    #[cfg(test)]
    pub(crate) fn compiled(&self) -> bool {
        self.regex.is_some()
    }
}

/// Rewrites `\b` to `(?-u:\b)`, leaving escaped backslashes (`\\b`) alone.
fn ascii_word_boundaries(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('b') => out.push_str(r"(?-u:\b)"),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_boundaries_become_ascii_and_escaped_backslashes_stay() {
        assert_eq!(ascii_word_boundaries(r"\brm\b"), r"(?-u:\b)rm(?-u:\b)");
        assert_eq!(ascii_word_boundaries(r"a\\b"), r"a\\b");
    }

    #[test]
    fn an_invalid_pattern_fails_closed() {
        let broken = Pattern::new("(unclosed");
        assert!(!broken.compiled());
        assert!(broken.is_match("anything"));
    }
}
