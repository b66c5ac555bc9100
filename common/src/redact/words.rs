//! Case-insensitive pre-checks that stay fast.
//!
//! A `(?i)` literal set in the `regex` crate expands every word into all its
//! casings, which defeats the SIMD literal scan; on JSON text the pre-check
//! cost as much as the pattern it guarded. Lower-casing the text in small
//! stack chunks and searching for lower-case words is ~15× cheaper.

use regex::bytes::Regex;

/// The UTF-8 of the characters outside ASCII that Unicode simple case
/// folding (what `(?i)` uses) maps onto ASCII letters: KELVIN SIGN ~ `k`,
/// LONG S ~ `s`.
const NON_ASCII_FOLDS: &str = r"(?-u:\xE2\x84\xAA|\xC5\xBF)";

const CHUNK: usize = 4096;
/// Longer than any match of the word patterns, so a match cut by a chunk
/// boundary is seen whole in the next chunk.
const OVERLAP: usize = 64;

/// A set of words, matched in any ASCII casing.
pub(crate) struct CaseInsensitiveWords {
    lower: Option<Regex>,
}

impl CaseInsensitiveWords {
    /// `pattern` must be written in lower case and match at most
    /// [`OVERLAP`] bytes.
    pub(crate) fn new(pattern: &str) -> Self {
        Self {
            lower: Regex::new(&format!("{NON_ASCII_FOLDS}|{pattern}")).ok(),
        }
    }

    /// The byte offset of the first place one of the words occurs in any
    /// casing `(?i)` would accept, or `None`. Text with a non-ASCII character
    /// that folds to an ASCII letter conservatively reports offset 0.
    pub(crate) fn find(&self, text: &str) -> Option<usize> {
        let Some(lower) = &self.lower else {
            // Unreachable with the crate's literal patterns; "maybe, from the
            // start" keeps the guarded pass running.
            return Some(0);
        };
        let bytes = text.as_bytes();
        let mut buf = [0u8; CHUNK];
        let mut start = 0;
        loop {
            let end = (start + CHUNK).min(bytes.len());
            let chunk = &mut buf[..end - start];
            chunk.copy_from_slice(&bytes[start..end]);
            chunk.make_ascii_lowercase();
            if let Some(m) = lower.find(chunk) {
                let folded_char = m.as_bytes().first().is_some_and(|b| !b.is_ascii());
                return Some(if folded_char { 0 } else { start + m.start() });
            }
            if end == bytes.len() {
                return None;
            }
            start = end - OVERLAP;
        }
    }
}

#[cfg(test)]
#[path = "words_tests.rs"]
mod tests;
