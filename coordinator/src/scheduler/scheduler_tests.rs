use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use caduceus_proto::{CallResult, Heartbeat, Hello, WorkerEvent, worker_command, worker_event};

use super::*;
use crate::registry::builtin;

async fn scheduler() -> (SchedulerHandle, RegistryHandle) {
    scheduler_with(Liveness::from_interval(Duration::from_secs(5))).await
}

async fn scheduler_with(liveness: Liveness) -> (SchedulerHandle, RegistryHandle) {
    scheduler_placing(
        liveness,
        PlacementConfig {
            wait: Duration::ZERO,
            ..PlacementConfig::default()
        },
    )
    .await
}

async fn scheduler_placing(
    liveness: Liveness,
    placement: PlacementConfig,
) -> (SchedulerHandle, RegistryHandle) {
    let (registry, _) = RegistryHandle::start(builtin::builtin_registry("local").unwrap())
        .await
        .unwrap();
    let (scheduler, _) = SchedulerHandle::start(
        registry.clone(),
        SchedulerConfig {
            liveness,
            notices: None,
            placement,
            metrics: Default::default(),
            hosted: Vec::new(),
        },
    )
    .await
    .unwrap();
    (scheduler, registry)
}

/// A worker that answers every call with `{"worker": name, "task": id}` and
/// reports the other commands it receives.
struct FakeWorker {
    attached: AttachedWorker,
    others: mpsc::UnboundedReceiver<worker_command::Command>,
}

async fn attach(scheduler: &SchedulerHandle, name: &str) -> FakeWorker {
    attach_with(scheduler, name, Vec::new()).await
}

/// A fake worker whose hello lists `environments` (task id, epoch).
async fn attach_with(
    scheduler: &SchedulerHandle,
    name: &str,
    environments: Vec<(&str, u64)>,
) -> FakeWorker {
    attach_hello(
        scheduler,
        name,
        environments,
        Hello {
            max_environments: 0,
            ..Hello::default()
        },
    )
    .await
}

/// A fake worker with labels and room for `max_environments`.
async fn attach_labelled(
    scheduler: &SchedulerHandle,
    name: &str,
    labels: &[(&str, &str)],
    max_environments: u32,
) -> FakeWorker {
    let hello = Hello {
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        max_environments,
        ..Hello::default()
    };
    attach_hello(scheduler, name, Vec::new(), hello).await
}

async fn attach_hello(
    scheduler: &SchedulerHandle,
    name: &str,
    environments: Vec<(&str, u64)>,
    hello: Hello,
) -> FakeWorker {
    let (commands, mut rx) = mpsc::unbounded_channel();
    let attached = scheduler
        .attach(
            Hello {
                name: name.to_owned(),
                backends: vec!["local".to_owned()],
                capacity: 4,
                labels: hello.labels,
                max_environments: hello.max_environments,
                environments: environments
                    .into_iter()
                    .map(|(task, epoch)| caduceus_proto::EnvironmentInfo {
                        task_id: task.to_owned(),
                        backend: "local".to_owned(),
                        epoch,
                        ..Default::default()
                    })
                    .collect(),
                ..Hello::default()
            },
            "test".to_owned(),
            commands,
            HostGrant::All,
        )
        .await
        .unwrap();
    let calls = attached.calls.clone();
    let worker = name.to_owned();
    let (others_tx, others) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(command)) = rx.recv().await {
            match command.command {
                Some(worker_command::Command::Run(run)) => calls.complete(CallResult {
                    body: json!({"worker": worker, "task": run.task_id, "epoch": run.epoch})
                        .to_string(),
                    call_id: run.call_id,
                    ..CallResult::default()
                }),
                Some(other) => {
                    let _ = others_tx.send(other);
                }
                None => {}
            }
        }
    });
    FakeWorker { attached, others }
}

fn call(task_id: &str) -> WorkerCall {
    WorkerCall {
        task_id: task_id.to_owned(),
        session_id: String::new(),
        tool: "terminal".to_owned(),
        arguments_json: "{}".to_owned(),
        backend: "local".to_owned(),
        settings_json: "{}".to_owned(),
        owner: "c".to_owned(),
        result_cap_chars: 0,
        timeout: None,
        traceparent: String::new(),
        deadline: Duration::from_secs(5),
        script: None,
    }
}

async fn run(scheduler: &SchedulerHandle, task_id: &str) -> WorkerCallDone {
    let done = scheduler.run_call(call(task_id)).await.unwrap();
    let result: Value = serde_json::from_str(&done.reply.body).unwrap();
    assert_eq!(result["worker"], done.worker.as_str());
    assert_eq!(result["task"], task_id);
    done
}

#[tokio::test]
async fn a_task_stays_on_its_worker_and_tasks_spread() {
    let (scheduler, _registry) = scheduler().await;
    let _w1 = attach(&scheduler, "w1").await;
    let _w2 = attach(&scheduler, "w2").await;
    let first = run(&scheduler, "a").await;
    for _ in 0..5 {
        assert_eq!(run(&scheduler, "a").await.worker, first.worker);
    }
    // The next new task goes to the worker with fewer pinned tasks.
    let second = run(&scheduler, "b").await;
    assert_ne!(second.worker, first.worker);
    assert_eq!(first.reset_from, None);
}

#[tokio::test]
async fn a_worker_whose_link_closed_is_replaced_and_the_caller_told() {
    let (scheduler, _registry) = scheduler().await;
    let w1 = attach(&scheduler, "w1").await;
    assert_eq!(run(&scheduler, "t").await.worker, "w1");
    let _w2 = attach(&scheduler, "w2").await;
    // The link has failed its calls, but the scheduler has not yet heard
    // that the worker left.
    w1.attached.calls.close("stream error");
    let done = run(&scheduler, "t").await;
    assert_eq!(done.worker, "w2");
    assert_eq!(done.reset_from.as_deref(), Some("w1"));
    // Told once; the task now lives on w2.
    let again = run(&scheduler, "t").await;
    assert_eq!((again.worker.as_str(), again.reset_from), ("w2", None));
    // New tasks avoid the closed worker too.
    assert_eq!(run(&scheduler, "new").await.worker, "w2");
}

#[tokio::test]
async fn drain_withdraws_the_fleet_at_once() {
    let (scheduler, registry) = scheduler().await;
    let mut w1 = attach(&scheduler, "w1").await;
    assert!(registry.snapshot().fleet_backends().contains("local"));
    scheduler.drain_all();
    // Status is answered after the drain has been handled.
    let status = scheduler.status().await;
    assert_eq!(status[0].state, "draining");
    assert!(
        registry.snapshot().fleet_backends().is_empty(),
        "{:?}",
        registry.snapshot().fleet_backends()
    );
    assert!(matches!(
        w1.others.recv().await,
        Some(worker_command::Command::Drain(_))
    ));
    let refused = scheduler.run_call(call("fresh")).await.unwrap_err();
    assert!(matches!(refused, ScheduleError::NoEligible(_)), "{refused}");
}

#[tokio::test]
async fn heartbeat_backends_reach_the_fleet_and_placement() {
    let (scheduler, registry) = scheduler().await;
    let w1 = attach(&scheduler, "w1").await;
    let heartbeat = WorkerEvent {
        event: Some(worker_event::Event::Heartbeat(Heartbeat {
            backends: vec!["docker".to_owned()],
            ..Heartbeat::default()
        })),
    };
    w1.attached.link.cast(LinkMsg::Inbound(heartbeat)).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !registry.snapshot().fleet_backends().contains("docker") {
        assert!(tokio::time::Instant::now() < deadline, "fleet not updated");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(scheduler.status().await[0].backends, ["docker"]);
    let refused = scheduler.run_call(call("t")).await.unwrap_err();
    assert!(
        matches!(&refused, ScheduleError::NoEligible(s) if s.backend == "local"),
        "{refused}"
    );
}

#[tokio::test]
async fn release_forgets_the_placement_and_tells_the_worker() {
    let (scheduler, _registry) = scheduler().await;
    let mut w1 = attach(&scheduler, "w1").await;
    run(&scheduler, "t").await;
    assert!(scheduler.release("t").await);
    assert!(!scheduler.release("t").await, "already released");
    match w1.others.recv().await {
        Some(worker_command::Command::Release(release)) => assert_eq!(release.task_id, "t"),
        other => panic!("expected a release, got {other:?}"),
    }
}

/// The epoch the fake worker saw with a call.
fn epoch_of(done: &WorkerCallDone) -> u64 {
    let result: Value = serde_json::from_str(&done.reply.body).unwrap();
    result["epoch"].as_u64().unwrap()
}

/// Stops a fake worker's link and waits until the scheduler has let it go.
async fn lose(scheduler: &SchedulerHandle, worker: FakeWorker) {
    let name = worker.attached.worker_id.clone();
    worker.attached.link.stop(Some("test: lost".to_owned()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while scheduler.status().await.iter().any(|w| w.worker_id == name) {
        assert!(tokio::time::Instant::now() < deadline, "{name} never left");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_returning_environment_of_a_task_placed_elsewhere_is_stale() {
    let (scheduler, _registry) = scheduler().await;
    let w1 = attach(&scheduler, "w1").await;
    let first = run(&scheduler, "r").await;
    let old_epoch = epoch_of(&first);
    assert!(old_epoch > 0, "calls carry their placement's epoch");
    lose(&scheduler, w1).await;
    let _w2 = attach(&scheduler, "w2").await;
    let moved = run(&scheduler, "r").await;
    assert_eq!(
        (moved.worker.as_str(), moved.reset_from.as_deref()),
        ("w2", Some("w1"))
    );
    assert!(
        epoch_of(&moved) > old_epoch,
        "a new placement, a newer epoch"
    );

    // w1 comes back with r's old environment: it is told to end it, and r
    // stays where it is now.
    let back = attach_with(&scheduler, "w1", vec![("r", old_epoch)]).await;
    assert_eq!(
        back.attached.stale,
        [StaleEnvironment {
            task_id: "r".to_owned(),
            epoch: old_epoch
        }]
    );
    let after = run(&scheduler, "r").await;
    assert_eq!(
        (after.worker.as_str(), after.reset_from.as_deref()),
        ("w2", None)
    );
    assert_eq!(epoch_of(&after), epoch_of(&moved));
}

#[tokio::test]
async fn a_returning_environment_nobody_replaced_is_adopted() {
    let (scheduler, _registry) = scheduler().await;
    let w1 = attach(&scheduler, "w1").await;
    let epoch = epoch_of(&run(&scheduler, "r").await);
    lose(&scheduler, w1).await;
    let _w2 = attach(&scheduler, "w2").await;
    let back = attach_with(&scheduler, "w1", vec![("r", epoch)]).await;
    assert!(back.attached.stale.is_empty(), "{:?}", back.attached.stale);
    let again = run(&scheduler, "r").await;
    assert_eq!(
        (again.worker.as_str(), again.reset_from.as_deref()),
        ("w1", None)
    );
    assert_eq!(epoch_of(&again), epoch);
}

#[tokio::test]
async fn an_environment_released_while_its_worker_was_away_is_stale() {
    let (scheduler, _registry) = scheduler().await;
    let w1 = attach(&scheduler, "w1").await;
    let epoch = epoch_of(&run(&scheduler, "r").await);
    lose(&scheduler, w1).await;
    scheduler.release("r").await;
    let back = attach_with(&scheduler, "w1", vec![("r", epoch)]).await;
    assert_eq!(back.attached.stale.len(), 1);
    // The next call starts a fresh placement (a newer epoch).
    assert!(epoch_of(&run(&scheduler, "r").await) > epoch);
}

#[tokio::test]
async fn a_silent_worker_is_suspect_gets_no_new_tasks_and_is_then_lost() {
    let liveness = Liveness::from_interval(Duration::from_millis(200));
    let (scheduler, _registry) = scheduler_with(liveness).await;
    let silent = attach(&scheduler, "silent").await;
    let alive = attach(&scheduler, "alive").await;
    // Only "alive" heartbeats.
    let shared = alive.attached.calls.shared().clone();
    let beating = tokio::spawn(async move {
        loop {
            shared.touch();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    // "silent" is placed a task before it falls silent.
    let held = loop {
        let done = run(&scheduler, &format!("held-{}", uuid::Uuid::new_v4())).await;
        if done.worker == "silent" {
            break done;
        }
    };
    tokio::time::sleep(liveness.suspect_after + Duration::from_millis(50)).await;
    let states: Vec<(String, String)> = scheduler
        .status()
        .await
        .into_iter()
        .map(|w| (w.name, w.state))
        .collect();
    assert!(
        states.contains(&("silent".to_owned(), "suspect".to_owned()))
            && states.contains(&("alive".to_owned(), "ready".to_owned())),
        "{states:?}"
    );
    for t in 0..4 {
        assert_eq!(run(&scheduler, &format!("new-{t}")).await.worker, "alive");
    }
    // A call of the suspect worker's task waits; once the worker is lost it
    // runs afresh elsewhere and says so.
    let task: String = serde_json::from_str::<Value>(&held.reply.body).unwrap()["task"]
        .as_str()
        .unwrap()
        .to_owned();
    let moved = run(&scheduler, &task).await;
    assert_eq!(
        (moved.worker.as_str(), moved.reset_from.as_deref()),
        ("alive", Some("silent"))
    );
    assert!(
        scheduler.status().await.iter().all(|w| w.name != "silent"),
        "the silent worker was lost"
    );
    drop(silent);
    beating.abort();
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test]
async fn a_labelled_task_lands_only_on_a_worker_with_its_labels() {
    let (scheduler, _registry) = scheduler().await;
    let _plain = attach_labelled(&scheduler, "a-plain", &[], 0).await;
    let _gpu = attach_labelled(&scheduler, "b-gpu", &[("gpu", "true")], 0).await;
    for t in 0..4 {
        let task = format!("gpu-{t}");
        scheduler.set_task_labels(&task, labels(&[("gpu", "true")]));
        assert_eq!(run(&scheduler, &task).await.worker, "b-gpu");
    }
    // Unlabelled tasks still spread by load (a-plain has none placed).
    assert_eq!(run(&scheduler, "plain").await.worker, "a-plain");
}

#[tokio::test]
async fn a_full_fleet_waits_for_a_freed_slot_and_then_uses_it() {
    // A wait far longer than the test: only the wake-up can answer in time.
    let placement = PlacementConfig {
        wait: Duration::from_secs(3600),
        ..PlacementConfig::default()
    };
    let (scheduler, _registry) =
        scheduler_placing(Liveness::from_interval(Duration::from_secs(5)), placement).await;
    let _w = attach_labelled(&scheduler, "w", &[], 1).await;
    assert_eq!(run(&scheduler, "first").await.worker, "w");
    let waiting = {
        let scheduler = scheduler.clone();
        tokio::spawn(async move { scheduler.run_call(call("second")).await })
    };
    // Let the call find the fleet full and start waiting.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(!waiting.is_finished(), "a full worker took a new task");
    // Releasing the first task frees the slot and wakes the waiting call.
    assert!(scheduler.release("first").await);
    let done = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the waiting call was not woken by the freed slot")
        .unwrap()
        .unwrap();
    assert_eq!(done.worker, "w");
}

#[tokio::test]
async fn a_full_fleet_errors_after_the_wait_naming_what_is_missing() {
    let (scheduler, _registry) = scheduler().await;
    let _g1 = attach_labelled(&scheduler, "g1", &[("gpu", "true")], 1).await;
    let _g2 = attach_labelled(&scheduler, "g2", &[("gpu", "true")], 1).await;
    for task in ["a", "b", "c"] {
        scheduler.set_task_labels(task, labels(&[("gpu", "true")]));
    }
    run(&scheduler, "a").await;
    run(&scheduler, "b").await;
    let refused = scheduler.run_call(call("c")).await.unwrap_err();
    assert_eq!(
        refused.to_string(),
        "no attached worker offers backend 'local' with labels gpu=true and free capacity; 2 workers have the labels but are full"
    );
}

#[tokio::test]
async fn a_cordoned_worker_keeps_its_tasks_and_gets_no_new_ones() {
    let (scheduler, _registry) = scheduler().await;
    let _w1 = attach(&scheduler, "w1").await;
    assert_eq!(run(&scheduler, "kept").await.worker, "w1");
    let status = scheduler.cordon("w1", true).await.unwrap();
    assert_eq!(status.state, "cordoned");
    assert_eq!(status.placed_environments, 1);
    // Its task carries on there.
    assert_eq!(run(&scheduler, "kept").await.worker, "w1");
    // A new task finds nowhere to go.
    let refused = scheduler.run_call(call("new")).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("1 worker offers the backend but is cordoned or draining"),
        "{refused}"
    );
    let _w2 = attach(&scheduler, "w2").await;
    assert_eq!(run(&scheduler, "new").await.worker, "w2");
    // Uncordoned, it takes new tasks again (both hold one task: the name
    // decides).
    scheduler.cordon("w1", false).await.unwrap();
    assert_eq!(run(&scheduler, "newer").await.worker, "w1");
    assert!(matches!(
        scheduler.cordon("nobody", true).await,
        Err(OperationError::NoSuchWorker(_))
    ));
}

#[tokio::test]
async fn draining_one_worker_tells_it_and_leaves_the_others() {
    let (scheduler, registry) = scheduler().await;
    let mut w1 = attach(&scheduler, "w1").await;
    let _w2 = attach(&scheduler, "w2").await;
    let status = scheduler.drain("w1").await.unwrap();
    assert_eq!(status.state, "draining");
    assert!(matches!(
        w1.others.recv().await,
        Some(worker_command::Command::Drain(_))
    ));
    assert!(registry.snapshot().fleet_backends().contains("local"));
    for t in 0..3 {
        assert_eq!(run(&scheduler, &format!("t{t}")).await.worker, "w2");
    }
    assert!(matches!(
        scheduler.cordon("w1", false).await,
        Err(OperationError::Draining(_))
    ));
}

#[tokio::test]
async fn a_task_on_another_backend_is_its_own_environment_released_with_the_task() {
    let (scheduler, _registry) = scheduler().await;
    let mut w1 = attach(&scheduler, "w1").await;
    run(&scheduler, "t").await;
    run(&scheduler, &backend_environment("t", "local")).await;
    assert_eq!(scheduler.status().await[0].placed_environments, 2);
    assert!(scheduler.release("t").await);
    let mut released = Vec::new();
    for _ in 0..2 {
        match w1.others.recv().await {
            Some(worker_command::Command::Release(release)) => released.push(release.task_id),
            other => panic!("expected a release, got {other:?}"),
        }
    }
    released.sort();
    assert_eq!(released, ["t", "t@local"]);
}
