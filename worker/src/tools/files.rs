//! The file tools (`read_file`, `write_file`, `patch`, `search_files`) run
//! through the environment's sandbox file access, with relative paths resolved
//! against the live shell's working directory.

use serde_json::{Map, Value};

use caduceus_common::result::ToolReply;
use caduceus_files::{FileToolContext, FileToolsConfig};

use crate::env::Environment;

pub fn is_file_tool(tool: &str) -> bool {
    matches!(tool, "read_file" | "write_file" | "patch" | "search_files")
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
