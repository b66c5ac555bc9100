use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::backends::local::LocalSandbox;

fn shell() -> PersistentShell {
    let sandbox = Arc::new(LocalSandbox::new("test".into(), "/tmp".into()));
    let env = vec![
        ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".to_owned(), "/tmp".to_owned()),
    ];
    PersistentShell::new(
        sandbox,
        ShellConfig {
            env,
            cwd: "/tmp".into(),
            ..ShellConfig::default()
        },
    )
}

async fn run(shell: &PersistentShell, command: &str) -> ExecOutcome {
    run_with(shell, command, Duration::from_secs(10)).await
}

async fn run_with(shell: &PersistentShell, command: &str, timeout: Duration) -> ExecOutcome {
    shell
        .exec(ExecRequest {
            command,
            timeout,
            workdir: None,
            max_output_chars: 50_000,
            on_output: None,
            cancel: None,
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn output_exit_code_and_cwd() {
    let sh = shell();
    let out = run(&sh, "echo hi; echo err >&2; false").await;
    assert_eq!(out.output, "hi\nerr\n");
    assert_eq!(out.exit_code, 1);
    assert_eq!(out.end, ExecEnd::Completed);
    let out = run(&sh, "printf 'no newline'").await;
    assert_eq!(out.output, "no newline");
    let out = run(&sh, "cd / && pwd").await;
    assert_eq!(out.cwd, "/");
    assert_eq!(sh.cwd(), "/");
}

#[tokio::test]
async fn state_persists_across_commands() {
    let sh = shell();
    run(&sh, "export EXPORTED=1; PLAIN=2; greet() { echo \"hello $1\"; }; alias ll='echo aliased'; set -o noglob; cd /usr").await;
    let out = run(
        &sh,
        "echo $EXPORTED $PLAIN; greet you; ll; [[ -o noglob ]] && echo noglob; pwd",
    )
    .await;
    assert_eq!(out.output, "1 2\nhello you\naliased\nnoglob\n/usr\n");
    let pid1 = run(&sh, "echo $$").await.output;
    let pid2 = run(&sh, "echo $$").await.output;
    assert_eq!(pid1, pid2, "one live shell");
    assert_eq!(sh.starts(), 1);
}

#[tokio::test]
async fn declare_stays_global_and_multiline_commands_work() {
    let sh = shell();
    run(
        &sh,
        "declare -A MAP=([k]=v)\nfor i in 1 2; do\n  echo $i\ndone",
    )
    .await;
    let out = run(&sh, "echo ${MAP[k]}").await;
    assert_eq!(out.output, "v\n");
}

#[tokio::test]
async fn stdin_readers_get_eof() {
    let sh = shell();
    let started = Instant::now();
    let out = run(&sh, "cat; read x; echo done").await;
    assert_eq!(out.output, "done\n");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn workdir_applies_and_bad_workdir_fails_cleanly() {
    let sh = shell();
    let out = sh
        .exec(ExecRequest {
            command: "pwd",
            timeout: Duration::from_secs(5),
            workdir: Some("/usr"),
            max_output_chars: 1000,
            on_output: None,
            cancel: None,
        })
        .await
        .unwrap();
    assert_eq!(out.output, "/usr\n");
    let out = sh
        .exec(ExecRequest {
            command: "echo ran",
            timeout: Duration::from_secs(5),
            workdir: Some("/no/such/dir"),
            max_output_chars: 1000,
            on_output: None,
            cancel: None,
        })
        .await
        .unwrap();
    assert_ne!(out.exit_code, 0);
    assert!(!out.output.contains("ran"));
    assert_eq!(
        run(&sh, "pwd").await.output,
        "/usr\n",
        "the shell is fine afterwards"
    );
}

#[tokio::test]
async fn timeout_kills_the_tree_and_keeps_the_shell() {
    let sh = shell();
    run(&sh, "cd /usr; KEEP=yes").await;
    let marker = format!("caduceus-test-sleep-{}", uuid::Uuid::new_v4().simple());
    let out = run_with(
        &sh,
        &format!("bash -c 'sleep 300; : {marker}' & echo started; sleep 300"),
        Duration::from_millis(500),
    )
    .await;
    assert_eq!(out.end, ExecEnd::TimedOut);
    assert_eq!(out.exit_code, 124);
    assert_eq!(out.output, "started\n");
    assert!(
        out.shell_replaced.is_none(),
        "the shell survived: {:?}",
        out.shell_replaced
    );
    // The grandchild is gone.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!process_alive(&marker), "the sleep grandchild survived");
    let out = run(&sh, "echo $KEEP; pwd").await;
    assert_eq!(out.output, "yes\n/usr\n");
    assert_eq!(sh.starts(), 1);
}

#[tokio::test]
async fn a_stuck_builtin_loop_replaces_the_shell_with_its_state() {
    let sh = shell();
    run(&sh, "cd /usr; export KEEP=yes; f() { echo f; }").await;
    let out = run_with(&sh, "while :; do :; done", Duration::from_millis(300)).await;
    assert_eq!(out.exit_code, 124);
    assert!(out.shell_replaced.is_some());
    let out = run(&sh, "echo $KEEP; f; pwd").await;
    assert_eq!(out.output, "yes\nf\n/usr\n");
    assert_eq!(sh.starts(), 2);
}

#[tokio::test]
async fn exit_reports_the_code_and_the_next_command_gets_a_new_shell() {
    let sh = shell();
    run(&sh, "cd /usr").await;
    let out = run(&sh, "echo bye; exit 3").await;
    assert_eq!(out.exit_code, 3);
    assert_eq!(out.output, "bye\n");
    assert_eq!(out.end, ExecEnd::ShellExited);
    let out = run(&sh, "pwd").await;
    assert_eq!(out.output, "/usr\n");
}

#[tokio::test]
async fn cancel_stops_the_command() {
    let sh = shell();
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cancel.cancel();
    });
    let started = Instant::now();
    let out = sh
        .exec(ExecRequest {
            command: "sleep 30",
            timeout: Duration::from_secs(60),
            workdir: None,
            max_output_chars: 1000,
            on_output: None,
            cancel: Some(&token),
        })
        .await
        .unwrap();
    assert_eq!(out.end, ExecEnd::Cancelled);
    assert_eq!(out.exit_code, 130);
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn concurrent_commands_never_interleave() {
    let sh = Arc::new(shell());
    let mut handles = Vec::new();
    for i in 0..6 {
        let sh = sh.clone();
        handles.push(tokio::spawn(async move {
            let cmd = format!("for j in 1 2 3; do echo {i}-$j; sleep 0.01; done");
            run(&sh, &cmd).await.output
        }));
    }
    for (i, handle) in handles.into_iter().enumerate() {
        assert_eq!(handle.await.unwrap(), format!("{i}-1\n{i}-2\n{i}-3\n"));
    }
}

#[tokio::test]
async fn marker_lookalikes_in_output_are_just_output() {
    let sh = shell();
    let out = run(&sh, r"printf '\n\036deadbeef 0 /\036\n'; echo after").await;
    assert_eq!(out.output, "\n\u{1e}deadbeef 0 /\u{1e}\nafter\n");
    assert_eq!(out.exit_code, 0);
}

#[tokio::test]
async fn streams_output_as_it_arrives() {
    let sh = shell();
    let mut seen = Vec::new();
    let mut sink = |chunk: &[u8]| seen.extend_from_slice(chunk);
    let out = sh
        .exec(ExecRequest {
            command: "echo one; sleep 0.1; echo two",
            timeout: Duration::from_secs(5),
            workdir: None,
            max_output_chars: 1000,
            on_output: Some(&mut sink),
            cancel: None,
        })
        .await
        .unwrap();
    assert_eq!(out.output, "one\ntwo\n");
    assert_eq!(String::from_utf8(seen).unwrap(), "one\ntwo\n");
}

#[test]
fn marker_scanner_handles_any_split() {
    let token = "abc123";
    let stream = b"hello\n\n\x1eabc123 7 /some dir\x1e\n".to_vec();
    for split in 0..stream.len() {
        let mut scanner = MarkerScanner::new(token);
        let mut emitted = Vec::new();
        let mut found = scanner.feed(&stream[..split], &mut |c| emitted.extend_from_slice(c));
        if found.is_none() {
            found = scanner.feed(&stream[split..], &mut |c| emitted.extend_from_slice(c));
        }
        assert_eq!(found, Some((7, "/some dir".to_owned())), "split {split}");
        assert_eq!(emitted, b"hello\n", "split {split}");
    }
}

#[test]
fn state_change_detection() {
    for cmd in [
        "export A=1",
        "cd /tmp",
        "x=1",
        "f() { :; }",
        "source env.sh",
        ". ./env",
        "alias a=b",
        "set -e",
        "unset X",
    ] {
        assert!(may_change_state(cmd), "{cmd}");
    }
    for cmd in [
        "echo hi",
        "ls -la",
        "cargo build --release",
        "git status",
        "python3 script.py",
    ] {
        assert!(!may_change_state(cmd), "{cmd}");
    }
}

fn process_alive(needle: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline"))
            .map(|raw| String::from_utf8_lossy(&raw).contains(needle))
            .unwrap_or(false)
    })
}
