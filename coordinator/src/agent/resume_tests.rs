use caduceus_llm::{ChatMessage, ToolCall};

use super::*;
use crate::agent::store::{CallResult, CallStart, ResumeSpec, SessionRow, SessionStore};

fn open(dir: &tempfile::TempDir) -> (std::path::PathBuf, SessionStore) {
    let path = dir.path().join("state.db");
    let store = SessionStore::open(&path, true).unwrap();
    store.session_started(SessionRow {
        id: "s".into(),
        parent_id: None,
        root_id: "s".into(),
        depth: 0,
        task_id: "t".into(),
        model: "replay:x".into(),
        prompt: "go".into(),
        parent_call_id: None,
        task_index: None,
        spec: ResumeSpec {
            max_iterations: 9,
            role: Some("orchestrator".into()),
            ..ResumeSpec::default()
        },
    });
    (path, store)
}

fn messages(store: &SessionStore, messages: &[ChatMessage]) {
    for (index, message) in messages.iter().enumerate() {
        store.message("s", index, message, None);
    }
}

async fn start(store: &SessionStore, turn: usize, id: &str, tool: &str) {
    store
        .call_started(CallStart {
            session_id: "s".into(),
            turn,
            call_id: id.into(),
            tool: tool.into(),
            arguments: "{}".into(),
            task_id: "t".into(),
        })
        .await;
}

fn finish(store: &SessionStore, turn: usize, id: &str, result: &str) {
    store.call_finished(CallResult {
        session_id: "s".into(),
        turn,
        call_id: id.into(),
        result: result.into(),
        status: "ok".into(),
        worker: Some("w1".into()),
    });
}

async fn restored(path: &std::path::Path, store: &SessionStore) -> Restored {
    store.flush().await;
    let session = store::read_session(path, "s").unwrap().unwrap();
    restore(path, &session).unwrap()
}

#[test]
fn the_unknown_outcome_reads_exactly_as_promised() {
    assert_eq!(
        unknown_outcome(),
        "{\"error\": \"The coordinator restarted while this call was running; its outcome is unknown. Check before repeating it.\"}"
    );
}

#[tokio::test]
async fn an_interrupted_turn_is_answered_from_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = open(&dir);
    let call = |id: &str, tool: &str| ToolCall::new(id, tool, "{}");
    messages(
        &store,
        &[
            ChatMessage::system("sys"),
            ChatMessage::user("go"),
            // An earlier turn reused the id c1; its record must not answer the new c1.
            ChatMessage::assistant(None, vec![call("c1", "terminal")]),
            ChatMessage::tool_result("c1", "{\"output\": \"old\"}"),
            ChatMessage::assistant(
                Some("four calls".into()),
                vec![
                    call("c1", "read_file"),
                    call("c2", "terminal"),
                    call("c3", "delegate_task"),
                    call("c4", "terminal"),
                ],
            ),
            // One answer of the turn made it to the transcript: the turn is answered again.
            ChatMessage::tool_result("c1", "{\"content\": \"x\"}"),
        ],
    );
    start(&store, 2, "c1", "terminal").await;
    finish(&store, 2, "c1", "{\"output\": \"old\"}");
    start(&store, 4, "c1", "read_file").await;
    finish(&store, 4, "c1", "{\"content\": \"x\"}");
    start(&store, 4, "c2", "terminal").await;
    start(&store, 4, "c3", "delegate_task").await;
    let restored = restored(&path, &store).await;

    assert_eq!(
        restored.messages.len(),
        5,
        "the partial answers are dropped"
    );
    assert_eq!(restored.api_calls, 2);
    assert_eq!(restored.workers, BTreeSet::from(["w1".to_owned()]));
    let Next::Calls { calls, recovered } = restored.next else {
        panic!("expected the interrupted turn, got {:?}", restored.next);
    };
    assert_eq!(calls.len(), 4);
    assert_eq!(
        recovered.get("c1"),
        Some(&Recovered::Done {
            result: "{\"content\": \"x\"}".into(),
            status: CallStatus::Ok,
            worker: Some("w1".into())
        })
    );
    assert_eq!(recovered.get("c2"), Some(&Recovered::Unknown));
    assert_eq!(recovered.get("c3"), Some(&Recovered::Adopt));
    assert_eq!(recovered.get("c4"), None, "never dispatched: it runs");
}

#[tokio::test]
async fn a_conversation_stopped_between_steps_carries_on_or_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = open(&dir);
    messages(
        &store,
        &[
            ChatMessage::system("sys"),
            ChatMessage::user("go"),
            ChatMessage::assistant(None, vec![ToolCall::new("c1", "terminal", "{}")]),
            ChatMessage::tool_result("c1", "{}"),
        ],
    );
    assert!(matches!(restored(&path, &store).await.next, Next::Request));

    store.message(
        "s",
        4,
        &ChatMessage::assistant(Some("done".into()), Vec::new()),
        None,
    );
    let next = restored(&path, &store).await.next;
    assert!(
        matches!(&next, Next::Finished { text, max_iterations: false } if text == "done"),
        "{next:?}"
    );

    store.message(
        "s",
        5,
        &ChatMessage::user(super::super::messages::SUMMARY_REQUEST),
        None,
    );
    store.message(
        "s",
        6,
        &ChatMessage::assistant(Some("summary".into()), Vec::new()),
        None,
    );
    let next = restored(&path, &store).await.next;
    assert!(
        matches!(&next, Next::Finished { text, max_iterations: true } if text == "summary"),
        "{next:?}"
    );
}

#[tokio::test]
async fn a_stored_spec_gives_back_the_session_it_describes() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = open(&dir);
    store.flush().await;
    let session = store::read_session(&path, "s").unwrap().unwrap();
    let spec = spec_of(&session, CancellationToken::new());
    assert_eq!(
        (spec.max_iterations, spec.role, spec.task_id.as_str()),
        (9, Some(Role::Orchestrator), "t")
    );
    assert_eq!(spec.system_prompt, None);
}
