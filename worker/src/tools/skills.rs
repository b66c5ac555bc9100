//! `skill_sync`: the coordinator's internal command that copies skill files
//! into a task's environment (`coordinator/src/skills/sync.rs` decides what
//! to send). Files go under `<the sandbox's temp dir>/caduceus-skills/`,
//! written through the backend's own file system, so every backend gets
//! them the same way; the temp dir is the environment's own, so the copies
//! end with it and never touch the coordinator's skills when a local
//! environment shares its host.
//!
//! Arguments: `{"write": [{"path", "content_base64"}], "remove": [path]}`,
//! paths relative to the skills root. Answers `{"root", "written", "removed"}`.

use std::path::{Component, Path};

use base64::Engine;
use serde_json::{Map, Value, json};

use caduceus_common::result::ToolReply;
use caduceus_files::fs::FsError;

use crate::env::Environment;

pub const TOOL: &str = "skill_sync";

/// The skills root inside an environment whose temp dir is `temp_dir`.
pub fn root(temp_dir: &str) -> String {
    format!("{}/caduceus-skills", temp_dir.trim_end_matches('/'))
}

/// A path the coordinator may name: relative, plain components only.
fn valid(path: &str) -> bool {
    !path.is_empty()
        && Path::new(path)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

pub async fn run(env: &Environment, args: &Map<String, Value>) -> ToolReply {
    let root = root(&env.sandbox.temp_dir());
    let fs = env.sandbox.files();
    let mut written = 0;
    let mut removed = 0;
    let writes = args.get("write").and_then(Value::as_array);
    for item in writes.into_iter().flatten() {
        let path = item.get("path").and_then(Value::as_str).unwrap_or_default();
        if !valid(path) {
            return ToolReply::error(format!("skill_sync: refused path '{path}'"));
        }
        let content = item
            .get("content_base64")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(content) else {
            return ToolReply::error(format!("skill_sync: '{path}' is not base64"));
        };
        if let Err(err) = fs.write_atomic(&format!("{root}/{path}"), &bytes).await {
            return ToolReply::error(format!("skill_sync: cannot write '{path}': {err}"));
        }
        written += 1;
    }
    let removes = args.get("remove").and_then(Value::as_array);
    for path in removes.into_iter().flatten().filter_map(Value::as_str) {
        if !valid(path) {
            return ToolReply::error(format!("skill_sync: refused path '{path}'"));
        }
        match fs.remove(&format!("{root}/{path}")).await {
            Ok(()) | Err(FsError::NotFound(_)) => removed += 1,
            Err(err) => {
                return ToolReply::error(format!("skill_sync: cannot remove '{path}': {err}"));
            }
        }
    }
    ToolReply::json(&json!({"root": root, "written": written, "removed": removed}))
}

#[cfg(test)]
#[path = "skills_tests.rs"]
mod tests;
