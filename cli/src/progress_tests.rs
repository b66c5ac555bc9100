// Test helpers take `json!` literals by value.
#![allow(clippy::needless_pass_by_value)]

use std::sync::{Arc, Mutex};

use serde_json::json;

use super::*;

#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buffer {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

fn event(session: &str, seq: u64, kind: &str, json: Value) -> SessionEvent {
    SessionEvent {
        session_id: session.into(),
        seq,
        kind: kind.into(),
        json: json.to_string(),
    }
}

fn script() -> Vec<SessionEvent> {
    vec![
        event(
            "root",
            1,
            "session_started",
            json!({"depth": 0, "model": "replay:demo.jsonl", "task_id": "task-1", "tools": ["terminal", "delegate_task"]}),
        ),
        event(
            "root",
            2,
            "assistant_text",
            json!({"text": "Splitting\nthe work.", "tool_calls": 1}),
        ),
        event(
            "root",
            3,
            "tool_started",
            json!({"call_id": "d", "tool": "delegate_task", "emoji": "🔀", "arguments": {"tasks": [{"goal": "a"}, {"goal": "b"}]}}),
        ),
        event(
            "root",
            4,
            "child_started",
            json!({"task_index": 0, "goal": "write alpha"}),
        ),
        event(
            "kid",
            5,
            "session_started",
            json!({"depth": 1, "parent_id": "root"}),
        ),
        event(
            "kid",
            6,
            "tool_started",
            json!({"call_id": "t", "tool": "terminal", "emoji": "💻", "arguments": {"command": "echo alpha > alpha.txt"}}),
        ),
        event(
            "kid",
            7,
            "tool_finished",
            json!({"call_id": "t", "tool": "terminal", "status": "ok", "duration_ms": 1020, "worker": "local-2"}),
        ),
        event(
            "kid",
            8,
            "final",
            json!({"status": "completed", "text": "wrote alpha"}),
        ),
        event(
            "root",
            9,
            "child_finished",
            json!({"task_index": 0, "status": "completed", "api_calls": 2, "duration_seconds": 1.3, "workers": ["local-2"]}),
        ),
        event(
            "root",
            10,
            "tool_finished",
            json!({"call_id": "d", "tool": "delegate_task", "status": "ok", "duration_ms": 1500, "worker": null}),
        ),
        event(
            "root",
            11,
            "final",
            json!({"status": "completed", "text": "All done.", "api_calls": 2, "duration_seconds": 1.9}),
        ),
    ]
}

#[test]
fn human_progress_indents_children_and_prints_the_answer_on_stdout() {
    let (out, err) = (Buffer::default(), Buffer::default());
    let mut renderer = Renderer::new(false, false, Box::new(out.clone()), Box::new(err.clone()));
    let mut ending = None;
    for e in script() {
        if let Some(done) = renderer.event(&e) {
            ending = Some(done);
        }
    }
    assert_eq!(
        ending,
        Some(RootFinal {
            status: "completed".into(),
            text: Some("All done.".into()),
            error: None
        })
    );
    assert_eq!(out.text(), "All done.\n");
    let lines: Vec<String> = err.text().lines().map(str::to_owned).collect();
    assert_eq!(
        lines,
        [
            "▶ session root · model replay:demo.jsonl · 2 tools · task task-1",
            "💬 Splitting the work.",
            "↳ subagent 1: write alpha",
            "  💻 terminal  echo alpha > alpha.txt  ✓ 1.02s  @local-2",
            "✓ subagent 1 completed · 2 api calls · 1.3s · on local-2",
            "🔀 delegate_task  2 tasks  ✓ 1.50s",
            "✓ completed · 2 api calls · 1.9s",
        ]
    );
    assert!(!err.text().contains('\r'), "no spinner without a terminal");
}

#[test]
fn json_mode_prints_one_parseable_line_per_event() {
    let (out, err) = (Buffer::default(), Buffer::default());
    let mut renderer = Renderer::new(true, true, Box::new(out.clone()), Box::new(err.clone()));
    for e in script() {
        renderer.event(&e);
    }
    let lines: Vec<Value> = out
        .text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 11);
    assert_eq!(lines[6]["data"]["worker"], "local-2");
    assert_eq!(
        (lines[10]["kind"].as_str(), lines[10]["seq"].as_u64()),
        (Some("final"), Some(11))
    );
    assert!(err.text().is_empty());
}

#[test]
fn the_spinner_draws_only_while_calls_run() {
    let (out, err) = (Buffer::default(), Buffer::default());
    let mut renderer = Renderer::new(false, true, Box::new(out), Box::new(err.clone()));
    renderer.event(&event("r", 1, "session_started", json!({"depth": 0})));
    renderer.tick();
    assert!(!err.text().contains('⠙'));
    renderer.event(&event(
        "r",
        2,
        "tool_started",
        json!({"call_id": "1", "tool": "terminal", "arguments": {"command": "sleep 1"}}),
    ));
    renderer.tick();
    assert!(
        err.text().contains("\r\x1b[2K⠙ 🔧 terminal sleep 1"),
        "{:?}",
        err.text()
    );
}

#[test]
fn argument_summaries() {
    assert_eq!(
        summarize_arguments("write_file", &json!({"path": "a/b.txt", "content": "x"})),
        "a/b.txt"
    );
    assert_eq!(
        summarize_arguments("delegate_task", &json!({"goal": "fix the build"})),
        "fix the build"
    );
    assert_eq!(
        summarize_arguments("mcp__x__y", &json!({"q": "multi\nline"})),
        "multi line"
    );
    assert_eq!(
        summarize_arguments("terminal", &json!({"command": "x".repeat(100)}))
            .chars()
            .count(),
        SUMMARY_CHARS + 1
    );
}
