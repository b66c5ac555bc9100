use std::time::Duration;

use super::*;

fn parse(text: &str) -> Result<Config, serde_yaml::Error> {
    serde_yaml::from_str(text)
}

#[test]
fn approvals_default_to_ask_for_60_seconds() {
    let config = parse("terminal:\n  timeout: 30\n").unwrap();
    assert_eq!(config.approvals.mode, ApprovalMode::Ask);
    assert_eq!(config.approvals.timeout, Duration::from_secs(60));
    assert_eq!(config.approvals.containers, ContainerApprovals::Off);
    assert!(config.approvals.deny.is_empty());
    assert!(config.command_allowlist.is_empty());
}

#[test]
fn hermes_spellings_load() {
    let config = parse(
        "approvals:\n  mode: off\n  timeout: 1.5\n  cron_mode: deny\n  deny: null\ncommand_allowlist: null\n",
    )
    .unwrap();
    assert_eq!(config.approvals.mode, ApprovalMode::Off);
    assert_eq!(config.approvals.timeout, Duration::from_millis(1500));
    for (text, mode) in [
        ("false", ApprovalMode::Off),
        ("manual", ApprovalMode::Ask),
        ("smart", ApprovalMode::Ask),
        ("deny", ApprovalMode::Deny),
    ] {
        let config = parse(&format!("approvals:\n  mode: {text}\n")).unwrap();
        assert_eq!(config.approvals.mode, mode, "{text}");
    }
}

#[test]
fn lists_and_container_mode_are_read() {
    let config = parse(
        "approvals:\n  deny: [\"git push*\"]\n  containers: ask\ncommand_allowlist:\n  - \"recursive delete\"\n  - \"podman *\"\n",
    )
    .unwrap();
    assert_eq!(config.approvals.deny, vec!["git push*"]);
    assert_eq!(config.approvals.containers, ContainerApprovals::Ask);
    let settings = Config {
        path: Some(PathBuf::from("/etc/caduceus.yaml")),
        ..config
    }
    .approval_settings();
    assert_eq!(settings.allowlist, vec!["recursive delete", "podman *"]);
    assert_eq!(
        settings.allowlist_file,
        Some(PathBuf::from("/etc/caduceus.yaml"))
    );
}

#[test]
fn bad_values_are_errors_that_name_the_key() {
    for (text, needle) in [
        (
            "approvals:\n  mode: yolo\n",
            "unknown approvals.mode 'yolo'",
        ),
        ("approvals:\n  timeout: 0\n", "approvals.timeout"),
        ("approvals:\n  timeout: -5\n", "approvals.timeout"),
        (
            "approvals:\n  containers: sometimes\n",
            "approvals.containers",
        ),
        ("command_allowlist: rm\n", "invalid type"),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(needle), "{text}: {err}");
    }
}
