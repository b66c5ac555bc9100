use super::batch::{looks_like_error, result_object};
use super::children::{ChildEnd, ChildWait, child_entry};
use super::*;

#[test]
fn error_looking_results() {
    let looks_like_error =
        |content: &str| looks_like_error(content, result_object(content).as_ref());
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
    assert!(root_system_prompt(&with, None).contains("delegate_task hands independent subtasks"));
    assert!(!root_system_prompt(&BTreeSet::new(), None).contains("delegate_task"));
}

#[tokio::test]
async fn a_child_past_its_wall_clock_limit_is_cancelled_and_reported() {
    let (report, rx) = oneshot::channel::<SessionOutcome>();
    let cancel = CancellationToken::new();
    // The child winds down when cancelled and reports what it did.
    let told = cancel.clone();
    tokio::spawn(async move {
        told.cancelled().await;
        let _ = report.send(SessionOutcome {
            status: EndStatus::Interrupted,
            final_text: None,
            error: None,
            api_calls: 2,
            duration: Duration::from_millis(60),
            tokens: Tokens::default(),
            tool_trace: vec![TraceEntry {
                tool: "terminal".into(),
                args_bytes: 9,
                result_bytes: None,
                status: None,
            }],
            workers: BTreeSet::new(),
            missed_steer: Vec::new(),
            schema: None,
            killed_processes: Vec::new(),
        });
    });
    // A child that shows no progress at all: the inactivity cap (shorter
    // than the stall thresholds) ends it.
    let limits = delegate::StallLimits {
        cap: Some(Duration::from_millis(50)),
        ..delegate::DelegationConfig::default().stall_limits()
    };
    let wait = ChildWait::Running {
        report: rx,
        shared: Arc::new(SessionShared::default()),
    };
    let end = tokio::time::timeout(Duration::from_secs(5), wait.finish(limits, &cancel))
        .await
        .unwrap();
    assert!(cancel.is_cancelled(), "the child is told to stop");
    let task = ChildTask {
        index: 2,
        goal: "slow".into(),
        context: None,
        role: delegate::Role::Leaf,
        labels: Default::default(),
        output_schema: None,
    };
    let entry = child_entry(&task, "s", "t", "m", end);
    assert_eq!(
        (entry.status, entry.exit_reason.as_str(), entry.api_calls),
        (ChildStatus::Timeout, "timeout", 2)
    );
    assert_eq!(entry.tool_trace.len(), 1);
    assert_eq!(
        entry.error.as_deref(),
        Some(
            "Subagent timed out after 0.05s with 2 API call(s) completed — likely stuck on a slow API call or unresponsive network request."
        )
    );
}

#[tokio::test]
async fn a_child_that_vanishes_without_a_report_is_an_error_entry() {
    let (report, rx) = oneshot::channel::<SessionOutcome>();
    drop(report);
    let end = ChildWait::Running {
        report: rx,
        shared: Arc::new(SessionShared::default()),
    }
    .finish(
        delegate::DelegationConfig::default().stall_limits(),
        &CancellationToken::new(),
    )
    .await;
    let task = ChildTask {
        index: 0,
        goal: "g".into(),
        context: None,
        role: delegate::Role::Leaf,
        labels: Default::default(),
        output_schema: None,
    };
    let entry = child_entry(&task, "s", "t", "m", end);
    assert_eq!(entry.status, ChildStatus::Error);
    assert_eq!(
        entry.error.as_deref(),
        Some("The subagent stopped without reporting a result.")
    );
}

#[test]
fn child_entries_follow_hermes_status_rules() {
    let task = ChildTask {
        index: 0,
        goal: "g".into(),
        context: None,
        role: delegate::Role::Leaf,
        labels: Default::default(),
        output_schema: None,
    };
    let outcome = |status, text: Option<&str>| SessionOutcome {
        status,
        final_text: text.map(str::to_owned),
        error: None,
        api_calls: 3,
        duration: Duration::from_millis(1500),
        tokens: Tokens::default(),
        tool_trace: Vec::new(),
        workers: BTreeSet::new(),
        missed_steer: Vec::new(),
        schema: None,
        killed_processes: Vec::new(),
    };
    let entry = |status, text| {
        child_entry(
            &task,
            "s",
            "t",
            "m",
            ChildEnd::Finished(outcome(status, text)),
        )
    };
    assert_eq!(
        entry(EndStatus::Completed, Some("done")).status,
        ChildStatus::Completed
    );
    let summarized = entry(EndStatus::MaxIterations, Some("partial"));
    assert_eq!(
        (summarized.status, summarized.exit_reason.as_str()),
        (ChildStatus::Completed, "max_iterations")
    );
    let empty = entry(EndStatus::Completed, Some("(empty)"));
    assert_eq!(
        (empty.status, empty.error.as_deref()),
        (
            ChildStatus::Failed,
            Some("Subagent did not produce a response.")
        )
    );
    assert_eq!(
        entry(EndStatus::Interrupted, None).status,
        ChildStatus::Interrupted
    );
    assert_eq!(entry(EndStatus::Crashed, None).status, ChildStatus::Error);
    assert_eq!(entry(EndStatus::Completed, Some("x")).duration_seconds, 1.5);
}

#[test]
fn a_steer_is_read_once_or_handed_back_as_missed_when_the_session_ends() {
    let shared = SessionShared::default();
    assert!(shared.steer("first".into()));
    assert_eq!(shared.take_steers(), ["first"]);
    assert!(shared.take_steers().is_empty(), "read once");
    assert!(shared.steer("unread".into()));
    assert_eq!(shared.close_steering(), ["unread"]);
    assert!(!shared.accepting_steer());
    assert!(!shared.steer("after the end".into()), "too late");
    assert!(shared.take_steers().is_empty());
}

#[test]
fn a_missed_steer_is_on_the_entry_and_noted_in_the_summary() {
    let task = ChildTask {
        index: 0,
        goal: "g".into(),
        context: None,
        role: delegate::Role::Leaf,
        labels: Default::default(),
        output_schema: None,
    };
    let outcome = SessionOutcome {
        status: EndStatus::Completed,
        final_text: Some("old plan done".into()),
        error: None,
        api_calls: 1,
        duration: Duration::from_millis(10),
        tokens: Tokens::default(),
        tool_trace: Vec::new(),
        workers: BTreeSet::new(),
        missed_steer: vec!["focus on pricing instead".into()],
        schema: None,
        killed_processes: Vec::new(),
    };
    let entry = child_entry(&task, "s", "t", "m", ChildEnd::Finished(outcome));
    assert_eq!(entry.status, ChildStatus::Completed);
    assert_eq!(
        entry.missed_steer.as_deref(),
        Some("focus on pricing instead")
    );
    assert_eq!(
        entry.summary.as_deref(),
        Some(
            "old plan done\n\n[steer did not land — the subagent finished before it could be delivered: focus on pricing instead]"
        )
    );
}
