//! Placement with real processes (issue 11, item 1): labels, capacity
//! (`--max-envs`), the wait for an eligible worker and its error, and the
//! per-call backend of `terminal`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use caduceus_tests::conformance::BackendUnderTest;
use caduceus_tests::{Fleet, Proc};
use serde_json::{Value, json};

/// `caduceus call terminal ARGS --task TASK [--labels L] --json`: the parsed
/// `{"result", "worker", "status"}`.
fn call(fleet: &Fleet, c: &Proc, args: &Value, task: &str, labels: Option<&str>) -> Value {
    let text = args.to_string();
    let mut argv = vec!["call", "terminal", &text, "--task", task, "--json"];
    if let Some(labels) = labels {
        argv.extend(["--labels", labels]);
    }
    let out = fleet.client(c, &argv);
    assert!(
        out.status.success(),
        "call failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn echo(text: &str) -> Value {
    json!({"command": format!("echo {text}")})
}

#[test]
fn a_labelled_call_lands_only_on_the_labelled_worker() {
    let fleet = Fleet::new();
    let c = fleet.serve(&[]);
    let _plain = fleet.worker(&c, "plain", &fleet.token, &[]);
    let _gpu = fleet.worker(&c, "gpu", &fleet.token, &["--labels", "gpu=true,site=hpc"]);
    fleet.wait_for_workers(&c, &["gpu", "plain"], Duration::from_secs(30));
    for t in 0..4 {
        let done = call(&fleet, &c, &echo("hi"), &format!("g{t}"), Some("gpu=true"));
        assert_eq!(done["worker"], "gpu", "{done}");
        assert_eq!(done["result"]["output"], "hi", "{done}");
    }
    // Both labels, with the same values, are needed.
    let done = call(&fleet, &c, &echo("both"), "both", Some("site=hpc,gpu=true"));
    assert_eq!(done["worker"], "gpu", "{done}");
    // Unlabelled tasks spread by load: the plain worker holds nothing yet.
    let done = call(&fleet, &c, &echo("any"), "any", None);
    assert_eq!(done["worker"], "plain", "{done}");
    // The labels are shown where the operator looks.
    let status = fleet.status(&c);
    let gpu = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "gpu")
        .unwrap();
    assert_eq!(gpu["labels"]["site"], "hpc", "{gpu}");
    assert_eq!(gpu["placed_environments"], 5, "{gpu}");
}

#[test]
fn a_full_fleet_waits_then_errors_with_what_was_missing() {
    let fleet = Fleet::new();
    fleet.write_config("placement:\n  wait_seconds: 1\n");
    let c = fleet.serve(&[]);
    let labelled = ["--labels", "gpu=true", "--max-envs", "1"];
    let _g1 = fleet.worker(&c, "g1", &fleet.token, &labelled);
    let _g2 = fleet.worker(&c, "g2", &fleet.token, &labelled);
    let _plain = fleet.worker(&c, "plain", &fleet.token, &[]);
    fleet.wait_for_workers(&c, &["g1", "g2", "plain"], Duration::from_secs(30));
    let mut placed: Vec<String> = ["a", "b"]
        .iter()
        .map(|task| {
            let done = call(&fleet, &c, &echo(task), task, Some("gpu=true"));
            assert_eq!(done["status"], "ok", "{done}");
            done["worker"].as_str().unwrap().to_owned()
        })
        .collect();
    placed.sort();
    assert_eq!(placed, ["g1", "g2"]);
    let refused = call(&fleet, &c, &echo("c"), "c", Some("gpu=true"));
    assert_eq!(
        refused["result"]["error"],
        "no attached worker offers backend 'local' with labels gpu=true and free capacity; 2 workers have the labels but are full, 1 worker offers the backend without the labels",
        "{refused}"
    );
    assert_eq!(refused["status"], "error", "{refused}");
    // A task already placed keeps working on its full worker.
    let again = call(&fleet, &c, &echo("again"), "a", Some("gpu=true"));
    assert_eq!(again["result"]["output"], "again", "{again}");
    let workers = fleet.status(&c);
    let g1 = workers["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "g1")
        .unwrap();
    assert_eq!(
        (&g1["placed_environments"], &g1["max_environments"]),
        (&json!(1), &json!(1)),
        "{g1}"
    );
}

#[test]
fn a_call_waiting_for_a_full_worker_takes_the_slot_it_frees() {
    let fleet = Fleet::new();
    // The wait is longer than the test may take: the call is answered only
    // because the idle environment is ended and its slot freed. Idle
    // environments end after 2 s here (the reaper looks every second).
    fleet.write_config(
        "placement:\n  wait_seconds: 600\nterminal:\n  lifetime_seconds: 2\n  reap_interval_seconds: 1\n",
    );
    let c = fleet.serve(&[]);
    let _w = fleet.worker(&c, "w", &fleet.token, &["--max-envs", "1"]);
    fleet.wait_for_workers(&c, &["w"], Duration::from_secs(30));
    let first = call(&fleet, &c, &echo("first"), "first", None);
    assert_eq!(first["worker"], "w", "{first}");
    let second = call(&fleet, &c, &echo("second"), "second", None);
    assert_eq!(
        (&second["worker"], &second["result"]["output"]),
        (&json!("w"), &json!("second")),
        "{second}"
    );
    let status = fleet.status(&c);
    let envs: Vec<&str> = status["workers"][0]["environments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["task_id"].as_str().unwrap())
        .collect();
    assert!(!envs.contains(&"first"), "the idle one was ended: {envs:?}");
}

/// `tools --json`: terminal's `parameters.properties`.
fn terminal_properties(fleet: &Fleet, c: &Proc) -> Value {
    let out = fleet.client(c, &["tools", "--json"]);
    assert!(out.status.success());
    let tools: Value = serde_json::from_slice(&out.stdout).unwrap();
    tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "terminal")
        .map(|t| t["function"]["parameters"]["properties"].clone())
        .unwrap()
}

#[test]
fn a_backend_per_call_only_where_allowed_and_attached() {
    // Not allowed: no `backend` in the schema, and a call naming one is told.
    let fleet = Fleet::new();
    let c = fleet.serve(&[]);
    let _w = fleet.worker(&c, "w", &fleet.token, &[]);
    fleet.wait_for_workers(&c, &["w"], Duration::from_secs(30));
    assert!(terminal_properties(&fleet, &c).get("backend").is_none());
    let refused = call(
        &fleet,
        &c,
        &json!({"command": "echo x", "backend": "docker"}),
        "t",
        None,
    );
    assert_eq!(
        refused["result"]["error"],
        "This coordinator does not let calls choose a backend (placement.backend_choice is empty); leave out 'backend' to run on 'local'.",
        "{refused}"
    );
    drop((c, _w));

    let Some(docker) = BackendUnderTest::docker().ready_or_skip() else {
        return;
    };
    let fleet = Fleet::new();
    fleet.write_config(&format!(
        "placement:\n  backend_choice: [docker]\nterminal:\n{}",
        docker.terminal_config
    ));
    let c = fleet.serve(&[]);
    let _local = fleet.worker(&c, "w-local", &fleet.token, &["--backends", "local"]);
    fleet.wait_for_workers(&c, &["w-local"], Duration::from_secs(30));
    // One backend attached: nothing to choose.
    assert!(terminal_properties(&fleet, &c).get("backend").is_none());
    let not_attached = call(
        &fleet,
        &c,
        &json!({"command": "echo x", "backend": "docker"}),
        "t",
        None,
    );
    assert_eq!(
        not_attached["result"]["error"],
        "Backend 'docker' is not offered by any attached worker right now; available: local.",
        "{not_attached}"
    );
    let _docker = fleet.worker(&c, "w-docker", &fleet.token, &["--backends", "docker"]);
    fleet.wait_for_backend(&c, "w-docker", "docker", Duration::from_secs(60));
    assert_eq!(
        terminal_properties(&fleet, &c)["backend"]["enum"],
        json!(["docker", "local"])
    );
    // A file only the host has (this test may itself run in a container).
    let marker = fleet.home.path().join("on-the-host");
    std::fs::write(&marker, "").unwrap();
    let probe = format!(
        "test -e {} && echo host || echo container",
        marker.display()
    );
    let in_docker = call(
        &fleet,
        &c,
        &json!({"command": probe, "backend": "docker", "timeout": 120}),
        "t",
        None,
    );
    assert_eq!(
        (&in_docker["worker"], &in_docker["result"]["output"]),
        (&json!("w-docker"), &json!("container")),
        "{in_docker}"
    );
    let on_host = call(&fleet, &c, &json!({"command": probe}), "t", None);
    assert_eq!(
        (&on_host["worker"], &on_host["result"]["output"]),
        (&json!("w-local"), &json!("host")),
        "{on_host}"
    );
    let refused = call(
        &fleet,
        &c,
        &json!({"command": "echo x", "backend": "ssh"}),
        "t",
        None,
    );
    assert_eq!(
        refused["result"]["error"], "Backend 'ssh' may not be chosen here; choose one of: docker.",
        "{refused}"
    );
    // The task holds one environment per backend.
    let status = fleet.status(&c);
    assert_eq!(
        status["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["placed_environments"].as_u64().unwrap())
            .sum::<u64>(),
        2,
        "{status}"
    );
}
