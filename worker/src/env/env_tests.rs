use std::time::Duration;

use super::*;
use crate::process::SpawnRequest;

async fn start(env: &Environment, command: &str) -> Arc<BackgroundProcess> {
    let state = env.shell.state_for_background().await;
    let request = SpawnRequest {
        command: command.to_owned(),
        cwd: state.cwd,
        snapshot: state.snapshot,
        env: env.base_env.clone(),
        session_id: "s".into(),
        pty: false,
        notify_on_complete: false,
        watch_patterns: Vec::new(),
    };
    env.processes.spawn(request).await.unwrap().process
}

fn process_alive(needle: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|raw| String::from_utf8_lossy(&raw).contains(needle))
            .unwrap_or(false)
    })
}

#[tokio::test]
async fn releasing_an_environment_stops_everything_it_started() {
    let (manager, _notices) = test_manager();
    let env = test_env(&manager, "t1").await;
    let mark = format!("caduceus-env-test-{}", uuid::Uuid::new_v4().simple());
    let process = start(
        &env,
        &format!("bash -c 'sleep 300; : {mark}-bg' & sleep 300"),
    )
    .await;
    let dir = env.shell.private_dir().to_owned();
    assert_eq!(env.info().background_processes, 1);
    assert_eq!(
        manager
            .find_process(&process.id)
            .map(|(e, _)| e.task_id.clone()),
        Some("t1".to_owned())
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(process_alive(&format!("{mark}-bg")));

    assert!(manager.release("t1").await);
    assert!(!process.is_running());
    assert_eq!(process.status().termination_source, "environment_end");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !process_alive(&format!("{mark}-bg")),
        "a background grandchild outlived its environment"
    );
    assert!(!std::path::Path::new(&dir).exists());
    assert!(manager.get("t1").is_none());
    assert!(!manager.release("t1").await);
}

#[tokio::test]
async fn the_reaper_spares_environments_with_live_background_processes() {
    let (manager, _notices) = test_manager();
    let idle = test_env(&manager, "idle").await;
    let busy = test_env(&manager, "busy").await;
    idle.shell.state_for_background().await;
    let process = start(&busy, "sleep 30").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reaped = manager.reap_idle(Duration::from_millis(100)).await;
    assert_eq!(reaped, vec!["idle".to_owned()]);
    assert!(manager.get("busy").is_some());
    assert_eq!(busy.idle_for(), Duration::ZERO);

    // Once the process is gone, the environment idles from its exit on.
    process.kill(busy.processes.sandbox(), "test", true).await;
    assert!(busy.idle_for() < Duration::from_millis(100));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        manager.reap_idle(Duration::from_millis(100)).await,
        vec!["busy".to_owned()]
    );
}

#[tokio::test]
async fn a_running_call_keeps_an_environment_busy() {
    let (manager, _notices) = test_manager();
    let env = test_env(&manager, "t").await;
    let guard = env.begin_call();
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(
        manager
            .reap_idle(Duration::from_millis(100))
            .await
            .is_empty()
    );
    drop(guard);
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        manager.reap_idle(Duration::from_millis(100)).await,
        vec!["t".to_owned()]
    );
}

/// The init files run once per host: later shells restore their result.
#[tokio::test]
async fn init_files_run_once_and_later_shells_restore_their_state() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("runs");
    let rc = dir.path().join("rc.sh");
    std::fs::write(
        &rc,
        format!("echo x >> {}\nexport FROM_RC=yes\nrc_fn() {{ echo from-rc-fn; }}\nalias rcal='echo from-rc-alias'\n", counter.display()),
    )
    .unwrap();
    let (backends, _) = Backends::new(&["local".to_owned()], "/tmp");
    let (notices, _rx) = NoticeHub::new();
    let settings = EnvSettings {
        shell_env: vec![
            ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".to_owned(), "/tmp".to_owned()),
        ],
        shell_init_files: vec![rc.display().to_string()],
        notices,
        ..EnvSettings::default()
    };
    let manager = EnvManager::new(backends, settings);
    let mut outputs = Vec::new();
    // Concurrent first calls: one runs the file, the others wait and restore.
    let ids: Vec<String> = (0..3).map(|i| format!("rc-{i}")).collect();
    let envs = futures::future::join_all(ids.iter().map(|id| test_env(&manager, id))).await;
    for env in &envs {
        let out = env
            .shell
            .exec(crate::shell::ExecRequest {
                command: "echo $FROM_RC; rc_fn; rcal",
                timeout: Duration::from_secs(10),
                workdir: None,
                max_output_chars: 1000,
                cancel: None,
            })
            .await
            .unwrap();
        outputs.push(out.output);
    }
    for out in &outputs {
        assert_eq!(out, "yes\nfrom-rc-fn\nfrom-rc-alias\n");
    }
    assert_eq!(
        std::fs::read_to_string(&counter).unwrap(),
        "x\n",
        "the init file ran once"
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn a_newer_placement_ends_the_stale_environment_and_older_calls_are_refused() {
    let (manager, _notices) = test_manager();
    manager.fence("t", 5).await.unwrap();
    let old = test_env(&manager, "t").await;
    assert_eq!(old.info().epoch, 5);
    let mark = format!("caduceus-fence-test-{}", uuid::Uuid::new_v4().simple());
    start(&old, &format!("sleep 300; : {mark}")).await;
    assert!(process_alive(&mark));

    // The same placement keeps its environment.
    manager.fence("t", 5).await.unwrap();
    assert!(Arc::ptr_eq(&manager.get("t").unwrap(), &old));
    // A newer one ends it (with what it started) and gets a fresh one.
    manager.fence("t", 9).await.unwrap();
    assert!(manager.get("t").is_none());
    assert!(
        !process_alive(&mark),
        "the stale environment's processes live"
    );
    assert_eq!(test_env(&manager, "t").await.info().epoch, 9);
    // A call of an older placement does not run.
    let refused = manager.fence("t", 5).await.unwrap_err();
    assert!(refused.to_string().contains("was not run"), "{refused}");
}

#[tokio::test]
async fn an_environment_the_coordinator_calls_stale_is_taken_out_at_once() {
    let (manager, _notices) = test_manager();
    manager.fence("t", 3).await.unwrap();
    test_env(&manager, "t").await;
    // Only the environment of that epoch (or older) goes.
    assert!(manager.take_stale("t", 2).is_none());
    let taken = manager.take_stale("t", 3).unwrap();
    taken.end().await;
    assert!(manager.get("t").is_none());
    assert!(
        manager.fence("t", 3).await.is_err(),
        "its placement is over"
    );
    manager.fence("t", 4).await.unwrap();
}
