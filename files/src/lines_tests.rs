use super::*;
use crate::fs::FileKind;

fn stat(size: u64) -> FileStat {
    FileStat {
        kind: FileKind::File,
        size,
        mode: Some(0o644),
        mtime_ns: Some(7),
    }
}

fn window(offset: usize, limit: usize) -> LineWindow {
    LineWindow {
        offset,
        limit,
        max_line_bytes: 16,
        detect_binary: true,
        unless_unchanged: None,
    }
}

fn page(data: &[u8], window: &LineWindow) -> LinePage {
    match page_from_bytes(stat(data.len() as u64), data, window) {
        LineRead::Page(page) => page,
        other => panic!("expected a page, got {other:?}"),
    }
}

#[test]
fn trailing_newline_does_not_add_a_line() {
    let page = page(b"a\nb\nc\n", &window(1, 10));
    assert_eq!(page.lines, ["a", "b", "c"]);
    assert_eq!(page.total_lines, 3);
}

#[test]
fn last_line_without_newline_counts() {
    let page = page(b"a\nb", &window(1, 10));
    assert_eq!(page.lines, ["a", "b"]);
    assert_eq!(page.total_lines, 2);
}

#[test]
fn window_in_the_middle_and_past_the_end() {
    let data = b"1\n2\n3\n4\n5\n";
    assert_eq!(page(data, &window(2, 2)).lines, ["2", "3"]);
    let past = page(data, &window(9, 2));
    assert!(past.lines.is_empty());
    assert_eq!(past.total_lines, 5);
    assert_eq!(page(b"", &window(1, 5)).total_lines, 0);
}

#[test]
fn chunked_feeding_gives_the_same_answer() {
    let data = b"alpha\r\nbeta\ngamma delta epsilon zeta\nlast";
    let whole = page(data, &window(2, 3));
    for chunk_size in 1..8 {
        let mut collector = LineCollector::new(&window(2, 3));
        for chunk in data.chunks(chunk_size) {
            collector.feed(chunk);
        }
        let (lines, total) = collector.finish();
        assert_eq!(lines, whole.lines, "chunk size {chunk_size}");
        assert_eq!(total, whole.total_lines);
    }
    assert_eq!(whole.lines, ["beta", "gamma delta epsi", "last"]);
    assert_eq!(whole.total_lines, 4);
}

#[test]
fn bom_and_carriage_returns_are_removed() {
    let page = page(b"\xEF\xBB\xBFfirst\r\nsecond\r\n", &window(1, 5));
    assert_eq!(page.lines, ["first", "second"]);
}

#[test]
fn binary_detection() {
    assert!(looks_binary(b"\x00\x01\x02abc"));
    assert!(looks_binary(&[1u8; 40]));
    assert!(!looks_binary(b"plain text\twith tabs\r\n"));
    assert!(!looks_binary(b""));
    // 3 control bytes in 10 is exactly 30 %: not binary (hermes uses '>').
    assert!(!looks_binary(b"\x01\x02\x03abcdefg"));
    assert!(looks_binary(b"\x01\x02\x03\x04abcdef"));
    let read = page_from_bytes(stat(3), b"\x00\x00\x00", &window(1, 5));
    assert!(matches!(read, LineRead::Binary(_)));
}

#[test]
fn unchanged_stamp_short_circuits() {
    let mut window = window(1, 5);
    window.unless_unchanged = stat(3).stamp();
    assert!(matches!(
        page_from_bytes(stat(3), b"abc", &window),
        LineRead::Unchanged(_)
    ));
    window.unless_unchanged = stat(4).stamp();
    assert!(matches!(
        page_from_bytes(stat(3), b"abc", &window),
        LineRead::Page(_)
    ));
}

#[test]
fn invalid_utf8_and_characters_cut_by_the_byte_cap_become_replacements() {
    // Line 2 is 19 bytes; the 16-byte cap ends inside its eighth `é`.
    let mut data = b"ab\xFFcd\n".to_vec();
    data.extend_from_slice(format!("a{}\n", "é".repeat(9)).as_bytes());
    let page = page(&data, &window(1, 5));
    assert_eq!(
        page.lines,
        [
            "ab\u{FFFD}cd".to_owned(),
            format!("a{}\u{FFFD}", "é".repeat(7))
        ]
    );
}
