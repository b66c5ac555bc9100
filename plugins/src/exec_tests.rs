use std::time::Duration;

use super::*;

fn exec(script: &str) -> Exec {
    Exec {
        argv: vec!["bash".into(), "-c".into(), script.into()],
        cwd: std::env::temp_dir(),
        env: vec![("DECLARED".into(), "yes".into())],
        stdin: b"{\"x\": 1}".to_vec(),
        timeout: Duration::from_secs(10),
        max_output: 1024,
    }
}

#[tokio::test]
async fn stdin_goes_in_and_stdout_comes_back() {
    let out = run(&exec("cat; echo; echo err >&2; exit 3")).await;
    assert_eq!(out.ended, Ended::Exited(Some(3)));
    assert_eq!(out.stdout_text(), "{\"x\": 1}\n");
    assert_eq!(out.stderr.trim(), "err");
}

#[tokio::test]
async fn only_the_base_and_given_variables_are_seen() {
    // SAFETY of the test: a variable set in this test process only.
    let out = run(&exec("env")).await;
    let text = out.stdout_text();
    assert!(text.contains("DECLARED=yes"), "{text}");
    assert!(text.lines().all(|l| !l.starts_with("CARGO")), "{text}");
}

#[tokio::test]
async fn a_hanging_process_and_its_children_end_at_the_deadline() {
    let mut e = exec("sleep 300 & sleep 300; wait");
    e.timeout = Duration::from_millis(300);
    let out = run(&e).await;
    assert_eq!(out.ended, Ended::TimedOut);
}

#[tokio::test]
async fn too_much_output_is_cut_and_the_process_ended() {
    let out = run(&exec(
        "trap '' PIPE; while :; do echo xxxxxxxxxxxxxxxx; done",
    ))
    .await;
    assert_eq!(out.ended, Ended::TooMuchOutput);
    assert_eq!(out.stdout.len(), 1024);
}

#[tokio::test]
async fn a_missing_program_is_reported() {
    let mut e = exec("");
    e.argv = vec!["./no-such-program".into()];
    let out = run(&e).await;
    assert!(matches!(out.ended, Ended::NotStarted(_)), "{:?}", out.ended);
}

#[test]
fn commands_split_as_a_shell_would() {
    assert_eq!(
        split_command(r#"python3 "my hook.py" --x 'a b' c\ d"#).unwrap(),
        vec!["python3", "my hook.py", "--x", "a b", "c d"]
    );
    assert!(split_command("echo 'open").is_err());
}

#[tokio::test]
async fn a_process_that_leaves_a_child_holding_stdout_returns_when_it_exits() {
    let mut e = exec("sleep 313133 & echo done");
    e.timeout = Duration::from_secs(20);
    let out = run(&e).await;
    assert_eq!(out.ended, Ended::Exited(Some(0)));
    assert_eq!(out.stdout_text(), "done\n");
    // The leftover was in the call's process group and ended with it.
    let alive = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|raw| {
                String::from_utf8_lossy(&raw)
                    .replace('\0', " ")
                    .contains("sleep 313133")
            })
        })
    };
    for _ in 0..100 {
        if !alive() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the leftover child outlived the call");
}

#[tokio::test]
async fn a_daemon_that_left_the_process_group_ends_with_the_call() {
    // setsid gives the daemon its own session and group: the group kill
    // cannot reach it, only the marker it inherited can.
    let mut e = exec("setsid sleep 313134 </dev/null >/dev/null 2>&1 & echo started");
    e.timeout = Duration::from_secs(20);
    let out = run(&e).await;
    assert_eq!(out.ended, Ended::Exited(Some(0)));
    assert_eq!(out.stdout_text(), "started\n");
    let alive = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
            let running = std::fs::read_to_string(e.path().join("stat")).is_ok_and(|stat| {
                !stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            });
            running
                && std::fs::read(e.path().join("cmdline")).is_ok_and(|raw| {
                    String::from_utf8_lossy(&raw)
                        .replace('\0', " ")
                        .contains("sleep 313134")
                })
        })
    };
    for _ in 0..50 {
        if !alive() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the setsid daemon outlived its call");
}
