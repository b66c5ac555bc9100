use std::process::Command;
use std::time::{Duration, Instant};

use super::*;

fn owner(instance: &str) -> LeaseOwner {
    LeaseOwner {
        instance: instance.into(),
        worker: "w1".into(),
        owner: "coord".into(),
        task: "task 1/x".into(),
    }
}

/// Runs a remote command line locally with `$HOME` pointing at `home`.
fn run(home: &std::path::Path, command_line: &str) -> (i32, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(command_line)
        .env("HOME", home)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn bash(home: &std::path::Path, script: &str) -> (i32, String) {
    let line = format!("bash -c {}", shell_quote(script));
    run(home, &line)
}

fn alive(pid: u32) -> bool {
    // A zombie is dead for our purposes.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

#[test]
fn create_writes_lease_and_prints_home() {
    let home = tempfile::tempdir().unwrap();
    let (code, out) = bash(home.path(), &create_env("env-a", &owner("inst1"), 60));
    assert_eq!(code, 0);
    assert_eq!(out.trim(), home.path().display().to_string());
    let dir = home.path().join(".caduceus/envs/env-a");
    assert!(dir.join("pids").is_dir() && dir.join("tmp").is_dir());
    let lease = std::fs::read_to_string(dir.join("lease")).unwrap();
    assert!(lease.starts_with("expires="), "{lease}");
    assert!(
        lease.contains("instance=inst1 worker=w1 owner=coord task=task_1_x"),
        "{lease}"
    );
    let expires: u64 = lease["expires=".len()..]
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(expires >= now + 55 && expires <= now + 65);
}

#[test]
fn sweep_removes_expired_and_orphaned_but_keeps_live_and_leased() {
    let home = tempfile::tempdir().unwrap();
    bash(home.path(), &create_env("expired", &owner("other"), 0));
    bash(home.path(), &create_env("leased", &owner("other"), 600));
    bash(home.path(), &create_env("mine-dead", &owner("me"), 600));
    bash(home.path(), &create_env("mine-live", &owner("me"), 600));
    std::thread::sleep(Duration::from_millis(1100));
    let (code, out) = bash(home.path(), &sweep("me", &["mine-live".to_owned()]));
    assert_eq!(code, 0);
    let mut removed: Vec<&str> = out.lines().collect();
    removed.sort();
    assert_eq!(removed, vec!["expired", "mine-dead"]);
    let envs = home.path().join(".caduceus/envs");
    assert!(envs.join("leased").exists() && envs.join("mine-live").exists());
    assert!(!envs.join("expired").exists() && !envs.join("mine-dead").exists());
}

#[test]
fn renew_pushes_expiry() {
    let home = tempfile::tempdir().unwrap();
    bash(home.path(), &create_env("e1", &owner("other"), 0));
    bash(
        home.path(),
        &renew_leases(
            &[
                ("e1".to_owned(), owner("other")),
                ("gone".to_owned(), owner("other")),
            ],
            600,
        ),
    );
    std::thread::sleep(Duration::from_millis(1100));
    let (_, out) = bash(home.path(), &sweep("me", &[]));
    assert_eq!(out, "", "a renewed lease survives the sweep");
    assert!(!home.path().join(".caduceus/envs/gone").exists());
}

#[test]
fn spawned_process_reports_pid_and_destroy_kills_its_tree() {
    let home = tempfile::tempdir().unwrap();
    bash(home.path(), &create_env("e2", &owner("me"), 600));
    let line = spawn_wrapper(
        "e2",
        "/",
        &[("GREETING".into(), "it's me".into())],
        "bash",
        &[
            "-c".into(),
            "echo \"$GREETING in $PWD\"; sleep 300 & sleep 300".into(),
        ],
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(&line)
        .env("HOME", home.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !String::from_utf8_lossy(&seen).contains(" in /") {
        assert!(
            Instant::now() < deadline,
            "no output: {}",
            String::from_utf8_lossy(&seen)
        );
        let mut buf = [0u8; 256];
        let n = std::io::Read::read(&mut stdout, &mut buf).unwrap();
        seen.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&seen).into_owned();
    let pid: u32 = text
        .split("\x1ePID ")
        .nth(1)
        .unwrap()
        .split('\x1e')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        pid,
        child.id(),
        "exec keeps the pid of the process ssh started"
    );
    assert!(text.ends_with("it's me in /\n"), "{text:?}");
    assert!(
        home.path()
            .join(format!(".caduceus/envs/e2/pids/{pid}"))
            .exists()
    );

    let (code, _) = bash(home.path(), &destroy_env("e2"));
    assert_eq!(code, 0);
    child.wait().unwrap();
    assert!(!alive(pid));
    assert!(!home.path().join(".caduceus/envs/e2").exists());
}

#[test]
fn spawn_fails_clearly_when_the_env_dir_is_gone() {
    let home = tempfile::tempdir().unwrap();
    let (code, _) = run(home.path(), &spawn_wrapper("nope", "/", &[], "true", &[]));
    assert_eq!(code, 125);
}

#[test]
fn sweep_never_kills_a_process_that_reused_a_recorded_pid() {
    let home = tempfile::tempdir().unwrap();
    bash(home.path(), &create_env("old", &owner("other"), 0));
    let mut bystander = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = bystander.id();
    // A pid file naming the bystander's pid with another start time.
    std::fs::write(
        home.path().join(format!(".caduceus/envs/old/pids/{pid}")),
        "1\n",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let (_, out) = bash(home.path(), &sweep("me", &[]));
    assert_eq!(out.trim(), "old");
    assert!(alive(pid), "the bystander survives");
    bystander.kill().unwrap();
    bystander.wait().unwrap();
}

#[test]
fn the_watchdog_ends_an_environment_whose_lease_is_not_renewed() {
    let home = tempfile::tempdir().unwrap();
    let (code, _) = bash(
        home.path(),
        &format!(
            "{}{}",
            create_env("doomed", &owner("other"), 1),
            start_watchdog("doomed", 1)
        ),
    );
    assert_eq!(code, 0);
    bash(home.path(), &create_env("renewed", &owner("other"), 600));
    let (code, _) = bash(home.path(), &start_watchdog("renewed", 600));
    assert_eq!(code, 0);
    let envs = home.path().join(".caduceus/envs");
    let deadline = Instant::now() + Duration::from_secs(10);
    while envs.join("doomed").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !envs.join("doomed").exists(),
        "the expired environment stayed"
    );
    assert!(envs.join("renewed").exists());
    // Its watchdog exits once the directory is gone (it looks every 30 s
    // with a 600 s lease, so only the removal is checked here).
    std::fs::remove_dir_all(envs.join("renewed")).unwrap();
}
