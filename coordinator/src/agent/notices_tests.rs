use super::*;

fn notice(kind: &str, text: &str) -> EnvironmentNotice {
    EnvironmentNotice {
        task_id: "t1".to_owned(),
        kind: kind.to_owned(),
        process_id: "proc_abc".to_owned(),
        text: text.to_owned(),
        session_id: "s1".to_owned(),
    }
}

#[test]
fn a_finished_process_reads_like_hermes() {
    let text = notice_message(&notice(
        "process_exited",
        r#"{"command":"make build","exit_code":0,"output":"ok\n"}"#,
    ));
    assert_eq!(
        text,
        "[IMPORTANT: Background process proc_abc completed normally (exit code 0).\nCommand: make build\nOutput:\nok\n]"
    );
    let killed = notice_message(&notice(
        "process_exited",
        r#"{"command":"sleep 9","exit_code":-15,"completion_reason":"killed"}"#,
    ));
    assert!(killed.starts_with("[IMPORTANT: Background process proc_abc terminated by caduceus (exit code -15, SIGTERM)."), "{killed}");
    let failed = notice_message(&notice(
        "process_exited",
        r#"{"command":"false","exit_code":1,"output":""}"#,
    ));
    assert!(failed.contains(" exited (exit code 1)."), "{failed}");
}

#[test]
fn watch_matches_name_the_pattern() {
    let text = notice_message(&notice(
        "watch_match",
        r#"{"command":"npm run dev","pattern":"ready","output":"ready on :3000","suppressed":2}"#,
    ));
    assert_eq!(
        text,
        "[IMPORTANT: Background process proc_abc matched watch pattern \"ready\".\nCommand: npm run dev\nMatched output:\nready on :3000\n(2 earlier matches were suppressed by rate limit)]"
    );
}

#[test]
fn plain_text_bodies_are_shown_as_is() {
    assert_eq!(
        notice_message(&notice("process_exited", "done")),
        "[IMPORTANT: Background process proc_abc: done]"
    );
    assert!(
        notice_message(&notice("environment_reset", "sandbox lost"))
            .contains("task t1 was reset (sandbox lost)")
    );
}
