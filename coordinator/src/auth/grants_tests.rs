use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::*;
use crate::auth::TokenInfo;

fn worker_caller(name: &str) -> Caller {
    Caller {
        role: Role::Worker,
        token: Some(TokenInfo {
            id: "tok_1".to_owned(),
            name: name.to_owned(),
            role: Role::Worker,
            created_at: 0,
            expires_at: None,
            revoked_at: None,
        }),
    }
}

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn grants() -> WorkerGrants {
    WorkerGrants(BTreeMap::from([(
        "gpu".to_owned(),
        Grant {
            labels: BTreeMap::from([
                ("gpu".to_owned(), Some("a100".to_owned())),
                ("zone".to_owned(), None),
            ]),
            host: HostGrant::Named(BTreeSet::from(["labtime".to_owned()])),
        },
    )]))
}

#[test]
fn the_shared_token_claims_anything_and_hosts_everything() {
    let shared = Caller {
        role: Role::Admin,
        token: None,
    };
    let grant = WorkerGrant::for_caller(Some(&shared), Some(&grants()));
    assert!(grant.check_labels(&labels(&[("gpu", "h100")])).is_ok());
    assert!(grant.host.allows("anything"));
}

#[test]
fn a_granted_worker_token_claims_only_its_labels_and_hosts_only_its_providers() {
    let grant = WorkerGrant::for_caller(Some(&worker_caller("gpu")), Some(&grants()));
    assert!(
        grant
            .check_labels(&labels(&[("gpu", "a100"), ("zone", "eu-1")]))
            .is_ok()
    );
    let err = grant.check_labels(&labels(&[("gpu", "h100")])).unwrap_err();
    assert!(
        err.contains("'gpu' may not claim the label gpu=h100"),
        "{err}"
    );
    assert!(err.contains("grants gpu=a100 only"), "{err}");
    let err = grant.check_labels(&labels(&[("site", "lab")])).unwrap_err();
    assert!(err.contains("does not grant that label"), "{err}");
    assert!(grant.host.allows("labtime"));
    assert!(!grant.host.allows("github"));
}

#[test]
fn a_worker_token_without_a_grant_claims_no_label_and_hosts_nothing() {
    let grant = WorkerGrant::for_caller(Some(&worker_caller("other")), Some(&grants()));
    assert!(grant.check_labels(&HashMap::new()).is_ok());
    assert!(grant.check_labels(&labels(&[("site", "lab")])).is_err());
    assert!(!grant.host.allows("labtime"));
    // Without any `worker_grants`, labels stay free (placement only), but
    // hosting still needs a grant.
    let grant = WorkerGrant::for_caller(Some(&worker_caller("other")), None);
    assert!(grant.check_labels(&labels(&[("site", "lab")])).is_ok());
    assert!(!grant.host.allows("labtime"));
}
