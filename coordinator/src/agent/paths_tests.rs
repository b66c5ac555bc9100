use super::*;

#[test]
fn relative_paths_resolve_against_the_cwd() {
    assert_eq!(
        canonical_path("/repo", "src/../lib/a.rs", None),
        "/repo/lib/a.rs"
    );
    assert_eq!(canonical_path("/repo/", "./x//y/", None), "/repo/x/y");
    assert_eq!(canonical_path("/repo", "/etc/hosts", None), "/etc/hosts");
    assert_eq!(canonical_path("/", "../../x", None), "/x");
}

#[test]
fn tilde_expands_only_with_a_known_home() {
    assert_eq!(
        canonical_path("/repo", "~/notes.md", Some("/home/u")),
        "/home/u/notes.md"
    );
    assert_eq!(canonical_path("/repo", "~", Some("/home/u")), "/home/u");
    assert_eq!(
        canonical_path("/repo", "~/notes.md", None),
        "/repo/~/notes.md"
    );
}

#[test]
fn overlap_is_a_shared_component_prefix() {
    // hermes' TestPathsOverlap cases.
    assert!(paths_overlap("src", "src/sub/a.py"));
    assert!(!paths_overlap("/repo/x", "/repo/xy"));
    assert!(paths_overlap("/repo/x", "/repo/x"));
    assert!(paths_overlap("/repo", "/repo/x/y"));
    assert!(!paths_overlap("/repo/a", "/repo/b"));
    assert!(!paths_overlap("", "/repo"));
}
