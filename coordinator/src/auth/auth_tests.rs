use std::sync::Arc;
use std::time::Duration;

use tonic::Code;

use super::*;

const ATTACH: &str = "/caduceus.v1.WorkerGateway/Attach";
const CALL: &str = "/caduceus.v1.Control/CallTool";
const APPROVE: &str = "/caduceus.v1.Control/AnswerApproval";
const CREATE: &str = "/caduceus.v1.Control/CreateToken";

fn bearer(token: &str) -> String {
    caduceus_proto::bearer(token)
}

#[test]
fn every_method_needs_the_role_of_its_table_row() {
    assert_eq!(required_role(ATTACH), Role::Worker);
    for method in [
        "ListTools",
        "CallTool",
        "Status",
        "ReleaseEnvironment",
        "StartSession",
        "CancelSession",
        "AttachSession",
        "AnswerClarify",
    ] {
        assert_eq!(
            required_role(&format!("/caduceus.v1.Control/{method}")),
            Role::Client,
            "{method}"
        );
    }
    for method in [
        "ListApprovals",
        "AnswerApproval",
        "CreateToken",
        "ListTokens",
        "RevokeToken",
    ] {
        assert_eq!(
            required_role(&format!("/caduceus.v1.Control/{method}")),
            Role::Admin,
            "{method}"
        );
    }
    assert_eq!(
        required_role("/caduceus.v1.Control/SomethingNew"),
        Role::Admin,
        "unclassified methods are closed"
    );
    assert_eq!(
        required_role("/caduceus.v1.Other/CallTool"),
        Role::Admin,
        "unknown services are closed"
    );
    assert_eq!(
        required_role("/caduceus.v1.WorkerGateway/Other"),
        Role::Admin
    );
}

#[test]
fn scoped_tokens_reach_only_their_methods_and_the_shared_token_reaches_all() {
    let store = Arc::new(TokenStore::open(None).unwrap());
    let auth = Authenticator::new("shared-admin-token", store.clone());
    let (_, worker) = store.create(Role::Worker, "w", None).unwrap();
    let (_, client) = store.create(Role::Client, "c", None).unwrap();
    let (_, admin) = store.create(Role::Admin, "a", None).unwrap();

    let code = |path: &str, token: &str| {
        auth.authorize(path, Some(&bearer(token)), false)
            .err()
            .map(|s| s.code())
    };
    assert_eq!(code(ATTACH, &worker), None);
    assert_eq!(code(CALL, &worker), Some(Code::PermissionDenied));
    assert_eq!(code(APPROVE, &worker), Some(Code::PermissionDenied));
    assert_eq!(code(CALL, &client), None);
    assert_eq!(code(ATTACH, &client), Some(Code::PermissionDenied));
    assert_eq!(code(APPROVE, &client), Some(Code::PermissionDenied));
    assert_eq!(code(CREATE, &client), Some(Code::PermissionDenied));
    for token in [admin.as_str(), "shared-admin-token"] {
        for path in [ATTACH, CALL, APPROVE, CREATE] {
            assert_eq!(code(path, token), None, "{path}");
        }
    }
    let denied = auth
        .authorize(CALL, Some(&bearer(&worker)), false)
        .unwrap_err();
    assert!(
        denied
            .message()
            .contains("a worker token may not call CallTool"),
        "{}",
        denied.message()
    );

    let caller = auth
        .authorize(ATTACH, Some(&bearer(&worker)), false)
        .unwrap();
    assert_eq!(caller.token.map(|t| t.name), Some("w".to_owned()));
    assert!(
        auth.authorize(ATTACH, Some(&bearer("shared-admin-token")), false)
            .unwrap()
            .token
            .is_none()
    );
}

#[test]
fn missing_wrong_revoked_and_expired_tokens_are_unauthenticated() {
    let store = Arc::new(TokenStore::open(None).unwrap());
    let auth = Authenticator::new("shared-admin-token", store.clone());
    let message = |header: Option<&str>| {
        let status = auth.authorize(CALL, header, false).unwrap_err();
        assert_eq!(status.code(), Code::Unauthenticated);
        status.message().to_owned()
    };
    assert!(message(None).starts_with("missing token"));
    assert!(message(Some("Basic abc")).starts_with("missing token"));
    assert!(message(Some(&bearer("nope"))).starts_with("invalid token"));

    let (info, client) = store.create(Role::Client, "ci", None).unwrap();
    assert!(auth.authorize(CALL, Some(&bearer(&client)), false).is_ok());
    store.revoke(&info.id).unwrap();
    assert!(message(Some(&bearer(&client))).contains("'ci' was revoked"));

    let (_, short) = store
        .create(Role::Client, "short", Some(Duration::from_secs(1)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(2100));
    assert!(message(Some(&bearer(&short))).contains("'short' has expired"));
}

#[test]
fn with_mutual_tls_only_attach_needs_a_client_certificate() {
    let store = Arc::new(TokenStore::open(None).unwrap());
    let auth = Authenticator::new("shared-admin-token", store).with_worker_certificates(true);
    let token = bearer("shared-admin-token");
    let refused = auth.authorize(ATTACH, Some(&token), false).unwrap_err();
    assert_eq!(refused.code(), Code::Unauthenticated);
    assert!(
        refused.message().starts_with("client certificate required"),
        "{}",
        refused.message()
    );
    assert!(auth.authorize(ATTACH, Some(&token), true).is_ok());
    assert!(
        auth.authorize(CALL, Some(&token), false).is_ok(),
        "clients need no certificate"
    );
    assert!(auth.authorize(APPROVE, Some(&token), false).is_ok());
}
