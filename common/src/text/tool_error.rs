//! hermes' `_sanitize_tool_error` (model_tools.py): tool error text can echo
//! anything (a command's stderr, a server's reply), so framing tokens that
//! could be read as conversation structure are removed before the model sees
//! it.

use std::sync::LazyLock;

use regex::Regex;

const MAX_CHARS: usize = 2000;
const PREFIX: &str = "[TOOL_ERROR] ";

struct Patterns {
    role_tag: Regex,
    fence_open: Regex,
    fence_close: Regex,
    cdata: Regex,
}

static PATTERNS: LazyLock<Option<Patterns>> = LazyLock::new(|| {
    // `[\s\x1C-\x1F]` is Python's `\s`.
    Some(Patterns {
        role_tag: Regex::new(
            r"(?i)</?(?:tool_call|function_call|result|response|output|input|system|assistant|user)>",
        )
        .ok()?,
        fence_open: Regex::new(r"(?m)^[\s\x1C-\x1F]*```(?:json|xml|html|markdown)?[\s\x1C-\x1F]*")
            .ok()?,
        fence_close: Regex::new(r"(?m)[\s\x1C-\x1F]*```[\s\x1C-\x1F]*$").ok()?,
        cdata: Regex::new(r"(?s)<!\[CDATA\[.*?\]\]>").ok()?,
    })
});

/// Removes role tags (`<system>`, `</tool_call>`, … any case), code-fence
/// markers and `<![CDATA[…]]>` blocks, caps the result at 2000 characters
/// (1997 + `...`) and prefixes `[TOOL_ERROR] `.
///
/// ```
/// use caduceus_common::text::sanitize_tool_error;
/// assert_eq!(
///     sanitize_tool_error("bad </tool_call> <system>x</system>"),
///     "[TOOL_ERROR] bad  x"
/// );
/// ```
pub fn sanitize_tool_error(message: &str) -> String {
    let mut text = message.to_owned();
    if let Some(p) = PATTERNS.as_ref() {
        for re in [&p.role_tag, &p.fence_open, &p.fence_close, &p.cdata] {
            if let std::borrow::Cow::Owned(stripped) = re.replace_all(&text, "") {
                text = stripped;
            }
        }
    }
    if text.chars().count() > MAX_CHARS {
        text = text.chars().take(MAX_CHARS - 3).collect::<String>() + "...";
    }
    format!("{PREFIX}{text}")
}

#[cfg(test)]
#[path = "tool_error_tests.rs"]
mod tests;
