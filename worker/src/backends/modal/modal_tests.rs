use std::time::Duration;

use base64::Engine as _;

use super::api::{ModalError, code_name, jwt_expiry};
use super::*;

fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'static {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

#[test]
fn variables_beat_the_profile_and_no_token_is_not_configured() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("modal.toml");
    std::fs::write(
        &path,
        "[other]\ntoken_id = \"ak-other\"\ntoken_secret = \"as-other\"\n\n[work]\ntoken_id = \"ak-work\"\ntoken_secret = \"as-work\"\nserver_url = \"http://127.0.0.1:1\"\nactive = true\n",
    )
    .unwrap();
    let config = path.to_str().unwrap();
    let active = ModalSettings::from_env(env(&[("MODAL_CONFIG_PATH", config)])).unwrap();
    assert_eq!(active.credentials.token_id, "ak-work");
    assert_eq!(active.server_url, "http://127.0.0.1:1");
    let chosen = ModalSettings::from_env(env(&[
        ("MODAL_CONFIG_PATH", config),
        ("MODAL_PROFILE", "other"),
    ]))
    .unwrap();
    assert_eq!(chosen.credentials.token_secret, "as-other");
    assert_eq!(chosen.server_url, DEFAULT_SERVER_URL);
    let vars = ModalSettings::from_env(env(&[
        ("MODAL_CONFIG_PATH", config),
        ("MODAL_TOKEN_ID", "ak-env"),
        ("MODAL_TOKEN_SECRET", "as-env"),
    ]))
    .unwrap();
    assert_eq!(vars.credentials.token_id, "ak-env");
    assert!(
        !format!("{:?}", vars.credentials).contains("as-env"),
        "the secret is in Debug output"
    );
    let nowhere = dir.path().join("absent.toml");
    assert!(
        ModalSettings::from_env(env(&[("MODAL_CONFIG_PATH", nowhere.to_str().unwrap())])).is_none()
    );
    assert!(ModalSettings::from_env(env(&[("MODAL_TOKEN_ID", "ak-only")])).is_none());
}

#[test]
fn the_timeout_is_at_least_the_lease_and_at_most_a_day() {
    let mut settings = ModalSettings::from_env(env(&[
        ("MODAL_TOKEN_ID", "ak-a"),
        ("MODAL_TOKEN_SECRET", "as-b"),
    ]))
    .unwrap();
    settings.lease = Duration::from_secs(90);
    settings.timeout = Duration::from_secs(10);
    assert_eq!(settings.timeout_secs(), 90);
    settings.timeout = Duration::from_secs(7 * 24 * 3600);
    assert_eq!(settings.timeout_secs(), 24 * 3600);
    let definition = definition(&settings, "im-1", "/tmp/.lease");
    assert_eq!(definition.entrypoint_args[..2], ["sh", "-c"]);
    assert_eq!(definition.entrypoint_args[4..], ["/tmp/.lease", "90", "10"]);
    assert_eq!(definition.timeout_secs, 24 * 3600);
    assert_eq!(definition.idle_timeout_secs, Some(90));
    settings.lease = Duration::from_secs(7 * 24 * 3600);
    assert_eq!(settings.idle_timeout_secs(), 24 * 3600);
}

#[test]
fn errors_name_the_service_and_the_status() {
    let err = ModalError::Status {
        code: tonic::Code::PermissionDenied,
        message: "token id ak-xx… not valid".to_owned(),
    };
    assert_eq!(
        err.to_string(),
        "Modal: PERMISSION_DENIED (token id ak-xx… not valid)"
    );
    assert_eq!(code_name(tonic::Code::Unauthenticated), "UNAUTHENTICATED");
}

#[test]
fn jwt_expiry_is_read_without_verifying() {
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let token = format!(
        "{}.{}.sig",
        engine.encode("{}"),
        engine.encode(r#"{"exp":1700000000}"#)
    );
    assert_eq!(jwt_expiry(&token), Some(1_700_000_000));
    assert_eq!(jwt_expiry("not-a-jwt"), None);
}

#[test]
fn a_listed_sandbox_carries_its_lease_in_tags() {
    let tags = [
        (label::MANAGED, "1"),
        (label::OWNER, "coord"),
        (label::WORKER, "w"),
        (label::WORKER_INSTANCE, "i"),
        (label::TASK, "t"),
        (label::CREATED, "100"),
        (label::LEASE_SECONDS, "90"),
        (RENEWED_TAG, "150"),
    ];
    let info = pb::SandboxInfo {
        id: "sb-x".to_owned(),
        tags: tags
            .iter()
            .map(|(k, v)| pb::SandboxTag {
                tag_name: (*k).to_owned(),
                tag_value: (*v).to_owned(),
            })
            .collect(),
        ..Default::default()
    };
    let candidate = candidate_of(&info).unwrap();
    assert_eq!(candidate.id, "sb-x");
    assert_eq!(candidate.record.unwrap().renewed_at, 150);
    assert!(candidate_of(&pb::SandboxInfo::default()).is_none());
}

#[test]
fn a_token_secret_read_from_a_profile_is_masked_in_results() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("modal.toml");
    let secret = "as-profile-secret-0123456789abcdef";
    std::fs::write(
        &path,
        format!("[default]\ntoken_id = \"ak-profile\"\ntoken_secret = \"{secret}\"\n"),
    )
    .unwrap();
    let settings =
        ModalSettings::from_env(env(&[("MODAL_CONFIG_PATH", path.to_str().unwrap())])).unwrap();
    assert_eq!(settings.credentials.token_secret, secret);
    let shown = caduceus_common::redact::known::mask_known_secrets(&format!(
        "[default]\ntoken_secret = \"{secret}\""
    ))
    .into_owned();
    assert!(!shown.contains(secret), "{shown}");
}

#[tokio::test]
async fn a_plain_http_control_plane_is_refused_unless_it_is_this_host() {
    let credentials = || Credentials {
        token_id: "ak-test".to_owned(),
        token_secret: "as-test-secret".to_owned(),
    };
    let refused = super::api::Api::new("http://modal.example.com:8080", credentials())
        .expect_err("plain http to another host is refused");
    assert!(refused.to_string().contains("unencrypted"), "{refused}");
    assert!(super::api::Api::new("http://127.0.0.1:9", credentials()).is_ok());
    assert!(super::api::Api::new("https://api.modal.com", credentials()).is_ok());
}
