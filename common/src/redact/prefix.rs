//! Vendor-prefixed keys (`sk-…`, `ghp_…`, `AKIA…`): the one pass that needs
//! hermes' `(?<![A-Za-z0-9_-])…(?![A-Za-z0-9_-])` boundaries, emulated here
//! because the `regex` crate has no look-around.
//!
//! hermes' regex, at each start not preceded by a token character, tries the
//! vendor patterns in order and, by backtracking, accepts the first whose
//! match is not followed by a token character. Every vendor pattern ends in
//! one repeated class that either lies inside the token class or contains it,
//! so the only end backtracking can accept is the greedy one; checking the
//! greedy match of each pattern in order therefore gives hermes' answer.

use super::patterns::{PREFIX_ANCHORED, PREFIX_LITERALS};

/// The characters that may not touch a key on either side.
pub(crate) fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Replaces every vendor-prefixed key in `text` with `mask(key)`, or returns
/// `None` when there is none.
pub(crate) fn replace_prefixed_keys(text: &str, mask: impl Fn(&str) -> String) -> Option<String> {
    let mut out: Option<String> = None;
    let mut copied_to = 0;
    let mut search_from = 0;
    while let Some(found) = PREFIX_LITERALS.find_at(text, search_from) {
        let start = found.start();
        // Literals are ASCII, so `start + 1` is a char boundary.
        search_from = start + 1;
        if text[..start].chars().next_back().is_some_and(is_token_char) {
            continue;
        }
        let Some(end) = key_end_at(text, start) else {
            continue;
        };
        let buf = out.get_or_insert_with(|| String::with_capacity(text.len()));
        buf.push_str(&text[copied_to..start]);
        buf.push_str(&mask(&text[start..end]));
        copied_to = end;
        search_from = end;
    }
    let mut buf = out?;
    buf.push_str(&text[copied_to..]);
    Some(buf)
}

/// The end of the first vendor pattern that matches at `start` and is not
/// followed by a token character.
fn key_end_at(text: &str, start: usize) -> Option<usize> {
    let rest = &text[start..];
    PREFIX_ANCHORED.iter().find_map(|re| {
        let m = re.find(rest)?;
        let end = start + m.end();
        let followed_by_token = text[end..].chars().next().is_some_and(is_token_char);
        (!followed_by_token).then_some(end)
    })
}
