use std::time::Duration;

use serde_json::{Map, Value, json};

use super::sandbox::{parse_poll, poll_script};
use super::*;

fn settings() -> DaytonaSettings {
    DaytonaSettings::from_env(|name| (name == "DAYTONA_API_KEY").then(|| "dtn_secret".to_owned()))
        .unwrap()
}

#[test]
fn credentials_come_from_a_key_or_a_jwt_with_its_organization() {
    assert!(DaytonaSettings::from_env(|_| None).is_none());
    let jwt_alone =
        DaytonaSettings::from_env(|n| (n == "DAYTONA_JWT_TOKEN").then(|| "t".to_owned()));
    assert!(jwt_alone.is_none(), "a JWT needs DAYTONA_ORGANIZATION_ID");
    let jwt = DaytonaSettings::from_env(|n| match n {
        "DAYTONA_JWT_TOKEN" => Some("t".to_owned()),
        "DAYTONA_ORGANIZATION_ID" => Some("org".to_owned()),
        _ => None,
    })
    .unwrap();
    assert!(
        matches!(jwt.credentials, Credentials::Jwt { ref organization, .. } if organization == "org")
    );
    assert_eq!(settings().api_url, DEFAULT_API_URL);
    // The key never shows in a Debug print (logs).
    assert!(!format!("{:?}", settings()).contains("dtn_secret"));
}

#[test]
fn lifecycle_intervals_are_the_lease_in_minutes_and_never_zero() {
    let mut s = settings();
    for (secs, minutes) in [(1, 1), (3, 1), (60, 1), (61, 2), (600, 10)] {
        s.lease = Duration::from_secs(secs);
        let body = create_body(&s, &Map::new());
        for key in [
            "autoStopInterval",
            "autoArchiveInterval",
            "autoDeleteInterval",
        ] {
            assert_eq!(body[key], minutes, "{key} for a {secs}s lease");
        }
    }
}

#[test]
fn an_image_is_built_as_the_sdk_does_and_a_snapshot_wins() {
    let mut s = settings();
    s.image = Some("debian:bookworm-slim".to_owned());
    let body = create_body(&s, &Map::new());
    assert_eq!(
        body["buildInfo"],
        json!({"dockerfileContent": "FROM debian:bookworm-slim\n"})
    );
    s.snapshot = Some("snap".to_owned());
    let body = create_body(&s, &Map::new());
    assert_eq!(body["snapshot"], "snap");
    assert!(body.get("buildInfo").is_none());
}

#[test]
fn errors_name_the_service_and_the_status() {
    let err = DaytonaError::Status {
        status: reqwest::StatusCode::UNAUTHORIZED,
        message: api::error_message(
            r#"{"statusCode":401,"error":"Unauthorized","message":"Invalid credentials"}"#,
        ),
    };
    assert_eq!(
        err.to_string(),
        "Daytona: 401 Unauthorized (Invalid credentials)"
    );
    assert_eq!(api::error_message(r#"{"message":["a","b"]}"#), "a; b");
    assert_eq!(api::error_message("plain text"), "plain text");
}

#[test]
fn polls_carry_exact_bytes_and_the_exit_code() {
    assert_eq!(parse_poll("aGk=\x1e"), Some((b"hi".to_vec(), None)));
    assert_eq!(parse_poll("\x1e137\n"), Some((Vec::new(), Some(137))));
    assert_eq!(parse_poll("no separator"), None);
    assert!(poll_script("/tmp/x", 10).contains("tail -c +11"));
}

#[test]
fn a_listed_sandbox_is_judged_by_its_labels() {
    let item = json!({"id": "sb-1", "labels": {
        "caduceus.managed": "1", "caduceus.owner": "c", "caduceus.worker": "w",
        "caduceus.worker-instance": "i", "caduceus.task": "t", "caduceus.created": "100",
        "caduceus.lease-seconds": "3", RENEWED_LABEL: "200"}});
    let candidate = candidate_of(&item).unwrap();
    assert_eq!(candidate.record.as_ref().map(|r| r.renewed_at), Some(200));
    let unmanaged = json!({"id": "sb-2", "labels": {"x": "y"}});
    assert!(candidate_of(&unmanaged).is_none());
    let _: Value = item;
}

/// The file tools' `execute` command, run here by `sh` as the daemon runs
/// it: exactly the given environment, the input inline or from a staged
/// file (removed once read), the output back as base64.
#[test]
fn a_file_script_runs_as_one_posix_command() {
    use base64::Engine as _;
    let run = |command: &str| {
        let out = std::process::Command::new("sh")
            .args(["-c", command])
            .env("DAYTONA_API_KEY", "must-not-cross")
            .output()
            .unwrap();
        base64::engine::general_purpose::STANDARD
            .decode(String::from_utf8_lossy(&out.stdout).trim())
            .unwrap()
    };
    let argv: Vec<String> = ["bash", "-c", "cat; env | sort", "caduceus-fs"]
        .map(str::to_owned)
        .to_vec();
    let env = vec![
        ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
        ("LC_ALL".to_owned(), "C".to_owned()),
    ];
    let data: Vec<u8> = (0..=255u8).collect();
    let out = run(&files::command(&argv, &env, &files::Input::Inline(&data)));
    assert_eq!(&out[..256], &data[..], "inline input is not exact");
    let rest = String::from_utf8_lossy(&out[256..]).into_owned();
    assert!(rest.contains("LC_ALL=C"), "{rest}");
    assert!(!rest.contains("must-not-cross"), "{rest}");

    let dir = tempfile::tempdir().unwrap();
    let staged = dir.path().join("in");
    std::fs::write(&staged, b"from a file").unwrap();
    let staged = staged.display().to_string();
    let out = run(&files::command(&argv, &env, &files::Input::File(&staged)));
    assert!(out.starts_with(b"from a file"));
    assert!(
        !std::path::Path::new(&staged).exists(),
        "the staged input was left"
    );

    let out = run(&files::command(&argv, &env, &files::Input::None));
    assert!(
        out.starts_with(b"LC_ALL=C"),
        "{}",
        String::from_utf8_lossy(&out)
    );
}

/// A stopped persistent sandbox is kept `keep` after it stopped, whatever
/// its lease says; running or not persistent, the lease rule decides.
#[test]
fn a_stopped_persistent_sandbox_is_kept_until_its_keep_passes() {
    let s = settings();
    let now = SystemTime::now();
    let at = |secs_ago: u64| (lease::epoch_secs(now) - secs_ago).to_string();
    let item = |state: &str, persistent: bool, stopped: String| {
        let mut labels = json!({STOPPED_LABEL: stopped});
        if persistent {
            labels[PERSISTENT_LABEL] = json!("1");
        }
        json!({"id": "sb", "state": state, "labels": labels})
    };
    assert_eq!(
        kept_persistent(&item("stopped", true, at(60)), &s, now),
        Some(true)
    );
    assert_eq!(
        kept_persistent(&item("archived", true, at(60)), &s, now),
        Some(true)
    );
    let long_ago = s.keep.as_secs() + 60;
    assert_eq!(
        kept_persistent(&item("stopped", true, at(long_ago)), &s, now),
        Some(false)
    );
    assert_eq!(
        kept_persistent(&item("started", true, at(60)), &s, now),
        None
    );
    assert_eq!(
        kept_persistent(&item("stopped", false, at(60)), &s, now),
        None
    );
    let mut p = settings();
    p.persistent = true;
    let mut labels = Map::new();
    labels.insert(PERSISTENT_LABEL.to_owned(), json!("1"));
    assert_eq!(
        create_body(&p, &labels)["autoDeleteInterval"],
        lease_minutes(p.keep)
    );
}
