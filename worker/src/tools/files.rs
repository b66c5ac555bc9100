//! The file tools (`read_file`, `write_file`, `patch`, `search_files`) run
//! through the environment's sandbox file access, with relative paths resolved
//! against the live shell's working directory.

use serde_json::{Map, Value};

use caduceus_common::result::ToolReply;
use caduceus_files::preview::EditPreview;
use caduceus_files::{FileToolContext, FileToolsConfig};

use crate::env::Environment;

pub fn is_file_tool(tool: &str) -> bool {
    matches!(tool, "read_file" | "write_file" | "patch" | "search_files")
}

/// The coordinator's request for an edit's diff before a person approves
/// it: `{"tool": "write_file" | "patch", "arguments": {…}}`. Answers
/// `{"diff", "files"}`, or the tool's own refusal; writes nothing.
pub const EDIT_PREVIEW: &str = "edit_preview";

pub async fn preview(
    config: &FileToolsConfig,
    env: &Environment,
    args: &Map<String, Value>,
) -> ToolReply {
    let tool = args.get("tool").and_then(Value::as_str).unwrap_or_default();
    let Some(Value::Object(arguments)) = args.get("arguments") else {
        return ToolReply::error("edit_preview needs {\"tool\", \"arguments\"}");
    };
    let fs = env.sandbox.files();
    let cwd = env.shell.cwd();
    let home = env.sandbox.home_dir();
    let ctx = FileToolContext {
        fs: fs.as_ref(),
        cwd: &cwd,
        home: Some(&home),
        tracker: &env.reads,
        config,
    };
    match caduceus_files::preview::preview_edit(&ctx, tool, arguments).await {
        EditPreview::Changes { diff, files } => {
            ToolReply::json(&serde_json::json!({"diff": diff, "files": files}))
        }
        EditPreview::Refused(reply) => reply,
    }
}

pub async fn run(
    config: &FileToolsConfig,
    env: &Environment,
    tool: &str,
    args: &Map<String, Value>,
) -> ToolReply {
    let fs = env.sandbox.files();
    // The shell's cwd after the last command: `cd src` in the terminal makes
    // `read_file main.rs` read src/main.rs.
    let cwd = env.shell.cwd();
    let home = env.sandbox.home_dir();
    let ctx = FileToolContext {
        fs: fs.as_ref(),
        cwd: &cwd,
        home: Some(&home),
        tracker: &env.reads,
        config,
    };
    match tool {
        "read_file" => caduceus_files::read_file(&ctx, args).await,
        "write_file" => caduceus_files::write_file(&ctx, args).await,
        "patch" => caduceus_files::patch(&ctx, args).await,
        "search_files" => caduceus_files::search_files(&ctx, args).await,
        other => ToolReply::error(format!("Tool '{other}' is not a file tool")),
    }
}
