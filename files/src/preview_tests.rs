use serde_json::json;

use super::*;
use crate::tools::test_support::{Env, args};

#[tokio::test]
async fn a_replace_patch_shows_its_diff_and_leaves_the_file_alone() {
    let env = Env::new();
    env.put("a.txt", "one\ntwo\nthree\n");
    let preview = preview_edit(
        &env.ctx(),
        "patch",
        &args(json!({"path": "a.txt", "old_string": "two", "new_string": "TWO"})),
    )
    .await;
    let EditPreview::Changes { diff, files } = preview else {
        panic!("expected changes, got {preview:?}");
    };
    assert!(diff.contains("-two\n+TWO\n"), "{diff}");
    assert!(diff.contains("--- a/"), "{diff}");
    assert_eq!(files, vec![env.abs("a.txt")]);
    assert_eq!(env.get("a.txt"), "one\ntwo\nthree\n");
}

#[tokio::test]
async fn a_new_file_is_diffed_against_nothing_and_not_created() {
    let env = Env::new();
    let preview = preview_edit(
        &env.ctx(),
        "write_file",
        &args(json!({"path": "new/b.txt", "content": "hello\n"})),
    )
    .await;
    let EditPreview::Changes { diff, .. } = preview else {
        panic!("expected changes, got {preview:?}");
    };
    assert!(diff.starts_with("--- /dev/null\n"), "{diff}");
    assert!(diff.contains("+hello\n"), "{diff}");
    assert!(!env.exists("new/b.txt"));
    assert!(!env.exists("new"));
}

#[tokio::test]
async fn a_v4a_patch_that_moves_and_deletes_changes_nothing_on_disk() {
    let env = Env::new();
    env.put("keep.txt", "x\n");
    env.put("gone.txt", "bye\n");
    let patch_text = "*** Begin Patch\n*** Update File: keep.txt\n@@\n-x\n+y\n*** Delete File: gone.txt\n*** Add File: born.txt\n+new\n*** End Patch\n";
    let preview = preview_edit(
        &env.ctx(),
        "patch",
        &args(json!({"mode": "patch", "patch": patch_text})),
    )
    .await;
    let EditPreview::Changes { diff, files } = preview else {
        panic!("expected changes, got {preview:?}");
    };
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(diff.contains("+++ /dev/null"), "{diff}");
    assert!(diff.contains("-x\n+y\n"), "{diff}");
    assert_eq!(env.get("keep.txt"), "x\n");
    assert!(env.exists("gone.txt"));
    assert!(!env.exists("born.txt"));
}

#[tokio::test]
async fn an_edit_the_tool_refuses_is_refused_with_the_tools_answer() {
    let env = Env::new();
    env.put("a.txt", "one\n");
    let preview = preview_edit(
        &env.ctx(),
        "patch",
        &args(json!({"path": "a.txt", "old_string": "absent", "new_string": "x"})),
    )
    .await;
    let EditPreview::Refused(reply) = preview else {
        panic!("expected a refusal, got {preview:?}");
    };
    assert!(reply.body.contains("Could not find"), "{}", reply.body);
}
