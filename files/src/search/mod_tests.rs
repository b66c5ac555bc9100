use super::*;

#[test]
fn file_name_glob_follows_hermes() {
    assert_eq!(file_name_glob("*.py"), "*.py");
    assert_eq!(file_name_glob("config"), "*config");
    assert_eq!(file_name_glob("src/*.rs"), "*.rs");
    assert_eq!(file_name_glob("**/test_*.py"), "*test_*.py");
}

#[test]
fn mtime_sort_is_newest_first_then_path() {
    let hit = |path: &str, mtime: i64| FileHit {
        path: path.into(),
        mtime_ns: Some(mtime),
    };
    let mut files = vec![hit("/b", 1), hit("/a", 1), hit("/c", 5)];
    sort_by_mtime(&mut files);
    let order: Vec<_> = files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(order, ["/c", "/a", "/b"]);
}
