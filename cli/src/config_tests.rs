#![allow(clippy::unwrap_used)]

use serde_json::json;

use super::*;

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
  lease_seconds: 30
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
        json!({"docker_image": "debian:bookworm-slim", "container_memory": 1024, "container_persistent": false,
               "docker_network": false, "docker_env": {"LANG": "C.UTF-8"}})
    );
    let policy = terminal.lease_policy();
    assert_eq!(policy.ttl.as_secs(), 30);
    assert_eq!(policy.renew_every.as_secs(), 10);
    assert_eq!(policy.sweep_every.as_secs(), 10);
    let pools = terminal.warm_pools().unwrap();
    assert_eq!(
        pools[0].settings,
        json!({"docker_image": "debian:bookworm-slim"})
    );
    assert_eq!(pools[0].size, 2);
}

#[test]
fn defaults_send_nothing_and_keep_leases_short() {
    let terminal = TerminalSection::default();
    assert_eq!(terminal.environment_settings(), json!({}));
    assert_eq!(terminal.docker_settings().image, "caduceus-base:bookworm");
    assert_eq!(terminal.lease_policy().ttl.as_secs(), 90);
    assert!(terminal.warm_pools().unwrap().is_empty());
    let bad: Config = serde_yaml::from_str("terminal:\n  warm_pool: [{size: 1}]\n").unwrap();
    assert!(bad.terminal.warm_pools().is_err());
}
