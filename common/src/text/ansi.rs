//! ANSI / ECMA-48 escape sequences, as hermes' `tools/ansi_strip.py`: models
//! that see them copy them into the files they write.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

/// CSI (with private-mode `?` and intermediate bytes), OSC (BEL or ST
/// terminated), DCS/SOS/PM/APC strings, nF escapes, single-byte Fp/Fe/Fs
/// escapes, and the 8-bit C1 forms (U+0080..U+009F as characters).
static ANSI_ESCAPE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(concat!(
        r"\x1B(?:",
        r"\[[\x30-\x3F]*[\x20-\x2F]*[\x40-\x7E]",
        r"|\](?s:.)*?(?:\x07|\x1B\\)",
        r"|[PX^_](?s:.)*?\x1B\\",
        r"|[\x20-\x2F]+[\x30-\x7E]",
        r"|[\x30-\x7E]",
        r")",
        r"|\x{9B}[\x30-\x3F]*[\x20-\x2F]*[\x40-\x7E]",
        r"|\x{9D}(?s:.)*?(?:\x07|\x{9C})",
        r"|[\x{80}-\x{9F}]",
    ))
    .ok()
});

/// Removes ANSI escape sequences. Borrows when there is nothing to strip
/// (no ESC byte and no C1 control character), which is one byte scan.
///
/// ```
/// use caduceus_common::text::strip_ansi;
/// assert_eq!(strip_ansi("\x1b[1;31merror\x1b[0m: x"), "error: x");
/// assert!(matches!(strip_ansi("plain"), std::borrow::Cow::Borrowed(_)));
/// ```
pub fn strip_ansi(text: &str) -> Cow<'_, str> {
    // C1 controls U+0080..U+009F are encoded as 0xC2 0x80..0x9F.
    let may_have_escape = text.bytes().any(|b| b == 0x1B || b == 0xC2);
    if !may_have_escape {
        return Cow::Borrowed(text);
    }
    match ANSI_ESCAPE.as_ref() {
        Some(re) => re.replace_all(text, ""),
        None => Cow::Borrowed(text),
    }
}

#[cfg(test)]
#[path = "ansi_tests.rs"]
mod tests;
