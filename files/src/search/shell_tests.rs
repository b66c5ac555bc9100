use std::process::Command;

use super::*;
use crate::search::local;
use crate::search::test_fixture::{content, fixture};
use crate::tools::test_support::have_program;

fn run(script: &str) -> (String, String, i32) {
    let output = Command::new("bash").arg("-c").arg(script).output().unwrap();
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        output.status.code().unwrap_or(-1),
    )
}

fn with_root(query: &SearchQuery, branch: &str) -> String {
    format!("root={}\n{branch}", shell_quote(&query.root))
}

fn search_via(query: &SearchQuery, branch: &str) -> Result<SearchHits, FsError> {
    let (stdout, stderr, code) = run(&with_root(query, branch));
    parse_shell_output(query, &stdout, &stderr, code)
}

fn queries(root: &str) -> Vec<SearchQuery> {
    vec![
        content(root, "TODO", OutputMode::Content, 0, None),
        content(root, "second", OutputMode::Content, 1, None),
        content(root, "TODO", OutputMode::FilesOnly, 0, None),
        content(root, "TODO", OutputMode::Count, 0, None),
        content(root, "TODO", OutputMode::Content, 0, Some("*.py")),
        content(root, "it's|x = [0-9]", OutputMode::Content, 0, None),
        content(
            &format!("{root}/src/a.rs"),
            "TODO",
            OutputMode::Content,
            0,
            None,
        ),
    ]
}

/// (path below `root`, line, text, is_context) of each hit, for comparing
/// with a literal list.
fn hit_tuples<'a>(lines: &'a [LineHit], root: &str) -> Vec<(&'a str, u64, &'a str, bool)> {
    lines
        .iter()
        .map(|hit| {
            (
                hit.path.trim_start_matches(root),
                hit.line,
                hit.text.as_str(),
                hit.is_context,
            )
        })
        .collect()
}

#[test]
fn rg_branch_agrees_with_the_local_search() {
    // Skips loudly without rg, and fails under CADUCEUS_REQUIRE_ALL=1.
    if !have_program("rg") {
        return;
    }
    let (_dir, root) = fixture();
    for query in queries(&root) {
        let expected = local::search(&query).unwrap();
        assert_eq!(
            search_via(&query, &rg_command(&query)).unwrap(),
            expected,
            "{query:?}"
        );
        // The full script picks rg too.
        let (stdout, stderr, code) = run(&shell_command(&query));
        assert!(stdout.starts_with(MARK_RG), "{stdout}");
        assert_eq!(
            parse_shell_output(&query, &stdout, &stderr, code).unwrap(),
            expected
        );
    }
    let names = SearchQuery {
        root: root.clone(),
        target: SearchTarget::Files {
            glob: "*.rs".into(),
        },
        max_entries: 100,
    };
    let SearchHits::Files { files, .. } = search_via(&names, &rg_command(&names)).unwrap() else {
        panic!("files expected");
    };
    let mut listed: Vec<_> = files
        .iter()
        .map(|f| f.path.trim_start_matches(&root).to_owned())
        .collect();
    listed.sort();
    assert_eq!(listed, ["/src/a.rs", "/src/nested/c.rs"]);
}

#[test]
fn fallback_branch_finds_the_same_minus_gitignore() {
    let (_dir, root) = fixture();
    let query = content(&root, "TODO", OutputMode::Content, 0, None);
    let SearchHits::Lines { lines, complete } =
        search_via(&query, &fallback_command(&query)).unwrap()
    else {
        panic!("lines expected");
    };
    assert!(complete);
    let found = hit_tuples(&lines, &root);
    // No .gitignore in the fallback: ignored/ and *.log show up; hidden
    // directories and the binary file do not.
    assert_eq!(
        found,
        [
            ("/app.log", 1, "TODO logged", false),
            ("/ignored/x.rs", 1, "TODO ignored", false),
            ("/src/a.rs", 2, "// TODO first", false),
            ("/src/a.rs", 4, "// TODO second", false),
            ("/src/b.py", 1, "# TODO python", false),
            ("/src/nested/c.rs", 2, "TODO nested", false),
        ]
    );
    // Everything that is not about ignore files agrees with the local search.
    for query in [
        content(&root, "second", OutputMode::Content, 1, None),
        content(&root, "TODO", OutputMode::Content, 0, Some("*.py")),
        content(&format!("{root}/src"), "TODO", OutputMode::Count, 0, None),
        content(
            &format!("{root}/src"),
            "TODO",
            OutputMode::FilesOnly,
            0,
            None,
        ),
        content(
            &format!("{root}/src/a.rs"),
            "TODO",
            OutputMode::Content,
            0,
            None,
        ),
    ] {
        let expected = local::search(&query).unwrap();
        assert_eq!(
            search_via(&query, &fallback_command(&query)).unwrap(),
            expected,
            "{query:?}"
        );
    }
}

#[test]
fn fallback_file_names_carry_times() {
    let (_dir, root) = fixture();
    let query = SearchQuery {
        root: format!("{root}/src"),
        target: SearchTarget::Files {
            glob: "*.rs".into(),
        },
        max_entries: 100,
    };
    let expected = local::search(&query).unwrap();
    let found = search_via(&query, &fallback_command(&query)).unwrap();
    let (
        SearchHits::Files { files: found, .. },
        SearchHits::Files {
            files: expected, ..
        },
    ) = (found, expected)
    else {
        panic!("files expected");
    };
    let paths = |files: &[FileHit]| files.iter().map(|f| f.path.clone()).collect::<Vec<_>>();
    assert_eq!(paths(&found), paths(&expected));
    assert!(found.iter().all(|file| file.mtime_ns.is_some()));
}

#[test]
fn missing_root_is_reported_by_the_script() {
    let query = content("/definitely/not/here", "x", OutputMode::Content, 0, None);
    let (stdout, stderr, code) = run(&shell_command(&query));
    assert_eq!(
        parse_shell_output(&query, &stdout, &stderr, code).unwrap(),
        SearchHits::RootNotFound
    );
}

#[test]
fn parses_rg_null_output_and_errors() {
    let query = content("/r", "x", OutputMode::Content, 1, None);
    let stdout =
        format!("{MARK_RG}\n/r/a:b.py\u{0}3-before\n/r/a:b.py\u{0}4:x = 1\n--\n/r/z.py\u{0}1:x\n");
    let SearchHits::Lines { lines, .. } = parse_shell_output(&query, &stdout, "", 0).unwrap()
    else {
        panic!("lines expected");
    };
    assert_eq!(lines.len(), 3);
    assert_eq!(
        (lines[0].path.as_str(), lines[0].line, lines[0].is_context),
        ("/r/a:b.py", 3, true)
    );
    assert_eq!(
        (lines[1].text.as_str(), lines[1].is_context),
        ("x = 1", false)
    );

    let error = parse_shell_output(
        &query,
        &format!("{MARK_RG}\n"),
        "rg: regex parse error:\n    (?:foo()\n    ^\nerror: unclosed group",
        2,
    )
    .unwrap_err();
    assert!(
        error.to_string().starts_with("rg: regex parse error:"),
        "{error}"
    );
    // Diagnostics merged into stdout are never taken for results.
    let merged =
        format!("{MARK_RG}\nrg: /r/secret: Permission denied (os error 13)\n/r/z.py\u{0}1:x\n");
    let SearchHits::Lines { lines, .. } = parse_shell_output(&query, &merged, "", 2).unwrap()
    else {
        panic!("lines expected");
    };
    assert_eq!(lines.len(), 1);
}

#[test]
fn parses_grep_context_with_dashed_names() {
    let query = content("/r", "x", OutputMode::Content, 1, None);
    let stdout =
        format!("{MARK_GREP}\n/r/a-1-b.py-6-ctx-9-here\n/r/a-1-b.py:7:x match\n--\n/r/c.py:2:x\n");
    let SearchHits::Lines { lines, .. } = parse_shell_output(&query, &stdout, "", 0).unwrap()
    else {
        panic!("lines expected");
    };
    let found = hit_tuples(&lines, "");
    assert_eq!(
        found,
        [
            ("/r/a-1-b.py", 6, "ctx-9-here", true),
            ("/r/a-1-b.py", 7, "x match", false),
            ("/r/c.py", 2, "x", false),
        ]
    );
}

#[test]
fn output_caps_mark_the_answer_incomplete() {
    let (_dir, root) = fixture();
    let mut query = content(&root, "TODO", OutputMode::Content, 0, None);
    query.max_entries = 1;
    let SearchHits::Lines { lines, complete } =
        search_via(&query, &fallback_command(&query)).unwrap()
    else {
        panic!("lines expected");
    };
    assert_eq!(lines.len(), 1);
    assert!(!complete);
}

#[test]
fn quoting_survives_hostile_text() {
    assert_eq!(shell_quote("it's"), "'it'\\''s'");
    let (stdout, _, _) = run(&format!("printf %s {}", shell_quote("a'b\"c $(x) `y`")));
    assert_eq!(stdout, "a'b\"c $(x) `y`");
}
