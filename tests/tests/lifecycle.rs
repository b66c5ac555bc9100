//! Lifecycle of a worker's commands and environments with real processes
//! (issue 9): a timeout, a cancel or a lost coordinator ends the whole
//! command; SIGTERM and SIGINT stop a worker gracefully; the commands of a
//! killed worker die with it and its successor sweeps what it left.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use caduceus_tests::{Fleet, Proc, leftovers, process_alive_with, wait_gone};
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

/// Runs `command` as a terminal call of task `fg` (it first touches
/// `<dir>/started`), does `meanwhile` once it has started, and returns the
/// call's result.
fn call_then(
    fleet: &Fleet,
    c: &Proc,
    dir: &Path,
    command: &str,
    meanwhile: impl FnOnce(),
) -> Value {
    let url = c.url();
    let started = dir.join("started");
    let args =
        json!({"command": format!("touch {}; {command}", started.display()), "timeout": 120});
    std::thread::scope(|scope| {
        let running = scope.spawn(|| fleet.call_at(&url, "terminal", &args, "fg"));
        wait_for_file(&started, Duration::from_secs(30));
        meanwhile();
        running.join().unwrap()
    })
}

/// Starts `caduceus call terminal ARGS --task TASK` and leaves it running
/// (its answer is not what the test looks at).
fn spawn_call(fleet: &Fleet, c: &Proc, args: &Value, task: &str) -> std::process::Child {
    fleet
        .command()
        .args(["call", "terminal", &args.to_string(), "--task", task])
        .env("CADUCEUS_COORDINATOR", c.url())
        .env("CADUCEUS_TOKEN", &fleet.token)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn signal(proc: &Proc, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &proc.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

fn wait_no_leftovers(tmp: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let left = leftovers(tmp);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// pids of processes whose command line holds every one of `needles`.
fn pids_with(needles: &[&str]) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let line = String::from_utf8_lossy(&raw).replace('\0', " ");
            needles.iter().all(|n| line.contains(n)).then_some(pid)
        })
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
    let mut call = spawn_call(&fleet, &c, &args, "t");
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
    assert!(!leftovers(&tmp).is_empty());
    let result = call_then(&fleet, &c, &dir, "sleep 2; echo finished", || {
        signal(&w, "TERM");
        // A second SIGTERM (an impatient operator, systemd's repeat) does
        // not cut the grace short.
        std::thread::sleep(Duration::from_millis(300));
        signal(&w, "TERM");
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
    assert_eq!(leftovers(&tmp), Vec::<String>::new());
    // The coordinator was told, and the worker left the fleet.
    fleet.wait_for_workers(&c, &[], Duration::from_secs(10));
}

#[test]
fn sigint_after_the_grace_cancels_the_rest_of_the_command() {
    let (fleet, c, mut w, tmp) = fleet(&["--shutdown-grace", "1"]);
    let dir = fleet.home.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    let after = format!("sleep 30; touch {}/after", dir.display());
    let result = call_then(&fleet, &c, &dir, &after, || signal(&w, "INT"));
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
    assert_eq!(leftovers(&tmp), Vec::<String>::new());
}

/// Starts a background process (`bg_mark`) and a foreground command
/// (`fg_mark`, through a `caduceus call` left running) on `w`.
fn busy_worker(fleet: &Fleet, c: &Proc, bg_mark: &str, fg_mark: &str) -> std::process::Child {
    let dir = fleet.home.path().join("work");
    std::fs::create_dir_all(&dir).unwrap();
    let background = script(&dir, bg_mark, "sleep 300");
    let started = terminal(
        fleet,
        c,
        "bg",
        &json!({"command": background, "background": true}),
    );
    assert_eq!(started["exit_code"], 0, "{started}");
    let foreground = script(&dir, fg_mark, "sleep 300");
    let args = json!({"command": foreground, "timeout": 600});
    let call = spawn_call(fleet, c, &args, "fg");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(process_alive_with(bg_mark) && process_alive_with(fg_mark)) {
        assert!(Instant::now() < deadline, "the commands never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    call
}

#[test]
fn the_commands_of_a_killed_worker_die_with_it() {
    let (fleet, c, mut w, tmp) = fleet(&[]);
    let (bg, fg) = (unique("k9-bg"), unique("k9-fg"));
    let mut call = busy_worker(&fleet, &c, &bg, &fg);
    w.kill();
    assert!(
        wait_gone(&fg, Duration::from_secs(10)),
        "the in-flight foreground command outlived its worker"
    );
    assert!(
        wait_gone(&bg, Duration::from_secs(10)),
        "a background process outlived its worker"
    );
    wait_no_leftovers(&tmp, Duration::from_secs(10));
    let _ = call.kill();
    let _ = call.wait();
}

#[test]
fn a_worker_starting_on_a_host_sweeps_what_a_dead_predecessor_left() {
    let (fleet, c, mut w, tmp) = fleet(&[]);
    let (bg, fg) = (unique("sweep-bg"), unique("sweep-fg"));
    let mut call = busy_worker(&fleet, &c, &bg, &fg);
    // The guardian goes first (a kill of the whole process group, an OOM
    // kill): nothing is left to clean up but the next worker.
    let tmp_text = tmp.display().to_string();
    let guardians = pids_with(&["caduceus-guardian", &tmp_text]);
    assert_eq!(guardians.len(), 1, "one guardian per worker: {guardians:?}");
    for pid in guardians {
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
    }
    w.kill();
    std::thread::sleep(Duration::from_millis(500));
    assert!(process_alive_with(&bg), "nothing should have swept yet");
    let dead = leftovers(&tmp);
    assert!(dead.iter().any(|l| l.ends_with(".lease")), "{dead:?}");
    assert!(
        dead.len() >= 3,
        "ledger, login and private directories: {dead:?}"
    );
    let _next = start_worker(&fleet, &c, &[], &tmp);
    assert!(
        wait_gone(&bg, Duration::from_secs(20)),
        "a background process survived"
    );
    assert!(
        wait_gone(&fg, Duration::from_secs(5)),
        "the foreground command survived"
    );
    // Nothing of the dead worker is left (the new one has its own).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<String> = leftovers(&tmp)
            .into_iter()
            .filter(|l| dead.contains(l))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = call.kill();
    let _ = call.wait();
}

/// Running containers carrying `label`.
fn running_with_label(label: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-q",
            "--no-trunc",
            "--filter",
            &format!("label={label}"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_docker_sandbox_ends_itself_when_its_lease_is_not_renewed() {
    use caduceus_tests::conformance::{BackendUnderTest, DOCKER_IMAGE, containers_with_label};
    if BackendUnderTest::docker().ready_or_skip().is_none() {
        return;
    }
    let fleet = Fleet::new();
    // No sweeper will run again: only the container itself can end it.
    fleet.write_config(&format!(
        "terminal:\n  backend: docker\n  docker_image: {DOCKER_IMAGE}\n  container_persistent: false\n  container_memory: 512\n  sandbox_lease_seconds: 3\n  sweep_interval_seconds: 3600\n  backend_probe_seconds: 1\n"
    ));
    let c = fleet.serve(&[]);
    let name = unique("dock");
    let mut w = fleet.worker(&c, &name, &fleet.token, &["--backends", "docker"]);
    fleet.wait_for_backend(&c, &name, "docker", Duration::from_secs(60));
    let result = terminal(&fleet, &c, "dk", &json!({"command": "echo in-container"}));
    assert_eq!(result["output"], "in-container", "{result}");
    let label = format!("caduceus.worker={name}");
    let running = running_with_label(&label);
    assert_eq!(running.len(), 1, "{running:?}");
    // Held: renewed every second, the container stays past its lease.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        running_with_label(&label),
        running,
        "a held container ended"
    );
    w.kill();
    // Lease 3 s, looked at every second: ended well within 15 s, with no
    // worker left to sweep it.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !running_with_label(&label).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the container of a dead worker is still running"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for id in containers_with_label(&label) {
        let _ = Command::new("docker").args(["rm", "-f", &id]).output();
    }
}
