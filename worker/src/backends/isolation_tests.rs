#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;

#[test]
fn modes_parse_and_unknown_ones_are_named() {
    for (text, mode) in [
        ("none", LocalIsolation::None),
        ("", LocalIsolation::None),
        ("Workspace", LocalIsolation::Workspace),
        (" strict ", LocalIsolation::Strict),
    ] {
        assert_eq!(text.parse::<LocalIsolation>().unwrap(), mode, "{text:?}");
    }
    let err = "sealed".parse::<LocalIsolation>().unwrap_err().to_string();
    assert_eq!(
        err,
        "local isolation 'sealed' is not one of none, workspace, strict"
    );
}

#[test]
fn no_isolation_needs_no_probe() {
    assert_eq!(Confinement::probe(LocalIsolation::None).unwrap(), None);
}

#[test]
fn only_strict_leaves_the_network_namespace() {
    let confinement = |mode| Confinement {
        mode,
        unshare: PathBuf::from("/usr/bin/unshare"),
        nsenter: PathBuf::from("/usr/bin/nsenter"),
    };
    assert!(
        !confinement(LocalIsolation::Workspace)
            .unshare_args()
            .contains(&"--net")
    );
    assert!(
        confinement(LocalIsolation::Strict)
            .unshare_args()
            .contains(&"--net")
    );
    assert!(
        confinement(LocalIsolation::Strict)
            .mechanism()
            .contains("net")
    );
}
