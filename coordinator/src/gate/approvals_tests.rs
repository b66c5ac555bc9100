use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::gate::settings::ApprovalSettings;

fn approvals(timeout: Duration) -> Arc<Approvals> {
    Approvals::new(ApprovalSettings {
        timeout,
        ..ApprovalSettings::default()
    })
}

fn query<'a>(command: &'a str, session: Option<&'a str>) -> Query<'a> {
    Query {
        tool: "terminal",
        command,
        description: "recursive delete",
        pattern_key: "recursive delete",
        task_id: "t1",
        session_id: session,
    }
}

fn pending_id(ruling: &Ruling) -> String {
    match ruling {
        Ruling::Pending { id, .. } => id.clone(),
        other => panic!("expected pending, got {other:?}"),
    }
}

const NOTE: &str = "Command required approval (recursive delete) and was approved by the user.";

#[tokio::test]
async fn without_a_listener_the_call_is_held_and_a_retry_gets_the_same_request() {
    let a = approvals(Duration::from_secs(60));
    let first = a.request(query("rm -rf build", None)).await;
    let id = pending_id(&first);
    assert!(id.starts_with("appr_") && id.len() == 17, "{id}");
    let again = a.request(query("rm -rf build", None)).await;
    assert_eq!(pending_id(&again), id);
    let other = a.request(query("rm -rf dist", None)).await;
    assert_ne!(pending_id(&other), id);

    let listed = a.list();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].id, id, "oldest first");
    assert_eq!(listed[0].command, "rm -rf build");
    assert_eq!(listed[0].task_id, "t1");
    assert_eq!(listed[0].session_id, None);
    assert!(!listed[0].waiting);
    assert!(listed[0].expires_in <= Duration::from_secs(60));
    assert!(listed[0].expires_in > Duration::from_secs(55));
}

#[tokio::test]
async fn approve_once_lets_exactly_one_retry_run() {
    let a = approvals(Duration::from_secs(60));
    let id = pending_id(&a.request(query("rm -rf build", None)).await);
    let answered = a.answer(&id, Decision::Approve(Scope::Once)).unwrap();
    assert_eq!(answered.decision, Decision::Approve(Scope::Once));
    assert!(answered.message.contains("once"), "{}", answered.message);
    assert!(a.list().is_empty());

    // Another command of the same kind is not covered.
    assert!(matches!(
        a.request(query("rm -rf dist", None)).await,
        Ruling::Pending { .. }
    ));
    assert_eq!(
        a.request(query("rm -rf build", None)).await,
        Ruling::Admit {
            note: Some(NOTE.to_owned())
        }
    );
    let next = pending_id(&a.request(query("rm -rf build", None)).await);
    assert_ne!(next, id, "once was consumed");
}

#[tokio::test]
async fn deny_is_read_by_the_retry_with_the_reason() {
    let a = approvals(Duration::from_secs(60));
    let id = pending_id(&a.request(query("rm -rf build", None)).await);
    a.answer(
        &id,
        Decision::Deny {
            reason: Some("keep the cache".into()),
        },
    )
    .unwrap();
    assert_eq!(
        a.request(query("rm -rf build", None)).await,
        Ruling::Refuse(texts::denied_by_user(Some("keep the cache")))
    );
    // Read once; the next retry asks again.
    assert!(matches!(
        a.request(query("rm -rf build", None)).await,
        Ruling::Pending { .. }
    ));
}

#[tokio::test]
async fn session_scope_covers_the_key_within_that_session_only() {
    let a = approvals(Duration::from_secs(60));
    let id = pending_id(&a.request(query("rm -rf build", Some("s1"))).await);
    let answered = a.answer(&id, Decision::Approve(Scope::Session)).unwrap();
    assert!(
        answered.message.contains("session s1"),
        "{}",
        answered.message
    );
    assert_eq!(
        a.request(query("rm -rf build", Some("s1"))).await,
        Ruling::Admit {
            note: Some(NOTE.to_owned())
        }
    );
    assert_eq!(
        a.request(query("rm -r other", Some("s1"))).await,
        Ruling::Admit { note: None }
    );
    assert!(matches!(
        a.request(query("rm -r other", Some("s2"))).await,
        Ruling::Pending { .. }
    ));
    // Without a session, grants belong to the task.
    assert!(matches!(
        a.request(query("rm -r other", None)).await,
        Ruling::Pending { .. }
    ));
    a.forget_session("s1");
    assert!(matches!(
        a.request(query("rm -r third", Some("s1"))).await,
        Ruling::Pending { .. }
    ));
}

#[tokio::test]
async fn always_extends_the_allowlist_and_writes_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "approvals:\n  mode: ask\n").unwrap();
    let a = Approvals::new(ApprovalSettings {
        allowlist_file: Some(path.clone()),
        ..ApprovalSettings::default()
    });
    let id = pending_id(&a.request(query("rm -rf build", None)).await);
    let answered = a.answer(&id, Decision::Approve(Scope::Always)).unwrap();
    assert!(
        answered.message.contains("added to command_allowlist"),
        "{}",
        answered.message
    );
    assert_eq!(a.allowlist(), vec!["recursive delete"]);
    assert!(a.allowlist_covers("rm -r anything", "recursive delete"));
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        "approvals:\n  mode: ask\ncommand_allowlist:\n  - \"recursive delete\"\n"
    );
}

#[tokio::test]
async fn scanner_keys_never_become_permanent() {
    let a = approvals(Duration::from_secs(60));
    let ruling = a
        .request(Query {
            pattern_key: "tirith:homograph_url",
            ..query("curl http://exаmple.com", None)
        })
        .await;
    let Ruling::Pending {
        id,
        allow_permanent,
        ..
    } = ruling
    else {
        panic!("expected pending");
    };
    assert!(!allow_permanent);
    let answered = a.answer(&id, Decision::Approve(Scope::Always)).unwrap();
    assert_eq!(answered.decision, Decision::Approve(Scope::Session));
    assert!(a.allowlist().is_empty());
}

#[tokio::test]
async fn an_unanswered_request_expires_and_the_retry_reads_the_timeout() {
    let a = approvals(Duration::from_millis(100));
    let id = pending_id(&a.request(query("rm -rf build", None)).await);
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(a.list().is_empty());
    assert_eq!(
        a.answer(&id, Decision::Approve(Scope::Once)),
        Err(AnswerError::NotFound(id.clone()))
    );
    assert_eq!(
        a.request(query("rm -rf build", None)).await,
        Ruling::Refuse(texts::timed_out())
    );
    let next = pending_id(&a.request(query("rm -rf build", None)).await);
    assert_ne!(next, id);
}

#[tokio::test]
async fn unknown_ids_are_not_found() {
    let a = approvals(Duration::from_secs(60));
    let err = a
        .answer("appr_nope", Decision::Approve(Scope::Once))
        .unwrap_err();
    assert!(err.to_string().contains("no pending approval 'appr_nope'"));
}

#[tokio::test]
async fn secrets_in_commands_are_masked_for_display() {
    let a = approvals(Duration::from_secs(60));
    let command = "OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz123456 rm -rf build";
    let Ruling::Pending { command: shown, .. } = a.request(query(command, None)).await else {
        panic!("expected pending");
    };
    assert!(
        !shown.contains("sk-abcdefghijklmnopqrstuvwxyz123456"),
        "{shown}"
    );
    assert!(
        !a.list()[0]
            .command
            .contains("sk-abcdefghijklmnopqrstuvwxyz123456")
    );
}

#[tokio::test]
async fn with_a_listener_the_call_waits_for_the_answer() {
    let a = approvals(Duration::from_secs(30));
    let mut listener = a.attach_listener("s1");
    assert_eq!(listener.session_id(), "s1");
    let waiting = {
        let a = a.clone();
        tokio::spawn(async move { a.request(query("rm -rf build", Some("s1"))).await })
    };
    let request = listener.recv().await.unwrap();
    assert_eq!(request.command, "rm -rf build");
    assert_eq!(request.description, "recursive delete");
    assert_eq!(request.session_id.as_deref(), Some("s1"));
    assert_eq!(request.timeout, Duration::from_secs(30));
    let json = request.to_json();
    assert_eq!(json["approval_id"], request.id.as_str());
    assert_eq!(
        json["scopes"],
        serde_json::json!(["once", "session", "always"])
    );
    assert_eq!(json["timeout_ms"], 30_000);

    let listed = a.list();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].waiting);

    a.answer(&request.id, Decision::Approve(Scope::Once))
        .unwrap();
    assert_eq!(
        waiting.await.unwrap(),
        Ruling::Admit {
            note: Some(NOTE.to_owned())
        }
    );
    assert!(a.list().is_empty());
    // Once was used by the waiting call itself; nothing is left for a retry.
    let again = {
        let a = a.clone();
        tokio::spawn(async move { a.request(query("rm -rf build", Some("s1"))).await })
    };
    let second = listener.recv().await.unwrap();
    a.answer(&second.id, Decision::Deny { reason: None })
        .unwrap();
    assert_eq!(
        again.await.unwrap(),
        Ruling::Refuse(texts::denied_by_user(None))
    );
}

#[tokio::test]
async fn a_listener_that_never_answers_times_out() {
    let a = approvals(Duration::from_millis(100));
    let mut listener = a.attach_listener("s1");
    let ruling = a.request(query("rm -rf build", Some("s1"))).await;
    assert_eq!(ruling, Ruling::Refuse(texts::timed_out()));
    assert!(listener.recv().await.is_some());
    assert!(a.list().is_empty());
}

#[tokio::test]
async fn a_listener_that_detaches_withdraws_its_requests() {
    let a = approvals(Duration::from_secs(30));
    let mut listener = a.attach_listener("s1");
    let waiting = {
        let a = a.clone();
        tokio::spawn(async move { a.request(query("rm -rf build", Some("s1"))).await })
    };
    listener.recv().await.unwrap();
    drop(listener);
    assert_eq!(waiting.await.unwrap(), Ruling::Refuse(texts::withdrawn()));
    // With nobody attached, the session's calls are held again.
    assert!(matches!(
        a.request(query("rm -rf build", Some("s1"))).await,
        Ruling::Pending { .. }
    ));
}

#[tokio::test]
async fn a_cancelled_call_leaves_no_request_behind() {
    let a = approvals(Duration::from_secs(30));
    let mut listener = a.attach_listener("s1");
    let waiting = {
        let a = a.clone();
        tokio::spawn(async move { a.request(query("rm -rf build", Some("s1"))).await })
    };
    let request = listener.recv().await.unwrap();
    assert_eq!(a.list().len(), 1);
    waiting.abort();
    let _ = waiting.await;
    assert!(a.list().is_empty());
    assert!(
        a.answer(&request.id, Decision::Approve(Scope::Once))
            .is_err()
    );
}

#[tokio::test]
async fn a_newer_listener_replaces_the_older_one() {
    let a = approvals(Duration::from_secs(30));
    let old = a.attach_listener("s1");
    let mut new = a.attach_listener("s1");
    drop(old); // must not detach the newer one
    let waiting = {
        let a = a.clone();
        tokio::spawn(async move { a.request(query("rm -rf build", Some("s1"))).await })
    };
    let request = new.recv().await.unwrap();
    a.answer(&request.id, Decision::Approve(Scope::Once))
        .unwrap();
    assert!(matches!(waiting.await.unwrap(), Ruling::Admit { .. }));
}

#[test]
fn scopes_parse() {
    assert_eq!(Scope::parse(""), Ok(Scope::Once));
    assert_eq!(Scope::parse("Session"), Ok(Scope::Session));
    assert_eq!(Scope::parse("always"), Ok(Scope::Always));
    assert!(Scope::parse("forever").is_err());
}

#[tokio::test]
async fn a_standing_answer_decides_without_asking() {
    let a = approvals(Duration::from_secs(30));
    let deny = a.auto_answer("child-1", AutoAnswer::Deny);
    assert_eq!(
        a.request(query("rm -rf build", Some("child-1"))).await,
        Ruling::Refuse(texts::auto_denied("recursive delete"))
    );
    let approve = a.auto_answer("child-2", AutoAnswer::ApproveOnce);
    assert_eq!(
        a.request(query("rm -rf build", Some("child-2"))).await,
        Ruling::Admit {
            note: Some(texts::auto_approval_note("recursive delete"))
        }
    );
    assert!(a.list().is_empty(), "nothing was asked");
    drop(deny);
    drop(approve);
    assert!(matches!(
        a.request(query("rm -rf build", Some("child-1"))).await,
        Ruling::Pending { .. }
    ));
}

fn edit<'a>(files: &'a [String], session: Option<&'a str>) -> EditQuery<'a> {
    EditQuery {
        tool: "patch",
        files,
        diff: "--- a/x\n+++ b/x\n-old\n+new\n",
        task_id: "t1",
        session_id: session,
    }
}

/// Waits until one request is listed, and returns it.
async fn listed_one(a: &Approvals) -> PendingApproval {
    for _ in 0..200 {
        if let Some(first) = a.list().into_iter().next() {
            return first;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no request was listed");
}

#[tokio::test]
async fn an_edit_waits_for_an_answer_from_anyone_and_shows_its_diff() {
    let a = approvals(Duration::from_secs(30));
    let files = vec!["/w/x".to_owned()];
    let waiting = {
        let a = a.clone();
        let files = files.clone();
        tokio::spawn(async move { a.request_edit(edit(&files, None)).await })
    };
    let request = listed_one(&a).await;
    assert!(request.waiting);
    assert_eq!(
        request.diff.as_deref(),
        Some("--- a/x\n+++ b/x\n-old\n+new\n")
    );
    assert_eq!(request.command, "patch /w/x");
    assert!(!request.allow_permanent);
    a.answer(&request.id, Decision::Approve(Scope::Once))
        .unwrap();
    let note = waiting.await.unwrap().unwrap();
    assert!(note.unwrap().contains("approved by the user"));
}

#[tokio::test]
async fn a_session_grant_covers_later_edits_and_deny_and_timeout_refuse() {
    let a = approvals(Duration::from_secs(30));
    let files = vec!["/w/x".to_owned()];
    let first = {
        let a = a.clone();
        let files = files.clone();
        tokio::spawn(async move { a.request_edit(edit(&files, Some("s1"))).await })
    };
    let request = listed_one(&a).await;
    a.answer(&request.id, Decision::Approve(Scope::Always))
        .unwrap();
    assert!(first.await.unwrap().is_ok());
    // "always" is applied as "session" for edits: the next edit runs unasked.
    assert_eq!(a.request_edit(edit(&files, Some("s1"))).await, Ok(None));

    let denied = {
        let a = a.clone();
        let files = files.clone();
        tokio::spawn(async move { a.request_edit(edit(&files, Some("s2"))).await })
    };
    let request = listed_one(&a).await;
    a.answer(&request.id, Decision::Deny { reason: None })
        .unwrap();
    let refusal = denied.await.unwrap().unwrap_err();
    assert!(refusal.contains("not modified"), "{refusal}");

    let quick = approvals(Duration::from_millis(50));
    let refusal = quick.request_edit(edit(&files, None)).await.unwrap_err();
    assert!(refusal.contains("timed out"), "{refusal}");
    assert!(quick.list().is_empty());
}
