//! `search_files(pattern, target=content|files, path=".", file_glob, limit=50,
//! offset=0, output_mode=content|files_only|count, context=0)`.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{Anchors, FileToolContext, arg_int, arg_str, error_json, failed_json};
use crate::fs::FsError;
use crate::paths;
use crate::safety::{self, SafetyAnchors};
use crate::search::{
    FileHit, LineHit, OutputMode, SearchHits, SearchQuery, SearchTarget, file_name_glob,
};
use caduceus_common::redact::{RedactMode, redact};
use caduceus_common::result::{CallStatus, ToolReply, to_json};

/// Characters of a matching line shown.
const MAX_LINE_CHARS: usize = 500;
/// From this many matches on a page, matches are grouped by file in one text block.
const DENSE_FROM: usize = 5;
const DENSE_FORMAT: &str = "path-grouped: each file path on its own line, followed by indented '<line>: <content>' rows for matches in that file";

#[derive(Serialize, Default)]
struct SearchOutput {
    total_count: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    matches: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    matches_format: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    matches_text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    files: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    counts: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit_reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warning: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(rename = "_omitted", skip_serializing_if = "Option::is_none")]
    omitted: Option<String>,
    #[serde(rename = "_warning", skip_serializing_if = "Option::is_none")]
    repeat_warning: Option<String>,
}

/// Searches file contents (regex) or file names (glob). Results are sorted:
/// by path then line for content, newest first for file names.
pub async fn search_files(ctx: &FileToolContext<'_>, args: &Map<String, Value>) -> ToolReply {
    let pattern = arg_str(args, "pattern").unwrap_or("");
    let target = match arg_str(args, "target").unwrap_or("content") {
        "grep" => "content",
        "find" => "files",
        other => other,
    };
    let path = arg_str(args, "path").unwrap_or(".");
    let file_glob = arg_str(args, "file_glob").filter(|glob| !glob.is_empty());
    let offset = usize::try_from(arg_int(args, "offset", 0).max(0)).unwrap_or(0);
    let limit = usize::try_from(arg_int(args, "limit", 50).max(1)).unwrap_or(50);
    let mode = match arg_str(args, "output_mode").unwrap_or("content") {
        "files_only" => OutputMode::FilesOnly,
        "count" => OutputMode::Count,
        _ => OutputMode::Content,
    };
    let context = usize::try_from(arg_int(args, "context", 0).max(0)).unwrap_or(0);

    // Paging through results is not a repeat: offset and limit are in the key.
    let call = format!(
        "search\u{0}{pattern}\u{0}{target}\u{0}{path}\u{0}{}\u{0}{limit}\u{0}{offset}",
        file_glob.unwrap_or("")
    );
    let count = ctx.tracker.search(call);
    if count >= 4 {
        return failed_json(&json!({
            "error": format!(
                "BLOCKED: You have run this exact search {count} times in a row. The results have NOT changed. You already have this information. STOP re-searching and proceed with your task."
            ),
            "pattern": pattern,
            "already_searched": count,
        }));
    }

    let root = ctx.resolve(path);
    let anchors = Anchors::of(ctx);
    let candidates = ctx.candidates(&root).await;
    let candidate_refs: Vec<&str> = candidates.iter().map(String::as_str).collect();
    if let Some(message) = safety::read_block_error(&root, &candidate_refs, anchors.get()) {
        return error_json(message);
    }

    let search_target = if target == "files" {
        SearchTarget::Files {
            glob: file_name_glob(pattern),
        }
    } else {
        SearchTarget::Content {
            pattern: pattern.to_owned(),
            file_glob: file_glob.map(str::to_owned),
            mode,
            context,
        }
    };
    let is_content = matches!(search_target, SearchTarget::Content { .. });
    let query = SearchQuery {
        root: root.clone(),
        target: search_target,
        max_entries: ctx
            .config
            .max_search_entries
            .max(offset.saturating_add(limit)),
    };
    let newline_warning = (is_content && has_regex_newline(pattern)).then(|| {
        "0 results found. Note: search_files content search is line-oriented and does not run ripgrep with -U/--multiline, so `\\n` in the regex does not match line breaks. Use context=N to inspect neighboring lines, or escape as `\\\\n` when searching for a literal backslash+n.".to_owned()
    });

    let mut output = match ctx.fs.search(&query).await {
        Ok(SearchHits::RootNotFound) => SearchOutput {
            error: Some(path_not_found(ctx, path, &root).await),
            ..SearchOutput::default()
        },
        Ok(hits) => {
            let shown_root = shown_root(ctx, path);
            shape(hits, &root, &shown_root, offset, limit, anchors.get())
        }
        Err(FsError::Search(_)) if newline_warning.is_some() => SearchOutput {
            warning: newline_warning.clone(),
            ..SearchOutput::default()
        },
        Err(error) => SearchOutput {
            error: Some(format!("Search failed: {error}")),
            ..SearchOutput::default()
        },
    };
    if output.total_count == 0 && output.error.is_none() && output.warning.is_none() {
        output.warning = newline_warning;
    }
    if count >= 3 {
        output.repeat_warning = Some(format!(
            "You have run this exact search {count} times consecutively. The results have not changed. Use the information you already have."
        ));
    }
    let mut rendered = to_json(&output);
    if output.truncated {
        rendered.push_str(&format!(
            "\n\n[Hint: Results truncated. Use offset={} to see more, or narrow with a more specific pattern or file_glob.]",
            offset + limit
        ));
    }
    let status = if output.error.is_some() {
        CallStatus::Error
    } else {
        CallStatus::Ok
    };
    ToolReply::new(status, rendered)
}

/// The root as results show it: the path as given (`~` expanded), no trailing slash.
fn shown_root(ctx: &FileToolContext<'_>, path: &str) -> String {
    let expanded = ctx.expanded(path);
    let trimmed = expanded.trim_end_matches('/');
    if trimmed.is_empty() && expanded.starts_with('/') {
        "/".to_owned()
    } else if trimmed.is_empty() {
        ".".to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// A backend path (under `root`) the way `rg <shown_root>` would print it.
fn shown(path: &str, root: &str, shown_root: &str) -> String {
    match path.strip_prefix(root) {
        Some("") => shown_root.to_owned(),
        Some(rest) if rest.starts_with('/') => {
            if shown_root == "/" {
                rest.to_owned()
            } else {
                format!("{shown_root}{rest}")
            }
        }
        _ => path.to_owned(),
    }
}

fn shape(
    hits: SearchHits,
    root: &str,
    shown_root: &str,
    offset: usize,
    limit: usize,
    anchors: SafetyAnchors<'_>,
) -> SearchOutput {
    let blocked = |path: &str| safety::read_block_error(path, &[path], anchors).is_some();
    let mut output = SearchOutput::default();
    let mut omitted = 0;
    let complete = match hits {
        SearchHits::RootNotFound => true,
        SearchHits::Lines {
            mut lines,
            complete,
        } => {
            crate::search::sort_lines(&mut lines);
            let before = lines.len();
            lines.retain(|hit| !blocked(&hit.path));
            omitted += before - lines.len();
            output.total_count = lines.len();
            let page: Vec<LineHit> = lines.into_iter().skip(offset).take(limit).collect();
            output.truncated = output.total_count > offset + limit;
            render_lines(&mut output, page, root, shown_root);
            complete
        }
        SearchHits::Files {
            mut files,
            complete,
        } => {
            let before = files.len();
            files.retain(|hit| !blocked(&hit.path));
            omitted += before - files.len();
            output.total_count = files.len();
            output.truncated = files.len() > offset + limit;
            let page: Vec<String> = files
                .into_iter()
                .skip(offset)
                .take(limit)
                .map(|FileHit { path, .. }| shown(&path, root, shown_root))
                .collect();
            output.files = (!page.is_empty()).then_some(page);
            complete
        }
        SearchHits::Counts {
            mut counts,
            complete,
        } => {
            counts.sort_by(|a, b| a.path.cmp(&b.path));
            let before = counts.len();
            counts.retain(|count| !blocked(&count.path));
            omitted += before - counts.len();
            output.total_count =
                usize::try_from(counts.iter().map(|count| count.count).sum::<u64>())
                    .unwrap_or(usize::MAX);
            output.truncated = counts.len() > offset + limit;
            let page: Map<String, Value> = counts
                .into_iter()
                .skip(offset)
                .take(limit)
                .map(|count| (shown(&count.path, root, shown_root), json!(count.count)))
                .collect();
            output.counts = (!page.is_empty()).then_some(page);
            complete
        }
    };
    if !complete {
        output.truncated = true;
        output.limit_reason = Some("result_cap");
    }
    if omitted > 0 {
        output.omitted = Some(format!(
            "{omitted} result(s) omitted because they target credential, token, cache, or secret-bearing environment files."
        ));
    }
    output
}

fn render_lines(output: &mut SearchOutput, page: Vec<LineHit>, root: &str, shown_root: &str) {
    if page.is_empty() {
        return;
    }
    let rows: Vec<(String, u64, String)> = page
        .into_iter()
        .map(|hit| {
            let cut = crate::text::char_offset(&hit.text, MAX_LINE_CHARS);
            let text = &hit.text[..cut];
            let text = match redact(text, RedactMode::FileRead) {
                Cow::Borrowed(text) => text.to_owned(),
                Cow::Owned(text) => text,
            };
            (shown(&hit.path, root, shown_root), hit.line, text)
        })
        .collect();
    if rows.len() >= DENSE_FROM {
        let mut text = String::new();
        let mut current: Option<&str> = None;
        for (path, line, content) in &rows {
            if current != Some(path.as_str()) {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(path);
                current = Some(path);
            }
            text.push_str(&format!("\n  {line}: {}", content.trim_end()));
        }
        output.matches_format = Some(DENSE_FORMAT);
        output.matches_text = Some(text);
    } else {
        output.matches = Some(
            rows.into_iter()
                .map(
                    |(path, line, content)| json!({"path": path, "line": line, "content": content}),
                )
                .collect(),
        );
    }
}

/// hermes' "Path not found: p. Similar paths: …" (entries of the parent whose
/// names contain, are contained in, or share the first three letters).
async fn path_not_found(ctx: &FileToolContext<'_>, path: &str, root: &str) -> String {
    let shown_path = ctx.expanded(path);
    let mut message = format!("Path not found: {shown_path}");
    let wanted = paths::file_name(root).to_lowercase();
    if wanted.is_empty() {
        return message;
    }
    let Ok(Some(names)) = ctx.fs.list_dir(paths::parent(root)).await else {
        return message;
    };
    let shown_parent = match shown_path.trim_end_matches('/').rfind('/') {
        Some(0) => "/",
        Some(index) => &shown_path[..index],
        None => ".",
    };
    let prefix: String = wanted.chars().take(3).collect();
    let similar: Vec<String> = names
        .iter()
        .filter(|name| !name.starts_with('.'))
        .take(20)
        .filter(|name| {
            let lower = name.to_lowercase();
            lower.contains(&wanted) || wanted.contains(&lower) || lower.starts_with(&prefix)
        })
        .take(5)
        .map(|name| paths::join(shown_parent, name))
        .collect();
    if !similar.is_empty() {
        message.push_str(&format!(". Similar paths: {}", similar.join(", ")));
    }
    message
}

/// A literal newline, or `\n` after an odd number of backslashes: such a
/// pattern can never match in line-oriented search.
fn has_regex_newline(pattern: &str) -> bool {
    if pattern.contains('\n') {
        return true;
    }
    let mut backslashes = 0;
    for byte in pattern.bytes() {
        match byte {
            b'\\' => backslashes += 1,
            b'n' if backslashes % 2 == 1 => return true,
            _ => backslashes = 0,
        }
    }
    false
}

#[cfg(test)]
#[path = "search_tests.rs"]
mod tests;
