use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use caduceus_proto::EnvironmentNotice;

use super::background::WaitEnd;
use super::*;
use crate::backends::local::LocalSandbox;
use crate::shell::{ExecRequest, PersistentShell, ShellConfig};

struct Fixture {
    shell: PersistentShell,
    registry: ProcessRegistry,
    notices: mpsc::Receiver<EnvironmentNotice>,
    env: Vec<(String, String)>,
}

fn fixture() -> Fixture {
    let sandbox: Arc<dyn Sandbox> = Arc::new(LocalSandbox::new("test".into(), "/tmp".into()));
    let env = vec![
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".to_owned(), "/tmp".to_owned()),
    ];
    let shell = PersistentShell::new(
        sandbox.clone(),
        ShellConfig {
            env: env.clone(),
            cwd: "/tmp".into(),
            ..ShellConfig::default()
        },
    );
    let (hub, notices) = NoticeHub::new();
    let registry = ProcessRegistry::new(
        "task-1".into(),
        sandbox,
        hub,
        Arc::new(OutputCleaner::default()),
    );
    Fixture {
        shell,
        registry,
        notices,
        env,
    }
}

impl Fixture {
    /// Ends the processes and removes the shell's directory.
    async fn cleanup(&self) {
        self.registry.kill_all("test").await;
        self.shell.close().await;
    }

    async fn sh(&self, command: &str) -> String {
        let request = ExecRequest {
            command,
            timeout: Duration::from_secs(10),
            workdir: None,
            max_output_chars: 50_000,
            cancel: None,
        };
        self.shell.exec(request).await.unwrap().output
    }

    fn request(&self, command: &str) -> SpawnRequest {
        SpawnRequest {
            command: command.to_owned(),
            cwd: "/tmp".to_owned(),
            snapshot: None,
            env: self.env.clone(),
            session_id: "session-1".into(),
            pty: false,
            notify_on_complete: false,
            watch_patterns: Vec::new(),
        }
    }

    async fn start(&self, request: SpawnRequest) -> Arc<BackgroundProcess> {
        self.registry.spawn(request).await.unwrap().process
    }

    async fn start_here(&self, command: &str) -> Arc<BackgroundProcess> {
        let state = self.shell.state_for_background().await;
        let mut request = self.request(command);
        request.cwd = state.cwd;
        request.snapshot = state.snapshot;
        self.start(request).await
    }

    async fn next_notice(&mut self, within: Duration) -> Option<(EnvironmentNotice, Value)> {
        let notice = tokio::time::timeout(within, self.notices.recv())
            .await
            .ok()
            .flatten()?;
        let body: Value = serde_json::from_str(&notice.text).unwrap();
        Some((notice, body))
    }
}

async fn wait(process: &BackgroundProcess, secs: u64) -> WaitEnd {
    process
        .wait_exit(Duration::from_secs(secs), &CancellationToken::new())
        .await
}

fn process_alive(needle: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|raw| String::from_utf8_lossy(&raw).contains(needle))
            .unwrap_or(false)
    })
}

async fn gone_within(needle: &str, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while tokio::time::Instant::now() < deadline {
        if !process_alive(needle) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn marker() -> String {
    format!("caduceus-bg-test-{}", uuid::Uuid::new_v4().simple())
}

#[tokio::test]
async fn a_background_process_starts_from_the_shell_state() {
    let f = fixture();
    f.sh("cd /usr; export EXPORTED=exp; PLAIN=plain; greet() { echo \"fn-$1\"; }; alias al='echo from-alias'").await;
    let process = f
        .start_here("echo $EXPORTED $PLAIN $(greet x) $PWD\nal")
        .await;
    assert!(process.pid > 1);
    assert_eq!(process.id.len(), "proc_".len() + 12);
    assert_eq!(wait(&process, 10).await, WaitEnd::Exited);
    assert_eq!(process.output(), "exp plain fn-x /usr\nfrom-alias\n");
    assert_eq!(process.status().exit_code, Some(0));
    f.cleanup().await;
}

#[tokio::test]
async fn stdin_write_and_close_work_for_plain_processes() {
    let f = fixture();
    let process = f
        .start(f.request("while IFS= read -r line; do echo \"got:$line\"; done; echo eof"))
        .await;
    assert_eq!(process.write_stdin("one\n").await, Ok(4));
    assert_eq!(process.write_stdin("tw").await, Ok(2));
    assert_eq!(process.write_stdin("o\n").await, Ok(2));
    assert!(process.close_stdin().await);
    assert_eq!(wait(&process, 10).await, WaitEnd::Exited);
    assert_eq!(process.output(), "got:one\ngot:two\neof\n");
    assert!(process.write_stdin("late").await.is_err());
    f.cleanup().await;
}

/// terminal's description: with background=true, pty=true gives the program a
/// terminal, and submit drives it.
#[tokio::test]
async fn a_pty_process_has_a_terminal_and_reads_what_is_submitted() {
    let f = fixture();
    let mut request = f.request("tty; read -r line; echo \"got:$line\"");
    request.pty = true;
    let process = f.start(request).await;
    assert_eq!(process.write_stdin("hello\n").await, Ok(6));
    assert_eq!(wait(&process, 10).await, WaitEnd::Exited);
    let output = process.output();
    // (the terminal echoes what was typed, too)
    assert!(output.contains("/dev/pts/"), "{output:?}");
    assert!(output.contains("got:hello"), "{output:?}");
    f.cleanup().await;
}

#[tokio::test]
async fn kill_stops_the_whole_tree_and_sends_no_notice() {
    let mut f = fixture();
    let mark = marker();
    let mut request = f.request(&format!(
        "bash -c 'sleep 300; : {mark}' & echo started; sleep 300"
    ));
    request.notify_on_complete = true;
    let process = f.start(request).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(process_alive(&mark));
    assert!(
        process
            .kill(f.registry.sandbox(), "process.kill", true)
            .await
    );
    let status = process.status();
    assert_eq!(
        (
            status.exit_code,
            status.completion_reason,
            status.termination_source.as_str()
        ),
        (Some(-15), "killed", "process.kill")
    );
    assert!(
        gone_within(&mark, Duration::from_secs(3)).await,
        "the grandchild survived the kill"
    );
    assert!(
        process.output().starts_with("started\n"),
        "{}",
        process.output()
    );
    assert!(
        !process
            .kill(f.registry.sandbox(), "process.kill", true)
            .await,
        "already exited"
    );
    assert!(
        f.next_notice(Duration::from_millis(500)).await.is_none(),
        "the kill result said it all"
    );
    f.cleanup().await;
}

#[tokio::test]
async fn what_an_exited_command_left_running_is_stopped() {
    let f = fixture();
    let mark = marker();
    let process = f
        .start(f.request(&format!("(sleep 300; : {mark}) & echo started")))
        .await;
    assert_eq!(wait(&process, 10).await, WaitEnd::Exited);
    assert!(
        gone_within(&mark, Duration::from_secs(4)).await,
        "a leftover of an exited process survived"
    );
    assert_eq!(process.output(), "started\n");
    f.cleanup().await;
}

#[tokio::test]
async fn notify_on_complete_sends_one_exit_notice_to_the_starting_session() {
    let mut f = fixture();
    let mut request =
        f.request("echo built; echo OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx; exit 3");
    request.notify_on_complete = true;
    let process = f.start(request).await;
    let (notice, body) = f
        .next_notice(Duration::from_secs(10))
        .await
        .expect("an exit notice");
    assert_eq!(notice.kind, "process_exited");
    assert_eq!(
        (notice.task_id.as_str(), notice.session_id.as_str()),
        ("task-1", "session-1")
    );
    assert_eq!(notice.process_id, process.id);
    assert_eq!(body["exit_code"], 3);
    assert_eq!(body["completion_reason"], "exited");
    let output = body["output"].as_str().unwrap();
    assert!(
        output.starts_with("built\n") && !output.contains("abcdefghijklmnop"),
        "{output}"
    );
    let message = body["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "[IMPORTANT: Background process {} exited (exit code 3).\nCommand: echo built;",
            process.id
        )),
        "{message}"
    );
    assert!(
        f.next_notice(Duration::from_millis(300)).await.is_none(),
        "exactly one notice"
    );
    f.cleanup().await;
}

#[tokio::test]
async fn a_wait_that_sees_the_exit_takes_the_place_of_the_notice() {
    let mut f = fixture();
    let mut request = f.request("sleep 0.3; echo ok");
    request.notify_on_complete = true;
    let process = f.start(request).await;
    assert_eq!(wait(&process, 10).await, WaitEnd::Exited);
    assert!(f.next_notice(Duration::from_millis(500)).await.is_none());
    f.cleanup().await;
}

#[tokio::test]
async fn watch_patterns_send_a_match_notice() {
    let mut f = fixture();
    let mut request = f.request(
        "echo booting; sleep 0.2; printf 'Server \\033[32mREADY\\033[0m on 8080\\n'; sleep 30",
    );
    request.watch_patterns = vec!["READY".into()];
    let process = f.start(request).await;
    let (notice, body) = f
        .next_notice(Duration::from_secs(10))
        .await
        .expect("a watch notice");
    assert_eq!(notice.kind, "watch_match");
    assert_eq!(body["pattern"], "READY");
    assert_eq!(body["output"], "Server READY on 8080");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("matched watch pattern \"READY\"")
    );
    assert_eq!(process.status().watch_hits, 1);
    f.registry.kill_all("test").await;
    f.cleanup().await;
}

#[tokio::test]
async fn pty_mode_gives_the_command_a_terminal() {
    let f = fixture();
    let mut request = f.request("tty; stty size; read -r answer; echo \"answer=$answer\"");
    request.pty = true;
    let started = f.registry.spawn(request).await.unwrap();
    assert!(!started.pty_unavailable);
    let process = started.process;
    tokio::time::sleep(Duration::from_millis(300)).await;
    process.write_stdin("yes\n").await.unwrap();
    assert_eq!(wait(&process, 10).await, WaitEnd::Exited);
    let output = process.output().replace('\r', "");
    assert!(output.contains("/dev/pts/"), "{output}");
    assert!(output.contains("30 120"), "{output}");
    assert!(output.contains("answer=yes"), "{output}");
    f.cleanup().await;
}

#[tokio::test]
async fn a_bad_workdir_ends_the_process_with_the_reason() {
    let f = fixture();
    let mut request = f.request("echo never");
    request.cwd = "/no/such/dir".into();
    let process = f.start(request).await;
    assert_eq!(wait(&process, 10).await, WaitEnd::Exited);
    assert_eq!(process.status().exit_code, Some(126));
    assert!(
        process.output().contains("/no/such/dir"),
        "{}",
        process.output()
    );
    f.cleanup().await;
}

#[tokio::test]
async fn sixty_four_running_processes_is_the_limit() {
    let f = fixture();
    for _ in 0..MAX_TRACKED {
        f.start(f.request("sleep 60")).await;
    }
    assert_eq!(f.registry.running(), MAX_TRACKED);
    let Err(err) = f.registry.spawn(f.request("sleep 60")).await else {
        panic!("a 65th process started")
    };
    assert!(
        err.to_string()
            .contains("64 background processes are already running"),
        "{err}"
    );
    assert_eq!(f.registry.kill_all("test").await, MAX_TRACKED);
    assert_eq!(f.registry.running(), 0);
    // Finished ones make room.
    f.start(f.request("true")).await;
    f.cleanup().await;
}

#[test]
fn the_launcher_knows_the_snapshot_end_line() {
    let spec = launch::spec("token", "true", "/", None, Vec::new(), false);
    assert!(spec.args[1].contains(crate::shell::SNAPSHOT_END));
}

#[test]
fn the_pid_marker_is_parsed_only_when_complete() {
    assert_eq!(launch::parse_pid_marker(b"\x1eCADPID 42 0\x1e"), None);
    assert_eq!(
        launch::parse_pid_marker(b"\x1eCADPID 42 1\x1e\nrest"),
        Some((42, true, 14))
    );
}
