use super::*;

#[test]
fn diff_matches_difflib_layout() {
    let diff = unified("a\nb\nc\n", "a\nB\nc\n", "a/x.py", "b/x.py");
    assert_eq!(
        diff,
        "--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"
    );
    assert_eq!(unified("same\n", "same\n", "a/x", "b/x"), "");
    assert_eq!(label("a", "/abs/x.py"), "a/abs/x.py");
    assert_eq!(label("b", "src/x.py"), "b/src/x.py");
}

#[test]
fn new_file_diff() {
    let diff = unified("", "one\ntwo\n", "/dev/null", "b/n.txt");
    assert_eq!(
        diff,
        "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1,2 @@\n+one\n+two\n"
    );
}
