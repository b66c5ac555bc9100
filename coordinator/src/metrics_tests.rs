#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn calls_are_counted_by_tool_and_status_and_timed_by_tool() {
    let metrics = CoordinatorMetrics::new();
    metrics.call_finished("terminal", CallStatus::Ok, Duration::from_millis(3));
    metrics.call_finished("terminal", CallStatus::Error, Duration::from_millis(4));
    metrics.call_finished("terminal", CallStatus::Ok, Duration::from_millis(5));
    let text = futures::executor::block_on(metrics.render(LiveState::default()));
    assert!(
        text.contains(r#"caduceus_tool_calls_total{tool="terminal",status="ok"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"caduceus_tool_calls_total{tool="terminal",status="error"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"caduceus_tool_call_duration_seconds_count{tool="terminal"} 3"#),
        "{text}"
    );
}

#[test]
fn the_gauges_are_what_the_live_state_says_now() {
    let metrics = CoordinatorMetrics::new();
    let live = LiveState {
        worker_states: vec!["ready".into(), "ready".into(), "suspect".into()],
        environment_backends: vec!["docker".into()],
        top_level_sessions: 2,
        child_sessions: 1,
        approvals_pending: 4,
    };
    let text = futures::executor::block_on(metrics.render(live));
    assert!(
        text.contains(r#"caduceus_workers{state="ready"} 2"#),
        "{text}"
    );
    assert!(
        text.contains(r#"caduceus_workers{state="suspect"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"caduceus_environments{backend="docker"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"caduceus_sessions{kind="top_level"} 2"#),
        "{text}"
    );
    assert!(text.contains("caduceus_approvals_pending 4"), "{text}");
    // A state that is gone is gone from the next scrape.
    let text = futures::executor::block_on(metrics.render(LiveState::default()));
    assert!(!text.contains(r#"state="suspect""#), "{text}");
}

#[test]
fn unknown_release_reasons_are_folded() {
    let metrics = CoordinatorMetrics::new();
    metrics.environment_released("idle");
    metrics.environment_released("made-up-by-a-worker");
    let text = futures::executor::block_on(metrics.render(LiveState::default()));
    assert!(
        text.contains(r#"caduceus_environments_released_total{reason="idle"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(r#"caduceus_environments_released_total{reason="other"} 1"#),
        "{text}"
    );
}
