//! Text shaping for tool output: ANSI stripping, the 40 % head / 60 % tail cut
//! of long output (whole-string and streaming), and the sanitising of tool
//! error messages.

mod ansi;
mod head_tail;
mod tool_error;
mod truncate;

pub use ansi::strip_ansi;
pub use head_tail::HeadTailBuffer;
pub use tool_error::sanitize_tool_error;
pub use truncate::{group_thousands, truncate_head_tail, truncate_head_tail_with_suffix};
