//! The chaos test of issue 9: a coordinator and three workers as real
//! processes, 20 tasks making 500 mixed calls (terminal commands with side
//! effects, file tools) while workers are killed with SIGKILL, frozen with
//! SIGSTOP for 10 s and resumed, and stopped with SIGTERM.
//!
//! Checked: every call gets exactly one result and none hangs; no call runs
//! twice (each terminal call appends its id to its task's log); no result
//! comes from an environment older than its task's last reset notice (each
//! terminal call reports its shell's pid); and afterwards, with everything
//! stopped gracefully, no shell, caduceus process or directory of the fleet
//! is left (the workers' temp dir is `<home>/tmp`, so their private
//! directories and ledgers are seen).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stderr
)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use caduceus_tests::{Fleet, Proc, control_client, leftovers, signal, tool_call};
use serde_json::{Value, json};

const TASKS: usize = 20;
const CALLS_PER_TASK: usize = 25;
/// Lost after 5 s of silence: a 10 s SIGSTOP is a loss (and a return), and a
/// loaded test machine does not lose a live worker.
const LIVENESS: [&str; 6] = [
    "--heartbeat-ms",
    "1000",
    "--suspect-after-ms",
    "2000",
    "--lost-after-ms",
    "5000",
];

struct Record {
    call: String,
    tool: &'static str,
    result: Value,
    worker: String,
}

/// The calls of one task, in order: terminal calls log their id and print
/// their shell's pid; every fifth writes a file that the next reads back.
async fn run_task(
    url: String,
    token: String,
    dir: std::path::PathBuf,
    task: String,
) -> Vec<Record> {
    let mut client = control_client(&url, &token).await;
    let mut records = Vec::new();
    let task_dir = dir.join(&task);
    let mut written: Option<(String, String)> = None;
    for k in 0..CALLS_PER_TASK {
        let call = format!("{task}-{k}");
        let (tool, args) = match k % 5 {
            3 => {
                let path = task_dir.join(format!("f-{k}.txt")).display().to_string();
                written = Some((path.clone(), call.clone()));
                ("write_file", json!({"path": path, "content": call}))
            }
            4 if written.is_some() => {
                let (path, _) = written.clone().unwrap();
                ("read_file", json!({"path": path}))
            }
            _ => (
                "terminal",
                json!({"command": format!(
                    "printf '%s\\n' {call} >> {log} && sleep 0.05 && echo $$ {call}",
                    log = dir.join(format!("{task}.log")).display()
                )}),
            ),
        };
        let (result, worker) = tokio::time::timeout(
            Duration::from_secs(90),
            tool_call(&mut client, tool, &args, &task),
        )
        .await
        .unwrap_or_else(|_| panic!("call {call} hung"));
        if tool == "read_file"
            && result.get("error").is_none()
            && let Some((_, content)) = &written
        {
            assert_eq!(
                result["content"],
                format!("1|{content}"),
                "{call}: {result}"
            );
        }
        records.push(Record {
            call,
            tool,
            result,
            worker,
        });
        tokio::time::sleep(Duration::from_millis(900 + (k as u64 * 37) % 400)).await;
    }
    records
}

/// A worker whose temp dir is `<home>/tmp`.
fn start_worker(fleet: &Fleet, coordinator: &Proc, name: &str) -> Proc {
    let tmp = fleet.home.path().join("tmp");
    fleet.worker_with_env(coordinator, name, &[], &[("TMPDIR", tmp.to_str().unwrap())])
}

/// The faults, in order, on a timeline of about 30 s of calls.
fn inflict_faults(fleet: &Fleet, coordinator: &Proc, workers: &Mutex<HashMap<String, Proc>>) {
    let restart = |name: &str| {
        let fresh = start_worker(fleet, coordinator, name);
        workers.lock().unwrap().insert(name.to_owned(), fresh);
    };
    std::thread::sleep(Duration::from_secs(3));
    eprintln!("chaos: kill -9 w1");
    workers.lock().unwrap().get_mut("w1").unwrap().kill();
    std::thread::sleep(Duration::from_secs(1));
    restart("w1");

    std::thread::sleep(Duration::from_secs(3));
    eprintln!("chaos: SIGSTOP w2 for 10 s");
    let w2 = workers.lock().unwrap()["w2"].pid();
    signal(w2, "STOP");
    std::thread::sleep(Duration::from_secs(10));
    signal(w2, "CONT");
    eprintln!("chaos: SIGCONT w2");

    std::thread::sleep(Duration::from_secs(2));
    eprintln!("chaos: SIGTERM w3");
    let mut w3 = workers.lock().unwrap().remove("w3").unwrap();
    signal(w3.pid(), "TERM");
    let exited = w3.wait_exit(Duration::from_secs(30));
    assert!(exited.is_some(), "w3 did not stop on SIGTERM");
    restart("w3");

    std::thread::sleep(Duration::from_secs(3));
    eprintln!("chaos: kill -9 w2");
    workers.lock().unwrap().get_mut("w2").unwrap().kill();
    restart("w2");
}

/// Errors a call may get from a fault: its worker was lost under it, or it
/// was draining, or it stayed silent (suspect) past the scheduler's wait.
fn fault_error(error: &str) -> bool {
    ["running this call was lost", "is draining", "(suspect)"]
        .iter()
        .any(|known| error.contains(known))
}

#[test]
fn chaos_every_call_one_result_none_twice_no_stale_environment() {
    let fleet = Fleet::new();
    let coordinator = fleet.serve(&LIVENESS);
    let workers: Mutex<HashMap<String, Proc>> = Mutex::default();
    std::fs::create_dir_all(fleet.home.path().join("tmp")).unwrap();
    for name in ["w1", "w2", "w3"] {
        let proc = start_worker(&fleet, &coordinator, name);
        workers.lock().unwrap().insert(name.to_owned(), proc);
    }
    fleet.wait_for_workers(&coordinator, &["w1", "w2", "w3"], Duration::from_secs(30));
    let dir = tempfile::tempdir().unwrap();
    for t in 0..TASKS {
        std::fs::create_dir_all(dir.path().join(format!("task-{t}"))).unwrap();
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            runtime.spawn(run_task(
                coordinator.url(),
                fleet.token.clone(),
                dir.path().to_owned(),
                format!("task-{t}"),
            ))
        })
        .collect();
    inflict_faults(&fleet, &coordinator, &workers);
    let faults: BTreeMap<String, Vec<Record>> = runtime.block_on(async {
        let mut all = BTreeMap::new();
        for (t, task) in tasks.into_iter().enumerate() {
            all.insert(format!("task-{t}"), task.await.unwrap());
        }
        all
    });
    eprintln!("chaos: 500 calls in {:?}", started.elapsed());

    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut shells: HashSet<u32> = HashSet::new();
    for (task, records) in &faults {
        assert_eq!(records.len(), CALLS_PER_TASK);
        // No call ran twice; every call that succeeded ran once.
        let log =
            std::fs::read_to_string(dir.path().join(format!("{task}.log"))).unwrap_or_default();
        let mut ran: HashMap<&str, usize> = HashMap::new();
        for line in log.lines() {
            *ran.entry(line).or_default() += 1;
        }
        assert!(
            ran.values().all(|n| *n == 1),
            "{task}: calls ran twice: {ran:?}"
        );
        // No result from an environment older than the last reset notice.
        let mut current: Option<u32> = None;
        let mut retired: HashSet<u32> = HashSet::new();
        for record in records {
            let result = &record.result;
            if let Some(error) = result.get("error").and_then(Value::as_str)
                && (record.tool != "terminal" || result.get("exit_code").is_none())
            {
                assert!(
                    fault_error(error),
                    "{}: unexpected error {result}",
                    record.call
                );
                *counts.entry("fault errors").or_default() += 1;
                continue;
            }
            if result.get("environment_reset").is_some() {
                *counts.entry("reset notices").or_default() += 1;
                retired.extend(current.take());
            }
            if record.tool != "terminal" {
                *counts.entry("file tool results").or_default() += 1;
                continue;
            }
            assert_eq!(result["exit_code"], 0, "{}: {result}", record.call);
            assert_eq!(
                ran.get(record.call.as_str()),
                Some(&1),
                "{}: succeeded but did not run once",
                record.call
            );
            let output = result["output"].as_str().unwrap();
            let (pid, echoed) = output.trim().split_once(' ').unwrap();
            assert_eq!(echoed, record.call, "{result}");
            let pid: u32 = pid.parse().unwrap();
            shells.insert(pid);
            match current {
                Some(shell) => assert_eq!(
                    pid, shell,
                    "{}: on {} the shell changed without a reset notice: {result}",
                    record.call, record.worker
                ),
                None => {
                    assert!(
                        !retired.contains(&pid),
                        "{}: answered by the shell {pid} of an environment older than the last reset notice ({})",
                        record.call,
                        record.worker
                    );
                    current = Some(pid);
                }
            }
            *counts.entry("terminal results").or_default() += 1;
        }
    }
    eprintln!("chaos: {counts:?}");
    let total: usize = counts
        .iter()
        .filter(|(k, _)| **k != "reset notices")
        .map(|(_, v)| v)
        .sum();
    assert_eq!(total, TASKS * CALLS_PER_TASK, "every call, one result");
    assert!(
        counts.get("reset notices").copied().unwrap_or(0) > 0,
        "the faults never moved a task: {counts:?}"
    );

    // Everything stopped gracefully: nothing of the fleet is left.
    for (_, worker) in workers.lock().unwrap().drain() {
        drop(worker);
    }
    drop(coordinator);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left: Vec<u32> = shells
            .iter()
            .copied()
            .filter(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
            .collect();
        let fleet_procs = processes_of(fleet.home.path());
        let dirs = leftovers(&fleet.home.path().join("tmp"));
        if left.is_empty() && fleet_procs.is_empty() && dirs.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind: shells {left:?}, fleet processes {fleet_procs:?}, directories {dirs:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Pids of live processes whose environment has `CADUCEUS_HOME=home`.
fn processes_of(home: &std::path::Path) -> Vec<u32> {
    let wanted = format!("CADUCEUS_HOME={}", home.display());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .map(|raw| raw.split(|b| *b == 0).any(|v| v == wanted.as_bytes()))
                .unwrap_or(false)
        })
        .collect()
}
