//! Backend conformance: the same cases against every backend (local, Docker,
//! SSH to a local sshd, Singularity through the Apptainer stand-in), through a
//! real coordinator and worker. A backend this machine lacks is skipped loudly
//! (a `SKIPPED …` line naming what is missing and how to get it); with
//! `CADUCEUS_REQUIRE_ALL=1` it fails instead.
//!
//! Cases every backend passes are in `CASES`. Cases for features still
//! landing (background processes, file tools) are added there when they do.
//! Sandboxed backends (`leased`: Docker, Daytona) also run the lifecycle
//! cases: a sandbox ended under a live environment (`docker kill`, a Daytona
//! `DELETE`), a worker killed with SIGKILL and restarted (its successor
//! sweeps by owner and lease labels), and nothing left after SIGTERM.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use caduceus_tests::conformance::{BackendUnderTest, Control, Stand, docker};
use serde_json::{Value, json};

/// A case gets a client and a task id of its own.
type Case = for<'a> fn(
    &'a mut Control,
    &'a str,
    &'a BackendUnderTest,
) -> Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

const CASES: &[(&str, Case)] = &[
    ("shell state persists between calls", |c, t, b| {
        Box::pin(shell_state_persists(c, t, b))
    }),
    ("output, stderr and exit codes", |c, t, b| {
        Box::pin(output_and_exit_codes(c, t, b))
    }),
    ("a timeout stops the whole process tree", |c, t, b| {
        Box::pin(timeout_kills_the_tree(c, t, b))
    }),
    ("file tools read, write, patch and search", |c, t, b| {
        Box::pin(file_tools(c, t, b))
    }),
    ("documents are extracted where they are", |c, t, b| {
        Box::pin(documents_are_extracted(c, t, b))
    }),
    (
        "syntax checks use the sandbox's own interpreter",
        |c, t, b| Box::pin(syntax_checks_run_in_the_sandbox(c, t, b)),
    ),
    ("release ends the environment", |c, t, b| {
        Box::pin(release_ends_the_environment(c, t, b))
    }),
];

fn output(result: &Value) -> &str {
    result["output"]
        .as_str()
        .unwrap_or_else(|| panic!("no output in {result}"))
}

async fn shell_state_persists(control: &mut Control, task: &str, _backend: &BackendUnderTest) {
    let first = control.terminal(task, "cd /tmp && export CONF_A=1 && CONF_B=2 && conf_fn() { echo fn-ok; } && alias conf_al='echo alias-ok'", None).await;
    assert_eq!(first["exit_code"], 0, "{first}");
    let second = control
        .terminal(task, "echo $CONF_A $CONF_B $PWD; conf_fn; conf_al", None)
        .await;
    assert_eq!(output(&second), "1 2 /tmp\nfn-ok\nalias-ok", "{second}");
}

async fn output_and_exit_codes(control: &mut Control, task: &str, _backend: &BackendUnderTest) {
    let result = control
        .terminal(task, "echo out; echo err >&2; false", None)
        .await;
    assert_eq!(output(&result), "out\nerr", "{result}");
    assert_eq!(result["exit_code"], 1);
    assert_eq!(result["error"], Value::Null);
    let result = control.terminal(task, "printf 'no newline'", None).await;
    assert_eq!(output(&result), "no newline");
}

async fn timeout_kills_the_tree(control: &mut Control, task: &str, backend: &BackendUnderTest) {
    // Numbers unique to this run and backend, so that other tests' sleeps do
    // not count (the host sees processes of containers too).
    let salt: u32 = backend.name.bytes().map(u32::from).sum();
    let n = 10_000 + (std::process::id() % 50_000) * 7 + salt;
    // `(sleep &)` leaves the tree (re-parented to init) but stays in the
    // shell's session. The script goes in a file: the terminal's guards
    // refuse a foreground `&` and ask approval for `bash -c` (as hermes does).
    let script = format!("(sleep {n}.1 &)\nsleep {n}.2 &\nsleep {n}.3\n");
    let cd = control
        .terminal(task, "cd \"$(mktemp -d)\" && pwd", None)
        .await;
    assert_eq!(cd["exit_code"], 0, "{cd}");
    let written = control
        .call(
            task,
            "write_file",
            &json!({"path": "conf-tree.sh", "content": script}),
        )
        .await;
    assert!(written["error"].is_null(), "{written}");
    let command = "bash ./conf-tree.sh".to_owned();
    let started = Instant::now();
    let result = control.terminal(task, &command, Some(1)).await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the timeout took {:?}",
        started.elapsed()
    );
    assert_eq!(result["exit_code"], 124, "{result}");
    assert!(
        output(&result).ends_with("[Command timed out after 1s]"),
        "{result}"
    );
    // Counted from /proc (no procps needed); the count is first proven to
    // see a sleep started as a background process.
    let define = control
        .terminal(
            task,
            "conf_count() { for f in /proc/[0-9]*/cmdline; do { tr '\\0' ' ' < \"$f\"; } 2>/dev/null; echo; done | grep -c \"^sleep $1\\.\" || true; }",
            None,
        )
        .await;
    assert_eq!(define["exit_code"], 0, "{define}");
    let background = control
        .call(
            task,
            "terminal",
            &json!({"command": format!("sleep {n}.9"), "background": true}),
        )
        .await;
    let session = background["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{background}"))
        .to_owned();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let probe = control
        .terminal(task, &format!("conf_count {n}"), None)
        .await;
    // (At least one: a pid namespace may list a process twice.)
    assert!(
        output(&probe).parse::<u32>().is_ok_and(|c| c >= 1),
        "the process count does not work here: {probe}"
    );
    let killed = control
        .call(
            task,
            "process",
            &json!({"action": "kill", "session_id": session}),
        )
        .await;
    assert!(killed["error"].is_null(), "{killed}");
    let left = control
        .terminal(task, &format!("sleep 0.3; conf_count {n}"), None)
        .await;
    assert_eq!(
        output(&left),
        "0",
        "processes of the timed-out command or the killed background process survived: {left}"
    );
    // The shell itself survived with its state.
    let after = control.terminal(task, "echo still-here", None).await;
    assert_eq!(output(&after), "still-here");
}

async fn file_tools(control: &mut Control, task: &str, _backend: &BackendUnderTest) {
    let cd = control
        .terminal(task, "d=$(mktemp -d) && cd \"$d\" && pwd", None)
        .await;
    let dir = output(&cd).to_owned();
    assert!(dir.starts_with('/'), "{cd}");
    let content: String = (1..=1000)
        .map(|i| format!("line {i:04}: lorem ipsum\n"))
        .collect();

    // Relative paths follow the shell's cwd.
    let written = control
        .call(
            task,
            "write_file",
            &json!({"path": "notes.txt", "content": content}),
        )
        .await;
    assert_eq!(written["bytes_written"], content.len(), "{written}");
    assert_eq!(
        written["files_modified"],
        json!([format!("{dir}/notes.txt")]),
        "{written}"
    );
    let read = control
        .call(
            task,
            "read_file",
            &json!({"path": "notes.txt", "offset": 10, "limit": 3}),
        )
        .await;
    assert_eq!(
        read["content"],
        "10|line 0010: lorem ipsum\n11|line 0011: lorem ipsum\n12|line 0012: lorem ipsum",
        "{read}"
    );
    assert_eq!(read["total_lines"], 1000);
    let seen = control
        .terminal(task, "sed -n 1000p notes.txt; wc -c < notes.txt", None)
        .await;
    assert_eq!(
        output(&seen),
        format!("line 1000: lorem ipsum\n{}", content.len())
    );

    let patched = control
        .call(task, "patch", &json!({"path": "notes.txt", "old_string": "line 0500: lorem ipsum", "new_string": "line 0500: PATCHED"}))
        .await;
    assert_eq!(patched["success"], true, "{patched}");
    let found = control
        .call(
            task,
            "search_files",
            &json!({"pattern": "PATCHED", "path": dir}),
        )
        .await;
    assert_eq!(found["total_count"], 1, "{found}");
    let count = control
        .terminal(task, "grep -c PATCHED notes.txt", None)
        .await;
    assert_eq!(output(&count), "1");

    let v4a = "*** Begin Patch\n*** Add File: deep/er/new.txt\n+made by v4a\n*** End Patch\n";
    let applied = control
        .call(task, "patch", &json!({"mode": "patch", "patch": v4a}))
        .await;
    assert_eq!(applied["success"], true, "{applied}");
    let made = control.terminal(task, "cat deep/er/new.txt", None).await;
    assert_eq!(output(&made), "made by v4a");

    let missing = control
        .call(task, "read_file", &json!({"path": "note.txt"}))
        .await;
    assert!(
        missing["similar_files"].to_string().contains("notes.txt"),
        "{missing}"
    );
    assert!(
        control
            .call(task, "read_file", &json!({"path": "/dev/zero"}))
            .await["error"]
            .is_string()
    );
}

const DOCUMENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../files/fixtures/documents");

/// A notebook, a Word document and a workbook put into the sandbox with the
/// shell are read as the text hermes extracts from them (the `.expected`
/// files), whatever the backend.
async fn documents_are_extracted(control: &mut Control, task: &str, _backend: &BackendUnderTest) {
    use base64::Engine as _;
    let cd = control
        .terminal(task, "d=$(mktemp -d) && cd \"$d\" && pwd", None)
        .await;
    assert!(output(&cd).starts_with('/'), "{cd}");
    for name in ["notebook.ipynb", "report.docx", "handmade.xlsx"] {
        let data = std::fs::read(format!("{DOCUMENTS}/{name}")).unwrap();
        let encoded = base64::engine::general_purpose::STANDARD.encode(&data);
        let put = control
            .terminal(
                task,
                &format!("echo {encoded} | base64 -d > {name} && wc -c < {name}"),
                None,
            )
            .await;
        assert_eq!(output(&put), data.len().to_string(), "{put}");
        let expected = std::fs::read_to_string(format!("{DOCUMENTS}/{name}.expected")).unwrap();
        let numbered: Vec<String> = expected
            .lines()
            .enumerate()
            .map(|(index, line)| format!("{}|{line}", index + 1))
            .collect();
        let read = control
            .call(task, "read_file", &json!({"path": name}))
            .await;
        assert_eq!(read["extracted_document"], true, "{name}: {read}");
        assert_eq!(read["file_size"], data.len(), "{name}: {read}");
        assert_eq!(read["content"], numbered.join("\n"), "{name}: {read}");
    }
}

/// write_file's `lint` of a `.py` comes from the sandbox's `python3` when it
/// has one, and says it is not available when it has none (the Docker base
/// image has no Python): never from the worker's host.
async fn syntax_checks_run_in_the_sandbox(
    control: &mut Control,
    task: &str,
    _backend: &BackendUnderTest,
) {
    let probe = control
        .terminal(
            task,
            "cd \"$(mktemp -d)\" && { command -v python3 >/dev/null && echo has-python || echo no-python; }",
            None,
        )
        .await;
    let written = control
        .call(
            task,
            "write_file",
            &json!({"path": "broken.py", "content": "def f(:\n    pass\n"}),
        )
        .await;
    assert_eq!(written["bytes_written"], 17, "{written}");
    let expected = match output(&probe) {
        "has-python" => {
            json!({"status": "error", "output": "SyntaxError: invalid syntax (line 1, column 7)"})
        }
        "no-python" => json!({"status": "skipped", "message": "python3 not available"}),
        other => panic!("probe said {other:?}"),
    };
    assert_eq!(written["lint"], expected, "{written}");
}

async fn release_ends_the_environment(
    control: &mut Control,
    task: &str,
    backend: &BackendUnderTest,
) {
    control.terminal(task, "export CONF_GONE=1", None).await;
    let sandbox = control.sandbox_of(task).await;
    assert!(control.release(task).await, "release found no environment");
    if backend.name == "docker" {
        let deadline = Instant::now() + Duration::from_secs(10);
        while docker(&["inspect", &sandbox]) {
            assert!(
                Instant::now() < deadline,
                "container {sandbox} still exists after release"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    if let Some(fake) = backend.fake_daytona() {
        let deadline = Instant::now() + Duration::from_secs(10);
        while fake
            .sandboxes_with(&json!({}))
            .iter()
            .any(|s| s["id"] == sandbox.as_str() && s["state"] != "destroying")
        {
            assert!(
                Instant::now() < deadline,
                "Daytona sandbox {sandbox} still exists after release"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // The worker ends the environment after the coordinator answered.
    control.wait_until_released(task).await;
    let fresh = control.terminal(task, "echo \"[$CONF_GONE]\"", None).await;
    assert_eq!(output(&fresh), "[]", "state survived the release: {fresh}");
}

/// Runs every case, then the lifecycle cases for sandboxed backends.
async fn run_suite(backend: BackendUnderTest) {
    let mut stand = Stand::start(backend.clone()).await;
    let mut control = stand.control().await;
    for (index, (name, case)) in CASES.iter().enumerate() {
        eprintln!("conformance[{}]: {name}", backend.name);
        let task = format!("conf-{}-{index}", backend.name);
        case(&mut control, &task, &backend).await;
    }
    if backend.leased {
        killed_sandbox_resets_the_environment(&mut control, &backend).await;
        crashed_worker_leaves_nothing_behind(&mut stand, &mut control).await;
        eprintln!(
            "conformance[{}]: nothing is left after SIGTERM",
            backend.name
        );
        drop(control);
        let Stand {
            mut worker,
            coordinator,
            worker_name,
            ..
        } = stand;
        // A polite stop: the worker removes its environments and pool.
        caduceus_tests::signal(worker.pid(), "TERM");
        let status = worker
            .wait_exit(Duration::from_secs(30))
            .expect("the worker exits after SIGTERM");
        assert!(status.success(), "exit status {status:?}");
        if let Some(fake) = backend.fake_daytona() {
            assert!(
                fake.log().contains("\"caduceus.pool\":\"daytona:default\""),
                "no warm-pool entry was created: {}",
                fake.log()
            );
        }
        let left = backend.sandboxes_of_worker(&worker_name);
        assert!(
            left.is_empty(),
            "sandboxes left after the worker stopped: {left:?}"
        );
        drop(coordinator);
    }
}

async fn killed_sandbox_resets_the_environment(control: &mut Control, backend: &BackendUnderTest) {
    eprintln!(
        "conformance[{}]: a sandbox ended behind the worker's back resets the environment",
        backend.name
    );
    let task = "conf-reset";
    let first = control
        .terminal(task, "export CONF_KEPT=no; echo one", None)
        .await;
    assert_eq!(output(&first), "one");
    let sandbox = control.sandbox_of(task).await;
    assert!(
        backend.kill_sandbox(&sandbox),
        "could not end sandbox {sandbox}"
    );
    let next = control
        .terminal(task, "echo two \"[$CONF_KEPT]\"", None)
        .await;
    assert_eq!(output(&next), "two []", "{next}");
    let notice = next["environment_reset"]
        .as_str()
        .unwrap_or_else(|| panic!("no environment_reset in {next}"));
    assert!(
        notice.contains("this call ran in a fresh environment"),
        "{notice}"
    );
    // And it stays working without further notices.
    let third = control.terminal(task, "echo three", None).await;
    assert_eq!(output(&third), "three");
    assert!(third.get("environment_reset").is_none(), "{third}");
}

async fn crashed_worker_leaves_nothing_behind(stand: &mut Stand, control: &mut Control) {
    let backend = stand.backend.clone();
    eprintln!(
        "conformance[{}]: a worker killed with SIGKILL leaves nothing behind once leases pass",
        backend.name
    );
    control.terminal("conf-doomed", "echo doomed", None).await;
    let before = backend.sandboxes_of_worker(&stand.worker_name);
    assert!(
        !before.is_empty(),
        "no sandboxes of worker {}",
        stand.worker_name
    );
    stand.crash_and_restart_worker().await;
    // Lease 3 s + sweep every 1 s: gone well within 20 s.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = backend.sandboxes_of_worker(&stand.worker_name);
        let survivors: Vec<&String> = before.iter().filter(|id| now.contains(id)).collect();
        if survivors.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sandboxes of the killed worker survived their leases: {survivors:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    if let Some(fake) = backend.fake_daytona() {
        // The next worker's sweep removed them, not Daytona's auto-stop
        // (which comes a "minute" of idleness later).
        let log = fake.log();
        for id in &before {
            assert!(
                !log.contains(&format!("auto-stop of {id}")),
                "sandbox {id} was auto-stopped before any sweep removed it:\n{log}"
            );
        }
    }
    // The restarted worker serves the task again (in a fresh environment).
    *control = stand.control().await;
    let again = control.terminal("conf-doomed", "echo back", None).await;
    assert_eq!(output(&again), "back", "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local() {
    if let Some(backend) = BackendUnderTest::local().ready_or_skip() {
        run_suite(backend).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_backend() {
    if let Some(backend) = BackendUnderTest::docker().ready_or_skip() {
        run_suite(backend).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_backend() {
    if let Some(backend) = BackendUnderTest::ssh() {
        run_suite(backend).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn singularity_backend() {
    if let Some(backend) = BackendUnderTest::singularity() {
        run_suite(backend).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daytona_backend() {
    if let Some(backend) = BackendUnderTest::daytona().ready_or_skip() {
        run_suite(backend).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modal_backend() {
    if let Some(backend) = BackendUnderTest::modal().ready_or_skip() {
        run_suite(backend).await;
    }
}

/// A Docker environment's file tools go to one file server in its container
/// (the worker's binary, mounted read-only) instead of a `docker exec` per
/// primitive; a server killed from inside the sandbox is started again by
/// the next call, which still gets its one answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_file_tools_are_served_inside_the_container() {
    let Some(backend) = BackendUnderTest::docker().ready_or_skip() else {
        return;
    };
    let stand = Stand::start(backend).await;
    let mut control = stand.control().await;
    let task = "conf-docker-served";
    let servers =
        "ps -eo args | grep -c '^/usr/local/libexec/caduceus-file-server __file-server' || true";
    let wrote = control
        .call(
            task,
            "write_file",
            &json!({"path": "/tmp/served.txt", "content": "one\ntwo\n"}),
        )
        .await;
    assert!(wrote.get("error").is_none_or(Value::is_null), "{wrote}");
    let read = control
        .call(task, "read_file", &json!({"path": "/tmp/served.txt"}))
        .await;
    assert_eq!(read["content"], "1|one\n2|two", "{read}");
    let running = control.terminal(task, servers, None).await;
    assert_eq!(
        output(&running),
        "1",
        "one file server per container: {running}"
    );
    let killed = control
        .terminal(
            task,
            "pkill -9 -f caduceus-file-server; sleep 0.2; echo done",
            None,
        )
        .await;
    assert_eq!(output(&killed), "done", "{killed}");
    // Other arguments than the first read: a repeat would be answered from
    // the session's read cache, not by the file system.
    let read = control
        .call(
            task,
            "read_file",
            &json!({"path": "/tmp/served.txt", "offset": 2}),
        )
        .await;
    assert_eq!(read["content"], "2|two", "after kill -9: {read}");
    let again = control.terminal(task, servers, None).await;
    assert_eq!(
        output(&again),
        "1",
        "the next call started a new server: {again}"
    );
}
