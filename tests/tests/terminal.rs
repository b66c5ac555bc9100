//! The `terminal` and `process` tools on a real worker, through
//! `caduceus call` against a coordinator: shell state across calls, timeouts
//! that kill process trees, bounded output, background processes, the idle
//! reaper and sandbox environment hygiene.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use caduceus_proto::control_client::ControlClient;
use caduceus_proto::{ReleaseEnvironmentRequest, bearer};
use caduceus_tests::{Fleet, Proc, peak_rss_kib, process_alive_with, wait_gone};
use serde_json::{Value, json};
use tonic::Request;
use tonic::metadata::MetadataValue;

/// A coordinator and one worker named `w`, with `config` as the config file.
fn fleet(config: &str) -> (Fleet, Proc, Proc) {
    fleet_with_env(config, &[])
}

fn fleet_with_env(config: &str, env: &[(&str, &str)]) -> (Fleet, Proc, Proc) {
    let fleet = Fleet::new();
    fleet.write_config(config);
    let coordinator = fleet.serve(&[]);
    let worker = fleet.worker_with_env(&coordinator, "w", &[], env);
    fleet.wait_for_workers(&coordinator, &["w"], Duration::from_secs(30));
    (fleet, coordinator, worker)
}

fn terminal(fleet: &Fleet, coordinator: &Proc, task: &str, args: &Value) -> Value {
    fleet.call(coordinator, "terminal", args, task)
}

fn process(fleet: &Fleet, coordinator: &Proc, task: &str, args: &Value) -> Value {
    fleet.call(coordinator, "process", args, task)
}

/// `bash <script>` for a script holding `body`, written next to the fleet's
/// home (the worker is local). The command guard asks approval for `bash -c`;
/// a script file is an ordinary command. The script's path carries `mark`, so
/// its process can be recognised in /proc.
fn script(fleet: &Fleet, mark: &str, body: &str) -> String {
    let path = fleet.home.path().join(format!("{mark}.sh"));
    std::fs::write(&path, format!("{body}\n")).unwrap();
    format!("bash {}", path.display())
}

/// A string to recognise a test's processes by in /proc.
fn unique(label: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("caduceus-it-{label}-{}-{nanos}", std::process::id())
}

#[test]
fn shell_state_persists_across_calls() {
    let (fleet, c, _w) = fleet("");
    let t = "persist";
    let first = terminal(
        &fleet,
        &c,
        t,
        &json!({"command": "cd /usr && PLAIN=plain && export EXPORTED=exported && greet() { echo \"hello $1\"; } && alias ll='echo aliased'"}),
    );
    assert_eq!(first["exit_code"], 0, "{first}");
    let pid = terminal(&fleet, &c, t, &json!({"command": "echo $$"}))["output"].clone();
    let result = terminal(
        &fleet,
        &c,
        t,
        &json!({"command": "pwd; echo $PLAIN $EXPORTED; greet you; ll"}),
    );
    assert_eq!(result["output"], "/usr\nplain exported\nhello you\naliased");
    assert_eq!(
        terminal(&fleet, &c, t, &json!({"command": "echo $$"}))["output"],
        pid,
        "one live shell"
    );
    // Another task has its own shell.
    assert_eq!(
        terminal(
            &fleet,
            &c,
            "other",
            &json!({"command": "echo ${PLAIN:-unset}"})
        )["output"],
        "unset"
    );
}

#[test]
fn a_timeout_kills_the_process_tree_and_the_next_call_works_in_the_same_cwd() {
    let (fleet, c, _w) = fleet("");
    let t = "timeout";
    terminal(&fleet, &c, t, &json!({"command": "cd /usr"}));
    let mark = unique("tree");
    let started = Instant::now();
    // shell → bash (carrying the mark) → sleep: a grandchild of the shell.
    let result = terminal(
        &fleet,
        &c,
        t,
        &json!({"command": script(&fleet, &mark, "sleep 3001 & wait"), "timeout": 2}),
    );
    assert_eq!(
        result,
        json!({"output": "[Command timed out after 2s]", "exit_code": 124, "error": null})
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(
        wait_gone(&mark, Duration::from_secs(3)),
        "the command's process survived its timeout"
    );
    let after = terminal(&fleet, &c, t, &json!({"command": "pwd"}));
    assert_eq!(after["output"], "/usr");
    assert_eq!(after["exit_code"], 0);
}

#[test]
fn ten_megabytes_of_output_come_back_cut_in_bounded_memory() {
    let (fleet, c, worker) = fleet("");
    let t = "big";
    terminal(&fleet, &c, t, &json!({"command": "echo warm"}));
    let before = peak_rss_kib(worker.pid());
    let result = terminal(
        &fleet,
        &c,
        t,
        &json!({"command": "head -c 10000000 /dev/zero | tr '\\0' x; echo; echo END"}),
    );
    let after = peak_rss_kib(worker.pid());
    let output = result["output"].as_str().unwrap();
    assert_eq!(
        output.chars().count(),
        50_000 - 1,
        "50,000 characters, the last newline trimmed"
    );
    assert!(
        output.contains("\n\n... [OUTPUT TRUNCATED - 9,950,"),
        "{}",
        &output[19_900..20_100]
    );
    assert!(output.starts_with("xxxx") && output.ends_with("xxx\nEND"));
    assert_eq!(result["exit_code"], 0);
    eprintln!("peak RSS before {before} KiB, after {after} KiB");
    // The worker never held the 10 MB (nor a copy of it).
    assert!(
        after - before < 6 * 1024,
        "peak RSS grew by {} KiB",
        after - before
    );
}

#[test]
fn stdin_readers_return_and_concurrent_calls_do_not_interleave() {
    let (fleet, c, _w) = fleet("");
    let t = "queue";
    let started = Instant::now();
    let result = terminal(&fleet, &c, t, &json!({"command": "cat; read x; echo done"}));
    assert_eq!(result["output"], "done");
    assert!(started.elapsed() < Duration::from_secs(10));

    let url = c.url();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let (fleet, url) = (&fleet, &url);
                scope.spawn(move || {
                    let command = format!("for j in 1 2 3 4 5; do echo {i}-$j; sleep 0.05; done");
                    fleet.call_at(url, "terminal", &json!({"command": command}), t)
                })
            })
            .collect();
        for (i, handle) in handles.into_iter().enumerate() {
            let result = handle.join().unwrap();
            assert_eq!(
                result["output"],
                format!("{i}-1\n{i}-2\n{i}-3\n{i}-4\n{i}-5"),
                "{result}"
            );
        }
    });
}

#[test]
fn exit_code_meaning_and_the_foreground_guard() {
    let (fleet, c, _w) = fleet("");
    let result = terminal(
        &fleet,
        &c,
        "hints",
        &json!({"command": "echo abc | grep -q xyz"}),
    );
    assert_eq!(result["exit_code"], 1);
    assert_eq!(
        result["exit_code_meaning"],
        "No matches found (not an error)"
    );
    let result = terminal(&fleet, &c, "hints", &json!({"command": "npm run dev"}));
    assert_eq!(result["exit_code"], -1);
    assert_eq!(result["status"], "error");
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("Run it with background=true"),
        "{result}"
    );
    let result = terminal(
        &fleet,
        &c,
        "hints",
        &json!({"command": "sleep 1", "timeout": 900}),
    );
    assert_eq!(
        result["error"],
        "Foreground timeout 900s exceeds the maximum of 600s. Use background=true with notify_on_complete=true for long-running commands."
    );
    // A timeout that is no number is hermes' TypeError, not the default.
    let result = terminal(
        &fleet,
        &c,
        "hints",
        &json!({"command": "echo ran", "timeout": "abc"}),
    );
    assert_eq!(
        result,
        json!({"error": "[TOOL_ERROR] Tool execution failed: TypeError: '>' not supported between instances of 'str' and 'int'"})
    );
    // A float timeout is obeyed as given (the coordinator used to cut it
    // at the default while the worker allowed it).
    let result = terminal(
        &fleet,
        &c,
        "hints",
        &json!({"command": "sleep 3", "timeout": 1.5}),
    );
    assert_eq!(result["exit_code"], 124, "{result}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_processes_through_the_process_tool() {
    let (fleet, c, _w) = fleet("");
    let t = "bg";
    terminal(
        &fleet,
        &c,
        t,
        &json!({"command": "cd /usr && export GREETING=hi"}),
    );
    let started = terminal(
        &fleet,
        &c,
        t,
        &json!({"command": "echo \"start $GREETING $PWD\"; while IFS= read -r line; do echo \"got $line\"; done; echo closed", "background": true}),
    );
    assert_eq!(started["output"], "Background process started");
    let id = started["session_id"].as_str().unwrap().to_owned();
    std::thread::sleep(Duration::from_millis(500));

    let poll = process(&fleet, &c, t, &json!({"action": "poll", "session_id": id}));
    assert_eq!(poll["status"], "running");
    assert_eq!(poll["output_preview"], "start hi /usr\n");
    assert_eq!(
        process(
            &fleet,
            &c,
            t,
            &json!({"action": "write", "session_id": id, "data": "one\n"})
        )["bytes_written"],
        4
    );
    assert_eq!(
        process(
            &fleet,
            &c,
            t,
            &json!({"action": "submit", "session_id": id, "data": "two"})
        )["status"],
        "ok"
    );
    std::thread::sleep(Duration::from_millis(300));
    let log = process(&fleet, &c, t, &json!({"action": "log", "session_id": id}));
    assert_eq!(log["output"], "start hi /usr\ngot one\ngot two");
    assert_eq!(
        process(&fleet, &c, t, &json!({"action": "close", "session_id": id}))["status"],
        "ok"
    );
    let wait = process(
        &fleet,
        &c,
        t,
        &json!({"action": "wait", "session_id": id, "timeout": 20}),
    );
    assert_eq!(wait["status"], "exited");
    assert_eq!(wait["exit_code"], 0);
    assert!(
        wait["output"]
            .as_str()
            .unwrap()
            .ends_with("got two\nclosed\n"),
        "{wait}"
    );

    // A loop that never ends on its own: killed with its children.
    let mark = unique("loop");
    let looping = terminal(
        &fleet,
        &c,
        t,
        &json!({"command": script(&fleet, &mark, "while :; do echo tick; sleep 0.2; done"), "background": true, "notify_on_complete": true}),
    );
    let loop_id = looping["session_id"].as_str().unwrap().to_owned();
    std::thread::sleep(Duration::from_millis(700));
    assert!(process_alive_with(&mark));
    let list = process(&fleet, &c, t, &json!({"action": "list"}));
    let ids: Vec<&str> = list["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id.as_str(), loop_id.as_str()]);
    let kill = process(
        &fleet,
        &c,
        t,
        &json!({"action": "kill", "session_id": loop_id}),
    );
    assert_eq!(kill["status"], "killed");
    assert!(kill["output"].as_str().unwrap().starts_with("tick\n"));
    assert!(
        wait_gone(&mark, Duration::from_secs(3)),
        "a killed background process left its children"
    );
    let poll = process(
        &fleet,
        &c,
        t,
        &json!({"action": "poll", "session_id": loop_id}),
    );
    assert_eq!(
        (poll["status"].as_str(), poll["exit_code"].as_i64()),
        (Some("exited"), Some(-15))
    );

    // Releasing the environment stops what still runs in it.
    let mark = unique("release");
    terminal(
        &fleet,
        &c,
        t,
        &json!({"command": script(&fleet, &mark, "sleep 3003 & wait"), "background": true}),
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(process_alive_with(&mark));
    let channel = tonic::transport::Endpoint::from_shared(c.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let token: MetadataValue<_> = bearer(&fleet.token).parse().unwrap();
    let mut control = ControlClient::with_interceptor(channel, move |mut req: Request<()>| {
        req.metadata_mut().insert("authorization", token.clone());
        Ok(req)
    });
    let released = control
        .release_environment(ReleaseEnvironmentRequest { task_id: t.into() })
        .await
        .unwrap()
        .into_inner();
    assert!(released.released);
    assert!(
        wait_gone(&mark, Duration::from_secs(5)),
        "a background process outlived its environment"
    );
    let gone = process(&fleet, &c, t, &json!({"action": "poll", "session_id": id}));
    assert_eq!(gone["status"], "not_found");
}

#[test]
fn the_reaper_ends_idle_environments_but_not_ones_with_live_background_processes() {
    let (fleet, c, _w) = fleet("terminal:\n  lifetime_seconds: 2\n  reap_interval_seconds: 1\n");
    terminal(&fleet, &c, "idle", &json!({"command": "echo hi"}));
    let started = terminal(
        &fleet,
        &c,
        "busy",
        &json!({"command": "sleep 60", "background": true}),
    );
    let id = started["session_id"].as_str().unwrap().to_owned();
    let tasks = |fleet: &Fleet| -> Vec<(String, u64)> {
        let mut envs: Vec<(String, u64)> = fleet
            .environments(&c, "w")
            .iter()
            .map(|e| {
                (
                    e["task_id"].as_str().unwrap().to_owned(),
                    e["background_processes"].as_u64().unwrap(),
                )
            })
            .collect();
        envs.sort();
        envs
    };
    // Status shows environments as of the worker's last heartbeat.
    let deadline = Instant::now() + Duration::from_secs(5);
    while tasks(&fleet)
        .iter()
        .map(|(t, _)| t.as_str())
        .collect::<Vec<_>>()
        != ["busy", "idle"]
    {
        assert!(
            Instant::now() < deadline,
            "both environments never showed: {:?}",
            tasks(&fleet)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while tasks(&fleet).iter().any(|(t, _)| t == "idle") {
        assert!(
            Instant::now() < deadline,
            "the idle environment was never reaped"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        tasks(&fleet),
        [("busy".to_owned(), 1)],
        "an environment with a live background process was reaped"
    );
    assert_eq!(
        process(
            &fleet,
            &c,
            "busy",
            &json!({"action": "poll", "session_id": id})
        )["status"],
        "running"
    );
    // Once the process is gone, the environment idles out too.
    process(
        &fleet,
        &c,
        "busy",
        &json!({"action": "kill", "session_id": id}),
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while !tasks(&fleet).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the environment was not reaped after its process ended"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn secrets_of_the_worker_never_reach_the_sandbox() {
    let (fleet, c, _w) = fleet_with_env(
        "terminal:\n  env_passthrough: [MY_PASSTHROUGH_TOKEN]\n",
        &[
            ("CADUCEUS_TOKEN", "tok-should-not-leak"),
            ("OPENAI_API_KEY", "sk-should-not-leak-0123456789abcdef"),
            ("MY_SECRET", "my-secret-should-not-leak"),
            ("GH_TOKEN", "ghp_shouldnotleak0123456789abcdefghij"),
            ("MY_PASSTHROUGH_TOKEN", "passed-through-value"),
            ("SUDO_PASSWORD", "sudo-should-not-leak"),
            ("HARMLESS_SETTING", "visible"),
        ],
    );
    let names = |output: &str| -> Vec<String> {
        output
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k.to_owned()))
            .collect()
    };
    let result = terminal(&fleet, &c, "hygiene", &json!({"command": "env"}));
    let seen = names(result["output"].as_str().unwrap());
    for secret in [
        "CADUCEUS_TOKEN",
        "OPENAI_API_KEY",
        "MY_SECRET",
        "GH_TOKEN",
        "SUDO_PASSWORD",
    ] {
        assert!(
            !seen.iter().any(|n| n == secret),
            "{secret} reached the sandbox"
        );
    }
    assert!(
        seen.iter().any(|n| n == "MY_PASSTHROUGH_TOKEN"),
        "the allowlisted variable is missing: {seen:?}"
    );
    assert!(seen.iter().any(|n| n == "HARMLESS_SETTING"));
    // Values never show either, whatever prints them.
    let dump = terminal(
        &fleet,
        &c,
        "hygiene",
        &json!({"command": "cat /proc/$$/environ | tr '\\0' '\\n'; set"}),
    );
    let dump = dump["output"].as_str().unwrap();
    assert!(
        !dump.contains("should-not-leak") && !dump.contains("shouldnotleak"),
        "a secret value leaked"
    );
    // Background processes get the same environment.
    let started = terminal(
        &fleet,
        &c,
        "hygiene",
        &json!({"command": "env | grep -E '^(MY_PASSTHROUGH_TOKEN|GH_TOKEN|OPENAI_API_KEY|MY_SECRET)='; true", "background": true}),
    );
    let wait = process(
        &fleet,
        &c,
        "hygiene",
        &json!({"action": "wait", "session_id": started["session_id"], "timeout": 20}),
    );
    let seen = names(wait["output"].as_str().unwrap());
    assert!(
        seen.iter().any(|n| n == "MY_PASSTHROUGH_TOKEN")
            && !seen
                .iter()
                .any(|n| n == "GH_TOKEN" || n == "OPENAI_API_KEY"),
        "{seen:?}"
    );
}

/// The terminal and process tools on a remote backend, at library level: the
/// same tool code over `Sandbox` only.
mod remote {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use serde_json::{Value, json};
    use tokio_util::sync::CancellationToken;

    use caduceus_tests::standins::{FakeApptainer, Sshd};
    use caduceus_worker::backends::singularity::SingularitySettings;
    use caduceus_worker::backends::ssh::SshSettings;
    use caduceus_worker::backends::{BackendOptions, Backends, CreateRequest};
    use caduceus_worker::env::{EnvManager, EnvSettings, Environment};
    use caduceus_worker::process::notice::NoticeHub;
    use caduceus_worker::tools::ToolSettings;
    use caduceus_worker::tools::process::{self, ProcessCall};
    use caduceus_worker::tools::terminal::{self, TerminalCall};

    struct Remote {
        manager: EnvManager,
        env: Arc<Environment>,
        notices: tokio::sync::mpsc::Receiver<caduceus_proto::EnvironmentNotice>,
        settings: ToolSettings,
    }

    impl Remote {
        async fn new(backends: Backends, backend: &str) -> Remote {
            let (hub, notices) = NoticeHub::new();
            let settings = EnvSettings {
                shell_env: vec![(
                    "PATH".to_owned(),
                    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
                )],
                notices: hub,
                ..EnvSettings::default()
            };
            let manager = EnvManager::new(backends, settings);
            let request = CreateRequest {
                task_id: "remote-task".to_owned(),
                owner: "c".to_owned(),
                worker: "w".to_owned(),
                worker_instance: format!("inst-{}", std::process::id()),
                settings: json!({}),
            };
            let env = manager.get_or_create(backend, &request).await.unwrap();
            Remote {
                manager,
                env,
                notices,
                settings: ToolSettings::default(),
            }
        }

        async fn terminal(&self, args: Value) -> Value {
            let Value::Object(args) = args else {
                panic!("not an object")
            };
            let cancel = CancellationToken::new();
            let call = TerminalCall {
                env: &self.env,
                args: &args,
                cancel: &cancel,
                session_id: "remote-session",
                // What the coordinator would decide: the argument, else 20 s.
                timeout: Some(Duration::from_secs(
                    args.get("timeout").and_then(Value::as_u64).unwrap_or(20),
                )),
            };
            serde_json::from_str(&terminal::run(&self.settings, call).await.body).unwrap()
        }

        async fn process(&self, args: Value) -> Value {
            let Value::Object(args) = args else {
                panic!("not an object")
            };
            let cancel = CancellationToken::new();
            let call = ProcessCall {
                envs: &self.manager,
                task_id: "remote-task",
                session_id: "remote-session",
                args: &args,
                cancel: &cancel,
                max_wait: Duration::from_secs(20),
            };
            serde_json::from_str(&process::run(call).await.body).unwrap()
        }

        /// Processes in the sandbox whose command line starts with `needle`
        /// (the launcher's own arguments contain the command too).
        async fn count(&self, needle: &str) -> u64 {
            let (first, rest) = needle.split_at(1);
            let out = self
                .terminal(
                    json!({"command": format!("ps -eo args | grep -c '^[{first}]{rest}' || true")}),
                )
                .await;
            out["output"].as_str().unwrap().trim().parse().unwrap()
        }

        async fn wait_count(&self, needle: &str, want: u64) -> u64 {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let n = self.count(needle).await;
                if n == want || Instant::now() > deadline {
                    return n;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// `base` keeps each backend's sleeps apart: both run on this host, and
    /// the SSH "remote" sees the Apptainer stand-in's processes.
    async fn tools_over(remote: &mut Remote, backend: &str, base: u32) {
        let (s1, s2, s3) = (
            format!("sleep {base}1"),
            format!("sleep {base}2"),
            format!("sleep {base}3"),
        );
        // Foreground: state, hermes' results, a timeout that kills the tree.
        remote
            .terminal(
                json!({"command": "cd /tmp && export GREETING=hi && f() { echo \"fn $1\"; }"}),
            )
            .await;
        let out = remote
            .terminal(json!({"command": "echo $GREETING; f x; pwd"}))
            .await;
        assert_eq!(
            out,
            json!({"output": "hi\nfn x\n/tmp", "exit_code": 0, "error": null}),
            "[{backend}]"
        );
        let out = remote
            .terminal(json!({"command": format!("bash -c '{s1} & wait'"), "timeout": 1}))
            .await;
        assert_eq!(
            out,
            json!({"output": "[Command timed out after 1s]", "exit_code": 124, "error": null}),
            "[{backend}]"
        );
        assert_eq!(
            remote.wait_count(&s1, 0).await,
            0,
            "[{backend}] the timed-out tree survived"
        );

        // Background: starts from the shell's state, stdin, log, wait.
        let started = remote
            .terminal(json!({"command": "echo \"start $GREETING $(f y) $PWD\"; while IFS= read -r l; do echo \"got $l\"; done", "background": true}))
            .await;
        let id = started["session_id"].as_str().unwrap().to_owned();
        assert_eq!(
            remote
                .process(json!({"action": "submit", "session_id": id, "data": "one"}))
                .await["status"],
            "ok"
        );
        assert_eq!(
            remote
                .process(json!({"action": "close", "session_id": id}))
                .await["status"],
            "ok"
        );
        let wait = remote
            .process(json!({"action": "wait", "session_id": id, "timeout": 20}))
            .await;
        assert_eq!(wait["status"], "exited", "[{backend}] {wait}");
        assert_eq!(
            wait["output"], "start hi fn y /tmp\ngot one\n",
            "[{backend}]"
        );

        // The exit notice goes to the starting session.
        let started = remote.terminal(json!({"command": "echo done; exit 4", "background": true, "notify_on_complete": true})).await;
        let notice = tokio::time::timeout(Duration::from_secs(20), remote.notices.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (notice.kind.as_str(), notice.session_id.as_str()),
            ("process_exited", "remote-session")
        );
        assert_eq!(notice.process_id, started["session_id"].as_str().unwrap());
        let body: Value = serde_json::from_str(&notice.text).unwrap();
        assert_eq!(
            (body["exit_code"].as_i64(), body["output"].as_str()),
            (Some(4), Some("done\n")),
            "[{backend}]"
        );

        // kill stops the whole tree; release stops what still runs.
        let started = remote
            .terminal(json!({"command": format!("bash -c '{s2} & wait'"), "background": true}))
            .await;
        assert_eq!(remote.wait_count(&s2, 1).await, 1, "[{backend}]");
        let kill = remote
            .process(json!({"action": "kill", "session_id": started["session_id"]}))
            .await;
        assert_eq!(kill["status"], "killed", "[{backend}]");
        assert_eq!(
            remote.wait_count(&s2, 0).await,
            0,
            "[{backend}] a killed process left its child"
        );
        remote
            .terminal(json!({"command": format!("bash -c '{s3} & wait'"), "background": true}))
            .await;
        assert_eq!(remote.wait_count(&s3, 1).await, 1, "[{backend}]");
        let sandbox = remote.env.sandbox.clone();
        assert!(remote.manager.release("remote-task").await);
        assert!(
            !sandbox.alive().await || !ps_has("sleep 3183"),
            "[{backend}] a background process outlived its environment"
        );
    }

    /// Processes on this host (the SSH "remote" and the Apptainer stand-in
    /// both run here) whose arguments contain `needle`.
    fn ps_has(needle: &str) -> bool {
        let out = std::process::Command::new("ps")
            .args(["-eo", "args"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.contains(needle))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn terminal_and_process_over_ssh() {
        let Some(sshd) = Sshd::start("terminal_and_process_over_ssh") else {
            return;
        };
        let mut ssh = SshSettings::new("127.0.0.1");
        ssh.user = Some("root".to_owned());
        ssh.port = sshd.port;
        ssh.key = Some(sshd.key.clone());
        ssh.known_hosts = Some(sshd.known_hosts.clone());
        ssh.control_dir = sshd.control_dir.clone();
        let options = BackendOptions {
            ssh: Some(ssh),
            ..BackendOptions::default()
        };
        let (backends, refused) = Backends::with_options(&["ssh".to_owned()], "/", &options);
        assert!(refused.is_empty(), "{refused:?}");
        let mut remote = Remote::new(backends, "ssh").await;
        tools_over(&mut remote, "ssh", 318).await;
        assert!(!ps_has("sleep 3183"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn terminal_and_process_over_singularity() {
        let Some(fake) = FakeApptainer::find("terminal_and_process_over_singularity") else {
            return;
        };
        let singularity = SingularitySettings {
            executable: Some(fake.exe.clone()),
            image: "docker://debian:bookworm-slim".to_owned(),
            scratch_dir: fake.state.path().join("scratch"),
            persistent: false,
            ..SingularitySettings::default()
        };
        let options = BackendOptions {
            singularity,
            ..BackendOptions::default()
        };
        let (backends, refused) =
            Backends::with_options(&["singularity".to_owned()], "/", &options);
        assert!(refused.is_empty(), "{refused:?}");
        let mut remote = Remote::new(backends, "singularity").await;
        tools_over(&mut remote, "singularity", 328).await;
        assert!(!ps_has("sleep 3283"));
    }
}
