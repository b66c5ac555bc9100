use super::*;

#[test]
fn a_root_worker_runs_sandboxes_as_nobody_unless_told_otherwise() {
    if !Uid::effective().is_root() {
        // Not root: sandboxes run as the worker's own user, whatever is asked
        // short of another account.
        assert_eq!(local_sandbox_user(None, false).unwrap(), None);
        assert!(local_sandbox_user(Some("root"), false).is_err());
        return;
    }
    let user = local_sandbox_user(None, false).unwrap().unwrap();
    assert_eq!(user.name, DEFAULT_SANDBOX_USER);
    assert_ne!(user.uid, 0);
    let home = std::fs::metadata(&user.home).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(home.uid(), user.uid, "the sandbox home belongs to the user");
    let again = local_sandbox_user(None, false).unwrap().unwrap();
    assert_eq!(again.home, user.home, "the same home on the next start");

    assert_eq!(
        local_sandbox_user(None, true).unwrap(),
        None,
        "--allow-root-sandbox"
    );
    assert_eq!(local_sandbox_user(Some("root"), true).unwrap(), None);
    let refused = local_sandbox_user(Some("root"), false)
        .unwrap_err()
        .to_string();
    assert!(refused.contains("--allow-root-sandbox"), "{refused}");
    let unknown = local_sandbox_user(Some("no-such-user-here"), false)
        .unwrap_err()
        .to_string();
    assert!(unknown.contains("no such user"), "{unknown}");
}
