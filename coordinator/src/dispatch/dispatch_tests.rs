use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use super::*;
use crate::call::{CallContext, CallStatus, ToolReply};
use crate::gate::OpenGate;
use crate::registry::{Handler, LocalTool, ToolEntry, builtin};
use crate::scheduler::{Liveness, SchedulerConfig};

struct Echo;

#[async_trait]
impl LocalTool for Echo {
    async fn call(&self, _ctx: &CallContext, args: Map<String, Value>) -> ToolReply {
        // An `error` argument makes the echo a failure.
        let status = if args.contains_key("error") {
            CallStatus::Error
        } else {
            CallStatus::Ok
        };
        ToolReply::new(status, Value::Object(args).to_string())
    }
}

struct Panics;

#[async_trait]
impl LocalTool for Panics {
    async fn call(&self, _ctx: &CallContext, _args: Map<String, Value>) -> ToolReply {
        panic!("kaboom")
    }
}

struct Big;

#[async_trait]
impl LocalTool for Big {
    async fn call(&self, _ctx: &CallContext, _args: Map<String, Value>) -> ToolReply {
        let body: String = { "x".repeat(150_000) };
        ToolReply::new(CallStatus::Ok, body)
    }
}

#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<(String, CallStatus)>>,
    block: Option<String>,
}

#[async_trait]
impl ToolHook for Recorder {
    async fn pre_tool_call(&self, call: &PreToolCall<'_>) -> HookDecision {
        match &self.block {
            Some(tool) if tool == call.tool => HookDecision::Block {
                message: format!("{tool} is not allowed here"),
            },
            _ => HookDecision::Continue,
        }
    }

    async fn post_tool_call(&self, call: &PostToolCall<'_>) {
        self.seen
            .lock()
            .unwrap()
            .push((call.result.tool.clone(), call.result.status));
    }
}

async fn dispatcher(hook: Option<Arc<Recorder>>) -> Dispatcher {
    let mut reg = builtin::builtin_registry("local").unwrap();
    let echo_schema = json!({
        "description": "echo",
        "parameters": {"type": "object", "properties": {"n": {"type": "integer"}, "flag": {"type": "boolean"}, "opt": {"type": "integer"}}, "required": ["n"]}
    });
    reg.register(
        ToolEntry::new(
            "echo_args",
            "test",
            echo_schema,
            Handler::Local(Arc::new(Echo)),
        ),
        false,
    )
    .unwrap();
    reg.register(
        ToolEntry::new(
            "explode",
            "test",
            json!({"description": "x"}),
            Handler::Local(Arc::new(Panics)),
        ),
        false,
    )
    .unwrap();
    reg.register(
        ToolEntry::new(
            "big",
            "test",
            json!({"description": "x"}),
            Handler::Local(Arc::new(Big)),
        ),
        false,
    )
    .unwrap();
    let (registry, _) = RegistryHandle::start(reg).await.unwrap();
    let (scheduler, _) = SchedulerHandle::start(
        registry.clone(),
        SchedulerConfig {
            liveness: Liveness::from_interval(Duration::from_secs(5)),
            notices: None,
            placement: Default::default(),
            metrics: Default::default(),
            hosted: Vec::new(),
        },
    )
    .await
    .unwrap();
    let mut d = Dispatcher::new(
        registry,
        scheduler,
        Arc::new(OpenGate),
        DispatchConfig::default(),
    );
    if let Some(hook) = hook {
        d.add_hook(hook);
    }
    d
}

fn request(tool: &str, args: &str) -> CallRequest {
    CallRequest {
        tool: tool.into(),
        arguments: RawArguments::Text(args.into()),
        ctx: CallContext {
            task_id: "t".into(),
            ..CallContext::default()
        },
    }
}

fn parsed(result: &str) -> Value {
    serde_json::from_str(result).unwrap()
}

#[tokio::test]
async fn invalid_arguments_run_nothing() {
    let d = dispatcher(None).await;
    for bad in ["{not json", "[1,2]", "\"text\"", "42"] {
        let out = d.call(request("echo_args", bad)).await;
        assert_eq!(
            parsed(&out.body),
            json!({"error": "Invalid tool arguments", "message": "Tool arguments must be a valid JSON object; tool was not executed."}),
            "{bad}"
        );
        assert_eq!(out.status, CallStatus::Error);
    }
}

#[tokio::test]
async fn arguments_are_coerced_before_the_tool_runs() {
    let d = dispatcher(None).await;
    let out = d
        .call(request(
            "echo_args",
            r#"{"n": "7", "flag": "TRUE", "opt": null}"#,
        ))
        .await;
    assert_eq!(parsed(&out.body), json!({"n": 7, "flag": true}));
    assert_eq!(out.status, CallStatus::Ok);
}

#[tokio::test]
async fn near_miss_names_are_repaired() {
    let d = dispatcher(None).await;
    let out = d.call(request("EchoArgs_tool", r#"{"n": 1}"#)).await;
    assert_eq!(out.tool, "echo_args");
    assert_eq!(parsed(&out.body), json!({"n": 1}));
}

#[tokio::test]
async fn unknown_tools_list_the_available_ones() {
    let d = dispatcher(None).await;
    let out = d.call(request("launch_rocket", "{}")).await;
    let error = parsed(&out.body)["error"].as_str().unwrap().to_owned();
    assert!(
        error.starts_with("Tool 'launch_rocket' does not exist. Available tools: "),
        "{error}"
    );
    assert!(
        error.contains("echo_args") && error.contains("todo"),
        "{error}"
    );
    // Worker tools are not available without a worker, so they are not offered.
    assert!(!error.contains("terminal"), "{error}");
}

#[tokio::test]
async fn worker_tools_without_a_worker_say_how_to_fix_it() {
    let d = dispatcher(None).await;
    let out = d
        .call(request("terminal", r#"{"command": "echo hi"}"#))
        .await;
    let error = parsed(&out.body)["error"].as_str().unwrap().to_owned();
    assert!(
        error.contains("no attached worker offers the 'local' backend"),
        "{error}"
    );
}

#[tokio::test]
async fn agent_loop_tools_are_intercepted() {
    let d = dispatcher(None).await;
    let out = d.call(request("todo", "{}")).await;
    assert_eq!(
        parsed(&out.body),
        json!({"error": "todo must be handled by the agent loop"})
    );
}

#[tokio::test]
async fn a_panicking_tool_becomes_a_sanitized_error() {
    let d = dispatcher(None).await;
    let out = d.call(request("explode", "{}")).await;
    let error = parsed(&out.body)["error"].as_str().unwrap().to_owned();
    assert!(error.starts_with("[TOOL_ERROR] "), "{error}");
    assert_eq!(out.status, CallStatus::Error);
    // The pipeline survives.
    assert_eq!(
        parsed(&d.call(request("echo_args", r#"{"n": 2}"#)).await.body),
        json!({"n": 2})
    );
}

#[tokio::test]
async fn hooks_block_and_observe() {
    let hook = Arc::new(Recorder {
        block: Some("echo_args".into()),
        ..Recorder::default()
    });
    let d = dispatcher(Some(hook.clone())).await;
    let out = d.call(request("echo_args", r#"{"n": 1}"#)).await;
    assert_eq!(
        parsed(&out.body),
        json!({"error": "echo_args is not allowed here"})
    );
    assert_eq!(out.status, CallStatus::Blocked);
    d.call(request("big", "{}")).await;
    let seen = hook.seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            ("echo_args".to_owned(), CallStatus::Blocked),
            ("big".to_owned(), CallStatus::Ok)
        ]
    );
}

#[tokio::test]
async fn large_local_results_without_an_environment_are_previewed() {
    let d = dispatcher(None).await;
    let out = d.call(request("big", "{}")).await;
    assert!(
        out.body.len() < 5_000,
        "the model gets a preview, not 150,000 chars"
    );
    assert!(
        out.body
            .contains("Full output could not be saved to sandbox"),
        "{}",
        &out.body[..200]
    );
}

#[tokio::test]
async fn a_large_error_result_keeps_its_status_after_the_preview() {
    let d = dispatcher(None).await;
    let out = d
        .call(request(
            "echo_args",
            &json!({"n": 1, "error": "x".repeat(150_000)}).to_string(),
        ))
        .await;
    assert!(
        out.body
            .contains("Full output could not be saved to sandbox")
    );
    assert_eq!(out.status, CallStatus::Error);
}

/// The coordinator decides every command timeout; the worker obeys it.
#[tokio::test]
async fn the_command_timeout_is_decided_here() {
    let d = dispatcher(None).await;
    let snapshot = d.registry().snapshot();
    let terminal = snapshot.get("terminal").unwrap().clone();
    let process = snapshot.get("process").unwrap().clone();
    let decide = |entry: &ToolEntry, args: Value| {
        d.command_timeout(entry, args.as_object().unwrap())
            .map_err(|reply| (reply.status, reply.body))
    };
    let secs = |s: u64| Ok(Some(Duration::from_secs(s)));
    assert_eq!(decide(&terminal, json!({"command": "x"})), secs(180));
    assert_eq!(
        decide(&terminal, json!({"command": "x", "timeout": 300})),
        secs(300)
    );
    // A float is a timeout too (the worker used to accept it and the
    // coordinator to cut it at the default).
    assert_eq!(
        decide(&terminal, json!({"command": "x", "timeout": 300.0})),
        secs(300)
    );
    assert_eq!(
        decide(&terminal, json!({"command": "x", "timeout": 1.5})),
        secs(2)
    );
    assert_eq!(
        decide(&terminal, json!({"command": "x", "timeout": 0})),
        secs(180)
    );
    assert_eq!(
        decide(&terminal, json!({"command": "x", "timeout": null})),
        secs(180)
    );
    assert_eq!(
        decide(&terminal, json!({"command": "x", "timeout": "abc"})),
        Err((
            CallStatus::Error,
            r#"{"error": "[TOOL_ERROR] Tool execution failed: TypeError: '>' not supported between instances of 'str' and 'int'"}"#.to_owned()
        ))
    );
    assert_eq!(
        decide(&terminal, json!({"command": "x", "timeout": 601})),
        Err((
            CallStatus::Error,
            r#"{"error": "Foreground timeout 601s exceeds the maximum of 600s. Use background=true with notify_on_complete=true for long-running commands."}"#.to_owned()
        ))
    );
    // A background command has no timeout; `process wait` is bounded by the default.
    assert_eq!(
        decide(
            &terminal,
            json!({"command": "x", "background": true, "timeout": "abc"})
        ),
        Ok(None)
    );
    assert_eq!(decide(&process, json!({"action": "wait"})), secs(180));
}
