//! deploy/k8s/*.yaml against the Kubernetes API's own types (k8s-openapi). No
//! API server runs here, so this is what stands between a typo and a user:
//! every document must deserialise into the type its `kind` names, and must
//! come back field for field when serialised again — k8s-openapi ignores
//! unknown fields, so a misspelt one shows up as a field that went missing.
//! Then the pieces must fit together: the names the workers dial, the Secret
//! they read, the selectors, and a termination grace longer than the worker's
//! graceful stop.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{PodSpec, Service};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The worker's default graceful-stop grace (`worker --shutdown-grace`), seconds.
const WORKER_SHUTDOWN_GRACE_SECS: i64 = 10;

fn manifests_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/k8s")
}

/// Every YAML document of every manifest, with the file it came from.
fn documents() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(manifests_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in deploy/k8s");
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let value: Value = serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("{name}: document {i} is not YAML: {e}"));
            if !value.is_null() {
                docs.push((format!("{name}#{i}"), value));
            }
        }
    }
    docs
}

/// Fields of `original` that are missing or different in `back`, as paths.
fn lost_fields(original: &Value, back: &Value, path: &str, out: &mut Vec<String>) {
    match (original, back) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let here = format!("{path}.{key}");
                match b.get(key) {
                    Some(other) => lost_fields(value, other, &here, out),
                    None => out.push(format!("{here} (unknown field)")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                lost_fields(x, y, &format!("{path}[{i}]"), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(format!("{path} ({a} became {b})")),
    }
}

/// Deserialises `value` as `T` and checks nothing was dropped or changed.
fn strict<T: DeserializeOwned + Serialize>(value: &Value) -> Result<T, String> {
    let typed: T = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    let mut lost = Vec::new();
    lost_fields(value, &back, "", &mut lost);
    if lost.is_empty() {
        Ok(typed)
    } else {
        Err(lost.join(", "))
    }
}

/// The typed objects of the manifests.
#[derive(Default)]
struct Objects {
    services: Vec<Service>,
    stateful_sets: Vec<StatefulSet>,
    deployments: Vec<Deployment>,
}

fn check(objects: &mut Objects, doc: &Value) -> Result<(), String> {
    let kind = doc["kind"].as_str().unwrap_or_default();
    let api = doc["apiVersion"].as_str().unwrap_or_default();
    match (api, kind) {
        ("v1", "Service") => objects.services.push(strict(doc)?),
        ("apps/v1", "StatefulSet") => objects.stateful_sets.push(strict(doc)?),
        ("apps/v1", "Deployment") => objects.deployments.push(strict(doc)?),
        _ => return Err(format!("unexpected apiVersion/kind {api}/{kind}")),
    }
    Ok(())
}

fn parse_all() -> Objects {
    let mut objects = Objects::default();
    for (name, doc) in documents() {
        if let Err(err) = check(&mut objects, &doc) {
            panic!("{name}: {err}");
        }
    }
    objects
}

#[test]
fn every_manifest_is_a_valid_kubernetes_object() {
    let objects = parse_all();
    assert_eq!(objects.services.len(), 1);
    assert_eq!(objects.stateful_sets.len(), 1);
    assert_eq!(objects.deployments.len(), 1);
}

#[test]
fn a_misspelt_or_mistyped_field_is_caught() {
    let (_, workers) = documents()
        .into_iter()
        .find(|(_, d)| d["kind"] == "Deployment")
        .unwrap();
    let mut objects = Objects::default();
    check(&mut objects, &workers).unwrap();

    let mut typo = workers.clone();
    let spec = typo["spec"]["template"]["spec"].as_object_mut().unwrap();
    let grace = spec.remove("terminationGracePeriodSeconds").unwrap();
    spec.insert("terminationGracePeriodSecond".into(), grace);
    let err = check(&mut objects, &typo).unwrap_err();
    assert!(
        err.contains(".spec.template.spec.terminationGracePeriodSecond (unknown field)"),
        "{err}"
    );

    let mut wrong_type = workers;
    wrong_type["spec"]["replicas"] = Value::String("three".into());
    assert!(check(&mut objects, &wrong_type).is_err());
}

fn pod(spec: &Option<PodSpec>) -> &PodSpec {
    spec.as_ref().unwrap()
}

fn env_value<'a>(spec: &'a PodSpec, name: &str) -> Option<&'a str> {
    spec.containers[0]
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .as_deref()
}

/// The Secret a pod mounts at the directory of its CADUCEUS_TOKEN_FILE.
fn token_secret(spec: &PodSpec) -> String {
    let file = env_value(spec, "CADUCEUS_TOKEN_FILE").expect("CADUCEUS_TOKEN_FILE is set");
    let dir = Path::new(file).parent().unwrap().to_str().unwrap();
    let mount = spec.containers[0]
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.mount_path == dir)
        .unwrap_or_else(|| panic!("nothing is mounted at {dir}"));
    assert_eq!(
        mount.read_only,
        Some(true),
        "the token is mounted read-only"
    );
    let volume = spec
        .volumes
        .as_ref()
        .unwrap()
        .iter()
        .find(|v| v.name == mount.name)
        .unwrap();
    volume
        .secret
        .as_ref()
        .and_then(|s| s.secret_name.clone())
        .expect("the token volume is a Secret")
}

#[test]
fn the_pieces_fit_together() {
    let objects = parse_all();
    let service = &objects.services[0];
    let coordinator = &objects.stateful_sets[0];
    let workers = &objects.deployments[0];
    let service_name = service.metadata.name.clone().unwrap();
    let service_spec = service.spec.as_ref().unwrap();
    let port = service_spec.ports.as_ref().unwrap()[0].port;

    // The StatefulSet is governed by the Service, which selects its pods.
    let sts = &coordinator.spec;
    assert_eq!(sts.service_name.as_deref(), Some(service_name.as_str()));
    assert_eq!(sts.replicas, Some(1), "one coordinator owns state.db");
    let pod_labels = sts.template.metadata.as_ref().unwrap().labels.as_ref();
    assert_eq!(service_spec.selector.as_ref(), pod_labels);
    assert_eq!(sts.selector.match_labels.as_ref(), pod_labels);

    // state.db lives on the claimed volume, mounted at CADUCEUS_HOME.
    let coordinator_pod = pod(&sts.template.spec);
    let home = env_value(coordinator_pod, "CADUCEUS_HOME").unwrap();
    let claim = &sts.volume_claim_templates.as_ref().unwrap()[0];
    let claim_name = claim.metadata.name.as_deref().unwrap();
    assert!(
        coordinator_pod.containers[0]
            .volume_mounts
            .as_ref()
            .unwrap()
            .iter()
            .any(|m| m.name == claim_name && m.mount_path == home),
        "the {claim_name} claim is mounted at CADUCEUS_HOME ({home})"
    );

    // Workers dial the Service's name and port, with the same Secret.
    let deploy = &workers.spec;
    let worker_pod = pod(&deploy.template.spec);
    let args = worker_pod.containers[0].args.as_ref().unwrap();
    let at = args.iter().position(|a| a == "--coordinator").unwrap();
    assert_eq!(args[at + 1], format!("http://{service_name}:{port}"));
    assert_eq!(args[0], "worker");
    assert_eq!(token_secret(worker_pod), token_secret(coordinator_pod));
    assert_eq!(
        deploy.selector.match_labels.as_ref(),
        deploy.template.metadata.as_ref().unwrap().labels.as_ref()
    );

    // No token on a command line; no Kubernetes API access at all.
    for spec in [coordinator_pod, worker_pod] {
        let args = spec.containers[0].args.as_ref().unwrap();
        assert!(!args.iter().any(|a| a == "--token"), "{args:?}");
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert!(spec.service_account_name.is_none());
    }

    // The kubelet waits longer than the worker's graceful stop.
    let grace = worker_pod.termination_grace_period_seconds.unwrap();
    assert!(
        grace > WORKER_SHUTDOWN_GRACE_SECS,
        "terminationGracePeriodSeconds {grace} must exceed the worker's {WORKER_SHUTDOWN_GRACE_SECS} s grace"
    );
}
