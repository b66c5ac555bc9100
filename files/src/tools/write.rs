//! `write_file(path, content)`.

use serde::Serialize;
use serde_json::{Map, Value, json};

use caduceus_common::result::ToolReply;

use super::{
    FileToolContext, WriteRefusal, error_json, failed_json, outside_cwd_warning, reply,
    stale_warning,
};
use crate::fs::FsError;
use crate::lint;
use crate::paths;
use crate::text::{self, FileStyle};
use crate::tools::read::UNCHANGED_MESSAGE;

/// Bytes of an existing file inspected for its BOM and line endings.
const STYLE_SAMPLE_BYTES: u64 = 4096;

/// Largest old content whose errors are compared with the new content's.
const LINT_BASELINE_BYTES: u64 = 2 * 1024 * 1024;

#[derive(Serialize)]
struct WriteOutput {
    bytes_written: u64,
    dirs_created: bool,
    lint: Value,
    #[serde(rename = "_warning", skip_serializing_if = "Option::is_none")]
    warning: Option<String>,
    resolved_path: String,
    files_modified: Vec<String>,
}

/// Replaces a file's content atomically, keeping its mode, BOM and CRLF line
/// endings; refuses sensitive paths and structured files that do not parse.
pub async fn write_file(ctx: &FileToolContext<'_>, args: &Map<String, Value>) -> ToolReply {
    ctx.tracker.note_other_tool();
    let path = match args.get("path") {
        Some(Value::String(path)) if !path.is_empty() => path.as_str(),
        _ => {
            return error_json(
                "write_file: missing required field 'path'. Re-emit the tool call with both 'path' and 'content' set.",
            );
        }
    };
    let content = match args.get("content") {
        Some(Value::String(content)) => content.as_str(),
        None => {
            return error_json(
                "write_file: missing required field 'content'. The tool call included a path but no content argument — this is almost always a dropped-arg bug under context pressure. Re-emit the tool call with the full content payload.",
            );
        }
        Some(other) => {
            return error_json(format!(
                "write_file: 'content' must be a string, got {}.",
                caduceus_common::result::python_type(other)
            ));
        }
    };

    if is_internal_display_text(content) {
        return error_json(
            "Refusing to write internal read_file display text as file content. Strip read_file line-number prefixes or reconstruct the intended file contents before writing.",
        );
    }
    let (resolved, candidates) = match ctx.check_write(path).await {
        Ok(checked) => checked,
        Err(WriteRefusal::Sensitive(message)) => return error_json(message),
        Err(WriteRefusal::Denied(message)) => return failed(&message, &ctx.resolve(path)),
    };
    let extension = paths::extension(&resolved);
    if lint::is_gated(&extension)
        && let Err(message) = lint::check(&extension, content)
    {
        return failed(&lint::refusal(&resolved, &extension, &message), &resolved);
    }

    // The old content too when it is checked, so only new errors are reported.
    let sample = if lint::is_checked(&extension) {
        LINT_BASELINE_BYTES + 1
    } else {
        STYLE_SAMPLE_BYTES
    };
    let existing = match ctx.fs.read_range(&resolved, 0, Some(sample)).await {
        Ok(existing) => existing,
        Err(error @ (FsError::IsADirectory(_) | FsError::NotRegularFile(_))) => {
            return failed(&format!("Failed to write file: {error}"), &resolved);
        }
        // Unreadable but maybe writable: write without style information.
        Err(_) => None,
    };
    let real = candidates
        .last()
        .cloned()
        .unwrap_or_else(|| resolved.clone());
    let stale = match (&existing, ctx.tracker.seen_stamp(&real)) {
        (Some(file), Some(seen)) if file.stat.stamp() != Some(seen) => Some(stale_warning(path)),
        _ => None,
    };
    let warning = stale.or_else(|| outside_cwd_warning(ctx, path, &resolved));

    let head = existing
        .as_ref()
        .map(|file| String::from_utf8_lossy(&file.data));
    let data = FileStyle::of(head.as_deref()).apply(content);
    let whole = existing.as_ref().is_some_and(|file| {
        sample > STYLE_SAMPLE_BYTES && file.data.len() as u64 <= LINT_BASELINE_BYTES
    });
    let before = head
        .as_deref()
        .filter(|_| whole)
        .map(|text| text::strip_bom(text).0);
    match ctx.fs.write_atomic(&resolved, data.as_bytes()).await {
        Ok(outcome) => {
            ctx.tracker.wrote(&real, outcome.stamp());
            reply(&WriteOutput {
                bytes_written: outcome.bytes_written,
                dirs_created: outcome.created_dirs,
                lint: lint::report(ctx.fs, &resolved, before, content).await,
                warning,
                resolved_path: resolved.clone(),
                files_modified: vec![resolved],
            })
        }
        Err(error) => failed(&format!("Failed to write file: {error}"), &resolved),
    }
}

/// hermes' failed-write shape: nothing written, the error, and where.
fn failed(message: &str, resolved: &str) -> ToolReply {
    failed_json(&json!({
        "bytes_written": 0,
        "dirs_created": false,
        "error": message,
        "resolved_path": resolved,
    }))
}

/// Content that is read_file's own display (the dedup stub, or `N|` numbered
/// lines) rather than file bytes — writing it would corrupt the file.
pub(crate) fn is_internal_display_text(content: &str) -> bool {
    let stripped = content.trim();
    if stripped.is_empty() {
        return false;
    }
    if stripped == UNCHANGED_MESSAGE
        || (stripped.contains(UNCHANGED_MESSAGE)
            && stripped.chars().count() <= 2 * UNCHANGED_MESSAGE.chars().count())
    {
        return true;
    }
    looks_line_numbered(content)
}

/// Mostly consecutive `N|…` lines (at least 60 % of non-blank lines).
fn looks_line_numbered(content: &str) -> bool {
    let lines: Vec<&str> = content
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    if lines.len() < 2 {
        return false;
    }
    let numbers: Vec<u64> = lines
        .iter()
        .filter_map(|line| {
            let (prefix, _) = line.trim_start().split_once('|')?;
            if prefix.is_empty() || !prefix.bytes().all(|byte| byte.is_ascii_digit()) {
                return None;
            }
            prefix.parse().ok()
        })
        .collect();
    if numbers.len() < 2 || (numbers.len() as f64) / (lines.len() as f64) < 0.6 {
        return false;
    }
    let consecutive = numbers
        .windows(2)
        .filter(|pair| pair[1] == pair[0] + 1)
        .count();
    consecutive + 1 >= numbers.len()
}

#[cfg(test)]
#[path = "write_tests.rs"]
mod tests;
