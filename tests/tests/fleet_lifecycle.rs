//! Hung workers, fenced environments, and `caduceus call` when things go
//! away (issue 9): real coordinator and worker processes, SIGSTOP/SIGCONT.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::time::{Duration, Instant};

use caduceus_proto::StatusRequest;
use caduceus_tests::{
    ControlClient, Fleet, PRODUCT_LIVENESS, Proc, control_client, signal, terminal_call,
};
use serde_json::Value;

/// (name, state) of every attached worker.
async fn states(client: &mut ControlClient) -> Vec<(String, String)> {
    client
        .status(StatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .workers
        .into_iter()
        .map(|w| (w.name, w.state))
        .collect()
}

/// The name of the worker holding `task`'s environment, per status.
async fn holder(client: &mut ControlClient, task: &str) -> Option<String> {
    client
        .status(StatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .workers
        .into_iter()
        .find(|w| w.environments.iter().any(|e| e.task_id == task))
        .map(|w| w.name)
}

fn shell_pid(result: &Value) -> u32 {
    result["output"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("no pid in {result}"))
}

/// A coordinator (test heartbeat settings) and worker w1.
fn fleet_of_one(fleet: &Fleet) -> (Proc, Proc) {
    let coordinator = fleet.serve(&[]);
    let w1 = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));
    (coordinator, w1)
}

/// A coordinator with the product's heartbeat settings and workers w1, w2.
fn fleet_of_two(fleet: &Fleet) -> (Proc, Proc, Proc) {
    let coordinator = fleet.serve(&PRODUCT_LIVENESS);
    let w1 = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
    let w2 = fleet.worker(&coordinator, "w2", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w1", "w2"], Duration::from_secs(30));
    (coordinator, w1, w2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_worker_is_suspect_then_lost_and_its_calls_end_naming_it() {
    let fleet = Fleet::new();
    let (coordinator, w1, w2) = fleet_of_two(&fleet);
    let mut client = control_client(&coordinator.url(), &fleet.token).await;
    let (_, name) = terminal_call(&mut client, "r", "echo placed").await;
    let (hung, other) = if name == "w1" { (w1, "w2") } else { (w2, "w1") };

    // A call in flight on the worker that will hang.
    let mark = format!("{}.{}", 600 + std::process::id() % 100, std::process::id());
    let url = coordinator.url();
    let token = fleet.token.clone();
    let command = format!("sleep {mark}");
    let in_flight = tokio::spawn(async move {
        let mut client = control_client(&url, &token).await;
        terminal_call(&mut client, "r", &command).await
    });
    let needle = format!("sleep {mark}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !running(&needle) {
        assert!(Instant::now() < deadline, "the call never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    signal(hung.pid(), "STOP");
    let stopped_at = Instant::now();
    // Suspect first (shown in status, no new placements), then lost.
    let mut seen_suspect = false;
    let mut placed_while_suspect = Vec::new();
    loop {
        let now = states(&mut client).await;
        let state = now.iter().find(|(n, _)| *n == name).map(|(_, s)| s.clone());
        match state.as_deref() {
            Some("suspect") => {
                seen_suspect = true;
                let task = format!("fresh-{}", placed_while_suspect.len());
                let (result, worker) = terminal_call(&mut client, &task, "echo new").await;
                assert_eq!(result["output"], "new");
                placed_while_suspect.push(worker);
            }
            Some(_) => {}
            None => break,
        }
        assert!(
            stopped_at.elapsed() < Duration::from_secs(30),
            "the stopped worker was never declared lost: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen_suspect,
        "status never showed the silent worker suspect"
    );
    assert!(
        placed_while_suspect.iter().all(|w| w == other),
        "new tasks were placed on the suspect worker: {placed_while_suspect:?}"
    );
    // The call in flight is answered while the worker is still stopped,
    // with an error naming it.
    let (result, _) = tokio::time::timeout(Duration::from_secs(20), in_flight)
        .await
        .expect("the in-flight call was never answered")
        .unwrap();
    let answered_after = stopped_at.elapsed();
    let error = result["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("The worker '{name}' running this call was lost")),
        "{result}"
    );
    eprintln!("SIGSTOP to the in-flight call's answer: {answered_after:?}");

    signal(hung.pid(), "CONT");
    fleet.wait_for_workers(&coordinator, &["w1", "w2"], Duration::from_secs(30));
    // The resumed worker stopped the command nobody waits for any more.
    assert!(
        gone_within(&needle, Duration::from_secs(20)),
        "the abandoned command still runs on the resumed worker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_back_from_a_hang_never_answers_for_a_task_placed_elsewhere() {
    let fleet = Fleet::new();
    let (coordinator, w1, w2) = fleet_of_two(&fleet);
    let mut client = control_client(&coordinator.url(), &fleet.token).await;
    let (first, name) =
        terminal_call(&mut client, "r", "cd /tmp && export MARK=old && echo $$").await;
    let old_pid = shell_pid(&first);
    let (hung, other) = if name == "w1" { (w1, "w2") } else { (w2, "w1") };

    signal(hung.pid(), "STOP");
    fleet.wait_for_workers(&coordinator, &[other], Duration::from_secs(30));
    // r moves to the other worker, and the model is told.
    let (moved, worker) = terminal_call(&mut client, "r", "echo $$ MARK=$MARK").await;
    assert_eq!(worker, other);
    assert!(
        moved["environment_reset"]
            .as_str()
            .unwrap_or_default()
            .contains(&name),
        "{moved}"
    );
    let new_pid = shell_pid(&moved);
    assert_ne!(new_pid, old_pid);
    assert!(
        moved["output"].as_str().unwrap().ends_with("MARK="),
        "{moved}"
    );
    terminal_call(&mut client, "r", "export MARK=new").await;

    signal(hung.pid(), "CONT");
    fleet.wait_for_workers(&coordinator, &["w1", "w2"], Duration::from_secs(30));
    // The old environment is stale for ever: every call of r is answered by
    // the new one, without another notice, and the old shell is ended.
    for _ in 0..5 {
        let (again, worker) = terminal_call(&mut client, "r", "echo $$ MARK=$MARK").await;
        assert_eq!(worker, other, "{again}");
        assert_eq!(again["output"], format!("{new_pid} MARK=new"));
        assert!(again.get("environment_reset").is_none(), "{again}");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::path::Path::new(&format!("/proc/{old_pid}")).exists()
        || holder(&mut client, "r").await.as_deref() != Some(other)
    {
        assert!(
            Instant::now() < deadline,
            "the stale shell {old_pid} lives on or r is listed on {name}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let listed: Vec<String> = client
        .status(StatusRequest {})
        .await
        .unwrap()
        .into_inner()
        .workers
        .iter()
        .filter(|w| w.environments.iter().any(|e| e.task_id == "r"))
        .map(|w| w.name.clone())
        .collect();
    assert_eq!(listed, [other], "one task, one live environment");
}

/// A unique `sleep` command and the needle that finds its process.
fn unique_sleep() -> String {
    format!(
        "sleep {}.{}{:09}",
        500 + std::process::id() % 100,
        std::process::id(),
        uuid_digits()
    )
}

fn uuid_digits() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
}

/// `caduceus call terminal {command}` as a child process (stdout piped);
/// `url` = None runs it embedded.
fn spawn_call(fleet: &Fleet, url: Option<&str>, command: &str) -> std::process::Child {
    let mut cmd = fleet.command();
    cmd.args([
        "call",
        "terminal",
        &serde_json::json!({ "command": command }).to_string(),
        "--task",
        "t",
    ]);
    if let Some(url) = url {
        cmd.env("CADUCEUS_COORDINATOR", url)
            .env("CADUCEUS_TOKEN", &fleet.token);
    }
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a child to exit; its status and stdout.
fn finish(mut child: std::process::Child, within: Duration) -> (std::process::ExitStatus, Value) {
    let deadline = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("caduceus call did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not one JSON result ({e}, exit {}): {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status, result)
}

/// Is a process running exactly `command` (not one that merely mentions it,
/// like the `caduceus call` that asked for it)?
fn running(command: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " ").trim() == command)
            .unwrap_or(false)
    })
}

fn gone_within(command: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while running(command) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

fn wait_started(needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !running(needle) {
        assert!(Instant::now() < deadline, "'{needle}' never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A fleet of one worker with a `caduceus call` of a unique sleep running on it:
/// the coordinator, the worker, the sleep command and the call's process.
fn remote_call_running(fleet: &Fleet) -> (Proc, Proc, String, std::process::Child) {
    let (coordinator, w1) = fleet_of_one(fleet);
    let command = unique_sleep();
    let child = spawn_call(fleet, Some(&coordinator.url()), &command);
    wait_started(&command);
    (coordinator, w1, command, child)
}

#[test]
fn a_call_in_flight_when_the_coordinator_dies_prints_a_result_naming_it() {
    let fleet = Fleet::new();
    let (mut coordinator, _w1, command, child) = remote_call_running(&fleet);
    let url = coordinator.url();
    coordinator.kill();
    let (status, result) = finish(child, Duration::from_secs(30));
    let error = result["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("coordinator at {url} was lost")) && error.contains("was stopped"),
        "{result}"
    );
    assert!(status.success(), "{status}");
    // And it was: the worker stopped the command when it lost the coordinator.
    assert!(
        gone_within(&command, Duration::from_secs(20)),
        "the command outlived its coordinator"
    );
}

#[test]
fn ctrl_c_cancels_a_remote_call_on_its_worker_and_exits_130() {
    let fleet = Fleet::new();
    let (coordinator, _w1, command, child) = remote_call_running(&fleet);

    signal(child.id(), "INT");
    let (status, result) = finish(child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130), "{result}");
    assert!(
        result["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("Interrupted (Ctrl-C): the call was cancelled"),
        "{result}"
    );
    assert!(
        gone_within(&command, Duration::from_secs(20)),
        "the interrupted command still runs on the worker"
    );
    // The task's environment serves the next call.
    let next = fleet.call(
        &coordinator,
        "terminal",
        &serde_json::json!({"command": "echo next"}),
        "t",
    );
    assert_eq!(next["output"], "next", "{next}");
}

#[test]
fn ctrl_c_cancels_an_embedded_call_and_exits_130() {
    let fleet = Fleet::new();
    let command = unique_sleep();
    let child = spawn_call(&fleet, None, &command);
    wait_started(&command);

    signal(child.id(), "INT");
    let (status, result) = finish(child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(130), "{result}");
    assert_eq!(
        result["error"],
        "Interrupted (Ctrl-C): the call was cancelled and its command stopped."
    );
    assert!(
        !running(&command),
        "the interrupted command outlived caduceus call"
    );
}

#[test]
fn a_second_ctrl_c_exits_at_once() {
    let fleet = Fleet::new();
    let (coordinator, _w1, command, mut child) = remote_call_running(&fleet);

    // A frozen coordinator cannot confirm the cancel: the first Ctrl-C waits
    // for it (up to 10 s); the second does not.
    signal(coordinator.pid(), "STOP");
    signal(child.id(), "INT");
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first Ctrl-C did not wait for the coordinator"
    );
    signal(child.id(), "INT");
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the second Ctrl-C did not end caduceus call"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    signal(coordinator.pid(), "CONT");
    // Once the coordinator runs again it cancels the abandoned call.
    assert!(
        gone_within(&command, Duration::from_secs(20)),
        "the abandoned command still runs"
    );
}

#[test]
fn an_embedded_call_survives_its_process_being_suspended() {
    // Ctrl-Z and fg: the embedded coordinator and worker freeze together,
    // which is no loss (longer than the 3 s after which a remote worker is).
    let fleet = Fleet::new();
    let child = spawn_call(&fleet, None, "sleep 2 && echo done");
    std::thread::sleep(Duration::from_millis(500));
    signal(child.id(), "STOP");
    std::thread::sleep(Duration::from_secs(4));
    signal(child.id(), "CONT");
    let (status, result) = finish(child, Duration::from_secs(60));
    assert!(status.success(), "{status}");
    assert_eq!(result["output"], "done", "{result}");
}
