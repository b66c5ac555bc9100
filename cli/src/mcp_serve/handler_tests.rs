#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;

use caduceus_proto::{StatusResponse, WorkerStatus};
use serde_json::json;

use super::*;

fn worker(name: &str, backends: &[&str], labels: &[(&str, &str)]) -> WorkerStatus {
    WorkerStatus {
        name: name.to_owned(),
        state: "ready".to_owned(),
        backends: backends.iter().map(|b| (*b).to_owned()).collect(),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..WorkerStatus::default()
    }
}

fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

#[test]
fn labels_may_be_given_as_strings_numbers_or_booleans() {
    let parsed = requested(&object(
        json!({"backend": "docker", "labels": {"gpu": true, "zone": "a", "n": 2}}),
    ))
    .unwrap();
    assert_eq!(parsed.backend.as_deref(), Some("docker"));
    assert_eq!(parsed.labels["gpu"], "true");
    assert_eq!(parsed.labels["n"], "2");
    assert!(requested(&object(json!({"labels": ["gpu"]}))).is_err());
    assert!(requested(&object(json!({"backend": 3}))).is_err());
}

#[test]
fn an_environment_no_worker_can_hold_is_refused_naming_what_is_attached() {
    let status = StatusResponse {
        workers: vec![worker("w1", &["local"], &[("zone", "a")])],
        ..StatusResponse::default()
    };
    let wanted = Requested {
        backend: Some("docker".to_owned()),
        labels: Default::default(),
    };
    let message = unplaceable(&status, &wanted).unwrap();
    assert!(message.contains("backend 'docker'"), "{message}");
    assert!(
        message.contains("w1 (ready; backends local; labels zone=a)"),
        "{message}"
    );
    assert!(unplaceable(&status, &Requested::default()).is_none());
    let labelled = Requested {
        backend: None,
        labels: [("zone".to_owned(), "a".to_owned())].into(),
    };
    assert!(unplaceable(&status, &labelled).is_none());
    let empty = StatusResponse::default();
    assert!(
        unplaceable(&empty, &Requested::default())
            .unwrap()
            .contains("no worker is attached")
    );
}

#[test]
fn an_environment_placed_without_the_labels_asked_for_is_a_mismatch() {
    let labels: HashMap<String, String> = [("zone".to_owned(), "b".to_owned())].into();
    let wanted = Requested {
        backend: None,
        labels: [("zone".to_owned(), "a".to_owned())].into(),
    };
    let message = placement_mismatch(&wanted, "w2", &labels).unwrap();
    assert!(message.contains("lacks the labels zone=a"), "{message}");
    assert!(placement_mismatch(&Requested::default(), "w2", &labels).is_none());
}

#[test]
fn the_approval_id_is_read_from_a_pending_result() {
    assert_eq!(
        approval_id(r#"{"status": "pending_approval", "approval_id": "ap_1"}"#).as_deref(),
        Some("ap_1")
    );
    assert_eq!(approval_id("not json"), None);
}
