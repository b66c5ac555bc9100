//! Small text helpers shared by error messages.

/// Cuts `text` to at most `limit` characters, marking the cut with `…`.
pub(crate) fn shorten(text: &str, limit: usize) -> String {
    match text.char_indices().nth(limit) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}
