use std::time::{Duration, SystemTime};

use super::*;
use crate::search::test_fixture::{content, fixture, temp_root};

fn hit(root: &str, rel: &str, line: u64, text: &str, is_context: bool) -> LineHit {
    LineHit {
        path: format!("{root}/{rel}"),
        line,
        text: text.to_owned(),
        is_context,
    }
}

#[test]
fn content_search_respects_ignores_and_sorts() {
    let (_dir, root) = fixture();
    let hits = search(&content(&root, "TODO", OutputMode::Content, 0, None)).unwrap();
    assert_eq!(
        hits,
        SearchHits::Lines {
            lines: vec![
                hit(&root, "src/a.rs", 2, "// TODO first", false),
                hit(&root, "src/a.rs", 4, "// TODO second", false),
                hit(&root, "src/b.py", 1, "# TODO python", false),
                hit(&root, "src/nested/c.rs", 2, "TODO nested", false),
            ],
            complete: true,
        }
    );
}

#[test]
fn context_lines_are_marked() {
    let (_dir, root) = fixture();
    let hits = search(&content(&root, "second", OutputMode::Content, 1, None)).unwrap();
    assert_eq!(
        hits,
        SearchHits::Lines {
            lines: vec![
                hit(&root, "src/a.rs", 3, "let x = 1;", true),
                hit(&root, "src/a.rs", 4, "// TODO second", false),
            ],
            complete: true,
        }
    );
}

#[test]
fn files_only_count_and_glob() {
    let (_dir, root) = fixture();
    let SearchHits::Files { files, .. } =
        search(&content(&root, "TODO", OutputMode::FilesOnly, 0, None)).unwrap()
    else {
        panic!("files expected");
    };
    let names: Vec<_> = files
        .iter()
        .map(|f| f.path.trim_start_matches(&root))
        .collect();
    assert_eq!(names, ["/src/a.rs", "/src/b.py", "/src/nested/c.rs"]);

    let SearchHits::Counts { counts, .. } =
        search(&content(&root, "TODO", OutputMode::Count, 0, None)).unwrap()
    else {
        panic!("counts expected");
    };
    let counted: Vec<_> = counts
        .iter()
        .map(|c| (c.path.trim_start_matches(&root), c.count))
        .collect();
    assert_eq!(
        counted,
        [("/src/a.rs", 2), ("/src/b.py", 1), ("/src/nested/c.rs", 1)]
    );

    let SearchHits::Lines { lines, .. } = search(&content(
        &root,
        "TODO",
        OutputMode::Content,
        0,
        Some("*.py"),
    ))
    .unwrap() else {
        panic!("lines expected");
    };
    assert_eq!(
        lines,
        vec![hit(&root, "src/b.py", 1, "# TODO python", false)]
    );
}

#[test]
fn a_file_root_is_searched_even_if_ignored() {
    let (_dir, root) = fixture();
    let query = content(
        &format!("{root}/app.log"),
        "TODO",
        OutputMode::Content,
        0,
        None,
    );
    let SearchHits::Lines { lines, .. } = search(&query).unwrap() else {
        panic!("lines expected");
    };
    assert_eq!(lines, vec![hit(&root, "app.log", 1, "TODO logged", false)]);
}

#[test]
fn file_names_sorted_newest_first() {
    let (_dir, root) = fixture();
    let base = SystemTime::now() - Duration::from_secs(3600);
    for (rel, age) in [("src/a.rs", 30), ("src/nested/c.rs", 10), ("src/b.py", 20)] {
        let file = std::fs::File::options()
            .write(true)
            .open(format!("{root}/{rel}"))
            .unwrap();
        file.set_modified(base - Duration::from_secs(age)).unwrap();
    }
    let query = SearchQuery {
        root: root.clone(),
        target: SearchTarget::Files {
            glob: "*.rs".into(),
        },
        max_entries: 100,
    };
    let SearchHits::Files { files, complete } = search(&query).unwrap() else {
        panic!("files expected");
    };
    let names: Vec<_> = files
        .iter()
        .map(|f| f.path.trim_start_matches(&root))
        .collect();
    assert_eq!(names, ["/src/nested/c.rs", "/src/a.rs"]);
    assert!(complete);
}

#[test]
fn missing_root_bad_regex_and_caps() {
    let (_dir, root) = fixture();
    let missing = content(&format!("{root}/nope"), "x", OutputMode::Content, 0, None);
    assert_eq!(search(&missing).unwrap(), SearchHits::RootNotFound);
    let bad = search(&content(&root, "foo(", OutputMode::Content, 0, None)).unwrap_err();
    assert!(
        matches!(bad, FsError::Search(ref message) if message.contains("regex parse error")),
        "{bad}"
    );
    let newline = search(&content(&root, "a\\nb", OutputMode::Content, 0, None));
    assert!(newline.is_err());

    let mut capped = content(&root, "TODO", OutputMode::Content, 0, None);
    capped.max_entries = 2;
    let SearchHits::Lines { lines, complete } = search(&capped).unwrap() else {
        panic!("lines expected");
    };
    assert_eq!(lines.len(), 2);
    assert!(!complete);
}

#[test]
fn parallel_search_gives_the_sequential_prefix() {
    let (_dir, root) = temp_root();
    for index in 0..400 {
        let sub = format!("{root}/d{}", index % 7);
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(
            format!("{sub}/f{index:03}.txt"),
            "needle one\nhay\nneedle two\n",
        )
        .unwrap();
    }
    let mut everything = content(&root, "needle", OutputMode::Content, 0, None);
    everything.max_entries = 10_000;
    let full = search(&everything).unwrap();
    let SearchHits::Lines {
        lines: all,
        complete,
    } = full
    else {
        panic!("lines expected");
    };
    assert!(complete);
    assert_eq!(all.len(), 800);
    let mut sorted = all.clone();
    crate::search::sort_lines(&mut sorted);
    assert_eq!(all, sorted, "results come back in path order");
    for cap in [1, 101, 799] {
        let mut query = content(&root, "needle", OutputMode::Content, 0, None);
        query.max_entries = cap;
        let SearchHits::Lines { lines, complete } = search(&query).unwrap() else {
            panic!("lines expected");
        };
        assert!(!complete);
        assert_eq!(lines[..], all[..cap], "cap {cap}");
    }
    let mut counted = content(&root, "needle", OutputMode::Count, 0, None);
    counted.max_entries = 50;
    let SearchHits::Counts { counts, complete } = search(&counted).unwrap() else {
        panic!("counts expected");
    };
    assert!(!complete);
    let expected: Vec<String> = all
        .iter()
        .step_by(2)
        .take(50)
        .map(|hit| hit.path.clone())
        .collect();
    assert_eq!(
        counts.iter().map(|c| c.path.clone()).collect::<Vec<_>>(),
        expected
    );
}
