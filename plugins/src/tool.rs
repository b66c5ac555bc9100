//! A plugin tool: a registry entry whose handler runs the plugin's
//! executable with the call's arguments as JSON on stdin and reads the
//! result from stdout. It is a `Handler::Local` entry like any coordinator
//! tool, so the call pipeline treats it as it treats the built-ins: name
//! repair, coercion, hooks, the gate, the result cap, secret masking, audit.

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};

use caduceus_common::result::{CallStatus, ToolReply, to_json, tool_error};
use caduceus_coordinator::call::CallContext;
use caduceus_coordinator::registry::LocalTool;

use crate::exec::{self, Ended, Exec};

/// Characters of stderr quoted in a failure.
const STDERR_QUOTED: usize = 2000;

pub struct PluginTool {
    pub plugin: String,
    pub tool: String,
    pub dir: PathBuf,
    pub argv: Vec<String>,
    /// The declared variables' names; values are read at each call.
    pub declared_env: Vec<String>,
    pub timeout: Duration,
    pub max_output: usize,
}

impl PluginTool {
    fn environment(&self, ctx: &CallContext) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = self
            .declared_env
            .iter()
            .filter(|name| !caduceus_common::env_hygiene::is_never_passed(name))
            .filter_map(|name| {
                caduceus_common::process_env::var(name).map(|value| (name.clone(), value))
            })
            .collect();
        env.push(("CADUCEUS_PLUGIN".to_owned(), self.plugin.clone()));
        env.push((
            "CADUCEUS_PLUGIN_DIR".to_owned(),
            self.dir.display().to_string(),
        ));
        env.push(("CADUCEUS_TOOL_NAME".to_owned(), self.tool.clone()));
        env.push(("CADUCEUS_TASK_ID".to_owned(), ctx.task_id.clone()));
        if let Some(session) = &ctx.session_id {
            env.push(("CADUCEUS_SESSION_ID".to_owned(), session.clone()));
        }
        if let Some(call) = &ctx.tool_call_id {
            env.push(("CADUCEUS_TOOL_CALL_ID".to_owned(), call.clone()));
        }
        env
    }
}

#[async_trait]
impl LocalTool for PluginTool {
    async fn call(&self, ctx: &CallContext, args: Map<String, Value>) -> ToolReply {
        let outcome = exec::run(&Exec {
            argv: self.argv.clone(),
            cwd: self.dir.clone(),
            env: self.environment(ctx),
            stdin: Value::Object(args).to_string().into_bytes(),
            timeout: self.timeout,
            max_output: self.max_output,
        })
        .await;
        let tool = &self.tool;
        let stdout = outcome.stdout_text();
        match outcome.ended {
            Ended::Exited(Some(0)) => reply_of(stdout.trim_end()),
            Ended::Exited(code) => {
                // A tool that explains its failure in JSON is heard out.
                if let Some(reply) = error_document(stdout.trim()) {
                    return reply;
                }
                let how = match code {
                    Some(code) => format!("exited with status {code}"),
                    None => "was killed by a signal".to_owned(),
                };
                let stderr = quoted(&outcome.stderr);
                ToolReply::error(if stderr.is_empty() {
                    format!("Plugin tool '{tool}' {how}.")
                } else {
                    format!("Plugin tool '{tool}' {how}: {stderr}")
                })
            }
            Ended::TimedOut => ToolReply::new(
                CallStatus::Timeout,
                tool_error(format!(
                    "Plugin tool '{tool}' timed out after {}s and was stopped.",
                    self.timeout.as_secs_f64()
                )),
            ),
            Ended::TooMuchOutput => ToolReply::error(format!(
                "Plugin tool '{tool}' printed more than {} bytes and was stopped.",
                self.max_output
            )),
            Ended::NotStarted(message) => {
                ToolReply::error(format!("Plugin tool '{tool}' could not start: {message}"))
            }
        }
    }
}

/// What the model reads of a successful run: a JSON object as the tool's
/// document (an `error` field makes it a failed call), anything else as
/// the text it printed (hermes passes a plugin handler's string through).
fn reply_of(stdout: &str) -> ToolReply {
    match serde_json::from_str::<Value>(stdout) {
        Ok(Value::Object(document)) => {
            let failed = document.get("error").is_some_and(|e| !e.is_null());
            let body = to_json(&Value::Object(document));
            if failed {
                ToolReply::new(CallStatus::Error, body)
            } else {
                ToolReply::ok(body)
            }
        }
        _ => ToolReply::ok(stdout),
    }
}

fn error_document(stdout: &str) -> Option<ToolReply> {
    match serde_json::from_str::<Value>(stdout) {
        Ok(Value::Object(document)) if document.get("error").is_some_and(|e| !e.is_null()) => Some(
            ToolReply::new(CallStatus::Error, to_json(&Value::Object(document))),
        ),
        _ => None,
    }
}

fn quoted(stderr: &str) -> String {
    let text = stderr.trim();
    let count = text.chars().count();
    if count <= STDERR_QUOTED {
        return text.to_owned();
    }
    text.chars().skip(count - STDERR_QUOTED).collect()
}
