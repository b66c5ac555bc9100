use std::sync::Arc;
use std::time::{Duration, Instant};

use super::script::may_change_state;
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
    sh.close().await;
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
    sh.close().await;
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
    sh.close().await;
}

#[tokio::test]
async fn stdin_readers_get_eof() {
    let sh = shell();
    let started = Instant::now();
    let out = run(&sh, "cat; read x; echo done").await;
    assert_eq!(out.output, "done\n");
    assert!(started.elapsed() < Duration::from_secs(5));
    sh.close().await;
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
    sh.close().await;
}

#[tokio::test]
async fn timeout_kills_the_tree_and_keeps_the_shell() {
    let sh = shell();
    run(&sh, "cd /usr; KEEP=yes").await;
    let marker = format!("caduceus-test-sleep-{}", uuid::Uuid::new_v4().simple());
    let out = run_with(
        &sh,
        &format!("bash -c 'sleep 300; : {marker}' & echo started; sleep 300"),
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(out.end, ExecEnd::TimedOut);
    assert_eq!(out.exit_code, 124);
    assert_eq!(out.output, "started\n");
    assert_eq!(
        out.output_with_status,
        "started\n\n[Command timed out after 1s]"
    );
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
    sh.close().await;
}

#[tokio::test]
async fn a_builtin_loop_is_aborted_and_the_shell_keeps_its_state() {
    let sh = shell();
    run(&sh, "cd /usr; export KEEP=yes; f() { echo f; }").await;
    let pid = run(&sh, "echo $$").await.output;
    let out = run_with(&sh, "while :; do :; done", Duration::from_millis(300)).await;
    assert_eq!(out.exit_code, 124);
    assert!(out.shell_replaced.is_none(), "{:?}", out.shell_replaced);
    let out = run(&sh, "echo $KEEP; f; pwd; echo $$").await;
    assert_eq!(out.output, format!("yes\nf\n/usr\n{pid}"));
    assert_eq!(sh.starts(), 1);
    sh.close().await;
}

#[tokio::test]
async fn a_timeout_ends_the_whole_command_and_keeps_the_state_it_reached() {
    let sh = shell();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let out = run_with(
        &sh,
        &format!(
            "cd {d}; REACHED=1; export EXP=2; sleep 5; echo AFTER > {d}/afterfile; echo printed"
        ),
        Duration::from_secs(1),
    )
    .await;
    assert_eq!(out.exit_code, 124);
    assert_eq!(out.output_with_status, "[Command timed out after 1s]");
    assert!(out.shell_replaced.is_none(), "{:?}", out.shell_replaced);
    let out = run(&sh, "echo $REACHED $EXP; pwd").await;
    assert_eq!(out.output, format!("1 2\n{d}\n"));
    // A loop of external commands stops at once too, inside a redirection.
    let out = run_with(
        &sh,
        &format!(
            "{{ for i in 1 2 3 4 5 6; do sleep 1; echo tick >> {d}/f; done; }} > {d}/out; echo done"
        ),
        Duration::from_millis(1500),
    )
    .await;
    assert_eq!(out.exit_code, 124);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let ticks = std::fs::read_to_string(dir.path().join("f")).unwrap_or_default();
    assert_eq!(
        ticks.lines().count(),
        1,
        "ticks after the timeout: {ticks:?}"
    );
    assert!(
        !dir.path().join("afterfile").exists(),
        "the rest of the line ran"
    );
    // The protocol's pipes were not redirected into the command's file.
    assert_eq!(run(&sh, "echo fine").await.output, "fine\n");
    sh.close().await;
}

#[tokio::test]
async fn repeated_aborts_leak_no_descriptors() {
    let sh = shell();
    // Counted by the shell itself: `ls /proc/$$/fd | wc -l` raced the shell
    // closing its copies of the pipeline's pipe and counted one more now and then.
    let count = "fds=(/proc/$$/fd/*); echo ${#fds[@]}";
    let before = run(&sh, count).await.output;
    for _ in 0..3 {
        let out = run_with(&sh, "sleep 5; echo never", Duration::from_millis(200)).await;
        assert_eq!(out.exit_code, 124);
        assert!(!out.output.contains("never"));
    }
    // A leak is more descriptors than before; fewer is fine (a descriptor of the
    // shell's start-up can still be open at the first count).
    let count_of = |text: &str| text.trim().parse::<usize>().unwrap();
    let after = run(&sh, count).await.output;
    assert!(
        count_of(&after) <= count_of(&before),
        "descriptors before the aborts: {before}, after: {after}"
    );
    sh.close().await;
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
    sh.close().await;
}

#[tokio::test]
async fn a_shell_that_dies_before_taking_the_command_is_replaced_and_the_command_runs_once() {
    let sh = shell();
    let pid = run(&sh, "echo $$").await.output.trim().to_owned();
    // Stopped, bash cannot read: the next command lands in its pipe unread,
    // and the shell dies with it there (an SSH channel whose master went).
    let stop = std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status();
    assert!(stop.unwrap().success());
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        std::process::Command::new("kill")
            .args(["-KILL", &pid])
            .status()
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ran");
    let out = run(&sh, &format!("echo once >> {}; echo two", file.display())).await;
    assert!(killer.await.unwrap().unwrap().success());
    assert_eq!(out.output, "two\n");
    assert_eq!(out.exit_code, 0);
    assert_eq!(sh.starts(), 2);
    assert!(
        out.shell_replaced.is_some(),
        "the caller is told the shell was replaced"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "once\n");
    sh.close().await;
}

#[tokio::test]
async fn a_command_that_kills_its_own_shell_is_not_run_again() {
    let sh = shell();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ran");
    let out = run(&sh, &format!("echo once >> {}; kill -9 $$", file.display())).await;
    assert_eq!(out.end, ExecEnd::ShellExited);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "once\n");
    assert_eq!(run(&sh, "echo next").await.output, "next\n");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "once\n");
    sh.close().await;
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
            command: "sleep 30; echo never",
            timeout: Duration::from_secs(60),
            workdir: None,
            max_output_chars: 1000,
            cancel: Some(&token),
        })
        .await
        .unwrap();
    assert_eq!(out.end, ExecEnd::Cancelled);
    assert_eq!(out.exit_code, 130);
    assert_eq!(out.output, "");
    assert_eq!(out.output_with_status, "[Command interrupted]");
    assert!(started.elapsed() < Duration::from_secs(10));
    sh.close().await;
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
    sh.close().await;
}

#[tokio::test]
async fn marker_lookalikes_in_output_are_just_output() {
    let sh = shell();
    let out = run(&sh, r"printf '\n\036deadbeef 0 /\036\n'; echo after").await;
    assert_eq!(out.output, "\n\u{1e}deadbeef 0 /\u{1e}\nafter\n");
    assert_eq!(out.exit_code, 0);
    sh.close().await;
}

#[tokio::test]
async fn a_silent_timeout_reads_like_hermes() {
    let sh = shell();
    let out = run_with(&sh, "sleep 3", Duration::from_secs(1)).await;
    assert_eq!(out.output_with_status, "[Command timed out after 1s]");
    assert_eq!(out.exit_code, 124);
    sh.close().await;
}

#[tokio::test]
async fn ten_megabytes_of_output_stay_bounded() {
    let sh = shell();
    let out = run_with(
        &sh,
        "head -c 10000000 /dev/zero | tr '\\0' x; echo; echo END",
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(out.exit_code, 0);
    assert_eq!(out.total_chars, 10_000_005);
    assert_eq!(out.output.chars().count(), 50_000);
    assert!(
        out.output.contains("\n\n... [OUTPUT TRUNCATED - 9,950,"),
        "{}",
        &out.output[19_900..20_100]
    );
    assert!(out.output.ends_with("xxx\nEND\n"));
    // The capture held a bounded window, not the 10 MB.
    assert!(
        out.retained_bytes < 300_000,
        "retained {} bytes",
        out.retained_bytes
    );
    sh.close().await;
}

#[tokio::test]
async fn errexit_and_nounset_do_not_outlive_their_command() {
    let sh = shell();
    run(&sh, "KEEP=kept; cd /usr").await;
    let out = run(&sh, "set -e; false; echo after").await;
    assert_eq!(out.exit_code, 1);
    assert_eq!(out.output, "");
    // A later failure does not end anything, and the state is still there.
    let out = run(
        &sh,
        "false; echo $KEEP $PWD; [[ -o errexit ]] || echo no-errexit",
    )
    .await;
    assert_eq!(out.output, "kept /usr\nno-errexit\n");
    run(&sh, "set -u").await;
    assert_eq!(run(&sh, "echo ${UNSET_VAR}ok").await.output, "ok\n");
    sh.close().await;
}

/// A shell whose HOME is `home`, reading login and init files.
fn login_shell(home: &std::path::Path, init_files: Vec<String>, path: &str) -> PersistentShell {
    let sandbox = Arc::new(LocalSandbox::new("test".into(), "/tmp".into()));
    let env = vec![
        ("PATH".to_owned(), path.to_owned()),
        ("HOME".to_owned(), home.display().to_string()),
    ];
    PersistentShell::new(
        sandbox,
        ShellConfig {
            env,
            cwd: "/tmp".into(),
            login: true,
            init_files,
            ..ShellConfig::default()
        },
    )
}

#[tokio::test]
async fn login_and_init_files_are_read_once_at_start() {
    let home = tempfile::tempdir().unwrap();
    let log = home.path().join("sourced.log");
    std::fs::write(
        home.path().join(".profile"),
        format!(
            "echo profile >> {}\nexport FROM_PROFILE=yes\nPATH=/usr/bin:/bin\n",
            log.display()
        ),
    )
    .unwrap();
    // Reads stdin (must not eat the protocol), prints (must not show), sets an alias.
    std::fs::write(
        home.path().join(".bashrc"),
        format!(
            "echo bashrc >> {}\nread -r x; echo noise\nalias hello='echo hi-from-alias'\nset -eu\n",
            log.display()
        ),
    )
    .unwrap();
    let original_path = format!("/opt/caduceus-test-bin:{}", std::env::var("PATH").unwrap());
    let sh = login_shell(
        home.path(),
        vec![
            "~/.profile".into(),
            "~/.bashrc".into(),
            "~/missing-file".into(),
        ],
        &original_path,
    );
    let out = run(&sh, "echo $FROM_PROFILE; hello; false; echo still-here").await;
    assert_eq!(out.output, "yes\nhi-from-alias\nstill-here\n");
    run(&sh, "echo again").await;
    // ~/.profile was the login file, so it is not read a second time.
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "profile\nbashrc\n");
    // The login files reset PATH; the worker's entries come back after theirs.
    let path = run(&sh, "echo $PATH").await.output;
    assert!(path.starts_with("/usr/bin:/bin:"), "{path}");
    assert!(path.contains("/opt/caduceus-test-bin"), "{path}");
    sh.close().await;
}

#[tokio::test]
async fn an_init_file_that_exits_does_not_break_the_shell() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join(".bashrc"), "exit 7\n").unwrap();
    let sh = login_shell(
        home.path(),
        vec!["~/.bashrc".into()],
        &std::env::var("PATH").unwrap(),
    );
    let out = run(&sh, "echo works").await;
    assert_eq!(out.output, "works\n");
    let note = out
        .shell_replaced
        .expect("the first result says the init files failed");
    assert!(note.contains("init files"), "{note}");
    assert!(
        run(&sh, "echo again").await.shell_replaced.is_none(),
        "said once"
    );
    sh.close().await;
}

#[tokio::test]
async fn the_private_directory_is_private_and_removed_on_close() {
    let sh = shell();
    run(&sh, "export A=1").await;
    let dir = std::path::PathBuf::from(sh.private_dir());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700);
    let snapshot = std::fs::read_to_string(dir.join("state.sh")).unwrap();
    assert!(snapshot.contains("declare -x A=\"1\""), "{snapshot}");
    let state = sh.state_for_background().await;
    assert_eq!(
        state.snapshot.as_deref(),
        Some(dir.join("state.sh").to_str().unwrap())
    );
    sh.close().await;
    assert!(!dir.exists());
}

#[tokio::test]
async fn state_for_background_starts_a_shell_that_never_ran() {
    let sh = shell();
    let state = sh.state_for_background().await;
    assert_eq!(state.cwd, "/tmp");
    assert!(std::path::Path::new(state.snapshot.as_deref().unwrap()).exists());
    assert_eq!(sh.starts(), 1);
    sh.close().await;
}

#[tokio::test]
async fn sudo_gets_the_password_from_the_askpass_helper() {
    // A stand-in sudo: with -A it asks the helper, as the real one does.
    let bin = tempfile::tempdir().unwrap();
    let fake = bin.path().join("sudo");
    std::fs::write(
        &fake,
        "#!/bin/sh\nif [ \"$1\" = -A ]; then shift; pw=$(\"$SUDO_ASKPASS\"); \
         if [ \"$pw\" = 's3cret-pass' ]; then \"$@\"; else echo 'sudo: 1 incorrect password attempt'; exit 1; fi; \
         else echo 'sudo: a terminal is required to read the password'; exit 1; fi\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sandbox = Arc::new(LocalSandbox::new("test".into(), "/tmp".into()));
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap()
    );
    let env = vec![
        ("PATH".to_owned(), path),
        ("HOME".to_owned(), "/tmp".to_owned()),
    ];
    let sh = PersistentShell::new(
        sandbox,
        ShellConfig {
            env,
            cwd: "/tmp".into(),
            sudo_password: Some(Secret::new("s3cret-pass")),
            ..ShellConfig::default()
        },
    );
    let out = run(&sh, "sudo echo as-root; cat").await;
    assert_eq!(
        out.output, "as-root\n",
        "the password never reaches the command's stdin"
    );
    // The password is in no variable and no function; the helper's path is
    // not in the environment either.
    let out = run(&sh, "declare -p; set").await;
    assert!(!out.output.contains("s3cret-pass"));
    assert!(!run(&sh, "env").await.output.contains("SUDO_ASKPASS"));
    let pass_file = std::path::Path::new(sh.private_dir()).join("sudo-pass");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&pass_file).unwrap().mode() & 0o777, 0o600);
    sh.close().await;
    assert!(!pass_file.exists());
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
fn marker_scanner_passes_lookalikes_through_under_any_chunking() {
    let token = "abc123";
    // Near-misses of the prefix, partial prefixes at chunk ends, and a
    // newline run right before the real marker.
    let output: &[u8] = b"a\n\x1eabc12 x\n\x1eabc123x\n\n\n\x1e\x1eabc\n\x1eab\n\n";
    let stream = [output, b"\n\x1eabc123 3 /w\x1e\n"].concat();
    for chunk in 1..=stream.len() {
        let mut scanner = MarkerScanner::new(token);
        let mut emitted = Vec::new();
        let mut found = None;
        for piece in stream.chunks(chunk) {
            assert!(found.is_none(), "chunk {chunk}: fed after the marker");
            found = scanner.feed(piece, &mut |c| emitted.extend_from_slice(c));
        }
        assert_eq!(found, Some((3, "/w".to_owned())), "chunk {chunk}");
        assert_eq!(emitted, output, "chunk {chunk}");
    }
}

#[test]
fn marker_scanner_flushes_a_held_partial_prefix_when_the_stream_ends() {
    let mut scanner = MarkerScanner::new("tok");
    let mut emitted = Vec::new();
    assert_eq!(
        scanner.feed(b"out\n\x1eto", &mut |c| emitted.extend_from_slice(c)),
        None
    );
    assert_eq!(emitted, b"out");
    scanner.flush(&mut |c| emitted.extend_from_slice(c));
    assert_eq!(emitted, b"out\n\x1eto");
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
