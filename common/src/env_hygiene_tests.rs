use super::*;

fn env(pairs: &[&str]) -> impl Iterator<Item = (String, String)> {
    pairs
        .iter()
        .map(|name| ((*name).to_owned(), "value".to_owned()))
        .collect::<Vec<_>>()
        .into_iter()
}

fn names(vars: &[(String, String)]) -> Vec<&str> {
    vars.iter().map(|(name, _)| name.as_str()).collect()
}

#[test]
fn hermes_fixed_list_is_secret_even_without_secret_words() {
    for name in [
        "OPENAI_BASE_URL",
        "OPENAI_ORG_ID",
        "ANTHROPIC_BASE_URL",
        "LLM_MODEL",
        "FIRECRAWL_API_URL",
        "GITHUB_APP_ID",
        "GITHUB_APP_INSTALLATION_ID",
        "MODAL_TOKEN_ID",
        "SLACK_ALLOWED_USERS",
        "HASS_URL",
        "EMAIL_ADDRESS",
        "GATEWAY_RELAY_ID",
        "CADUCEUS_COORDINATOR",
    ] {
        assert!(is_secret_env_name(name), "{name}");
    }
}

#[test]
fn secret_words_in_any_case_make_a_name_secret() {
    for name in [
        "OPENAI_API_KEY",
        "GH_TOKEN",
        "DAYTONA_API_KEY",
        "my_service_token",
        "Db_Password",
        "LDAP_PASSWD",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "BASIC_AUTH",
        "SENTRY_DSN",
        "SLACK_WEBHOOK_URL",
        "DOCKER_CREDS",
        "CLAUDE_CODE_OAUTH_TOKEN",
    ] {
        assert!(is_secret_env_name(name), "{name}");
    }
}

#[test]
fn ordinary_and_known_harmless_names_pass() {
    for name in [
        "PATH",
        "HOME",
        "LANG",
        "TERM",
        "AWS_REGION",
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "SSH_AUTH_SOCK",
        "TOKENIZERS_PARALLELISM",
        "BYPASS_CACHE",
    ] {
        assert!(!is_secret_env_name(name), "{name}");
    }
}

#[test]
fn own_and_dynamic_secrets_are_never_passed() {
    for name in [
        "CADUCEUS_TOKEN",
        "caduceus_api_key",
        "SUDO_PASSWORD",
        "AUXILIARY_VISION_API_KEY",
        "AUXILIARY_VISION_BASE_URL",
        "GATEWAY_RELAY_DELIVERY_KEY",
        "GATEWAY_RELAY_X_TOKEN",
    ] {
        assert!(is_never_passed(name), "{name}");
        assert!(!may_pass(name, &[name.to_owned()]), "{name} allowlisted");
    }
    // Non-secret caduceus settings are ordinary.
    assert!(!is_never_passed("CADUCEUS_HOME"));
    assert!(!is_secret_env_name("CADUCEUS_HOME"));
}

#[test]
fn passthrough_overrides_secret_names() {
    let passthrough = ["NOTION_TOKEN".to_owned(), "OPENAI_API_KEY".to_owned()];
    let out = sanitized_env(
        env(&[
            "PATH",
            "NOTION_TOKEN",
            "OPENAI_API_KEY",
            "STRIPE_KEY",
            "HOME",
        ]),
        &passthrough,
    );
    assert_eq!(
        names(&out),
        ["PATH", "NOTION_TOKEN", "OPENAI_API_KEY", "HOME"]
    );
}

#[test]
fn active_venv_markers_are_dropped_even_when_allowlisted() {
    let passthrough = ["VIRTUAL_ENV".to_owned()];
    let out = sanitized_env(
        env(&["VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV"]),
        &passthrough,
    );
    assert_eq!(names(&out), ["CONDA_DEFAULT_ENV"]);
}

#[test]
fn values_are_kept_and_order_preserved() {
    let vars = vec![
        ("B".to_owned(), "2".to_owned()),
        ("GH_TOKEN".to_owned(), "ghp_x".to_owned()),
        ("A".to_owned(), "1".to_owned()),
    ];
    assert_eq!(
        sanitized_env(vars.into_iter(), &[]),
        vec![
            ("B".to_owned(), "2".to_owned()),
            ("A".to_owned(), "1".to_owned())
        ]
    );
}
