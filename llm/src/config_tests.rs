use std::collections::HashMap;

use serde_json::json;

use super::*;

#[test]
fn defaults() {
    let config = LlmConfig::default();
    assert_eq!(config.base_url, "https://api.openai.com/v1");
    assert!(config.stream);
    assert_eq!(config.timeout().expect("timeout"), Duration::from_secs(300));
    assert_eq!(config.max_retries, 3);
    assert_eq!(config.api_key, None);
}

#[test]
fn the_llm_section_deserializes_with_defaults_for_missing_fields() {
    let config: LlmConfig = serde_json::from_value(json!({
        "base_url": "http://localhost:8000/v1",
        "model": "qwen",
        "stream": false,
        "timeout_seconds": 60,
        "headers": { "HTTP-Referer": "https://example.org" }
    }))
    .expect("config");
    assert_eq!(config.model, "qwen");
    assert!(!config.stream);
    assert_eq!(config.timeout().expect("timeout"), Duration::from_secs(60));
    assert_eq!(config.max_retries, 3);
    assert_eq!(config.extra_headers["HTTP-Referer"], "https://example.org");
}

#[test]
fn a_misspelled_field_is_rejected() {
    let error = serde_json::from_value::<LlmConfig>(json!({ "modle": "x" })).expect_err("typo");
    assert!(error.to_string().contains("modle"), "{error}");
}

#[test]
fn environment_overrides_the_file() {
    let env: HashMap<&str, &str> = HashMap::from([
        ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        ("OPENAI_API_KEY", "sk-env"),
        ("CADUCEUS_MODEL", ""),
    ]);
    let file = LlmConfig {
        model: "from-file".into(),
        ..LlmConfig::default()
    };
    let config = file.with_overrides_from(|name| env.get(name).map(|value| value.to_string()));
    assert_eq!(config.base_url, "http://127.0.0.1:9/v1");
    assert_eq!(config.api_key.as_deref(), Some("sk-env"));
    // An empty variable does not erase the file's value.
    assert_eq!(config.model, "from-file");
}

#[test]
fn debug_output_hides_credentials() {
    let config = LlmConfig {
        api_key: Some("sk-very-secret".into()),
        extra_headers: [("api-key".to_string(), "azure-secret".to_string())].into(),
        ..LlmConfig::default()
    };
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("sk-very-secret") && !shown.contains("azure-secret"),
        "{shown}"
    );
    assert!(shown.contains("<redacted>"));
}

#[test]
fn replay_models_are_recognised() {
    let config = LlmConfig {
        model: "replay:demo/session.jsonl".into(),
        ..LlmConfig::default()
    };
    assert_eq!(config.replay_file(), Some("demo/session.jsonl"));
    assert_eq!(LlmConfig::default().replay_file(), None);
}

#[test]
fn nonsense_timeouts_are_configuration_errors() {
    for value in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let config = LlmConfig {
            timeout_seconds: value,
            ..LlmConfig::default()
        };
        assert!(
            matches!(config.timeout(), Err(LlmError::Config(_))),
            "{value}"
        );
    }
}
