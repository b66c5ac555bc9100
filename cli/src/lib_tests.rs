use super::*;

#[test]
fn serve_warns_about_a_short_token_and_plain_text_on_a_reachable_address() {
    let loopback: std::net::SocketAddr = "127.0.0.1:7700".parse().unwrap();
    let any: std::net::SocketAddr = "0.0.0.0:7700".parse().unwrap();
    let long = "0123456789abcdef";
    assert!(serve_warnings(long, loopback, false).is_empty());
    assert!(serve_warnings(long, any, true).is_empty());
    let short = serve_warnings("0123456789abcde", loopback, true);
    assert_eq!(short.len(), 1);
    assert!(short[0].contains("shorter than 16 characters"), "{short:?}");
    let open = serve_warnings(long, any, false);
    assert_eq!(open.len(), 1);
    assert!(open[0].contains("without TLS"), "{open:?}");
    assert_eq!(serve_warnings("short", any, false).len(), 2);
}

#[test]
fn the_command_line_definition_is_consistent() {
    // clap checks ids, conflicts and defaults only when a subcommand is used;
    // this checks every one of them.
    Cli::command().debug_assert();
}

#[test]
fn json_logs_only_when_asked_for() {
    assert!(json_logs(Some("json")));
    assert!(json_logs(Some(" JSON ")));
    assert!(!json_logs(Some("text")));
    assert!(!json_logs(Some("")));
    assert!(!json_logs(None));
}
