//! A coordinator and workers as separate processes on loopback: membership,
//! authentication, placement, many calls, and a worker dying.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use caduceus_tests::{Fleet, control_client, parse_result, terminal_call};
use serde_json::{Value, json};

#[test]
fn two_workers_attach_and_a_wrong_token_is_refused() {
    let fleet = Fleet::new();
    let coordinator = fleet.serve(&[]);
    let _w1 = fleet.worker(
        &coordinator,
        "w1",
        &fleet.token,
        &["--labels", "zone=a,gpu=no"],
    );
    let _w2 = fleet.worker(&coordinator, "w2", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1", "w2"], Duration::from_secs(30));

    let status = fleet.status(&coordinator);
    let w1 = status["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["name"] == "w1")
        .unwrap();
    assert_eq!(w1["backends"], json!(["local"]));
    assert_eq!(w1["labels"], json!({"zone": "a", "gpu": "no"}));
    assert_eq!(w1["state"], "ready");

    // A worker with the wrong token never joins, and says why.
    let mut intruder = fleet.worker(&coordinator, "intruder", "not-the-token", &[]);
    let exit = intruder
        .wait_exit(Duration::from_secs(30))
        .expect("a refused worker exits");
    assert!(!exit.success());
    let log = intruder.stderr_to_end();
    assert!(
        log.contains("refused") && log.contains("invalid token"),
        "{log}"
    );
    assert_eq!(fleet.worker_names(&coordinator), ["w1", "w2"]);

    // A client with the wrong token is refused too.
    let mut cmd = fleet.command();
    let out = cmd
        .args([
            "status",
            "--coordinator",
            &coordinator.url(),
            "--token",
            "wrong",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid token"));
    // And one without any token is told how to give one.
    let out = fleet
        .command()
        .args(["status", "--coordinator", &coordinator.url()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("token"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_second_worker_with_the_same_name_is_refused_while_the_first_lives() {
    let fleet = Fleet::new();
    let coordinator = fleet.serve(&[]);
    let _w1 = fleet.worker(&coordinator, "same", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["same"], Duration::from_secs(30));
    let mut twin = fleet.worker(&coordinator, "same", &fleet.token, &[]);
    twin.wait_for_stderr("already attached", Duration::from_secs(30));
    assert_eq!(fleet.worker_names(&coordinator), ["same"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_calls_placement_and_a_dying_worker() {
    let fleet = Fleet::new();
    let coordinator = fleet.serve(&[]);
    let _w1 = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
    let mut w2 = fleet.worker(&coordinator, "w2", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1", "w2"], Duration::from_secs(30));
    let mut client = control_client(&coordinator.url(), &fleet.token).await;

    // 200 sequential calls through the coordinator, each with the right output.
    let mut worker_of_main = HashSet::new();
    for i in 0..200 {
        let (result, worker) = terminal_call(&mut client, "main", &format!("echo call-{i}")).await;
        assert_eq!(result["output"], format!("call-{i}"), "call {i}: {result}");
        assert_eq!(result["exit_code"], 0);
        worker_of_main.insert(worker);
    }
    assert_eq!(
        worker_of_main.len(),
        1,
        "one task stays on one worker: {worker_of_main:?}"
    );

    // State persists in the task's environment, on that worker.
    terminal_call(&mut client, "main", "export CAD_MARK=kept; cd /tmp").await;
    let (result, _) = terminal_call(&mut client, "main", "echo $CAD_MARK $PWD").await;
    assert_eq!(result["output"], "kept /tmp");

    // Many tasks spread over both workers; each task sticks to its worker.
    let mut placement: HashMap<String, String> = HashMap::new();
    for round in 0..3 {
        for t in 0..10 {
            let task = format!("task-{t}");
            let (result, worker) = terminal_call(&mut client, &task, "echo ok").await;
            assert_eq!(result["output"], "ok");
            if round == 0 {
                placement.insert(task, worker);
            } else {
                assert_eq!(placement[&task], worker, "{task} moved");
            }
        }
    }
    let used: HashSet<&String> = placement.values().collect();
    assert_eq!(
        used.len(),
        2,
        "tasks spread over both workers: {placement:?}"
    );

    // Killing a worker process removes it from status.
    let victim_tasks: Vec<String> = placement
        .iter()
        .filter(|(_, w)| *w == "w2")
        .map(|(t, _)| t.clone())
        .collect();
    w2.kill();
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(10));
    // Its tasks continue on the survivor, and the model is told the environment was reset.
    let task = &victim_tasks[0];
    let (result, worker) = terminal_call(&mut client, task, "echo again").await;
    assert_eq!(worker, "w1");
    assert_eq!(result["output"], "again");
    assert!(
        result["environment_reset"]
            .as_str()
            .unwrap_or_default()
            .contains("w2"),
        "{result}"
    );
    let (result, _) = terminal_call(&mut client, task, "echo once more").await;
    assert!(
        result.get("environment_reset").is_none(),
        "told only once: {result}"
    );
}

#[test]
fn cli_call_prints_the_model_result() {
    let fleet = Fleet::new();
    let coordinator = fleet.serve(&[]);
    let _w1 = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));

    let out = fleet.client(
        &coordinator,
        &[
            "call",
            "terminal",
            r#"{"command": "echo hi; echo err >&2; exit 3"}"#,
        ],
    );
    assert!(out.status.success());
    assert_eq!(
        parse_result(&out.stdout),
        json!({"output": "hi\nerr", "exit_code": 3, "error": null})
    );

    // Malformed arguments: hermes' error, nothing runs.
    let out = fleet.client(
        &coordinator,
        &["call", "terminal", r#"{"command": "touch /tmp/should-not"#],
    );
    assert_eq!(
        parse_result(&out.stdout),
        json!({"error": "Invalid tool arguments", "message": "Tool arguments must be a valid JSON object; tool was not executed."})
    );
    // Unknown tool.
    let out = fleet.client(&coordinator, &["call", "no_such_tool", "{}"]);
    assert!(
        parse_result(&out.stdout)["error"]
            .as_str()
            .unwrap()
            .starts_with("Tool 'no_such_tool' does not exist")
    );

    // tools: worker tools are listed once a worker offers the backend.
    let out = fleet.client(&coordinator, &["tools", "--json"]);
    let defs: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = defs
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"terminal") && names.contains(&"todo"),
        "{names:?}"
    );
}

#[test]
fn large_results_are_persisted_in_the_sandbox_with_a_preview() {
    let fleet = Fleet::new();
    // Let the terminal return more than the 100,000-character result cap.
    std::fs::write(
        fleet.home.path().join("config.yaml"),
        "tool_output:\n  max_bytes: 300000\n",
    )
    .unwrap();
    let coordinator = fleet.serve(&[]);
    let _w1 = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));

    let out = fleet.client(
        &coordinator,
        &[
            "call",
            "terminal",
            r#"{"command": "head -c 150000 /dev/zero | tr '\\0' x"}"#,
            "--task",
            "big",
        ],
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("<persisted-output>\nThis tool result was too large ("),
        "{}",
        &text[..text.len().min(300)]
    );
    assert!(
        text.len() < 5_000,
        "the model sees a preview, not the whole result"
    );
    let path = text
        .lines()
        .find_map(|l| l.strip_prefix("Full output saved to: "))
        .unwrap()
        .trim()
        .to_owned();
    assert!(path.contains("/caduceus-results/"), "{path}");
    // The full result is in the task's sandbox.
    let out = fleet.client(
        &coordinator,
        &[
            "call",
            "terminal",
            &json!({"command": format!("wc -c < {path}")}).to_string(),
            "--task",
            "big",
        ],
    );
    let size: usize = parse_result(&out.stdout)["output"]
        .as_str()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        size > 150_000,
        "the saved result holds the whole output ({size} bytes)"
    );
}

/// A burst of calls on one worker, far more than it runs at once: every call
/// is answered by its command. (The coordinator's queue of commands to a
/// worker once held 64, and the 65th call in flight failed with "worker is
/// not reading its commands" although the worker was healthy.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_a_thousand_calls_on_one_worker_is_answered_call_by_call() {
    let fleet = Fleet::new();
    let coordinator = fleet.serve(&[]);
    let _w1 = fleet.worker(&coordinator, "w1", &fleet.token, &["--max-envs", "20"]);
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));
    let client = control_client(&coordinator.url(), &fleet.token).await;

    let calls = (0..1000).map(|i| {
        let mut client = client.clone();
        async move {
            let task = format!("burst-{}", i % 20);
            let (result, worker) =
                terminal_call(&mut client, &task, &format!("echo call-{i}")).await;
            (i, result, worker)
        }
    });
    for (i, result, worker) in futures::future::join_all(calls).await {
        assert_eq!(result["output"], format!("call-{i}"), "call {i}: {result}");
        assert_eq!(result["exit_code"], 0, "call {i}: {result}");
        assert_eq!(worker, "w1");
    }
}
