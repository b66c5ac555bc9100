//! Text shaping for tool output. (stub: to be completed)

use std::borrow::Cow;

/// Removes ANSI escape sequences.
pub fn strip_ansi(text: &str) -> Cow<'_, str> {
    Cow::Borrowed(text)
}
