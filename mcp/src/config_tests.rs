use std::time::Duration;

use super::*;

fn parse(yaml: &str, vars: &[(&str, &str)]) -> Vec<Configured> {
    let value: Value = serde_yaml::from_str(yaml).unwrap();
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    parse_servers(Some(&value), &|name| {
        vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
    .unwrap()
}

#[test]
fn hermes_keys_with_defaults_and_interpolation() {
    let servers = parse(
        "time:\n  command: uvx\n  args: [mcp-server-time, '--tz=${TZ_NAME}']\n  env:\n    KEY: ${env:API_KEY}\n    N: 3\nweb:\n  url: https://example.com/mcp\n  headers:\n    Authorization: Bearer ${TOKEN}\n  timeout: 12.5\n  connect_timeout: 5\n  enabled: false\n  supports_parallel_tool_calls: true\n  tools:\n    include: [search]\n    exclude: [delete]\n",
        &[("TZ_NAME", "UTC"), ("API_KEY", "k-1"), ("TOKEN", "t-2")],
    );
    let time = servers[0].config.as_ref().unwrap();
    assert_eq!(servers[0].name, "time");
    assert_eq!(
        time.transport,
        Transport::Stdio {
            command: "uvx".into(),
            args: vec!["mcp-server-time".into(), "--tz=UTC".into()],
            env: [
                ("KEY".to_owned(), "k-1".to_owned()),
                ("N".to_owned(), "3".to_owned())
            ]
            .into_iter()
            .collect(),
        }
    );
    assert_eq!(time.timeout, Duration::from_secs(300));
    assert_eq!(time.connect_timeout, Duration::from_secs(60));
    assert!(time.enabled && !time.supports_parallel_tool_calls);
    assert!(time.offers("anything"));
    let web = servers[1].config.as_ref().unwrap();
    assert_eq!(
        web.transport,
        Transport::Http {
            url: "https://example.com/mcp".into(),
            headers: [("Authorization".to_owned(), "Bearer t-2".to_owned())]
                .into_iter()
                .collect(),
        }
    );
    assert_eq!(web.timeout, Duration::from_millis(12_500));
    assert_eq!(web.connect_timeout, Duration::from_secs(5));
    assert!(!web.enabled && web.supports_parallel_tool_calls);
    assert!(web.offers("search") && !web.offers("delete") && !web.offers("other"));
}

#[test]
fn url_wins_over_command_and_args_string_is_shell_split() {
    let servers = parse(
        "both:\n  command: x\n  url: http://127.0.0.1:1/mcp\nsplit:\n  command: npx\n  args: -y 'pkg with spaces' \"a\\\"b\"\n",
        &[],
    );
    assert_eq!(servers[0].config.as_ref().unwrap().transport.kind(), "http");
    let Transport::Stdio { args, .. } = &servers[1].config.as_ref().unwrap().transport else {
        panic!("stdio expected");
    };
    assert_eq!(args, &["-y", "pkg with spaces", "a\"b"]);
}

#[test]
fn one_bad_server_does_not_hide_the_others() {
    let servers = parse(
        "nothing: {}\nmissing_var:\n  command: ${NOPE}\nbad_url:\n  url: ftp://x\nbad_timeout:\n  command: x\n  timeout: -1\nok:\n  command: x\n",
        &[],
    );
    let errors: Vec<String> = servers
        .iter()
        .map(|s| match &s.config {
            Ok(_) => "ok".to_owned(),
            Err(e) => e.to_string(),
        })
        .collect();
    assert_eq!(
        errors,
        [
            "MCP server 'nothing' has neither a command (stdio) nor a url (HTTP)",
            "MCP server 'missing_var': the variable NOPE (named as ${NOPE}) is not set",
            "Invalid MCP URL for 'bad_url': scheme must be http or https ('ftp://x')",
            "MCP server 'bad_timeout': timeout must be a positive number of seconds, not -1",
            "ok",
        ]
    );
}

#[test]
fn section_shapes() {
    assert!(parse_servers(None, &|_| None).unwrap().is_empty());
    assert!(
        parse_servers(Some(&Value::Null), &|_| None)
            .unwrap()
            .is_empty()
    );
    let list: Value = serde_yaml::from_str("[a, b]").unwrap();
    assert!(parse_servers(Some(&list), &|_| None).is_err());
}

#[test]
fn reconnect_backoff_doubles_to_its_cap() {
    let r = Reconnect::default();
    let delays: Vec<u64> = (1..=8).map(|n| r.delay(n).as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
    assert_eq!((r.retries, r.initial_retries), (5, 3));
    assert_eq!(r.probe_interval, Duration::from_secs(300));
}

#[test]
fn on_labels_name_the_workers_and_the_settings_travel_as_json() {
    let servers = parse(
        "lab:\n  command: mcp-server-time\n  env: {KEY: '${K}'}\n  on:\n    labels: {site: lab, gpu: 1}\nall:\n  command: x\n  on: {}\nhere:\n  command: x\nbad:\n  command: x\n  on: {hosts: [a]}\n",
        &[("K", "v")],
    );
    let lab = servers[0].config.as_ref().unwrap();
    assert_eq!(
        lab.on,
        Some(
            [
                ("gpu".to_owned(), "1".to_owned()),
                ("site".to_owned(), "lab".to_owned())
            ]
            .into_iter()
            .collect()
        )
    );
    assert_eq!(
        servers[1].config.as_ref().unwrap().on,
        Some(BTreeMap::new())
    );
    assert_eq!(servers[2].config.as_ref().unwrap().on, None);
    assert!(servers[3].config.is_err(), "unknown key under on:");
    // Serialized and read back: the same settings.
    let json = serde_json::to_string(lab).unwrap();
    let back: ServerConfig = serde_json::from_str(&json).unwrap();
    assert_eq!(&back, lab);
    assert!(json.contains("\"KEY\":\"v\""), "{json}");
}

#[test]
fn hosted_settings_travel_with_their_variables_unread_and_the_worker_reads_them() {
    let yaml = "lab:\n  command: '${BIN}/srv'\n  args: [--key, '${env:K}']\n  env: {KEY: '${K}', PLAIN: x}\n  on: {labels: {site: lab}}\nweb:\n  url: 'https://${HOST}/mcp'\n  headers: {Authorization: 'Bearer ${K}'}\n  on: {}\n";
    let value: Value = serde_yaml::from_str(yaml).unwrap();
    let servers = parse_servers(Some(&value), &keep_variables).unwrap();
    let lab = servers[0].config.as_ref().unwrap();
    let web = servers[1].config.as_ref().unwrap();
    // What a worker is sent names the variables, never a value.
    let sent = serde_json::to_string(lab).unwrap() + &serde_json::to_string(web).unwrap();
    assert!(!sent.contains("secret"), "{sent}");
    assert!(
        sent.contains("${K}") && sent.contains("${BIN}/srv"),
        "{sent}"
    );

    let worker_env = |name: &str| match name {
        "K" => Some("secret".to_owned()),
        "BIN" => Some("/opt".to_owned()),
        "HOST" => Some("mcp.example".to_owned()),
        _ => None,
    };
    let resolved = lab.resolve_variables(&worker_env).unwrap();
    assert_eq!(
        resolved.transport,
        Transport::Stdio {
            command: "/opt/srv".to_owned(),
            args: vec!["--key".to_owned(), "secret".to_owned()],
            env: [("KEY", "secret"), ("PLAIN", "x")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into_iter()
                .collect(),
        }
    );
    assert_eq!(
        web.resolve_variables(&worker_env).unwrap().transport,
        Transport::Http {
            url: "https://mcp.example/mcp".to_owned(),
            headers: [("Authorization".to_owned(), "Bearer secret".to_owned())]
                .into_iter()
                .collect(),
        }
    );
    // A variable the worker does not have is named.
    let missing = lab.resolve_variables(&|_| None).unwrap_err();
    assert_eq!(
        missing.to_string(),
        "MCP server 'lab': the variable BIN (named as ${BIN}) is not set"
    );
}
