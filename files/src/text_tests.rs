use super::*;

#[test]
fn line_endings() {
    assert_eq!(detect_line_ending("a\r\nb\n"), Some("\r\n"));
    assert_eq!(detect_line_ending("a\nb"), Some("\n"));
    assert_eq!(detect_line_ending("abc"), None);
    assert_eq!(
        normalize_line_endings("a\r\nb\rc\n", "\r\n"),
        "a\r\nb\r\nc\r\n"
    );
    assert_eq!(normalize_line_endings("a\r\nb", "\n"), "a\nb");
}

#[test]
fn style_is_kept() {
    let style = FileStyle::of(Some("\u{feff}x\r\ny\r\n"));
    assert_eq!(
        style,
        FileStyle {
            bom: true,
            crlf: true
        }
    );
    assert_eq!(style.apply("a\nb\n"), "\u{feff}a\r\nb\r\n");
    assert_eq!(FileStyle::of(None).apply("a\n"), "a\n");
    // A BOM already present is not doubled.
    assert_eq!(style.apply("\u{feff}a"), "\u{feff}a");
}

#[test]
fn gutter() {
    let lines = vec!["alpha".to_owned(), "b".repeat(12)];
    assert_eq!(
        number_lines(&lines, 9, 10),
        "9|alpha\n10|bbbbbbbbbb... [truncated]"
    );
    assert_eq!(number_lines::<&str>(&[], 1, 10), "");
    // The limit counts characters: more bytes than the limit is not enough
    // to be cut, one character more is.
    let wide = vec!["é".repeat(10), "é".repeat(11)];
    assert_eq!(
        number_lines(&wide, 1, 10),
        format!("1|{}\n2|{}... [truncated]", "é".repeat(10), "é".repeat(10))
    );
}

#[test]
fn python_renderings() {
    assert_eq!(py_repr("a.py"), "'a.py'");
    assert_eq!(py_repr("\\'"), "\"\\\\'\"");
    assert_eq!(py_repr("\\\""), "'\\\\\"'");
    assert_eq!(py_repr("it's \"x\""), "'it\\'s \"x\"'");
    assert_eq!(split_ext("a.tar.gz"), ("a.tar", ".gz"));
    assert_eq!(split_ext(".bashrc"), (".bashrc", ""));
    assert_eq!(split_ext("Makefile"), ("Makefile", ""));
}
