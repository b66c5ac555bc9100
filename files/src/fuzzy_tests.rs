use super::*;

fn replace(content: &str, old: &str, new: &str) -> Replaced {
    fuzzy_find_and_replace(content, old, new, false).unwrap_or_else(|error| panic!("{error}"))
}

// --- one case per strategy, each found by that strategy first -------------

#[test]
fn exact_strategy() {
    let done = replace("hello world", "hello", "hi");
    assert_eq!(
        (done.content.as_str(), done.count, done.strategy),
        ("hi world", 1, Strategy::Exact)
    );
}

#[test]
fn line_trimmed_strategy_reindents() {
    let done = replace(
        "    foo = 1  \n    bar = 2\n",
        "foo = 1\nbar = 2",
        "foo = 10\nbar = 20",
    );
    assert_eq!(done.strategy, Strategy::LineTrimmed);
    assert_eq!(done.content, "    foo = 10\n    bar = 20\n");
}

#[test]
fn whitespace_normalized_strategy_keeps_word_boundaries() {
    let done = replace("foo   bar baz", "foo bar", "XY");
    assert_eq!(
        (done.content.as_str(), done.strategy),
        ("XY baz", Strategy::WhitespaceNormalized)
    );
    let code = replace(
        "result = compute(a,  b) + tail",
        "compute(a, b)",
        "compute(a, b, c)",
    );
    assert_eq!(code.content, "result = compute(a, b, c) + tail");
    // A match that ends in blanks takes the whole run of blanks.
    let trailing = replace("a = foo   + bar", "foo +", "XY");
    assert_eq!(trailing.content, "a = XY bar");
}

#[test]
fn escape_normalized_strategy() {
    let done = replace("line1\nline2\n", "line1\\nline2", "joined");
    assert_eq!(
        (done.content.as_str(), done.strategy),
        ("joined\n", Strategy::EscapeNormalized)
    );
}

#[test]
fn unicode_normalized_strategy_preserves_typography() {
    let done = replace(
        "return value\u{2014}fallback",
        "return value--fallback",
        "return value or fallback",
    );
    assert_eq!(done.strategy, Strategy::UnicodeNormalized);
    assert_eq!(done.content, "return value or fallback");

    let ellipsis = replace(
        "Wait for it\u{2026}and done",
        "Wait for it...and done",
        "Wait for it...then done",
    );
    assert_eq!(ellipsis.content, "Wait for it\u{2026}then done");

    let content = "Line 1 \u{2014} with dash\nLine 2 \u{201c}quoted\u{201d} text\nLine 3 plain";
    let old = "Line 1 -- with dash\nLine 2 \"quoted\" text\nLine 3 plain";
    let new = "Line 1 -- with dash\nLine 2 \"quoted\" text\nLine 3 changed";
    assert_eq!(
        replace(content, old, new).content,
        "Line 1 \u{2014} with dash\nLine 2 \u{201c}quoted\u{201d} text\nLine 3 changed"
    );
}

#[test]
fn block_anchor_strategy() {
    let content = "def foo():\n    x = 1\n    y = 2\n    return x + y\n";
    let old = "def foo():\n    x = 1\n    y = 9\n    return x + y";
    let done = replace(content, old, "def foo():\n    return 0");
    assert_eq!(done.strategy, Strategy::BlockAnchor);
    assert_eq!(done.content, "def foo():\n    return 0\n");
}

#[test]
fn block_anchor_needs_a_similar_middle() {
    let content = "class Foo:\n    completely = 'unrelated'\n    content = 'here'\n    nothing = 'in common'\n    pass\n";
    let old = "class Foo:\n    x = 1\n    y = 2\n    z = 3\n    pass";
    assert_eq!(
        fuzzy_find_and_replace(content, old, "replaced", false),
        Err(MatchError::NotFound)
    );
}

#[test]
fn context_aware_strategy() {
    let content = "alpha one\nbeta two\ngamma three\n";
    let done = replace(
        content,
        "alpha 1\nbeta two\ngamma three",
        "alpha ONE\nbeta two\ngamma three",
    );
    assert_eq!(done.strategy, Strategy::ContextAware);
    assert_eq!(done.content, "alpha ONE\nbeta two\ngamma three\n");
}

#[test]
fn context_aware_needs_a_strict_majority() {
    // One similar line out of two is not enough (hermes accepted it and
    // overwrote `threshold = 200`).
    let content = "config_value = 100\nthreshold = 200\n";
    let old = "config_value = 999\ntotally_unrelated_line_here";
    assert_eq!(
        fuzzy_find_and_replace(
            content,
            old,
            "config_value = 42\ntotally_unrelated_line_here",
            false
        ),
        Err(MatchError::NotFound)
    );
}

#[test]
fn shadowed_strategies_still_find_their_cases() {
    // In the chain these two never fire first: whatever they match,
    // line_trimmed (which trims every line) matches already.
    let content = "    if x:\n        y()\n";
    assert_eq!(
        indentation_flexible(content, "if x:\n    y()"),
        vec![(0, content.len() - 1)]
    );
    assert_eq!(
        trimmed_boundary(content, "if x:\n        y()  "),
        vec![(0, content.len() - 1)]
    );
    assert_eq!(
        line_trimmed(content, "if x:\n    y()"),
        vec![(0, content.len() - 1)]
    );
}

// --- errors ---------------------------------------------------------------

#[test]
fn error_texts() {
    assert_eq!(
        fuzzy_find_and_replace("abc", "", "x", false)
            .unwrap_err()
            .to_string(),
        "old_string cannot be empty"
    );
    assert_eq!(
        fuzzy_find_and_replace("abc", "a", "a", false)
            .unwrap_err()
            .to_string(),
        "old_string and new_string are identical"
    );
    assert_eq!(
        fuzzy_find_and_replace("aaa bbb aaa", "aaa", "ccc", false)
            .unwrap_err()
            .to_string(),
        "Found 2 matches for old_string. Provide more context to make it unique, or use replace_all=True."
    );
    assert_eq!(
        fuzzy_find_and_replace("hello", "xyz", "w", false)
            .unwrap_err()
            .to_string(),
        "Could not find a match for old_string in the file"
    );
}

#[test]
fn replace_all() {
    let done = fuzzy_find_and_replace("aaa bbb aaa", "aaa", "ccc", true).unwrap();
    assert_eq!((done.content.as_str(), done.count), ("ccc bbb ccc", 2));
    let overlapping = fuzzy_find_and_replace("prefix aaaa suffix", "aa", "b", true).unwrap();
    assert_eq!(
        (overlapping.content.as_str(), overlapping.count),
        ("prefix bb suffix", 2)
    );
    assert_eq!(
        fuzzy_find_and_replace("aaaa", "aa", "b", false),
        Err(MatchError::Ambiguous(2))
    );
}

#[test]
fn replace_all_never_uses_similarity() {
    let content = "aX\nbY\naX\nbY\naX\nbY\n";
    assert_eq!(
        fuzzy_find_and_replace(content, "aX\nbZ", "QQ\nRR", true),
        Err(MatchError::NotFound)
    );
}

// --- replacement shaping ----------------------------------------------------

#[test]
fn reindents_to_the_file() {
    let content = "class Calculator:\n    def add(self, a, b):\n        result = a + b\n        return result\n";
    let done = replace(
        content,
        "result = a + b\nreturn result",
        "result = a + b\nresult *= 2\nreturn result",
    );
    assert_ne!(done.strategy, Strategy::Exact);
    assert!(
        done.content
            .contains("        result = a + b\n        result *= 2\n        return result\n")
    );
}

#[test]
fn blank_lines_in_the_replacement_are_left_alone() {
    let done = replace("    a = 1\n    b = 2\n", "a = 1\nb = 2", "a = 1\n\nb = 99");
    assert_eq!(done.content, "    a = 1\n\n    b = 99\n");
}

#[test]
fn escape_drift_is_refused() {
    let error = fuzzy_find_and_replace(
        "line\n    x = 1\nline",
        "line\n  x = \\'a\\'\nline",
        "line\n  x = \\'b\\'\nline",
        false,
    )
    .unwrap_err();
    let MatchError::EscapeDrift(message) = &error else {
        panic!("{error:?}");
    };
    assert!(message.starts_with(
        "Escape-drift detected: old_string and new_string contain the literal sequence \"\\\\'\""
    ));
    assert!(message.ends_with("without backslash-escaping \"'\" characters."));
    // The file really has the escapes: no drift.
    let genuine = replace(
        "line\n  x = \\'a\\'\nline",
        "line\n  x = \\'a\\'\nline",
        "line\n  x = \\'b\\'\nline",
    );
    assert!(genuine.content.contains("\\'b\\'"));
}

#[test]
fn literal_tabs_become_real_where_the_file_has_tabs() {
    let done = replace(
        "def hello():\n\tprint(\"before\")\n",
        "\tprint(\"before\")",
        "\\tprint(\"after\")",
    );
    assert_eq!(done.content, "def hello():\n\tprint(\"after\")\n");
    // `\n` is never unescaped; a file with literal backslash-t keeps it.
    assert_eq!(
        replace("line1\nline2\n", "line1\nline2", "alpha\\nbeta").content,
        "alpha\\nbeta\n"
    );
    assert_eq!(
        replace("sep = \"\\t\"\n", "sep = \"\\t\"\n", "sep = \"\\tab\"\n").content,
        "sep = \"\\tab\"\n"
    );
}

#[test]
fn no_match_hint_shows_the_closest_lines() {
    let content = "def foo():\n    pass\ndef bar():\n    return 1\n";
    let hint = no_match_hint("def baz():", content);
    assert!(
        hint.starts_with("\n\nDid you mean one of these sections?\n"),
        "{hint}"
    );
    assert!(hint.contains("   1| def foo():"), "{hint}");
    assert!(hint.contains("\n---\n"), "{hint}");
    assert_eq!(no_match_hint("totally_unique_xyzzy_qux", "abc\nxyz\n"), "");
}

#[test]
fn similarity_is_difflib_ratio() {
    assert_eq!(similarity("", ""), 1.0);
    assert_eq!(similarity("abcd", "bcde"), 0.75);
    assert_eq!(similarity("abc", "xyz"), 0.0);
}
