use super::*;

/// File names produced by hermes' `_safe_result_filename`.
#[test]
fn file_names_match_hermes() {
    let x130 = "x".repeat(130);
    let x120 = "x".repeat(120);
    let x121 = "x".repeat(121);
    let a119_dot_b = format!("{}.b", "a".repeat(119));
    let cases: Vec<(&str, String)> = vec![
        ("call_abc", "call_abc.txt".into()),
        ("toolu_01ABC-def.ghi", "toolu_01ABC-def.ghi.txt".into()),
        ("a/b", "a_b_c14cddc033f6.txt".into()),
        ("", "tool_result.txt".into()),
        ("...", "tool_result_ab5df625bc76.txt".into()),
        ("call:1 2", "call_1_2_3c3e84242654.txt".into()),
        ("-_a_-", "a_42921fec7cb8.txt".into()),
        ("é", "tool_result_4a99557e4033.txt".into()),
        (&x130, format!("{}_3afbb132863c.txt", "x".repeat(120))),
        (&x120, format!("{x120}.txt")),
        (&x121, format!("{}_79072a47bfaa.txt", "x".repeat(120))),
        (&a119_dot_b, format!("{}_d37f02ca8fd5.txt", "a".repeat(119))),
    ];
    for (id, expected) in cases {
        assert_eq!(safe_result_filename(id), expected, "{id:?}");
    }
}

#[test]
fn paths_live_under_the_results_dir() {
    assert_eq!(
        results_path("/tmp", "call_1"),
        "/tmp/caduceus-results/call_1.txt"
    );
    assert_eq!(
        results_path("/tmp///", "call_1"),
        "/tmp/caduceus-results/call_1.txt"
    );
    assert_eq!(results_path("", "c"), "/tmp/caduceus-results/c.txt");
    assert_eq!(results_path("/", "c"), "/caduceus-results/c.txt");
    assert_eq!(
        results_path("/data/data/com.termux/files/usr/tmp", "../../etc/passwd"),
        "/data/data/com.termux/files/usr/tmp/caduceus-results/etc_passwd_3754d6cb3a38.txt"
    );
}

/// The `<persisted-output>` texts are hermes' `_build_persisted_message`
/// output for the same inputs.
#[test]
fn persisted_preview_matches_hermes() {
    let full: String = (0..5000)
        .map(|i| format!("line {i:05} of the output\n"))
        .collect();
    let lines: String = (0..60)
        .map(|i| format!("line {i:05} of the output\n"))
        .collect();
    assert_eq!(
        persisted_preview(&full, "/tmp/caduceus-results/call_1.txt"),
        format!(
            "<persisted-output>\nThis tool result was too large (125,000 characters, 122.1 KB).\n\
             Full output saved to: /tmp/caduceus-results/call_1.txt\n\
             Use the read_file tool with offset and limit to access specific sections of this output.\n\n\
             Preview (first 1500 chars):\n{lines}\n...\n</persisted-output>"
        )
    );
    assert_eq!(
        persisted_preview(&"x".repeat(3000), "/p"),
        format!(
            "<persisted-output>\nThis tool result was too large (3,000 characters, 2.9 KB).\n\
             Full output saved to: /p\n\
             Use the read_file tool with offset and limit to access specific sections of this output.\n\n\
             Preview (first 1500 chars):\n{}\n...\n</persisted-output>",
            "x".repeat(1500)
        )
    );
    assert_eq!(
        persisted_preview("short", "/p"),
        "<persisted-output>\nThis tool result was too large (5 characters, 0.0 KB).\n\
         Full output saved to: /p\n\
         Use the read_file tool with offset and limit to access specific sections of this output.\n\n\
         Preview (first 5 chars):\nshort\n</persisted-output>"
    );
}

#[test]
fn sizes_are_shown_in_kb_or_mb() {
    for (chars, label) in [
        (0, "0.0 KB"),
        (1023, "1.0 KB"),
        (52_377, "51.1 KB"),
        (120_000, "117.2 KB"),
        (1_048_575, "1024.0 KB"),
        (1_048_576, "1.0 MB"),
        (10_485_765, "10.0 MB"),
    ] {
        assert_eq!(human_size(chars), label, "{chars}");
    }
}

#[test]
fn preview_cuts_back_to_a_newline_past_half() {
    assert_eq!(preview("ab\ncdefgh", 8), ("ab\ncdefg", true));
    assert_eq!(preview("abcdef\ngh", 8), ("abcdef\n", true));
    // Exactly half is not past half.
    assert_eq!(preview("abcd\nefgh", 8), ("abcd\nefg", true));
    assert_eq!(preview("12345678", 8), ("12345678", false));
    // Characters, not bytes.
    assert_eq!(preview("éééé\nééé", 8), ("éééé\nééé", false));
    assert_eq!(preview("日本語日本語\n日本語", 8), ("日本語日本語\n", true));
}

#[test]
fn unsaved_preview_says_so() {
    let full = "y".repeat(120_000);
    assert_eq!(
        unsaved_preview(&full),
        format!(
            "{}\n\n[Truncated: tool response was 120,000 chars. Full output could not be saved to sandbox.]",
            "y".repeat(1500)
        )
    );
}

#[test]
fn persisted_results_are_recognised() {
    assert!(is_persisted(&persisted_preview(&"z".repeat(10), "/p")));
    assert!(!is_persisted(&unsaved_preview("z")));
}
