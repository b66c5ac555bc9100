use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::env::{EnvManager, test_env, test_manager};

/// The timeout the coordinator would send: the argument, else 180 s.
fn decided_timeout(args: &Map<String, Value>) -> Option<Duration> {
    let secs = args
        .get("timeout")
        .and_then(Value::as_u64)
        .filter(|t| *t > 0);
    Some(Duration::from_secs(secs.unwrap_or(180)))
}

async fn call_raw(env: &Arc<Environment>, args: Value) -> String {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    let cancel = CancellationToken::new();
    run(
        &ToolSettings::default(),
        TerminalCall {
            env,
            args: &args,
            cancel: &cancel,
            session_id: "session-1",
            timeout: decided_timeout(&args),
        },
    )
    .await
    .body
}

async fn call(env: &Arc<Environment>, args: Value) -> Value {
    serde_json::from_str(&call_raw(env, args).await).unwrap()
}

async fn env() -> (EnvManager, Arc<Environment>) {
    let (manager, _) = test_manager();
    let env = test_env(&manager, "task").await;
    (manager, env)
}

#[tokio::test]
async fn a_foreground_result_reads_exactly_like_hermes() {
    let (manager, env) = env().await;
    assert_eq!(
        call_raw(&env, json!({"command": "echo hi"})).await,
        r#"{"output": "hi", "exit_code": 0, "error": null}"#
    );
    // hermes' acceptance case: `sleep 3` with timeout 1.
    assert_eq!(
        call_raw(&env, json!({"command": "sleep 3", "timeout": 1})).await,
        r#"{"output": "[Command timed out after 1s]", "exit_code": 124, "error": null}"#
    );
    let result = call(
        &env,
        json!({"command": "echo partial; sleep 3", "timeout": 1}),
    )
    .await;
    assert_eq!(result["output"], "partial\n\n[Command timed out after 1s]");
    // The shell and its cwd survive the timeout.
    call(&env, json!({"command": "cd /usr"})).await;
    assert_eq!(
        call(&env, json!({"command": "pwd"})).await["output"],
        "/usr"
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn exit_code_meaning_ansi_and_secrets() {
    let (manager, env) = env().await;
    let result = call(&env, json!({"command": "echo nothing | grep missing"})).await;
    assert_eq!(result["exit_code"], 1);
    assert_eq!(
        result["exit_code_meaning"],
        "No matches found (not an error)"
    );
    let result = call(&env, json!({"command": "printf '\\033[31mred\\033[0m key=sk-proj-abcdefghijklmnopqrstuvwxyz012345\\n'"})).await;
    let output = result["output"].as_str().unwrap();
    assert!(output.starts_with("red key=sk-pro"), "{output}");
    assert!(!output.contains("abcdefghijklmnopqrstuvwxyz"), "{output}");
    assert!(result.get("exit_code_meaning").is_none());
    manager.shutdown().await;
}

#[tokio::test]
async fn refusals_before_anything_runs() {
    let (manager, env) = env().await;
    assert_eq!(
        call_raw(&env, json!({"command": 42})).await,
        r#"{"output": "", "exit_code": -1, "error": "Invalid command: expected string, got int", "status": "error"}"#
    );
    let result = call(&env, json!({"command": "npm run dev"})).await;
    assert_eq!(result["status"], "error");
    assert_eq!(result["exit_code"], -1);
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .starts_with("This foreground command appears to start a long-lived server")
    );
    let result = call(&env, json!({"command": "./server &"})).await;
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .starts_with("Foreground command uses '&' backgrounding.")
    );
    let result = call(&env, json!({"command": "ls", "workdir": "/tmp; rm -rf /"})).await;
    assert_eq!(result["status"], "blocked");
    assert_eq!(
        result["error"],
        "Blocked: workdir contains disallowed character ';'. Use a simple filesystem path without shell metacharacters."
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn workdir_is_used_and_persists_as_in_hermes() {
    let (manager, env) = env().await;
    assert_eq!(
        call(&env, json!({"command": "pwd", "workdir": "/usr"})).await["output"],
        "/usr"
    );
    assert_eq!(
        call(&env, json!({"command": "pwd"})).await["output"],
        "/usr"
    );
    assert_eq!(
        call(&env, json!({"command": "pwd", "workdir": "~"})).await["output"],
        "/tmp",
        "the sandbox's home"
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn background_start_result() {
    let (manager, env) = env().await;
    let result = call(&env, json!({"command": "sleep 30", "background": true})).await;
    assert_eq!(result["output"], "Background process started");
    assert_eq!(result["exit_code"], 0);
    assert_eq!(result["error"], Value::Null);
    let id = result["session_id"].as_str().unwrap();
    assert!(id.starts_with("proc_") && id.len() == 17, "{id}");
    assert!(result["pid"].as_u64().unwrap() > 1);
    assert!(
        result["hint"]
            .as_str()
            .unwrap()
            .starts_with("background=true without notify_on_complete=true")
    );

    let result = call(&env, json!({"command": "true", "background": true, "notify_on_complete": true, "watch_patterns": ["x"]})).await;
    assert_eq!(result["notify_on_complete"], true);
    assert!(
        result["watch_patterns_ignored"]
            .as_str()
            .unwrap()
            .starts_with("watch_patterns ignored because notify_on_complete=True")
    );
    assert!(result.get("watch_patterns").is_none());
    assert!(result.get("hint").is_none());

    let result = call(
        &env,
        json!({"command": "sleep 5", "background": true, "watch_patterns": ["READY"]}),
    )
    .await;
    assert_eq!(result["watch_patterns"], json!(["READY"]));
    assert!(result.get("hint").is_none());
    // The foreground guard does not apply to background commands.
    let result = call(
        &env,
        json!({"command": "python3 -m http.server 0 --bind 127.0.0.1", "background": true}),
    )
    .await;
    assert_eq!(result["output"], "Background process started");
    env.processes.kill_all("test").await;
    manager.shutdown().await;
}

#[tokio::test]
async fn notifications_need_a_session_to_go_to() {
    let (manager, env) = env().await;
    let Value::Object(args) =
        json!({"command": "true", "background": true, "notify_on_complete": true})
    else {
        unreachable!()
    };
    let cancel = CancellationToken::new();
    let call = TerminalCall {
        env: &env,
        args: &args,
        cancel: &cancel,
        session_id: "",
        timeout: None,
    };
    let result: Value =
        serde_json::from_str(&run(&ToolSettings::default(), call).await.body).unwrap();
    assert_eq!(result["notify_on_complete"], false);
    assert!(
        result["notify_unsupported"]
            .as_str()
            .unwrap()
            .starts_with("notify_on_complete / watch_patterns are not available")
    );
    assert!(result.get("hint").is_none());
    manager.shutdown().await;
}

#[tokio::test]
async fn pty_notes() {
    let (manager, env) = env().await;
    let result = call(&env, json!({"command": "echo hi", "pty": true})).await;
    assert_eq!(result["output"], "hi");
    assert!(
        result["pty_note"]
            .as_str()
            .unwrap()
            .starts_with("pty applies to background processes")
    );
    let result = call(
        &env,
        json!({"command": "gh auth login --with-token", "pty": true, "background": true}),
    )
    .await;
    assert!(
        result["pty_note"]
            .as_str()
            .unwrap()
            .starts_with("PTY disabled for this command")
    );
    env.processes.kill_all("test").await;
    manager.shutdown().await;
}

#[test]
fn a_trailing_ampersand_is_dropped_from_background_commands() {
    assert_eq!(
        without_trailing_ampersand("python3 -m http.server &"),
        "python3 -m http.server"
    );
    assert_eq!(
        without_trailing_ampersand("cd app && ./serve &  "),
        "cd app && ./serve"
    );
    assert_eq!(
        without_trailing_ampersand("make && make test"),
        "make && make test"
    );
    assert_eq!(without_trailing_ampersand("echo a \\&"), "echo a \\&");
    assert_eq!(without_trailing_ampersand("cmd >&"), "cmd >&");
    assert_eq!(without_trailing_ampersand("sleep 1"), "sleep 1");
}
