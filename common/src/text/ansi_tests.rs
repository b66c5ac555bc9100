use std::borrow::Cow;

use super::*;

/// Expected outputs produced by hermes' `tools/ansi_strip.py`.
#[test]
fn strips_like_hermes() {
    let cases = [
        ("\x1b[1;31merror\x1b[0m: x", "error: x"),
        ("\x1b[?25lhidden\x1b[?25h", "hidden"),
        ("a\x1b]0;title\x07b", "ab"),
        ("a\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\b", "alinkb"),
        ("\x1bPdcs payload\x1b\\after", "after"),
        ("\x1b(Bascii", "ascii"),
        ("\x1b7save\x1b8", "save"),
        ("x\u{9b}31mred", "xred"),
        ("y\u{9d}0;t\u{9c}z", "yz"),
        ("c1\u{85}next", "c1next"),
        ("\x1b]unterminated", "unterminated"),
        ("\x1b[38:2:255:0:0mrgb", "rgb"),
        ("tab\tnl\n\x1b[2K\rline", "tab\tnl\n\rline"),
        ("é\x1b[0m日本", "é日本"),
    ];
    for (input, expected) in cases {
        assert_eq!(strip_ansi(input), expected, "{input:?}");
    }
}

#[test]
fn borrows_clean_text() {
    for clean in ["", "plain", "é日本 ü — “quotes”"] {
        assert!(matches!(strip_ansi(clean), Cow::Borrowed(_)), "{clean:?}");
    }
}
