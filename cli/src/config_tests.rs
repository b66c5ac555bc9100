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

#[test]
fn docker_keys_reach_the_worker_and_the_coordinator() {
    let config: Config = serde_yaml::from_str(
        r#"
terminal:
  backend: docker
  docker_image: debian:bookworm-slim
  container_memory: 1024
  container_persistent: false
  docker_network: false
  docker_env: {LANG: C.UTF-8}
  docker_volumes: ["/data:/data:ro"]
  docker_forward_env: [GITHUB_TOKEN]
  sandbox_lease_seconds: 30
  sweep_interval_seconds: 10
  warm_pool:
    - {backend: docker, image: "debian:bookworm-slim", size: 2}
"#,
    )
    .unwrap();
    let terminal = &config.terminal;
    let docker = terminal.docker_settings();
    assert_eq!(docker.image, "debian:bookworm-slim");
    assert_eq!(docker.memory_mb, 1024);
    assert_eq!(docker.cpu, 1.0, "unset keys keep hermes' defaults");
    assert!(!docker.persistent && !docker.network);
    assert_eq!(docker.volumes, vec!["/data:/data:ro".to_owned()]);
    // The coordinator sends only what was set, and never host paths.
    assert_eq!(
        terminal.environment_settings(),
        serde_json::json!({"docker_image": "debian:bookworm-slim", "container_memory": 1024, "container_persistent": false,
               "docker_network": false, "docker_env": {"LANG": "C.UTF-8"}})
    );
    let policy = terminal.lease_policy();
    assert_eq!(policy.ttl.as_secs(), 30);
    assert_eq!(policy.renew_every.as_secs(), 10);
    assert_eq!(policy.sweep_every.as_secs(), 10);
    let pools = terminal.warm_pools().unwrap();
    assert_eq!(
        pools[0].settings,
        serde_json::json!({"docker_image": "debian:bookworm-slim"})
    );
    assert_eq!(pools[0].size, 2);
}

#[test]
fn defaults_send_nothing_and_keep_leases_short() {
    let terminal = TerminalSection::default();
    assert_eq!(terminal.environment_settings(), serde_json::json!({}));
    assert_eq!(terminal.docker_settings().image, "caduceus-base:bookworm");
    assert_eq!(terminal.lease_policy().ttl.as_secs(), 600);
    assert!(terminal.warm_pools().unwrap().is_empty());
    let bad: Config = serde_yaml::from_str("terminal:\n  warm_pool: [{size: 1}]\n").unwrap();
    assert!(bad.terminal.warm_pools().is_err());
}

#[test]
fn the_audit_log_is_on_by_default_and_its_rotation_is_configurable() {
    let default = parse("{}").unwrap().audit;
    let config = default.config().unwrap();
    assert_eq!(config.max_bytes, 16 * 1024 * 1024);
    assert_eq!(config.keep, 5);
    assert!(config.path.ends_with("audit.jsonl"));

    let set = parse("audit:\n  max_bytes: 1000000\n  keep: 2\n")
        .unwrap()
        .audit;
    let config = set.config().unwrap();
    assert_eq!((config.max_bytes, config.keep), (1_000_000, 2));
    assert!(
        parse("audit:\n  enabled: false\n")
            .unwrap()
            .audit
            .config()
            .is_none()
    );
    let err = parse("audit:\n  max_byte: 10\n").unwrap_err().to_string();
    assert!(err.contains("max_byte"), "{err}");
}

#[test]
fn docker_network_takes_docker_modes_and_booleans() {
    for (value, network) in [
        ("none", false),
        ("false", false),
        ("bridge", true),
        ("true", true),
    ] {
        let config = parse(&format!("terminal:\n  docker_network: {value}\n")).unwrap();
        assert_eq!(config.terminal.docker_network, Some(network), "{value}");
        assert_eq!(
            config.terminal.docker_settings().network,
            network,
            "{value}"
        );
    }
    let err = parse("terminal:\n  docker_network: host\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("docker_network 'host' is not one of none, bridge"),
        "{err}"
    );
    assert_eq!(
        parse("terminal: {}\n").unwrap().terminal.docker_network,
        None
    );
}

#[test]
fn local_isolation_defaults_to_none() {
    let config = parse("terminal:\n  local_isolation: strict\n").unwrap();
    assert_eq!(config.terminal.local_isolation, "strict");
    assert_eq!(Config::default().terminal.local_isolation, "none");
}

#[test]
fn edit_approvals_are_off_unless_asked_for() {
    assert_eq!(parse("{}").unwrap().approvals.edits, EditApprovals::Off);
    let config = parse("approvals:\n  edits: ask\n").unwrap();
    assert_eq!(config.approval_settings().edits, EditApprovals::Ask);
    assert!(parse("approvals:\n  edits: maybe\n").is_err());
}

#[test]
fn worker_grants_read_labels_and_hosted_providers() {
    use caduceus_coordinator::auth::HostGrant;
    let config = parse(
        "worker_grants:\n  gpu:\n    labels: {gpu: a100, zone: '*'}\n    host: [labtime]\n  all:\n    host: '*'\n",
    )
    .unwrap();
    let grants = crate::config::worker_grants(config.worker_grants.as_ref())
        .unwrap()
        .unwrap();
    let gpu = &grants.0["gpu"];
    assert_eq!(gpu.labels["gpu"].as_deref(), Some("a100"));
    assert_eq!(gpu.labels["zone"], None);
    assert!(gpu.host.allows("labtime") && !gpu.host.allows("other"));
    assert_eq!(grants.0["all"].host, HostGrant::All);
    let bad = parse("worker_grants:\n  gpu:\n    host: 3\n").unwrap();
    let err = crate::config::worker_grants(bad.worker_grants.as_ref()).unwrap_err();
    assert!(err.to_string().contains("worker_grants.gpu.host"), "{err}");
    assert!(parse("worker_grants:\n  gpu:\n    lables: {}\n").is_err());
    assert!(crate::config::worker_grants(None).unwrap().is_none());
}

#[test]
fn a_persistent_daytona_sandbox_is_kept_as_long_as_configured() {
    let default: Config = serde_yaml::from_str("terminal:\n  backend: daytona\n").unwrap();
    assert_eq!(default.terminal.daytona_keep_seconds, 7 * 24 * 3600);
    let config: Config =
        serde_yaml::from_str("terminal:\n  backend: daytona\n  daytona_keep_seconds: 7200\n")
            .unwrap();
    assert_eq!(config.terminal.daytona_keep_seconds, 7200);
}
