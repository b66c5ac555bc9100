use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use caduceus_proto::{
    EnvironmentSpec, RunCall, Welcome, WorkerCommand, WorkerEvent, worker_command, worker_event,
};

use super::serve_connection;
use crate::{Worker, WorkerConfig};

fn run_call(call_id: &str, args: &Value) -> Result<WorkerCommand, tonic::Status> {
    Ok(WorkerCommand {
        command: Some(worker_command::Command::Run(RunCall {
            call_id: call_id.to_owned(),
            task_id: "task".to_owned(),
            tool: "terminal".to_owned(),
            arguments_json: args.to_string(),
            environment: Some(EnvironmentSpec {
                backend: "local".to_owned(),
                settings_json: "{}".to_owned(),
                owner: "c".to_owned(),
            }),
            result_cap_chars: 0,
            session_id: "session-7".to_owned(),
            timeout_ms: 30_000,
            ..RunCall::default()
        })),
    })
}

#[tokio::test]
async fn background_process_notices_reach_the_coordinator_for_the_starting_session() {
    let worker = Worker::new(WorkerConfig {
        local_cwd: "/tmp".to_owned(),
        shell_env: vec![
            ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".to_owned(), "/tmp".to_owned()),
        ],
        ..WorkerConfig::default()
    });
    let (commands, command_stream) = mpsc::channel(16);
    let (events, mut received) = mpsc::channel::<WorkerEvent>(256);
    let shutdown = CancellationToken::new();
    let welcome = Welcome {
        worker_id: "w".into(),
        coordinator_id: "c".into(),
        heartbeat_interval_ms: 60_000,
        ..Welcome::default()
    };
    commands
        .send(Ok(WorkerCommand {
            command: Some(worker_command::Command::Welcome(welcome)),
        }))
        .await
        .unwrap();
    let link = tokio::spawn(serve_connection(
        worker.clone(),
        ReceiverStream::new(command_stream),
        events,
        shutdown.clone(),
    ));

    let args = json!({"command": "echo finished", "background": true, "notify_on_complete": true});
    commands.send(run_call("call-1", &args)).await.unwrap();
    let mut process_id = None;
    let notice = loop {
        let event = tokio::time::timeout(Duration::from_secs(20), received.recv())
            .await
            .unwrap()
            .unwrap();
        match event.event {
            Some(worker_event::Event::Result(result)) => {
                let result: Value = serde_json::from_str(&result.body).unwrap();
                process_id = result["session_id"].as_str().map(str::to_owned);
            }
            Some(worker_event::Event::Notice(notice)) => break notice,
            _ => {}
        }
    };
    assert_eq!(notice.kind, "process_exited");
    assert_eq!(notice.session_id, "session-7");
    assert_eq!(notice.task_id, "task");
    assert_eq!(
        Some(notice.process_id.clone()),
        process_id,
        "the notice follows the call's result"
    );
    let body: Value = serde_json::from_str(&notice.text).unwrap();
    assert_eq!(body["exit_code"], 0);
    assert_eq!(body["output"], "finished\n");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("completed normally (exit code 0)")
    );

    shutdown.cancel();
    link.await.unwrap();
    worker.shutdown().await;
}
