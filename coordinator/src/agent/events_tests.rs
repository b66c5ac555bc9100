use serde_json::json;

use super::*;

#[test]
fn sequence_numbers_count_over_the_whole_stream() {
    let (stream, mut rx) = EventStream::new();
    let child = stream.clone();
    stream.emit("root", SESSION_STARTED, &json!({"depth": 0}));
    child.emit("child", TOOL_STARTED, &json!({"tool": "terminal"}));
    let first = rx.try_recv().unwrap();
    let second = rx.try_recv().unwrap();
    assert_eq!(
        (first.seq, first.session_id.as_str(), first.kind.as_str()),
        (1, "root", "session_started")
    );
    assert_eq!((second.seq, second.session_id.as_str()), (2, "child"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&second.json).unwrap(),
        json!({"tool": "terminal"})
    );
    assert!(stream.is_attached());
    drop(rx);
    assert!(!stream.is_attached());
    // Emitting into a closed stream is harmless.
    stream.emit("root", FINAL, &json!({}));
}

#[test]
fn previews_cut_on_characters() {
    assert_eq!(preview("héllo", 2), "hé…");
    assert_eq!(preview("hi", 2), "hi");
}

#[tokio::test]
async fn closed_resolves_when_the_reader_goes_away() {
    let (stream, rx) = EventStream::new();
    let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), stream.closed()).await;
    assert!(waiting.is_err(), "the reader is still there");
    drop(rx);
    tokio::time::timeout(std::time::Duration::from_secs(5), stream.closed())
        .await
        .expect("closed after the reader left");
}
