use super::*;

#[test]
fn error_looking_results() {
    assert!(looks_like_error(r#"{"error":"boom"}"#));
    assert!(looks_like_error(r#"{"status":"Failed","output":""}"#));
    assert!(looks_like_error("Error: no such file"));
    assert!(!looks_like_error(
        r#"{"output":"error: in the output is fine","exit_code":0,"error":null}"#
    ));
    assert!(!looks_like_error("all good"));
}

#[test]
fn think_blocks_are_dropped_from_summaries() {
    assert_eq!(strip_think("<think>hmm</think>\n Done."), "Done.");
    assert_eq!(strip_think("  plain  "), "plain");
    assert_eq!(strip_think("a<think>x"), "a");
}

#[test]
fn the_root_prompt_mentions_only_tools_the_session_has() {
    let with: BTreeSet<String> = ["delegate_task".to_owned(), "todo".to_owned()]
        .into_iter()
        .collect();
    assert!(root_system_prompt(&with).contains("delegate_task hands independent subtasks"));
    assert!(!root_system_prompt(&BTreeSet::new()).contains("delegate_task"));
}
