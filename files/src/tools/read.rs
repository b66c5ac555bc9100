//! `read_file(path, offset=1, limit=500)`.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{Anchors, FileToolContext, arg_int, arg_str, as_strs, error_json, failed_json, reply};
use crate::extract::{self, DocumentKind, MAX_DOCUMENT_BYTES};
use crate::fs::{FileStamp, FsError, LineRead};
use crate::lines::{LinePage, LineWindow};
use crate::paths;
use crate::safety;
use crate::text::{number_lines, split_ext};
use crate::tracker::RegionKey;
use caduceus_common::redact::{RedactMode, redact};
use caduceus_common::result::ToolReply;
use caduceus_common::text::group_thousands;

/// hermes' text for a re-read of an unchanged region.
pub const UNCHANGED_MESSAGE: &str = "File unchanged since last read. The content from the earlier read_file result in this conversation is still current — refer to that instead of re-reading.";

/// Documents up to this size are extracted on the async thread.
const INLINE_EXTRACT_BYTES: usize = 256 * 1024;

/// Files above this size get a nudge towards narrower reads.
const LARGE_FILE_BYTES: u64 = 512_000;

#[derive(Serialize)]
struct ReadOutput {
    content: String,
    total_lines: usize,
    file_size: u64,
    truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<String>,
    is_binary: bool,
    is_image: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    truncated_by: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_offset: Option<usize>,
    #[serde(rename = "_hint", skip_serializing_if = "Option::is_none")]
    large_file_hint: Option<String>,
    #[serde(rename = "_warning", skip_serializing_if = "Option::is_none")]
    warning: Option<String>,
}

/// Reads a window of a text file with `N|` line numbers. See the crate README
/// for the result shapes.
pub async fn read_file(ctx: &FileToolContext<'_>, args: &Map<String, Value>) -> ToolReply {
    let path = match arg_str(args, "path") {
        Some(path) if !path.trim().is_empty() => path,
        _ => return error_json("read_file: missing required field 'path'."),
    };
    let offset = usize::try_from(arg_int(args, "offset", 1).max(1)).unwrap_or(1);
    let max_lines = i64::try_from(ctx.config.max_read_lines.max(1)).unwrap_or(i64::MAX);
    let limit = usize::try_from(arg_int(args, "limit", 500).clamp(1, max_lines)).unwrap_or(500);

    let resolved = ctx.resolve(path);
    let candidates = ctx.candidates(&resolved).await;
    if safety::is_blocked_device(&as_strs(&candidates)) {
        return error_json(safety::device_error(path));
    }
    let anchors = Anchors::of(ctx);
    if let Some(message) = safety::read_block_error(&resolved, &as_strs(&candidates), anchors.get())
    {
        return error_json(message);
    }
    // Documents before the binary-extension refusal, so .docx/.xlsx render as text.
    let document = candidates.iter().rev().find_map(|c| DocumentKind::of(c));
    // Dedup is keyed on the real file, so two spellings of a path share it.
    let real = candidates
        .last()
        .cloned()
        .unwrap_or_else(|| resolved.clone());
    let region = RegionKey {
        path: real,
        offset,
        limit,
    };
    if let Some(kind) = document
        && let DocumentRead::Done(result) =
            read_document(ctx, path, &resolved, region.clone(), kind).await
    {
        return result;
    }
    if let Some(extension) = safety::binary_extension(&resolved) {
        return error_json(safety::binary_extension_error(path, &extension));
    }
    let window = LineWindow {
        offset,
        limit,
        // Enough bytes for `max_line_length` characters of any width, plus one.
        max_line_bytes: ctx
            .config
            .max_line_length
            .saturating_mul(4)
            .saturating_add(4),
        detect_binary: true,
        unless_unchanged: ctx.tracker.region_stamp(&region),
    };
    match ctx.fs.read_lines(&resolved, &window).await {
        Ok(LineRead::Page(page)) => render_page(ctx, path, region, &page),
        Ok(LineRead::Unchanged(_)) => unchanged(ctx, path, &region),
        Ok(LineRead::NotFound) => not_found(ctx, path, &resolved).await,
        Ok(LineRead::Binary(stat)) => failed_json(&json!({
            "error": "Binary file - cannot display as text. Use appropriate tools to handle this file type.",
            "is_binary": true,
            "file_size": stat.size,
        })),
        Err(FsError::IsADirectory(_)) => error_json(format!(
            "Cannot read '{path}': it is a directory. Use search_files with target='files' to list its contents."
        )),
        Err(FsError::NotRegularFile(_)) => error_json(safety::device_error(path)),
        Err(error) => error_json(error.to_string()),
    }
}

fn unchanged(ctx: &FileToolContext<'_>, path: &str, region: &RegionKey) -> ToolReply {
    let hits = ctx.tracker.stub_served(region);
    if hits >= 2 {
        // Models that ignore the stub would otherwise loop on it forever.
        return failed_json(&json!({
            "error": format!(
                "BLOCKED: You have called read_file on this exact region {} times and the file has NOT changed. STOP calling read_file for this path — the content from your earlier read_file result in this conversation is still current. Proceed with your task using the information you already have.",
                hits + 1
            ),
            "path": path,
            "already_read": hits + 1,
        }));
    }
    reply(&json!({
        "status": "unchanged",
        "message": UNCHANGED_MESSAGE,
        "path": path,
        "dedup": true,
        "content_returned": false,
    }))
}

/// The numbered window of lines shown to the model, with its truncation notes.
struct PageView {
    content: String,
    truncated: bool,
    hint: Option<String>,
    truncated_by: Option<&'static str>,
    next_offset: Option<usize>,
}

/// Numbers `lines` (the window starting at line `offset` of `total`), cuts
/// them to the read budget and redacts them.
fn page_view<S: AsRef<str>>(
    ctx: &FileToolContext<'_>,
    lines: &[S],
    offset: usize,
    limit: usize,
    total: usize,
) -> PageView {
    let end_line = offset + limit - 1;
    let mut truncated = total > end_line;
    let mut hint = truncated.then(|| {
        format!(
            "Use offset={} to continue reading (showing {offset}-{end_line} of {total} lines)",
            end_line + 1
        )
    });
    if lines.is_empty() && total > 0 && offset > total {
        hint = Some(format!(
            "Offset {offset} is past the end of the file ({total} lines)."
        ));
    }

    let mut content = number_lines(lines, offset, ctx.config.max_line_length);
    let mut truncated_by = None;
    let mut next_offset = None;
    let max_chars = ctx.config.max_read_chars;
    if content.chars().count() > max_chars {
        let (kept, lines_kept, clamped) = trim_to_budget(&content, max_chars);
        content = kept;
        let next = offset + lines_kept;
        let mut message = format!(
            "Output truncated at the {}-char read budget after {lines_kept} line(s) (showing lines {offset}-{} of {total}). Use offset={next} to continue.",
            group_thousands(max_chars as u64),
            next - 1
        );
        if clamped {
            message.push_str(" Note: the first line alone exceeded the budget and was clamped mid-line; its remainder is not retrievable via offset.");
        }
        truncated = true;
        truncated_by = Some("bytes");
        next_offset = Some(next);
        hint = Some(message);
    }
    let content = if let Cow::Owned(redacted) = redact(&content, RedactMode::FileRead) {
        redacted
    } else {
        content
    };
    PageView {
        content,
        truncated,
        hint,
        truncated_by,
        next_offset,
    }
}

/// Counts a full read of `region`: `Err` holds the BLOCKED result of a 4th
/// identical read in a row, `Ok` the `_warning` of a 3rd.
fn read_loop_guard(
    ctx: &FileToolContext<'_>,
    path: &str,
    region: RegionKey,
    stamp: Option<FileStamp>,
) -> Result<Option<String>, ToolReply> {
    let call = format!("read\u{0}{path}\u{0}{}\u{0}{}", region.offset, region.limit);
    let count = ctx.tracker.full_read(region, call, stamp);
    if count >= 4 {
        return Err(failed_json(&json!({
            "error": format!(
                "BLOCKED: You have read this exact file region {count} times in a row. The content has NOT changed. You already have this information. STOP re-reading and proceed with your task."
            ),
            "path": path,
            "already_read": count,
        })));
    }
    Ok((count >= 3).then(|| {
        format!(
            "You have read this exact file region {count} times consecutively. The content has not changed since your last read. Use the information you already have. If you are stuck in a loop, stop reading and proceed with writing or responding."
        )
    }))
}

fn render_page(
    ctx: &FileToolContext<'_>,
    path: &str,
    region: RegionKey,
    page: &LinePage,
) -> ToolReply {
    let (offset, limit) = (region.offset, region.limit);
    let view = page_view(ctx, &page.lines, offset, limit, page.total_lines);
    let file_size = page.stat.size;
    let large_file_hint =
        (file_size > LARGE_FILE_BYTES && limit > 200 && view.truncated).then(|| {
            format!(
                "This file is large ({} bytes). Consider reading only the section you need with offset and limit to keep context usage efficient.",
                group_thousands(file_size)
            )
        });
    let warning = match read_loop_guard(ctx, path, region, page.stat.stamp()) {
        Ok(warning) => warning,
        Err(blocked) => return blocked,
    };
    reply(&ReadOutput {
        content: view.content,
        total_lines: page.total_lines,
        file_size,
        truncated: view.truncated,
        hint: view.hint,
        is_binary: false,
        is_image: false,
        truncated_by: view.truncated_by,
        next_offset: view.next_offset,
        large_file_hint,
        warning,
    })
}

/// What became of an attempt to read a path as a document.
enum DocumentRead {
    /// The result the model sees.
    Done(ToolReply),
    /// Not renderable (malformed, missing, not a file): read it like any file.
    FallThrough,
}

/// read_file of a notebook, Word document or workbook: its text as hermes
/// extracts it, paged like a text file, in hermes' result shape
/// (`extracted_document: true`, no `is_binary`/`is_image`). The bytes come
/// in one `read_range`; extraction runs here, off the async thread when the
/// file is large.
async fn read_document(
    ctx: &FileToolContext<'_>,
    path: &str,
    resolved: &str,
    region: RegionKey,
    kind: DocumentKind,
) -> DocumentRead {
    let file = match ctx
        .fs
        .read_range(resolved, 0, Some(MAX_DOCUMENT_BYTES + 1))
        .await
    {
        Ok(Some(file)) => file,
        // hermes refused a missing .docx as binary; it is missing.
        Ok(None) => return DocumentRead::Done(not_found(ctx, path, resolved).await),
        Err(_) => return DocumentRead::FallThrough,
    };
    let stat = file.stat;
    if file.data.len() as u64 > MAX_DOCUMENT_BYTES {
        if kind == DocumentKind::Notebook {
            // JSON text: pages well without extraction.
            return DocumentRead::FallThrough;
        }
        return DocumentRead::Done(error_json(format!(
            "Cannot extract '{path}': the document is larger than {} bytes. Use terminal to inspect it.",
            group_thousands(MAX_DOCUMENT_BYTES)
        )));
    }
    if stat.stamp().is_some() && ctx.tracker.region_stamp(&region) == stat.stamp() {
        return DocumentRead::Done(unchanged(ctx, path, &region));
    }
    let text = if file.data.len() > INLINE_EXTRACT_BYTES {
        let data = file.data;
        match tokio::task::spawn_blocking(move || extract::extract(kind, &data)).await {
            Ok(text) => text,
            Err(_) => return DocumentRead::FallThrough,
        }
    } else {
        extract::extract(kind, &file.data)
    };
    let Ok(text) = text else {
        return DocumentRead::FallThrough;
    };

    let lines = extract::py_splitlines(&text);
    let total = lines.len();
    let (offset, limit) = (region.offset, region.limit);
    let first = (offset - 1).min(total);
    let window = &lines[first..(first.saturating_add(limit)).min(total)];
    let view = if window.iter().all(|line| line.is_empty()) && window.len() <= 1 {
        // hermes numbers nothing when the page's text is empty.
        PageView {
            content: String::new(),
            ..page_view::<&str>(ctx, &[], offset, limit, total)
        }
    } else {
        page_view(ctx, window, offset, limit, total)
    };
    let warning = match read_loop_guard(ctx, path, region, stat.stamp()) {
        Ok(warning) => warning,
        Err(blocked) => return DocumentRead::Done(blocked),
    };
    // hermes' key order: the hint joins after the budget fields when only the budget cut.
    let mut out = Map::new();
    out.insert("content".into(), json!(view.content));
    out.insert("total_lines".into(), json!(total));
    out.insert("file_size".into(), json!(stat.size));
    out.insert("truncated".into(), json!(view.truncated));
    out.insert("extracted_document".into(), json!(true));
    let cut_by_lines = total > offset + limit - 1;
    if cut_by_lines && let Some(hint) = &view.hint {
        out.insert("hint".into(), json!(hint));
    }
    if let (Some(by), Some(next)) = (view.truncated_by, view.next_offset) {
        out.insert("truncated_by".into(), json!(by));
        out.insert("next_offset".into(), json!(next));
    }
    if !cut_by_lines && let Some(hint) = view.hint {
        out.insert("hint".into(), json!(hint));
    }
    if let Some(warning) = warning {
        out.insert("_warning".into(), json!(warning));
    }
    DocumentRead::Done(reply(&Value::Object(out)))
}

/// Keeps whole lines while they fit in `max_chars` characters; if not even the
/// first fits, that line is cut. Returns (text, lines kept, first line cut).
fn trim_to_budget(content: &str, max_chars: usize) -> (String, usize, bool) {
    let mut used = 0;
    let mut kept = 0;
    let mut end = 0;
    for line in content.split('\n') {
        let addition = line.chars().count() + usize::from(kept > 0);
        if used + addition > max_chars {
            break;
        }
        used += addition;
        end += line.len() + usize::from(kept > 0);
        kept += 1;
    }
    if kept == 0 {
        let first = content.split('\n').next().unwrap_or("");
        let cut = crate::text::char_offset(first, max_chars);
        return (first[..cut].to_owned(), 1, true);
    }
    (content[..end].to_owned(), kept, false)
}

async fn not_found(ctx: &FileToolContext<'_>, path: &str, resolved: &str) -> ToolReply {
    let shown = ctx.expanded(path);
    let similar = similar_files(ctx, &shown, resolved).await;
    let mut result = json!({ "error": format!("File not found: {shown}") });
    if !similar.is_empty() {
        result["similar_files"] = json!(similar);
    }
    failed_json(&result)
}

/// hermes' suggestions: names in the same directory scored by how alike they
/// are (same stem 90, prefix 70, substring 60/40, same extension with shared
/// letters 30), best five. Hidden names are not offered, as `ls` hides them.
async fn similar_files(ctx: &FileToolContext<'_>, shown: &str, resolved: &str) -> Vec<String> {
    let Ok(Some(names)) = ctx.fs.list_dir(paths::parent(resolved)).await else {
        return Vec::new();
    };
    let shown_dir = match shown.rfind('/') {
        Some(0) => "/",
        Some(index) => &shown[..index],
        None => ".",
    };
    let wanted = paths::file_name(resolved).to_lowercase();
    let (wanted_stem, wanted_ext) = split_ext(&wanted);
    let mut scored: Vec<(u8, String)> = names
        .iter()
        .filter(|name| !name.starts_with('.'))
        .filter_map(|name| {
            let lower = name.to_lowercase();
            let (stem, ext) = split_ext(&lower);
            let score = if lower == wanted {
                100
            } else if stem == wanted_stem {
                90
            } else if lower.starts_with(&wanted) || wanted.starts_with(&lower) {
                70
            } else if lower.contains(&wanted) {
                60
            } else if wanted.contains(&lower) && lower.chars().count() > 2 {
                40
            } else if !wanted_ext.is_empty() && ext == wanted_ext && shares_letters(&wanted, &lower)
            {
                30
            } else {
                0
            };
            (score > 0).then(|| (score, paths::join(shown_dir, name)))
        })
        .collect();
    scored.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    scored.into_iter().take(5).map(|(_, path)| path).collect()
}

/// At least 40 % of the longer name's length in distinct shared characters.
fn shares_letters(a: &str, b: &str) -> bool {
    let left: std::collections::HashSet<char> = a.chars().collect();
    let right: std::collections::HashSet<char> = b.chars().collect();
    let common = left.intersection(&right).count();
    common as f64 >= a.chars().count().max(b.chars().count()) as f64 * 0.4
}

#[cfg(test)]
#[path = "read_tests.rs"]
mod tests;
