//! Lifecycle of a worker's commands and environments with real processes
//! (issue 9): a timeout, a cancel or a lost coordinator ends the whole
//! command; SIGTERM and SIGINT stop a worker gracefully; the commands of a
//! killed worker die with it and its successor sweeps what it left.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use caduceus_tests::{Fleet, Proc, process_alive_with, wait_gone};
use serde_json::{Value, json};

/// A coordinator and one worker `w` whose temp dir is `<home>/tmp` (the
/// shells' private directories land there, so a test can see them).
fn fleet(worker_args: &[&str]) -> (Fleet, Proc, Proc, PathBuf) {
    let fleet = Fleet::new();
    let tmp = fleet.home.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let coordinator = fleet.serve(&[]);
    let worker = start_worker(&fleet, &coordinator, worker_args, &tmp);
    fleet.wait_for_workers(&coordinator, &["w"], Duration::from_secs(30));
    (fleet, coordinator, worker, tmp)
}

fn start_worker(fleet: &Fleet, coordinator: &Proc, args: &[&str], tmp: &Path) -> Proc {
    fleet.worker_with_env(coordinator, "w", args, &[("TMPDIR", tmp.to_str().unwrap())])
}

fn terminal(fleet: &Fleet, coordinator: &Proc, task: &str, args: &Value) -> Value {
    fleet.call(coordinator, "terminal", args, task)
}

fn wait_for_file(path: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn signal(proc: &Proc, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &proc.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// The shells' private directories (`caduceus-<id>`) left in `tmp`.
fn private_dirs(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("caduceus-"))
        .collect()
}

/// A string to recognise a test's processes by in /proc.
fn unique(label: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("caduceus-lc-{label}-{}-{nanos}", std::process::id())
}

/// `bash <script>`: a script file whose path carries `mark`, so that its
/// process is found in /proc (the guard asks approval for `bash -c`).
fn script(dir: &Path, mark: &str, body: &str) -> String {
    let path = dir.join(format!("{mark}.sh"));
    std::fs::write(&path, format!("{body}\n")).unwrap();
    format!("bash {}", path.display())
}

#[test]
fn a_timeout_ends_the_whole_command_and_keeps_the_state_it_reached() {
    let (fleet, c, _w, _tmp) = fleet(&[]);
    let dir = fleet.home.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let result = terminal(
        &fleet,
        &c,
        "t",
        &json!({"command": format!("cd {d}; REACHED=yes; sleep 5; echo AFTER > {d}/afterfile; echo printed"), "timeout": 1}),
    );
    assert_eq!(result["exit_code"], 124, "{result}");
    assert!(!result["output"].as_str().unwrap().contains("printed"));
    let result = terminal(
        &fleet,
        &c,
        "t",
        &json!({"command": format!("for i in 1 2 3 4 5 6; do sleep 1; echo tick >> {d}/ticks; done"), "timeout": 1}),
    );
    assert_eq!(result["exit_code"], 124, "{result}");
    // Long enough for the rest of both lines to have run, had it.
    std::thread::sleep(Duration::from_secs(6));
    assert!(!dir.join("afterfile").exists(), "the rest of the line ran");
    let ticks = std::fs::read_to_string(dir.join("ticks")).unwrap_or_default();
    assert!(ticks.lines().count() <= 1, "the loop went on: {ticks:?}");
    // The live shell kept what the interrupted command had reached.
    let result = terminal(&fleet, &c, "t", &json!({"command": "echo $REACHED; pwd"}));
    assert_eq!(result["output"], format!("yes\n{d}"), "{result}");
}

#[test]
fn a_lost_coordinator_ends_the_whole_command() {
    let (fleet, mut c, _w, _tmp) = fleet(&[]);
    let dir = fleet.home.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let args =
        json!({"command": format!("touch {d}/started; sleep 4; touch {d}/after"), "timeout": 60});
    let mut call = fleet
        .command()
        .args(["call", "terminal", &args.to_string(), "--task", "t"])
        .env("CADUCEUS_COORDINATOR", c.url())
        .env("CADUCEUS_TOKEN", &fleet.token)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&dir.join("started"), Duration::from_secs(30));
    c.kill();
    let _ = call.wait();
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        !dir.join("after").exists(),
        "the command went on after its coordinator died"
    );
}

#[test]
fn sigterm_lets_running_calls_finish_and_ends_every_environment() {
    let (fleet, c, mut w, tmp) = fleet(&[]);
    let dir = fleet.home.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    let mark = unique("bg");
    let background = script(&dir, &mark, "sleep 300");
    let started = terminal(
        &fleet,
        &c,
        "bg",
        &json!({"command": background, "background": true}),
    );
    assert_eq!(started["exit_code"], 0, "{started}");
    assert!(process_alive_with(&mark));
    assert!(!private_dirs(&tmp).is_empty());
    let d = dir.display();
    let url = c.url();
    let result = std::thread::scope(|scope| {
        let running = scope.spawn(|| {
            fleet.call_at(
                &url,
                "terminal",
                &json!({"command": format!("touch {d}/started; sleep 2; echo finished"), "timeout": 60}),
                "fg",
            )
        });
        wait_for_file(&dir.join("started"), Duration::from_secs(30));
        signal(&w, "TERM");
        // A second SIGTERM (an impatient operator, systemd's repeat) does
        // not cut the grace short.
        std::thread::sleep(Duration::from_millis(300));
        signal(&w, "TERM");
        running.join().unwrap()
    });
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(result["output"], "finished");
    let status = w
        .wait_exit(Duration::from_secs(20))
        .expect("the worker exits");
    assert!(status.success(), "exit status {status:?}");
    assert!(
        wait_gone(&mark, Duration::from_secs(5)),
        "a background process outlived its worker"
    );
    assert_eq!(private_dirs(&tmp), Vec::<String>::new());
    // The coordinator was told, and the worker left the fleet.
    fleet.wait_for_workers(&c, &[], Duration::from_secs(10));
}

#[test]
fn sigint_after_the_grace_cancels_the_rest_of_the_command() {
    let (fleet, c, mut w, tmp) = fleet(&["--shutdown-grace", "1"]);
    let dir = fleet.home.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let url = c.url();
    let result = std::thread::scope(|scope| {
        let running = scope.spawn(|| {
            fleet.call_at(
                &url,
                "terminal",
                &json!({"command": format!("touch {d}/started; sleep 30; touch {d}/after"), "timeout": 120}),
                "fg",
            )
        });
        wait_for_file(&dir.join("started"), Duration::from_secs(30));
        signal(&w, "INT");
        running.join().unwrap()
    });
    assert_eq!(result["exit_code"], 130, "{result}");
    assert!(
        result["output"]
            .as_str()
            .unwrap()
            .contains("[Command interrupted]"),
        "{result}"
    );
    let status = w
        .wait_exit(Duration::from_secs(20))
        .expect("the worker exits");
    assert!(status.success(), "exit status {status:?}");
    std::thread::sleep(Duration::from_secs(1));
    assert!(!dir.join("after").exists(), "the rest of the command ran");
    assert_eq!(private_dirs(&tmp), Vec::<String>::new());
}
