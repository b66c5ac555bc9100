use std::borrow::Cow;

use super::*;

/// A text whose every position is recognisable: `abc…zabc…`.
fn alphabet(chars: usize) -> String {
    (0..chars)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect()
}

/// (max_chars, total chars, head chars, notice, tail chars) as rendered by
/// hermes' `_BoundedOutputCollector` for the same text.
const HERMES_RENDERS: &[(usize, usize, usize, &str, usize)] = &[
    (1, 2, 0, "\n", 0),
    (2, 3, 0, "\n\n", 0),
    (5, 10, 0, "\n\n...", 0),
    (10, 1000007, 0, "\n\n... [OUT", 0),
    (
        50,
        1000007,
        0,
        "\n\n... [OUTPUT TRUNCATED - 1,000,007 chars omitted ",
        0,
    ),
    (
        79,
        80,
        5,
        "\n\n... [OUTPUT TRUNCATED - 66 chars omitted out of 80 total] ...\n\n",
        9,
    ),
    (
        79,
        1000007,
        0,
        "\n\n... [OUTPUT TRUNCATED - 1,000,007 chars omitted out of 1,000,007 total] ...\n\n",
        0,
    ),
    (
        80,
        1000007,
        0,
        "\n\n... [OUTPUT TRUNCATED - 1,000,006 chars omitted out of 1,000,007 total] ...\n\n",
        1,
    ),
    (
        81,
        162,
        5,
        "\n\n... [OUTPUT TRUNCATED - 148 chars omitted out of 162 total] ...\n\n",
        9,
    ),
    (
        100,
        101,
        13,
        "\n\n... [OUTPUT TRUNCATED - 67 chars omitted out of 101 total] ...\n\n",
        21,
    ),
    (
        100,
        1000007,
        9,
        "\n\n... [OUTPUT TRUNCATED - 999,984 chars omitted out of 1,000,007 total] ...\n\n",
        14,
    ),
    (
        200,
        400,
        53,
        "\n\n... [OUTPUT TRUNCATED - 267 chars omitted out of 400 total] ...\n\n",
        80,
    ),
    (
        1000,
        1001,
        372,
        "\n\n... [OUTPUT TRUNCATED - 69 chars omitted out of 1,001 total] ...\n\n",
        560,
    ),
    (
        1000,
        10000070,
        368,
        "\n\n... [OUTPUT TRUNCATED - 9,999,150 chars omitted out of 10,000,070 total] ...\n\n",
        552,
    ),
    (
        50000,
        50001,
        19972,
        "\n\n... [OUTPUT TRUNCATED - 70 chars omitted out of 50,001 total] ...\n\n",
        29959,
    ),
    (
        50000,
        100000,
        19970,
        "\n\n... [OUTPUT TRUNCATED - 50,074 chars omitted out of 100,000 total] ...\n\n",
        29956,
    ),
    (
        50000,
        10000070,
        19968,
        "\n\n... [OUTPUT TRUNCATED - 9,950,150 chars omitted out of 10,000,070 total] ...\n\n",
        29952,
    ),
];

#[test]
fn cuts_exactly_like_hermes() {
    for &(max, total, head, notice, tail) in HERMES_RENDERS {
        let text = alphabet(total);
        let expected = format!("{}{notice}{}", &text[..head], &text[total - tail..]);
        let actual = truncate_head_tail(&text, max);
        assert!(actual == expected, "max {max} total {total}:\n{actual:?}");
    }
}

#[test]
fn ten_megabytes_become_fifty_thousand_characters() {
    let text = "x".repeat(10_000_070);
    let out = truncate_head_tail(&text, 50_000);
    assert_eq!(out.chars().count(), 50_000);
    assert!(
        out.contains(
            "... [OUTPUT TRUNCATED - 9,950,150 chars omitted out of 10,000,070 total] ..."
        )
    );
}

#[test]
fn fitting_text_is_borrowed() {
    assert!(matches!(
        truncate_head_tail("short", 5),
        Cow::Borrowed("short")
    ));
    // Bytes over the limit but characters within it.
    assert!(matches!(truncate_head_tail("ééééé", 5), Cow::Borrowed(_)));
    assert!(matches!(truncate_head_tail("", 0), Cow::Borrowed("")));
}

#[test]
fn counts_characters_and_never_splits_one() {
    let text = "日本語".repeat(1000);
    let out = truncate_head_tail(&text, 500);
    assert_eq!(out.chars().count(), 500);
    assert!(out.starts_with("日本語日本語"));
    assert!(out.ends_with("日本語"));
    assert!(out.contains("chars omitted out of 3,000 total"));
}

#[test]
fn suffix_is_kept_whole() {
    let suffix = "\n[Command timed out after 5s]";
    // From hermes: render(suffix=…) on 150 and 50 characters, limit 100.
    assert_eq!(
        truncate_head_tail_with_suffix(&"x".repeat(150), 100, suffix),
        "x\n\n... [OUTPUT TRUNCATED - 146 chars omitted out of 150 total] ...\n\nxxx\n[Command timed out after 5s]"
    );
    assert_eq!(
        truncate_head_tail_with_suffix(&"x".repeat(50), 100, suffix),
        format!("{}{suffix}", "x".repeat(50))
    );
    // A suffix longer than the limit keeps its end.
    assert_eq!(
        truncate_head_tail_with_suffix(&"x".repeat(50), 10, suffix),
        " after 5s]"
    );
}

#[test]
fn budget_split_is_floor_of_forty_percent() {
    for budget in 0..10_000 {
        let (head, tail) = split_budget(budget);
        assert_eq!(head, (budget as f64 * 0.4) as usize, "{budget}");
        assert_eq!(head + tail, budget);
    }
}

#[test]
fn thousands_separators() {
    assert_eq!(group_thousands(0), "0");
    assert_eq!(group_thousands(999), "999");
    assert_eq!(group_thousands(1000), "1,000");
    assert_eq!(group_thousands(9_950_150), "9,950,150");
    assert_eq!(group_thousands(u64::MAX), "18,446,744,073,709,551,615");
}

#[test]
fn first_and_last_chars_count_characters_not_bytes() {
    for text in [
        "",
        "abc",
        "日本語",
        "ab日c🦀de",
        "🦀abcdef",
        "abcdef🦀",
        "é",
    ] {
        let chars: Vec<char> = text.chars().collect();
        for n in 0..=chars.len() + 2 {
            let first: String = chars.iter().take(n).collect();
            let last: String = chars[chars.len().saturating_sub(n)..].iter().collect();
            assert_eq!(first_chars(text, n), first, "first {n} of {text:?}");
            assert_eq!(last_chars(text, n), last, "last {n} of {text:?}");
        }
    }
}
