#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

#[test]
fn a_call_naming_no_environment_runs_in_the_sessions_default() {
    let envs = Environments::new();
    let default = envs.resolve(None).unwrap();
    assert_eq!(default, envs.default_id());
    assert_eq!(envs.resolve(Some("default")).unwrap(), default);
    assert_eq!(envs.resolve(Some("  ")).unwrap(), default);
    assert_eq!(envs.all().len(), 1);
}

#[test]
fn sessions_never_share_task_ids() {
    let (a, b) = (Environments::new(), Environments::new());
    assert_ne!(a.default_id(), b.default_id());
    let id = a.create(Requested::default()).unwrap();
    assert_eq!(
        b.resolve(Some(&id)),
        Err(EnvironmentError::Unknown(id.clone()))
    );
    assert_eq!(a.resolve(Some(&id)).unwrap(), id);
}

#[test]
fn a_released_environment_is_unknown_afterwards() {
    let envs = Environments::new();
    let id = envs.create(Requested::default()).unwrap();
    envs.remove(&id).unwrap();
    assert!(envs.resolve(Some(&id)).is_err());
    assert!(envs.remove(&id).is_err());
}

#[test]
fn a_session_holds_a_bounded_number_of_environments() {
    let envs = Environments::new();
    for _ in 0..MAX_PER_SESSION {
        envs.create(Requested::default()).unwrap();
    }
    assert_eq!(
        envs.create(Requested::default()),
        Err(EnvironmentError::TooMany(MAX_PER_SESSION))
    );
}

#[test]
fn drain_takes_every_environment_once() {
    let envs = Environments::new();
    envs.resolve(None).unwrap();
    let id = envs.create(Requested::default()).unwrap();
    let mut drained = envs.drain();
    drained.sort();
    let mut expected = vec![envs.default_id(), id];
    expected.sort();
    assert_eq!(drained, expected);
    assert!(envs.drain().is_empty());
}
