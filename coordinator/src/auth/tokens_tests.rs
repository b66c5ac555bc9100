use std::time::Duration;

use super::*;

#[test]
fn a_created_token_is_found_by_its_secret_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let store = TokenStore::open(Some(&db)).unwrap();
    let (info, secret) = store.create(Role::Worker, "gpu-1", None).unwrap();
    assert!(secret.starts_with("cdt_") && secret.len() == 68, "{secret}");
    assert!(info.id.starts_with("tok_"));
    assert_eq!(store.lookup(&secret), Some(info.clone()));
    assert_eq!(store.lookup("cdt_not-a-token"), None);
    drop(store);

    let reopened = TokenStore::open(Some(&db)).unwrap();
    assert_eq!(reopened.lookup(&secret), Some(info));
    let text = std::fs::read(&db).unwrap();
    assert!(
        !text.windows(secret.len()).any(|w| w == secret.as_bytes()),
        "the secret itself is not stored"
    );
}

#[test]
fn revoking_by_id_or_name_marks_only_live_matching_tokens() {
    let store = TokenStore::open(None).unwrap();
    let (a, secret_a) = store.create(Role::Client, "ci", None).unwrap();
    let (b, _) = store.create(Role::Client, "ci", None).unwrap();
    let (c, secret_c) = store
        .create(Role::Admin, "", Some(Duration::from_secs(60)))
        .unwrap();
    assert_eq!(c.name, c.id, "a token without a name is named by its id");
    assert_eq!(c.expires_at, Some(c.created_at + 60));

    let revoked = store.revoke("ci").unwrap();
    let mut ids: Vec<_> = revoked.iter().map(|t| t.id.clone()).collect();
    ids.sort();
    let mut want = vec![a.id.clone(), b.id.clone()];
    want.sort();
    assert_eq!(ids, want);
    assert!(store.lookup(&secret_a).unwrap().revoked_at.is_some());
    assert!(store.lookup(&secret_c).unwrap().revoked_at.is_none());
    assert!(
        matches!(store.revoke("ci"), Err(TokenError::NotFound(_))),
        "nothing live is left by that name"
    );
    store.revoke(&c.id).unwrap();
    let listed: Vec<String> = store.list().unwrap().into_iter().map(|t| t.id).collect();
    assert_eq!(listed, [a.id, b.id, c.id], "oldest first");
}

#[test]
fn roles_parse_and_unknown_ones_are_refused() {
    for role in [Role::Worker, Role::Client, Role::Admin] {
        assert_eq!(Role::parse(role.as_str()).unwrap(), role);
    }
    assert!(matches!(Role::parse("root"), Err(TokenError::Role(_))));
}
