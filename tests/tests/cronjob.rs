//! Scheduled jobs: `caduceus call cronjob …` answers as hermes does and
//! `caduceus cron list|show|runs` reads what it wrote; a coordinator with a
//! worker and a scripted model runs a 1-minute job each time its (injected)
//! clock passes a minute, each run a session whose `terminal` call runs on
//! the worker, and a coordinator restarted on the same `state.db` neither
//! loses nor doubles a run.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_pass_by_value
)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tokio_util::sync::CancellationToken;

use caduceus_coordinator::agent::AgentSettings;
use caduceus_coordinator::cron::clock::ManualClock;
use caduceus_coordinator::cron::jobs::{self, Run};
use caduceus_coordinator::dispatch::RawArguments;
use caduceus_coordinator::gate::OpenGate;
use caduceus_coordinator::{ClientCall, Coordinator, CoordinatorConfig};
use caduceus_llm::testing::{ScriptedResponse, ScriptedServer};
use caduceus_llm::{LlmConfig, ToolCall};
use caduceus_tests::{Fleet, parse_result};
use caduceus_worker::{Worker, WorkerConfig};

fn cli(fleet: &Fleet, args: &[&str]) -> Value {
    let out = fleet.command().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_result(&out.stdout)
}

#[test]
fn caduceus_call_cronjob_answers_as_hermes_and_cron_lists_what_it_wrote() {
    let fleet = Fleet::new();
    let created = cli(
        &fleet,
        &[
            "call",
            "cronjob",
            r#"{"action": "create", "prompt": "Summarise /var/log/syslog.", "schedule": "0 9 * * *", "name": "syslog digest"}"#,
        ],
    );
    assert_eq!(created["success"], true, "{created}");
    let id = created["job_id"].as_str().unwrap().to_owned();
    for (key, value) in [
        ("name", json!("syslog digest")),
        ("schedule", json!("0 9 * * *")),
        ("repeat", json!("forever")),
        ("deliver", json!("local")),
        ("message", json!("Cron job 'syslog digest' created.")),
    ] {
        assert_eq!(created[key], value, "{key}: {created}");
    }
    assert!(
        created["next_run_at"]
            .as_str()
            .unwrap()
            .ends_with("T09:00:00+00:00")
    );

    let paused = cli(
        &fleet,
        &[
            "call",
            "cronjob",
            &json!({"action": "pause", "job_id": id}).to_string(),
        ],
    );
    assert_eq!(paused["job"]["state"], "paused");
    let missing = cli(
        &fleet,
        &["call", "cronjob", r#"{"action": "run", "job_id": "nope"}"#],
    );
    assert_eq!(
        missing,
        json!({"success": false, "error": "Job with ID 'nope' not found. Use cronjob(action='list') to inspect jobs."})
    );

    let listed = cli(&fleet, &["cron", "list", "--json"]);
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["job_id"], id.as_str());
    assert_eq!(listed[0]["state"], "paused");
    let shown = cli(&fleet, &["cron", "show", &id, "--json"]);
    assert_eq!(shown["prompt"], "Summarise /var/log/syslog.");
    assert_eq!(shown["runs"], 0);
    assert_eq!(cli(&fleet, &["cron", "runs", &id, "--json"]), json!([]));

    let out = fleet
        .command()
        .args(["cron", "show", "nope"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no cron job 'nope'"));
}

/// A coordinator on `home` (its `state.db`) with one in-process worker.
struct Node {
    coordinator: Arc<Coordinator>,
    worker: Arc<Worker>,
    shutdown: CancellationToken,
}

impl Node {
    async fn start(home: &Path, model: &ScriptedServer, clock: Arc<ManualClock>) -> Node {
        let coordinator = Coordinator::start(
            CoordinatorConfig {
                token: "t".into(),
                home: Some(home.to_path_buf()),
                cron_clock: clock,
                agent: AgentSettings {
                    llm: LlmConfig {
                        base_url: model.base_url(),
                        model: "scripted".into(),
                        max_retries: 0,
                        ..LlmConfig::default()
                    },
                    state_db: Some(home.join("state.db")),
                    durable: true,
                    ..AgentSettings::default()
                },
                ..CoordinatorConfig::default()
            },
            Arc::new(OpenGate),
        )
        .await
        .unwrap();
        let worker = Worker::new(WorkerConfig {
            name: "w1".into(),
            local_cwd: home.display().to_string(),
            ..WorkerConfig::default()
        });
        let shutdown = CancellationToken::new();
        let (events, events_rx) = mpsc::channel(256);
        let (commands, commands_rx) = mpsc::unbounded_channel();
        events
            .send(caduceus_proto::WorkerEvent {
                event: Some(caduceus_proto::worker_event::Event::Hello(worker.hello())),
            })
            .await
            .unwrap();
        coordinator
            .attach_worker(
                Box::pin(ReceiverStream::new(events_rx).map(Ok)),
                commands,
                "in-process".into(),
            )
            .await
            .unwrap();
        tokio::spawn(caduceus_worker::link::serve_in_process(
            worker.clone(),
            UnboundedReceiverStream::new(commands_rx),
            events,
            shutdown.clone(),
        ));
        Node {
            coordinator,
            worker,
            shutdown,
        }
    }

    async fn stop(self) {
        self.coordinator.sessions().flush().await;
        self.coordinator.shutdown();
        self.shutdown.cancel();
        self.worker.shutdown().await;
    }
}

/// Waits (60 s at most) until the job has `count` finished runs.
async fn finished_runs(db: &Path, job_id: &str, count: usize) -> Vec<Run> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let runs = jobs::runs_of(&jobs::open(db).unwrap(), job_id).unwrap();
        if runs.iter().filter(|r| r.state == "done").count() >= count {
            return runs;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} runs did not finish: {runs:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One run: a `terminal` call that appends `label` to `file`, then the answer.
fn run_script(label: &str, file: &Path) -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::tool_calls(vec![ToolCall::new(
            format!("call-{label}"),
            "terminal",
            json!({"command": format!("echo {label} >> {}", file.display())}).to_string(),
        )]),
        ScriptedResponse::text(format!("{label} done")),
    ]
}

fn lines(file: &PathBuf) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_minute_job_runs_twice_then_survives_a_restart_without_a_lost_or_doubled_run() {
    let home = tempfile::tempdir().unwrap();
    let db = home.path().join("state.db");
    let file = home.path().join("ticks.txt");
    let mut script = Vec::new();
    for label in ["tick-1", "tick-2", "tick-3", "tick-4"] {
        script.extend(run_script(label, &file));
    }
    let model = ScriptedServer::start(script).await.unwrap();
    let start = 1_796_230_800;
    let clock = Arc::new(ManualClock::new(start));

    let node = Node::start(home.path(), &model, clock.clone()).await;
    let created = node
        .coordinator
        .call_tool(ClientCall::new(
            "cronjob",
            RawArguments::Value(json!({"action": "create", "prompt": "Append a tick to the log.", "schedule": "every 1m", "name": "ticker"})),
            "",
        ))
        .await;
    let created: Value = serde_json::from_str(&created.body).unwrap();
    let id = created["job_id"].as_str().unwrap().to_owned();
    assert!(node.coordinator.start_cron());

    clock.advance(60);
    finished_runs(&db, &id, 1).await;
    clock.advance(60);
    let runs = finished_runs(&db, &id, 2).await;
    assert_eq!(lines(&file), ["tick-1", "tick-2"]);
    assert_eq!(
        runs.iter()
            .map(|r| r.final_response.clone().unwrap())
            .collect::<Vec<_>>(),
        ["tick-1 done", "tick-2 done"]
    );
    // Each run's terminal call ran on the fleet's worker.
    for run in &runs {
        let calls = caduceus_coordinator::agent::store::read_calls(&db, &run.session_id).unwrap();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].worker.as_deref(), Some("w1"));
    }
    node.stop().await;

    // Down for five minutes: five due times pass, one run makes up for them.
    clock.advance(300);
    let node = Node::start(home.path(), &model, clock.clone()).await;
    node.coordinator.sessions().resume_orphans();
    node.coordinator.start_cron();
    let runs = finished_runs(&db, &id, 3).await;
    assert_eq!(lines(&file), ["tick-1", "tick-2", "tick-3"]);
    assert_eq!(runs[2].claimed_at, start + 420);
    clock.advance(60);
    let runs = finished_runs(&db, &id, 4).await;
    assert_eq!(runs.len(), 4, "{runs:#?}");
    assert_eq!(lines(&file), ["tick-1", "tick-2", "tick-3", "tick-4"]);
    let mut due: Vec<i64> = runs.iter().map(|r| r.scheduled_for).collect();
    due.dedup();
    assert_eq!(due.len(), 4, "a due time ran twice: {runs:#?}");
    assert_eq!(model.remaining(), 0);
    node.stop().await;
}

/// Creates `schedule`'s job on `node` and returns its id.
async fn create_job(node: &Node, prompt: &str, schedule: &str) -> String {
    let created = node
        .coordinator
        .call_tool(ClientCall::new(
            "cronjob",
            RawArguments::Value(
                json!({"action": "create", "prompt": prompt, "schedule": schedule}),
            ),
            "",
        ))
        .await;
    let created: Value = serde_json::from_str(&created.body).unwrap();
    created["job_id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_cut_off_mid_session_by_a_crash_is_resumed_once_not_started_again() {
    let home = tempfile::tempdir().unwrap();
    // The first coordinator's model never answers in time: its run is cut off
    // while the session waits for the model.
    let stalled = ScriptedServer::start(vec![
        ScriptedResponse::text("too late").after(Duration::from_secs(600)),
    ])
    .await
    .unwrap();
    let clock = Arc::new(ManualClock::new(1_796_230_800));
    let node = Node::start(home.path(), &stalled, clock.clone()).await;
    let id = create_job(&node, "Report the load average.", "every 1m").await;
    node.coordinator.start_cron();
    clock.advance(60);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while stalled.request_count() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run never asked the model"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.coordinator.sessions().flush().await;

    // The state a crash leaves: a consistent copy of the database, whose
    // owner (the first coordinator) holds no lock there.
    let after = tempfile::tempdir().unwrap();
    let db = after.path().join("state.db");
    rusqlite_copy(&home.path().join("state.db"), &db);
    let runs = jobs::runs_of(&jobs::open(&db).unwrap(), &id).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].state, "running");

    let model = ScriptedServer::start(vec![ScriptedResponse::text("load is 0.42")])
        .await
        .unwrap();
    clock.advance(30);
    let restarted = Node::start(after.path(), &model, clock.clone()).await;
    restarted.coordinator.start_cron();
    let runs = finished_runs(&db, &id, 1).await;
    assert_eq!(
        runs.len(),
        1,
        "the cut-off run was started again: {runs:#?}"
    );
    assert_eq!(runs[0].final_response.as_deref(), Some("load is 0.42"));
    // The resumed session carried on the same conversation.
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert!(
        requests[0]
            .first_user_text()
            .ends_with("Report the load average.")
    );
    restarted.stop().await;
    node.stop().await;
}

/// `VACUUM INTO`: a consistent copy of a live database.
fn rusqlite_copy(from: &Path, to: &Path) {
    let conn = jobs::open(from).unwrap();
    conn.execute("VACUUM INTO ?1", [to.display().to_string()])
        .unwrap();
}

/// `workdir`: the run's environment starts there, so relative paths in its
/// commands land in it; a job whose workdir is gone runs without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_environment_starts_in_its_workdir() {
    let home = tempfile::tempdir().unwrap();
    let db = home.path().join("state.db");
    let workdir = tempfile::tempdir().unwrap();
    let pwd_then = |label: &str| {
        vec![
            ScriptedResponse::tool_calls(vec![ToolCall::new(
                format!("call-{label}"),
                "terminal",
                json!({"command": format!("pwd; echo {label} > here.txt")}).to_string(),
            )]),
            ScriptedResponse::text(format!("{label} done")),
        ]
    };
    let mut script = pwd_then("in-workdir");
    script.extend(pwd_then("without"));
    let model = ScriptedServer::start(script).await.unwrap();
    let clock = Arc::new(ManualClock::new(1_796_230_800));
    let node = Node::start(home.path(), &model, clock.clone()).await;
    let created = node
        .coordinator
        .call_tool(ClientCall::new(
            "cronjob",
            RawArguments::Value(json!({"action": "create", "prompt": "Mark the directory.", "schedule": "every 1m", "workdir": workdir.path().display().to_string()})),
            "",
        ))
        .await;
    let created: Value = serde_json::from_str(&created.body).unwrap();
    let id = created["job_id"].as_str().unwrap().to_owned();
    assert!(node.coordinator.start_cron());
    clock.advance(60);
    let runs = finished_runs(&db, &id, 1).await;
    assert_eq!(
        std::fs::read_to_string(workdir.path().join("here.txt")).unwrap(),
        "in-workdir\n"
    );
    let calls = caduceus_coordinator::agent::store::read_calls(&db, &runs[0].session_id).unwrap();
    let result: Value = serde_json::from_str(calls[0].result.as_deref().unwrap()).unwrap();
    assert_eq!(
        result["output"],
        workdir.path().canonicalize().unwrap().display().to_string()
    );

    // The directory is gone: the next run starts where environments do.
    let gone = workdir.path().to_path_buf();
    drop(workdir);
    clock.advance(60);
    let runs = finished_runs(&db, &id, 2).await;
    let calls = caduceus_coordinator::agent::store::read_calls(&db, &runs[1].session_id).unwrap();
    let result: Value = serde_json::from_str(calls[0].result.as_deref().unwrap()).unwrap();
    assert_eq!(
        result["output"],
        home.path().display().to_string(),
        "{result}"
    );
    assert!(!gone.exists());
    node.stop().await;
}

/// A run cut off by a crash keeps its job's `workdir` when it resumes: the
/// resumed session's environment starts there, as the first one would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_run_keeps_its_jobs_workdir() {
    let home = tempfile::tempdir().unwrap();
    let workdir = tempfile::tempdir().unwrap();
    let stalled = ScriptedServer::start(vec![
        ScriptedResponse::text("too late").after(Duration::from_secs(600)),
    ])
    .await
    .unwrap();
    let clock = Arc::new(ManualClock::new(1_796_230_800));
    let node = Node::start(home.path(), &stalled, clock.clone()).await;
    let created = node
        .coordinator
        .call_tool(ClientCall::new(
            "cronjob",
            RawArguments::Value(json!({"action": "create", "prompt": "Mark the directory.", "schedule": "every 1m", "workdir": workdir.path().display().to_string()})),
            "",
        ))
        .await;
    let created: Value = serde_json::from_str(&created.body).unwrap();
    let id = created["job_id"].as_str().unwrap().to_owned();
    node.coordinator.start_cron();
    clock.advance(60);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while stalled.request_count() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run never asked the model"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    node.coordinator.sessions().flush().await;
    let after = tempfile::tempdir().unwrap();
    let db = after.path().join("state.db");
    rusqlite_copy(&home.path().join("state.db"), &db);

    let model = ScriptedServer::start(vec![
        ScriptedResponse::tool_calls(vec![ToolCall::new(
            "call-pwd",
            "terminal",
            json!({"command": "pwd; echo resumed > here.txt"}).to_string(),
        )]),
        ScriptedResponse::text("marked"),
    ])
    .await
    .unwrap();
    clock.advance(30);
    let restarted = Node::start(after.path(), &model, clock.clone()).await;
    restarted.coordinator.start_cron();
    let runs = finished_runs(&db, &id, 1).await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].final_response.as_deref(), Some("marked"));
    assert_eq!(
        std::fs::read_to_string(workdir.path().join("here.txt")).unwrap(),
        "resumed\n"
    );
    let calls = caduceus_coordinator::agent::store::read_calls(&db, &runs[0].session_id).unwrap();
    let result: Value = serde_json::from_str(calls[0].result.as_deref().unwrap()).unwrap();
    assert_eq!(
        result["output"],
        workdir.path().canonicalize().unwrap().display().to_string()
    );
    restarted.stop().await;
    node.stop().await;
}
