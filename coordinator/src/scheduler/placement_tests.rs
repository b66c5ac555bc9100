use std::collections::{BTreeMap, HashMap};

use super::*;

struct Spec {
    name: &'static str,
    backends: Vec<String>,
    labels: HashMap<String, String>,
    admission: Admission,
    environments: usize,
    max_environments: u32,
    running_calls: u32,
}

fn worker(name: &'static str, labels: &[(&str, &str)]) -> Spec {
    Spec {
        name,
        backends: vec!["local".to_owned(), "docker".to_owned()],
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        admission: Admission::Open,
        environments: 0,
        max_environments: 4,
        running_calls: 0,
    }
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn pick(
    backend: &str,
    wanted: &BTreeMap<String, String>,
    specs: &[Spec],
) -> Result<&'static str, String> {
    let candidates: Vec<Candidate<'_>> = specs
        .iter()
        .map(|s| Candidate {
            name: s.name,
            backends: &s.backends,
            labels: &s.labels,
            admission: s.admission,
            environments: s.environments,
            max_environments: s.max_environments,
            running_calls: s.running_calls,
            call_capacity: 8,
        })
        .collect();
    choose(
        Request {
            backend,
            labels: wanted,
        },
        &candidates,
    )
    .map(|i| specs[i].name)
    .map_err(|shortfall| shortfall.to_string())
}

#[test]
fn only_a_worker_with_every_label_is_eligible() {
    let specs = [
        worker("plain", &[]),
        worker("gpu-other-site", &[("gpu", "true"), ("site", "cloud")]),
        worker("gpu-hpc", &[("gpu", "true"), ("site", "hpc")]),
    ];
    assert_eq!(
        pick(
            "docker",
            &labels(&[("gpu", "true"), ("site", "hpc")]),
            &specs
        ),
        Ok("gpu-hpc")
    );
    // A label with another value does not count.
    assert_eq!(
        pick("docker", &labels(&[("gpu", "false")]), &specs),
        Err("no attached worker offers backend 'docker' with labels gpu=false and free capacity; 3 workers offer the backend without the labels".to_owned())
    );
}

#[test]
fn the_least_loaded_eligible_worker_wins() {
    let mut busy = worker("a-busy", &[]);
    busy.running_calls = 4;
    let mut crowded = worker("b-crowded", &[]);
    crowded.environments = 3;
    let idle = worker("c-idle", &[]);
    let specs = [busy, crowded, idle];
    assert_eq!(pick("local", &BTreeMap::new(), &specs), Ok("c-idle"));
    // Equal load and environments: the name decides (stable, testable).
    let specs = [worker("w2", &[]), worker("w1", &[])];
    assert_eq!(pick("local", &BTreeMap::new(), &specs), Ok("w1"));
}

#[test]
fn full_workers_are_skipped_and_named_in_the_error() {
    let mut full1 = worker("g1", &[("gpu", "true")]);
    full1.environments = 4;
    let mut full2 = worker("g2", &[("gpu", "true")]);
    full2.environments = 4;
    let roomy_plain = worker("plain", &[]);
    let specs = [full1, full2, roomy_plain];
    assert_eq!(
        pick("docker", &labels(&[("gpu", "true")]), &specs),
        Err("no attached worker offers backend 'docker' with labels gpu=true and free capacity; 2 workers have the labels but are full, 1 worker offers the backend without the labels".to_owned())
    );
    // Without labels the roomy one takes it.
    assert_eq!(pick("docker", &BTreeMap::new(), &specs), Ok("plain"));
}

#[test]
fn the_issue_example_reads_exactly_so() {
    let mut a = worker("a", &[("gpu", "true")]);
    a.environments = 4;
    let mut b = worker("b", &[("gpu", "true")]);
    b.environments = 9;
    assert_eq!(
        pick("docker", &labels(&[("gpu", "true")]), &[a, b]),
        Err("no attached worker offers backend 'docker' with labels gpu=true and free capacity; 2 workers have the labels but are full".to_owned())
    );
}

#[test]
fn no_limit_means_never_full() {
    let mut unlimited = worker("u", &[]);
    unlimited.max_environments = 0;
    unlimited.environments = 10_000;
    assert_eq!(pick("local", &BTreeMap::new(), &[unlimited]), Ok("u"));
}

#[test]
fn cordoned_draining_and_suspect_workers_take_nothing_new() {
    let mut cordoned = worker("c", &[]);
    cordoned.admission = Admission::Cordoned;
    let mut draining = worker("d", &[]);
    draining.admission = Admission::Draining;
    let mut suspect = worker("s", &[]);
    suspect.admission = Admission::Suspect;
    assert_eq!(
        pick("local", &BTreeMap::new(), &[cordoned, draining, suspect]),
        Err("no attached worker offers backend 'local' and free capacity; 2 workers offer the backend but are cordoned or draining, 1 worker with them is not answering heartbeats".to_owned())
    );
}

#[test]
fn a_fleet_without_the_backend_says_only_that() {
    let mut local_only = worker("l", &[]);
    local_only.backends = vec!["local".to_owned()];
    assert_eq!(
        pick("ssh", &BTreeMap::new(), &[local_only]),
        Err("no attached worker offers backend 'ssh' and free capacity".to_owned())
    );
    let mut one_full = worker("f", &[]);
    one_full.environments = 4;
    assert_eq!(
        pick("local", &BTreeMap::new(), &[one_full]),
        Err("no attached worker offers backend 'local' and free capacity; 1 worker offers the backend but is full".to_owned())
    );
}
