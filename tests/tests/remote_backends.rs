//! The SSH backend against a real sshd on 127.0.0.1, and the Singularity
//! backend against the Apptainer stand-in (`tests/fake-apptainer/`): the same
//! cases as the local backend's shell tests — persistent shell state, a
//! timeout that kills the command's whole tree while the shell survives,
//! background processes, files, release — plus leases: environments of a
//! worker that died are swept once their lease passes.
//!
//! Missing components (sshd, root, the rootfs) skip loudly; with
//! `CADUCEUS_REQUIRE_ALL=1` they fail.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use caduceus_tests::standins::{FakeApptainer, Sshd};
use caduceus_worker::backends::singularity::{SingularityProvider, SingularitySettings};
use caduceus_worker::backends::ssh::{SshProvider, SshSettings};
use caduceus_worker::backends::{BackendOptions, Backends, CreateRequest, Provider, SweepContext};
use caduceus_worker::env::{EnvManager, EnvSettings};
use caduceus_worker::sandbox::Sandbox;
use caduceus_worker::shell::{ExecEnd, ExecOutcome, ExecRequest, PersistentShell, ShellConfig};

fn ssh_settings(sshd: &Sshd, lease: Duration) -> SshSettings {
    let mut s = SshSettings::new("127.0.0.1");
    s.user = Some("root".to_owned());
    s.port = sshd.port;
    s.key = Some(sshd.key.clone());
    s.known_hosts = Some(sshd.known_hosts.clone());
    s.control_dir = sshd.control_dir.clone();
    s.connect_timeout = Duration::from_secs(5);
    s.lease = lease;
    s
}

fn singularity_settings(fake: &FakeApptainer, lease: Duration) -> SingularitySettings {
    SingularitySettings {
        executable: Some(fake.exe.clone()),
        image: "docker://debian:bookworm-slim".to_owned(),
        scratch_dir: fake.state.path().join("scratch"),
        persistent: false,
        lease,
        ..SingularitySettings::default()
    }
}

fn request(task: &str, instance: &str) -> CreateRequest {
    CreateRequest {
        task_id: task.to_owned(),
        owner: "coordinator-1".to_owned(),
        worker: "w1".to_owned(),
        worker_instance: instance.to_owned(),
        settings: json!({}),
    }
}

fn shell_env() -> Vec<(String, String)> {
    vec![
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".to_owned(), "/nonexistent-worker-home".to_owned()),
        ("CADUCEUS_PASSED".to_owned(), "yes it's passed".to_owned()),
    ]
}

async fn run(shell: &PersistentShell, command: &str, timeout: Duration) -> ExecOutcome {
    shell
        .exec(ExecRequest {
            command,
            timeout,
            workdir: None,
            max_output_chars: 50_000,
            cancel: None,
        })
        .await
        .unwrap()
}

/// Counts processes whose command line contains `needle`, inside the sandbox.
async fn count_processes(shell: &PersistentShell, needle: &str) -> usize {
    // The bracket keeps the grep itself out of the count.
    let (first, rest) = needle.split_at(1);
    let out = run(
        shell,
        &format!("ps -eo args | grep -c '[{first}]{rest}' || true"),
        Duration::from_secs(20),
    )
    .await;
    let count = out.output.trim().parse().unwrap_or(usize::MAX);
    if count == usize::MAX || std::env::var_os("DEBUG_PS").is_some() {
        let all = run(shell, "ps -eo pid,ppid,sid,args", Duration::from_secs(20)).await;
        eprintln!("looking for {needle:?}: {:?}\n{}", out.output, all.output);
    }
    count
}

/// Waits (up to 10 s) until `count_processes` gives `want`; returns the last count.
/// A process just started in the background may not have exec'd yet.
async fn wait_for_count(shell: &PersistentShell, needle: &str, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let count = count_processes(shell, needle).await;
        if count == want || Instant::now() > deadline {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The shared cases, on one backend.
async fn conformance(backends: Backends, backend: &str, instance: &str) -> Arc<dyn Sandbox> {
    let manager = EnvManager::new(
        backends,
        EnvSettings {
            shell_env: shell_env(),
            shell_init: Vec::new(),
            ..EnvSettings::default()
        },
    );
    let started = Instant::now();
    let env = manager
        .get_or_create(backend, &request("task-conf", instance))
        .await
        .unwrap();
    let first = run(&env.shell, "echo ready", Duration::from_secs(60)).await;
    eprintln!(
        "[{backend}] environment start + first command: {} ms",
        started.elapsed().as_millis()
    );
    assert_eq!(first.output, "ready\n");
    let sandbox = env.sandbox.clone();

    // Persistent shell: variables, functions, cwd and options persist.
    let out = run(
        &env.shell,
        "export A=1; B=2; f() { echo fn \"$1\"; }; cd /tmp; set -o noglob",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.exit_code, 0, "{}", out.output);
    let out = run(
        &env.shell,
        "echo $A $B; f x; pwd; [[ -o noglob ]] && echo noglob",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.output, "1 2\nfn x\n/tmp\nnoglob\n");
    assert_eq!(env.shell.cwd(), "/tmp");
    let out = run(
        &env.shell,
        "echo out; echo err >&2; exit_code() { return 3; }; exit_code",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!((out.output.as_str(), out.exit_code), ("out\nerr\n", 3));

    // Worker variables cross; the worker's own PATH/HOME do not.
    let out = run(
        &env.shell,
        "echo \"$CADUCEUS_PASSED\"; echo \"$HOME\"",
        Duration::from_secs(20),
    )
    .await;
    let mut lines = out.output.lines();
    assert_eq!(lines.next(), Some("yes it's passed"));
    assert_eq!(lines.next(), Some(sandbox.home_dir().as_str()));
    assert_ne!(sandbox.home_dir(), "/nonexistent-worker-home");

    // Warm latency.
    let mut samples = Vec::new();
    for _ in 0..10 {
        let at = Instant::now();
        let out = run(&env.shell, "echo hi", Duration::from_secs(20)).await;
        samples.push(at.elapsed());
        assert_eq!(out.output, "hi\n");
    }
    samples.sort();
    eprintln!(
        "[{backend}] warm `echo hi`: median {:?}, max {:?}",
        samples[5], samples[9]
    );

    // A timeout stops the command's whole tree; the shell and its state survive.
    let marker = "sleep 3171";
    let at = Instant::now();
    // (A subshell that prints after its child dies is left out: the shared
    // shell's INT/TERM rounds can let it print late on every backend,
    // local included — reported separately.)
    let out = run(
        &env.shell,
        &format!("echo before; ({marker}) & {marker}"),
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(out.end, ExecEnd::TimedOut);
    assert_eq!(out.exit_code, 124);
    assert_eq!(out.output, "before\n");
    assert!(
        at.elapsed() < Duration::from_secs(15),
        "stopping took {:?}",
        at.elapsed()
    );
    assert_eq!(
        wait_for_count(&env.shell, marker, 0).await,
        0,
        "the timed-out tree is gone"
    );
    let out = run(&env.shell, "echo $A; pwd", Duration::from_secs(20)).await;
    assert_eq!(out.output, "1\n/tmp\n");
    assert_eq!(env.shell.starts(), 1, "the same shell throughout");

    // Background processes return at once and keep running.
    let background = "sleep 3172";
    let at = Instant::now();
    let out = run(
        &env.shell,
        &format!("nohup {background} >/dev/null 2>&1 & echo started"),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.output, "started\n");
    assert!(at.elapsed() < Duration::from_secs(5));
    assert_eq!(wait_for_count(&env.shell, background, 1).await, 1);

    // Files through the shell (write, read, patch, search).
    let out = run(
        &env.shell,
        "mkdir -p /tmp/conf && printf 'alpha\\nbeta\\n' > /tmp/conf/a.txt && sed -i 's/beta/gamma/' /tmp/conf/a.txt && cat /tmp/conf/a.txt && grep -rn gamma /tmp/conf",
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(out.output, "alpha\ngamma\n/tmp/conf/a.txt:2:gamma\n");

    // Release: everything the environment started is gone.
    assert!(sandbox.alive().await);
    assert!(manager.release("task-conf").await);
    assert!(!sandbox.alive().await, "the sandbox is gone after release");
    sandbox
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_backend_conformance() {
    let Some(sshd) = Sshd::start("ssh_backend_conformance") else {
        return;
    };
    let started = Instant::now();
    let plain = sshd.plain_ssh("echo hi");
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout),
        "hi\n",
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    eprintln!(
        "[ssh] plain `ssh host echo hi` (new connection): {} ms",
        started.elapsed().as_millis()
    );

    let options = BackendOptions {
        ssh: Some(ssh_settings(&sshd, Duration::from_secs(30))),
        ..BackendOptions::default()
    };
    let (backends, refused) = Backends::with_options(&["ssh".to_owned()], "/", &options);
    assert!(refused.is_empty(), "{refused:?}");
    assert!(backends.provider("ssh").unwrap().available().await);
    let sandbox = conformance(backends, "ssh", "inst-conformance").await;
    // The remote environment directory went with the release.
    let dir = format!(
        "/root/.caduceus/envs/{}",
        sandbox.id().rsplit('/').next().unwrap()
    );
    assert!(!std::path::Path::new(&dir).exists(), "{dir} remains");
    assert_eq!(
        count_host_processes("sleep 3172"),
        0,
        "the background process went with the release"
    );
    assert!(sshd.log().contains("Accepted publickey for root"));
}

/// Processes on this host (= the SSH "remote" host) whose args contain `needle`.
fn count_host_processes(needle: &str) -> usize {
    let out = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}

/// An SSH environment of a worker that then died (no release, no renewal:
/// its shell's channel just closes), with a `nohup sleep <seconds>` left
/// running in it; its sandbox id and directory.
async fn dead_ssh_environment(
    sshd: &Sshd,
    lease: Duration,
    instance: &str,
    seconds: &str,
) -> (String, String) {
    let dead = SshProvider::new(ssh_settings(sshd, lease));
    let sandbox = dead
        .create(&request(&format!("t-{instance}"), instance))
        .await
        .unwrap();
    let env_dir = format!(
        "{}/.caduceus/envs/{}",
        sandbox.home_dir(),
        sandbox.id().rsplit('/').next().unwrap()
    );
    let shell = PersistentShell::new(
        sandbox.clone(),
        ShellConfig {
            cwd: sandbox.initial_cwd(),
            ..ShellConfig::default()
        },
    );
    let needle = format!("sleep {seconds}");
    run(
        &shell,
        &format!("nohup {needle} >/dev/null 2>&1 &"),
        Duration::from_secs(20),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while count_host_processes(&needle) != 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(count_host_processes(&needle), 1);
    (sandbox.id().to_owned(), env_dir)
}

/// pids of the lease watchdogs whose arguments contain `needle`.
fn watchdogs(needle: &str) -> Vec<String> {
    let out = std::process::Command::new("ps")
        .args(["-eo", "pid=,args="])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("caduceus-watchdog") && l.contains(needle))
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// Kills the lease watchdogs whose arguments contain `needle` (to test what
/// the sweeper does when a watchdog died too); returns how many.
fn kill_watchdogs(needle: &str) -> usize {
    let pids = watchdogs(needle);
    for pid in &pids {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", pid])
            .status();
    }
    pids.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_unreachable_host_is_a_clear_error_and_never_local() {
    let Some(sshd) = Sshd::start("ssh_unreachable_host_is_a_clear_error_and_never_local") else {
        return;
    };
    let mut settings = ssh_settings(&sshd, Duration::from_secs(30));
    // A port nobody listens on.
    settings.port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let provider = SshProvider::new(settings);
    assert!(!provider.available().await);
    let err = match provider.create(&request("t", "i")).await {
        Ok(_) => panic!("created an environment on an unreachable host"),
        Err(err) => err.to_string(),
    };
    assert!(err.contains("root@127.0.0.1:"), "names the host: {err}");
    assert!(
        err.to_lowercase().contains("connect"),
        "says what failed: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_master_that_dropped_is_reestablished_by_the_next_spawn() {
    let Some(sshd) = Sshd::start("ssh_master_that_dropped_is_reestablished_by_the_next_spawn")
    else {
        return;
    };
    let provider = SshProvider::new(ssh_settings(&sshd, Duration::from_secs(30)));
    let sandbox = provider.create(&request("t-reconnect", "i")).await.unwrap();
    let shell = PersistentShell::new(
        sandbox.clone(),
        ShellConfig {
            cwd: sandbox.initial_cwd(),
            ..ShellConfig::default()
        },
    );
    assert_eq!(
        run(&shell, "echo one", Duration::from_secs(20))
            .await
            .output,
        "one\n"
    );
    // Kill the master (as a network drop would).
    let session = provider.host().session().await.unwrap();
    let status = std::process::Command::new("ssh")
        .arg("-S")
        .arg(session.control_socket())
        .args(["-O", "exit", "none"])
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    drop(session);
    // The shell's channel died with it; the next command starts a new shell
    // over a new master and says so.
    let out = run(&shell, "echo two", Duration::from_secs(30)).await;
    assert_eq!(out.output, "two\n");
    assert_eq!(shell.starts(), 2);
    shell.close().await;
    sandbox.destroy().await.unwrap();
}

/// A worker that dies leaves its environment and processes behind; another
/// worker's sweep removes them once the lease passed, and not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_environments_of_a_dead_worker_are_swept_after_their_lease() {
    let Some(sshd) = Sshd::start("ssh_environments_of_a_dead_worker_are_swept_after_their_lease")
    else {
        return;
    };
    // "kill -9": no release, no renewal; the shell's channel just closes.
    let (id, env_dir) =
        dead_ssh_environment(&sshd, Duration::from_secs(8), "dead-worker", "3173").await;
    // The environment's own watchdog would end it after its lease (see
    // `ssh_environments_end_themselves_when_their_lease_is_not_renewed`);
    // here it died too, and the sweeper has to do it.
    assert_eq!(kill_watchdogs(&env_dir), 1, "one watchdog per environment");

    let survivor = SshProvider::new(ssh_settings(&sshd, Duration::from_secs(8)));
    let context = SweepContext {
        worker_instance: "new-worker".to_owned(),
        live: Default::default(),
    };
    // (Other tests share this host's home; only our environment is judged.)
    assert!(
        !survivor.sweep(&context).await.contains(&id),
        "the lease still runs"
    );
    assert!(std::path::Path::new(&env_dir).exists());
    // (A lease of 8 s: the steps above must fit in it on a loaded machine.)
    tokio::time::sleep(Duration::from_secs(9)).await;
    // Sweeps run every minute in a worker; on a loaded machine one can find
    // the host briefly unreachable, so give it a few rounds.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut removed = survivor.sweep(&context).await;
    while !removed.contains(&id) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        removed = survivor.sweep(&context).await;
    }
    assert!(removed.contains(&id), "{removed:?}");
    assert!(
        !std::path::Path::new(&env_dir).exists(),
        "{env_dir} remains"
    );
    assert_eq!(
        count_host_processes("sleep 3173"),
        0,
        "the orphaned process was killed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn singularity_backend_conformance() {
    let Some(fake) = FakeApptainer::find("singularity_backend_conformance") else {
        return;
    };
    let options = BackendOptions {
        singularity: singularity_settings(&fake, Duration::from_secs(30)),
        ..BackendOptions::default()
    };
    let (backends, refused) = Backends::with_options(&["singularity".to_owned()], "/", &options);
    assert!(refused.is_empty(), "{refused:?}");
    assert!(backends.provider("singularity").unwrap().available().await);
    let sandbox = conformance(backends, "singularity", "inst-conformance").await;
    assert!(
        sandbox
            .id()
            .starts_with("singularity:caduceus_instconforma_"),
        "{}",
        sandbox.id()
    );
    assert_eq!(
        fake.instances(),
        Vec::<String>::new(),
        "no instance remains after release"
    );
    assert_eq!(
        count_host_processes("sleep 3172"),
        0,
        "the background process went with the instance"
    );
    // The docker:// image was built into the SIF cache once.
    assert!(
        fake.state
            .path()
            .join("scratch/.apptainer/debian-bookworm-slim.sif")
            .exists()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn singularity_instances_of_a_dead_worker_are_swept_after_their_lease() {
    let Some(fake) =
        FakeApptainer::find("singularity_instances_of_a_dead_worker_are_swept_after_their_lease")
    else {
        return;
    };
    let dead = SingularityProvider::new(singularity_settings(&fake, Duration::from_secs(3)));
    let sandbox = dead
        .create(&request("t-dead", "deadworker0001"))
        .await
        .unwrap();
    let kept = SingularityProvider::new(singularity_settings(&fake, Duration::from_secs(60)));
    let other = kept
        .create(&request("t-other", "otherworker01"))
        .await
        .unwrap();
    // As if the dead worker's host watchdog died too (see
    // `singularity_instances_end_themselves_when_their_lease_is_not_renewed`).
    let name = sandbox.id().trim_start_matches("singularity:").to_owned();
    assert_eq!(kill_watchdogs(&name), 1, "one watchdog per instance");
    drop(sandbox);
    drop(dead);

    let survivor = SingularityProvider::new(singularity_settings(&fake, Duration::from_secs(3)));
    let context = SweepContext {
        worker_instance: "newworker0001".to_owned(),
        live: Default::default(),
    };
    assert_eq!(
        survivor.sweep(&context).await,
        Vec::<String>::new(),
        "leases still run"
    );
    assert_eq!(fake.instances().len(), 2);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let removed = survivor.sweep(&context).await;
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert!(
        removed[0].starts_with("singularity:caduceus_deadworker00_"),
        "{removed:?}"
    );
    let left = fake.instances();
    assert_eq!(left.len(), 1);
    assert!(
        other.id().ends_with(&left[0]),
        "the leased instance stays: {left:?}"
    );
    other.destroy().await.unwrap();
    assert_eq!(fake.instances(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_environments_end_themselves_when_their_lease_is_not_renewed() {
    let Some(sshd) = Sshd::start("ssh_environments_end_themselves_when_their_lease_is_not_renewed")
    else {
        return;
    };
    // The worker dies: no renewal, no release, and no other worker sweeps.
    let (_, env_dir) =
        dead_ssh_environment(&sshd, Duration::from_secs(3), "expiring-worker", "3183").await;
    assert!(std::path::Path::new(&env_dir).exists());
    // Lease 3 s, looked at every second. The watchdog removes the directory
    // and then exits: all three are waited for (the full suite once saw it
    // still running just after the directory went).
    let deadline = Instant::now() + Duration::from_secs(20);
    while (std::path::Path::new(&env_dir).exists()
        || count_host_processes("sleep 3183") > 0
        || !watchdogs(&env_dir).is_empty())
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !std::path::Path::new(&env_dir).exists(),
        "{env_dir} remains"
    );
    assert_eq!(
        count_host_processes("sleep 3183"),
        0,
        "the process survived"
    );
    assert_eq!(
        watchdogs(&env_dir),
        Vec::<String>::new(),
        "the watchdog exited"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn singularity_instances_end_themselves_when_their_lease_is_not_renewed() {
    let Some(fake) =
        FakeApptainer::find("singularity_instances_end_themselves_when_their_lease_is_not_renewed")
    else {
        return;
    };
    let dead = SingularityProvider::new(singularity_settings(&fake, Duration::from_secs(3)));
    let sandbox = dead
        .create(&request("t-expire", "expireworker1"))
        .await
        .unwrap();
    let kept = SingularityProvider::new(singularity_settings(&fake, Duration::from_secs(3)));
    let other = kept
        .create(&request("t-kept", "keptworker001"))
        .await
        .unwrap();
    // The first worker dies (no renewal, nobody sweeps); the second lives
    // and keeps renewing its instance's lease.
    drop(sandbox);
    drop(dead);
    assert_eq!(fake.instances().len(), 2);
    let deadline = Instant::now() + Duration::from_secs(20);
    while fake.instances().len() > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let left = fake.instances();
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(
        other.id().ends_with(&left[0]),
        "the renewed instance stays: {left:?}"
    );
    // A released instance's watchdog exits with it.
    other.destroy().await.unwrap();
    drop(kept);
    let name = other.id().trim_start_matches("singularity:").to_owned();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !watchdogs(&name).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        watchdogs(&name),
        Vec::<String>::new(),
        "the watchdog stayed"
    );
    assert_eq!(fake.instances(), Vec::<String>::new());
}
