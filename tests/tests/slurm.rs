//! deploy/slurm/caduceus-workers.sbatch on a real Slurm (Debian's slurm-wlm,
//! a one-node cluster started by deploy/slurm/local-cluster.sh): the job
//! array's tasks attach as workers labelled with their job, task and node,
//! run calls, and `scancel` stops them — gone from the fleet, no process left.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use caduceus_tests::{Fleet, bin, process_alive_with, require, standins::FakeApptainer};
use serde_json::{Value, json};

const TASKS: usize = 3;

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Is a Slurm node up and taking jobs (`sinfo` answers idle, mixed or allocated)?
fn slurm_up() -> bool {
    Command::new("sinfo")
        .args(["-h", "-o", "%t"])
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout).lines().any(|s| {
                    s.starts_with("idle") || s.starts_with("mix") || s.starts_with("alloc")
                })
        })
}

/// The job's array tasks still known to Slurm (pending, running, completing).
fn job_tasks(job: &str) -> usize {
    let out = run(Command::new("squeue").args(["-h", "-j", job, "-o", "%i %T"]));
    String::from_utf8_lossy(&out.stdout).lines().count()
}

struct Cancel(String);

impl Drop for Cancel {
    fn drop(&mut self) {
        let _ = Command::new("scancel").arg(&self.0).status();
    }
}

#[test]
fn a_job_array_of_workers_serves_calls_and_scancel_stops_it() {
    if !require(
        "a running Slurm cluster",
        "slurm-wlm and munge with a node up (deploy/slurm/local-cluster.sh start, as root)",
        slurm_up,
    ) {
        return;
    }
    let fleet = Fleet::new();
    // Workers offer singularity through the Apptainer stand-in where it is
    // there (Apptainer itself cannot be installed on these machines); the
    // calls then run in Apptainer instances on the Slurm nodes, as on HPC.
    let apptainer = FakeApptainer::find("slurm workers' singularity backend");
    let backend = if apptainer.is_some() {
        "singularity"
    } else {
        "local"
    };
    let coordinator = fleet.serve_with_env(&[], &[("TERMINAL_ENV", backend)]);
    let token_file = fleet.home.path().join("token");
    std::fs::write(&token_file, &fleet.token).unwrap();
    let logs = tempfile::tempdir().unwrap();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/slurm/caduceus-workers.sbatch");

    let mut sbatch = Command::new("sbatch");
    sbatch
        .args(["--parsable", "--chdir"])
        .arg(logs.path())
        .arg("--output")
        .arg(logs.path().join("worker-%A_%a.log"))
        .arg(&script)
        .env("CADUCEUS_COORDINATOR", coordinator.url())
        .env("CADUCEUS_TOKEN_FILE", &token_file)
        .env("CADUCEUS_BIN", bin())
        .env("CADUCEUS_HOME", fleet.home.path())
        .env("CADUCEUS_LOG", "info")
        .env_remove("CADUCEUS_TOKEN")
        .env_remove("CADUCEUS_CONFIG");
    if let Some(fake) = &apptainer {
        sbatch.env("TERMINAL_SINGULARITY_EXECUTABLE", &fake.exe);
    }
    let out = run(&mut sbatch);
    assert!(
        out.status.success(),
        "sbatch failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let job = String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let _cancel = Cancel(job.clone());
    let names: Vec<String> = (0..TASKS).map(|t| format!("slurm-{job}-{t}")).collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let worker_logs = || {
        std::fs::read_dir(logs.path())
            .unwrap()
            .flatten()
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n---\n")
    };

    // The three array tasks attach, labelled with their job, task and node.
    let deadline = Instant::now() + Duration::from_secs(90);
    while fleet.worker_names(&coordinator) != names {
        assert!(
            Instant::now() < deadline,
            "the array's workers did not attach: {:?}; squeue: {}; logs:\n{}",
            fleet.worker_names(&coordinator),
            String::from_utf8_lossy(&run(Command::new("squeue").args(["-j", &job])).stdout),
            worker_logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let node = String::from_utf8_lossy(&run(Command::new("hostname").arg("-s")).stdout)
        .trim()
        .to_owned();
    let status = fleet.status(&coordinator);
    for worker in status["workers"].as_array().unwrap() {
        let name = worker["name"].as_str().unwrap();
        let task = name.rsplit('-').next().unwrap();
        let labels = &worker["labels"];
        assert_eq!(labels["slurm_array_job_id"], job.as_str(), "{worker}");
        assert_eq!(labels["slurm_array_task_id"], task, "{worker}");
        assert_eq!(labels["slurm_node"], node.as_str(), "{worker}");
        assert!(
            labels["slurm_job_id"]
                .as_str()
                .is_some_and(|id| !id.is_empty()),
            "{worker}"
        );
        let backends: Vec<&str> = worker["backends"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_str().unwrap())
            .collect();
        assert!(backends.contains(&"local"), "{worker}");
        if apptainer.is_some() {
            assert!(backends.contains(&"singularity"), "{worker}");
        }
    }

    // Calls run on them: one task per worker (placement spreads new tasks to
    // the least-loaded), each inside its Slurm task's environment, and one
    // background process to be ended by the stop.
    let marker = format!("caduceus-slurm-test-{job}");
    for t in 0..TASKS {
        let result = fleet.call(
            &coordinator,
            "terminal",
            &json!({"command": "echo task=$SLURM_ARRAY_TASK_ID"}),
            &format!("slurm-task-{t}"),
        );
        assert_eq!(result["exit_code"], 0, "{result}");
        assert!(
            result["output"].as_str().unwrap().starts_with("task="),
            "{result}"
        );
    }
    let started = fleet.call(
        &coordinator,
        "terminal",
        &json!({"command": format!("sleep 600 # {marker}"), "background": true}),
        "slurm-task-0",
    );
    assert!(started["session_id"].is_string(), "{started}");
    // Environments are reported with the heartbeats: one per task, on
    // three workers, each of the coordinator's backend.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = fleet.status(&coordinator);
        let placed: Vec<(String, Value)> = status["workers"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|w| {
                w["environments"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|e| (w["name"].as_str().unwrap().to_owned(), e.clone()))
            })
            .collect();
        if placed.len() == TASKS {
            for (_, env) in &placed {
                assert_eq!(env["backend"], backend, "{status}");
            }
            let holders: std::collections::BTreeSet<&String> =
                placed.iter().map(|(w, _)| w).collect();
            assert_eq!(holders.len(), TASKS, "one task per worker: {status}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "expected one environment per task: {status}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // scancel: Slurm's SIGTERM stops every worker; they leave the fleet, and
    // neither they nor the processes of their environments are left running.
    let out = run(Command::new("scancel").arg(&job));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !fleet.worker_names(&coordinator).is_empty() || job_tasks(&job) > 0 {
        assert!(
            Instant::now() < deadline,
            "after scancel: workers {:?}, {} array tasks still in squeue",
            fleet.worker_names(&coordinator),
            job_tasks(&job)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for name in &name_refs {
        assert!(
            !process_alive_with(&format!("--name {name}")),
            "worker {name} still runs"
        );
    }
    assert!(
        !process_alive_with(&marker),
        "the background process of an environment outlived its worker"
    );
    if let Some(fake) = &apptainer {
        assert_eq!(
            fake.instances(),
            Vec::<String>::new(),
            "instances left behind"
        );
    }
    // Gracefully: each worker caught the SIGTERM and exited 0, which Slurm
    // records as ExitCode=0:0 (a worker killed by the signal shows 0:15).
    let out = run(Command::new("scontrol").args(["-o", "show", "job", &job]));
    let records = String::from_utf8_lossy(&out.stdout).into_owned();
    let codes: Vec<&str> = records
        .split_whitespace()
        .filter(|f| f.starts_with("ExitCode="))
        .collect();
    assert_eq!(
        codes,
        vec!["ExitCode=0:0"; TASKS],
        "the workers did not stop gracefully on scancel's SIGTERM; logs:\n{}",
        worker_logs()
    );
}
