//! The tools a worker runs inside a task's environment, and the result cap
//! that keeps large results in the sandbox instead of the context.

pub mod code;
pub mod files;
pub mod image;
pub mod process;
pub mod skills;
pub mod speech;
pub mod terminal;
pub mod web;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use caduceus_common::persist;
use caduceus_common::result::ToolReply;

use crate::env::Environment;
use crate::sandbox::SpawnSpec;
use crate::shell::shell_quote;

/// Worker-wide tool settings.
#[derive(Debug, Clone)]
pub struct ToolSettings {
    /// Characters of terminal output the model sees (hermes: 50,000).
    pub max_output_chars: usize,
    /// Limits and write policy of the file tools.
    pub files: caduceus_files::FileToolsConfig,
    /// `web_extract`'s fetches (the private-address policy, the page budget).
    pub web: web::WebSettings,
    /// `text_to_speech` (offered where espeak-ng is installed).
    pub speech: speech::SpeechSettings,
}

impl Default for ToolSettings {
    fn default() -> Self {
        ToolSettings {
            max_output_chars: 50_000,
            files: caduceus_files::FileToolsConfig::default(),
            web: web::WebSettings::default(),
            speech: speech::SpeechSettings::default(),
        }
    }
}

/// One call of a worker tool.
pub struct ToolCall {
    pub call_id: String,
    /// The session that made the call (background-process notices go there).
    pub session_id: String,
    pub tool: String,
    pub args: Map<String, Value>,
    pub env: Arc<Environment>,
    pub cancel: CancellationToken,
    /// Results longer than this are persisted in the sandbox; 0 = never.
    pub result_cap: u64,
    /// The command timeout the coordinator decided (`RunCall.timeout_ms`).
    pub timeout: Option<Duration>,
    /// `execute_code`: the tools its script may call (`RunCall.script_tools`)
    /// and its channel to the coordinator.
    pub script_tools: Vec<String>,
    pub script: Option<code::ScriptLink>,
}

/// Whether this worker serves `tool` (the ones [`run`] knows).
pub fn serves(tool: &str) -> bool {
    matches!(
        tool,
        "terminal" | "process" | code::TOOL | web::TOOL | speech::TOOL | image::TOOL
    ) || files::is_file_tool(tool)
}

/// Runs the call and returns the tool's answer.
pub async fn run(settings: &ToolSettings, mut call: ToolCall) -> ToolReply {
    if !files::is_file_tool(&call.tool)
        && call.tool != files::EDIT_PREVIEW
        && call.tool != skills::TOOL
    {
        // hermes: any other tool resets the consecutive-read loop guard.
        call.env.reads.note_other_tool();
    }
    let result = match call.tool.as_str() {
        tool if files::is_file_tool(tool) => {
            files::run(&settings.files, &call.env, tool, &call.args).await
        }
        files::EDIT_PREVIEW => files::preview(&settings.files, &call.env, &call.args).await,
        skills::TOOL => skills::run(&call.env, &call.args).await,
        "terminal" => {
            let terminal_call = terminal::TerminalCall {
                env: &call.env,
                args: &call.args,
                cancel: &call.cancel,
                session_id: &call.session_id,
                timeout: call.timeout,
            };
            terminal::run(settings, terminal_call).await
        }
        code::TOOL => {
            code::run(code::CodeCall {
                env: &call.env,
                call_id: &call.call_id,
                args: &call.args,
                tools: &call.script_tools,
                timeout: call.timeout,
                cancel: &call.cancel,
                link: call.script.take(),
            })
            .await
        }
        web::TOOL => web::run(&settings.web, &call.env, &call.args).await,
        speech::TOOL => speech::run(&settings.speech, &settings.files, &call.env, &call.args).await,
        image::TOOL => image::run(&settings.web, &call.env, &call.args).await,
        other => ToolReply::error(format!("Tool '{other}' is not served by this worker")),
    };
    cap_if_needed(Some(&call.env), &call.call_id, result, call.result_cap).await
}

/// Persists the reply's document in the sandbox and puts hermes' preview in
/// its place when it is longer than `cap` characters (0 = never); without an
/// environment the preview says it could not be saved. The status stays the
/// full document's: a preview is never an error of its own.
pub async fn cap_if_needed(
    env: Option<&Environment>,
    id: &str,
    mut reply: ToolReply,
    cap: u64,
) -> ToolReply {
    let body = &reply.body;
    if cap == 0 || body.len() as u64 <= cap || body.chars().count() as u64 <= cap {
        return reply;
    }
    let body = std::mem::take(&mut reply.body);
    reply.body = match env {
        Some(env) => cap_result(env, id, body).await,
        None => persist::unsaved_preview(&body),
    };
    reply
}

/// Saves a too-large result inside the sandbox and returns hermes' preview.
async fn cap_result(env: &Environment, id: &str, result: String) -> String {
    match persist_in_sandbox(env, id, &result).await {
        Ok(path) => persist::persisted_preview(&result, &path),
        Err(err) => {
            tracing::warn!(task = %env.task_id, "could not persist a large result: {err}");
            persist::unsaved_preview(&result)
        }
    }
}

/// Writes `content` to `<tmp>/caduceus-results/<safe id>.txt` inside the
/// sandbox, through the sandbox's own process API (works on every backend).
pub async fn persist_in_sandbox(
    env: &Environment,
    id: &str,
    content: &str,
) -> Result<String, String> {
    let path = persist::results_path(&env.sandbox.temp_dir(), id);
    let dir = path
        .rsplit_once('/')
        .map(|(d, _)| d.to_owned())
        .unwrap_or_else(|| ".".to_owned());
    let script = format!(
        "umask 077; mkdir -p {} && cat > {}",
        shell_quote(&dir),
        shell_quote(&path)
    );
    let spec = SpawnSpec {
        program: "bash".to_owned(),
        args: vec!["-c".to_owned(), script],
        cwd: None,
        env: vec![(
            "PATH".to_owned(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        )],
    };
    let mut process = env.sandbox.spawn(spec).await.map_err(|e| e.to_string())?;
    let write = async {
        process.stdin.write_all(content.as_bytes()).await?;
        process.stdin.shutdown().await
    };
    let written = tokio::time::timeout(std::time::Duration::from_secs(30), write).await;
    drop(process.stdin);
    let code = tokio::time::timeout(std::time::Duration::from_secs(30), process.handle.wait())
        .await
        .ok()
        .flatten();
    match (written, code) {
        (Ok(Ok(())), Some(0)) => Ok(path),
        (Ok(Err(err)), _) => Err(format!("writing {path} failed: {err}")),
        (Err(_), _) => Err(format!("writing {path} timed out")),
        (_, code) => Err(format!("writing {path} failed (exit {code:?})")),
    }
}
