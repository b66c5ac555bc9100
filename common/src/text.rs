//! Text shaping for tool output: ANSI stripping, the 40 % head / 60 % tail cut
//! of long output (whole-string and streaming), and the sanitising of tool
//! error messages.

mod ansi;
mod head_tail;
mod tail_window;
mod tool_error;
mod truncate;
mod utf8_stream;

pub use ansi::strip_ansi;
pub use head_tail::HeadTailBuffer;
pub use tail_window::TailWindow;
pub use tool_error::sanitize_tool_error;
pub use truncate::{
    group_thousands, last_chars, truncate_head_tail, truncate_head_tail_with_suffix,
};
pub use utf8_stream::Utf8Stream;

/// Single-quotes a string for a POSIX shell (an embedded `'` becomes `'\''`).
///
/// ```
/// use caduceus_common::text::shell_quote;
/// assert_eq!(shell_quote("it's"), r"'it'\''s'");
/// ```
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}
