use super::*;

#[test]
fn overlap_samples_from_hermes() {
    assert!(paths_overlap("src", "src/sub/a.py"));
    assert!(!paths_overlap("/repo/x", "/repo/xy"));
    assert!(paths_overlap("/repo/x", "/repo/x"));
    assert!(paths_overlap("/repo", "/repo/x/y"));
    assert!(!paths_overlap("/repo/a", "/repo/b"));
    assert!(!paths_overlap("", "/repo"));
    assert!(!paths_overlap("/a", "a"));
}

#[test]
fn canonical_path_joins_expands_and_normalizes() {
    assert_eq!(
        canonical_path("/work", "src/./a.py", None),
        "/work/src/a.py"
    );
    assert_eq!(canonical_path("/work/sub", "../x//y/", None), "/work/x/y");
    assert_eq!(canonical_path("/work", "/etc/../tmp", None), "/tmp");
    assert_eq!(
        canonical_path("/work", "~/notes.md", Some("/home/u")),
        "/home/u/notes.md"
    );
    assert_eq!(canonical_path("/work", "~", Some("/home/u")), "/home/u");
    // Without a known home the tilde is an ordinary name.
    assert_eq!(canonical_path("/work", "~/x", None), "/work/~/x");
    assert_eq!(
        canonical_path("/work", "~bob/x", Some("/home/u")),
        "/work/~bob/x"
    );
    assert_eq!(canonical_path("/", "../../..", None), "/");
    assert_eq!(canonical_path("/work", ".", None), "/work");
}

#[test]
fn normalize_keeps_leading_dotdot_of_relative_paths() {
    assert_eq!(normalize("../a/./b/.."), "../a");
    assert_eq!(normalize("a/.."), ".");
    assert_eq!(normalize("//x///y"), "/x/y");
}

#[test]
fn name_helpers() {
    assert_eq!(parent("/a/b.py"), "/a");
    assert_eq!(parent("/b.py"), "/");
    assert_eq!(file_name("/a/b.py"), "b.py");
    assert_eq!(extension("/a/b.PY"), ".py");
    assert_eq!(extension("/a/.bashrc"), "");
    assert_eq!(extension("/a/.env.local"), ".local");
    assert_eq!(extension("/a/archive.tar.gz"), ".gz");
    assert_eq!(extension("/a/Makefile"), "");
    assert!(is_within("/a/b/c", "/a/b"));
    assert!(is_within("/a/b", "/a/b/"));
    assert!(!is_within("/a/bc", "/a/b"));
    assert!(is_within("/x", "/"));
    assert!(has_traversal_component("a/../b"));
    assert!(!has_traversal_component("a/..b/c"));
}
