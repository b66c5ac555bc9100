#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

fn config_with(token: Option<TokenSource>) -> Config {
    let mut config = Config::default();
    config.token = token;
    config
}

#[test]
fn a_token_file_is_read_without_its_newline() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "s3cret\n").unwrap();
    let args = TokenArgs {
        token: None,
        token_file: Some(path),
    };
    assert_eq!(
        args.resolve(&Config::default()).unwrap().as_deref(),
        Some("s3cret")
    );
}

#[test]
fn flags_win_over_the_configuration() {
    let config = config_with(Some(TokenSource::Value("from-env".into())));
    let args = TokenArgs {
        token: Some("from-flag".into()),
        token_file: None,
    };
    assert_eq!(args.resolve(&config).unwrap().as_deref(), Some("from-flag"));
    assert_eq!(
        TokenArgs::default().resolve(&config).unwrap().as_deref(),
        Some("from-env")
    );
    assert!(
        TokenArgs::default()
            .resolve(&Config::default())
            .unwrap()
            .is_none()
    );
}

#[test]
fn an_empty_or_missing_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, " \n").unwrap();
    let missing = dir.path().join("missing");
    for (path, words) in [(&empty, "is empty"), (&missing, "cannot read")] {
        let config = config_with(Some(TokenSource::File(path.clone())));
        let err = TokenArgs::default().resolve(&config).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains(words), "{text}");
        assert!(text.contains(&path.display().to_string()), "{text}");
    }
}

#[test]
fn a_value_and_a_file_together_are_refused() {
    let err = TokenSource::one_of(
        Some("t".into()),
        Some(PathBuf::from("/run/secrets/t")),
        ("CADUCEUS_TOKEN", "CADUCEUS_TOKEN_FILE"),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "CADUCEUS_TOKEN and CADUCEUS_TOKEN_FILE are both set; set one"
    );
}

#[test]
fn debug_output_hides_the_token() {
    let shown = format!(
        "{:?}",
        config_with(Some(TokenSource::Value("s3cret".into())))
    );
    assert!(!shown.contains("s3cret"), "{shown}");
}

#[test]
fn a_config_file_with_token_and_token_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, "token: abc\ntoken_file: /run/secrets/t\n").unwrap();
    let err = Config::load(Some(&path)).unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("the configuration's token and token_file are both set"),
        "{text}"
    );
}

#[test]
fn a_config_file_may_name_a_token_file() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "from-file\n").unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, format!("token_file: {}\n", token.display())).unwrap();
    let config = Config::load(Some(&path)).unwrap();
    // The environment of the test process could name another token.
    if std::env::var_os("CADUCEUS_TOKEN").is_none()
        && std::env::var_os("CADUCEUS_TOKEN_FILE").is_none()
    {
        assert_eq!(
            TokenArgs::default().resolve(&config).unwrap().as_deref(),
            Some("from-file")
        );
    }
}
