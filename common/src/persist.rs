//! Results too large for the context are saved inside the task's sandbox and
//! replaced by a preview (hermes `tools/tool_result_storage.py`), under
//! `<sandbox temp dir>/caduceus-results/`.
//!
//! This module owns the names and texts; writing the file is the caller's
//! business (through the sandbox, so the model can `read_file` it on any
//! backend).

use sha2::{Digest, Sha256};

use crate::text::group_thousands;

mod budget;

pub use budget::{
    DEFAULT_PREVIEW_CHARS, DEFAULT_RESULT_CHARS, DEFAULT_TURN_BUDGET_CHARS, ResultBudget,
    ResultSize, TurnBudget, budget_for_context_window, turn_budget,
};

/// Directory under the sandbox's temp dir that holds persisted results.
pub const RESULTS_DIR_NAME: &str = "caduceus-results";

/// Opening tag of the replacement text; a result containing it counts as
/// already persisted.
pub const PERSISTED_OUTPUT_TAG: &str = "<persisted-output>";
/// Closing tag of the replacement text.
pub const PERSISTED_OUTPUT_CLOSING_TAG: &str = "</persisted-output>";

/// Longest file-name stem kept from a tool call id.
const MAX_FILENAME_STEM_CHARS: usize = 120;
const FALLBACK_STEM: &str = "tool_result";

/// A safe file name for a tool call id: runs of characters outside
/// `[A-Za-z0-9_.-]` become `_`, then `._-` are stripped from both ends (empty
/// → `tool_result`). If that changed the id, or the stem is longer than 120
/// characters, the stem is cut to 120 and `_` plus the first 12 hex digits of
/// the id's SHA-256 is appended, so distinct ids never share a file.
///
/// ```
/// use caduceus_common::persist::safe_result_filename;
/// assert_eq!(safe_result_filename("call_abc"), "call_abc.txt");
/// assert_eq!(safe_result_filename("a/b"), "a_b_c14cddc033f6.txt");
/// assert_eq!(safe_result_filename(""), "tool_result.txt");
/// ```
pub fn safe_result_filename(tool_call_id: &str) -> String {
    // hermes substitutes the fallback before looking at the id.
    let raw_id = if tool_call_id.is_empty() {
        FALLBACK_STEM
    } else {
        tool_call_id
    };
    let replaced = replace_unsafe_runs(raw_id);
    let mut stem = replaced.trim_matches(is_strip_char).to_owned();
    let mut changed = stem != raw_id;
    if stem.is_empty() {
        stem = FALLBACK_STEM.to_owned();
        changed = true;
    }
    // Stems are ASCII by now, so characters and bytes agree.
    if changed || stem.len() > MAX_FILENAME_STEM_CHARS {
        let digest = Sha256::digest(raw_id.as_bytes());
        let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
        let mut cut =
            stem[..stem.len().min(MAX_FILENAME_STEM_CHARS)].trim_end_matches(is_strip_char);
        if cut.is_empty() {
            cut = FALLBACK_STEM;
        }
        stem = format!("{cut}_{hex}");
    }
    format!("{stem}.txt")
}

fn is_safe_filename_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

fn is_strip_char(c: char) -> bool {
    matches!(c, '.' | '_' | '-')
}

fn replace_unsafe_runs(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    let mut in_unsafe_run = false;
    for c in id.chars() {
        if is_safe_filename_char(c) {
            out.push(c);
            in_unsafe_run = false;
        } else if !in_unsafe_run {
            out.push('_');
            in_unsafe_run = true;
        }
    }
    out
}

/// The directory persisted results go to: `<temp_dir>/caduceus-results`.
/// Trailing slashes of `temp_dir` are dropped; an empty `temp_dir` means
/// `/tmp`.
pub fn results_dir(temp_dir: &str) -> String {
    let trimmed = temp_dir.trim_end_matches('/');
    let base = if trimmed.is_empty() {
        if temp_dir.is_empty() { "/tmp" } else { "" }
    } else {
        trimmed
    };
    format!("{base}/{RESULTS_DIR_NAME}")
}

/// Where the full text of one result is saved inside the sandbox:
/// `<temp_dir>/caduceus-results/<safe_result_filename(id)>`.
///
/// ```
/// use caduceus_common::persist::results_path;
/// assert_eq!(results_path("/tmp/", "call_1"), "/tmp/caduceus-results/call_1.txt");
/// ```
pub fn results_path(temp_dir: &str, tool_call_id: &str) -> String {
    format!(
        "{}/{}",
        results_dir(temp_dir),
        safe_result_filename(tool_call_id)
    )
}

/// The start of `full` shown in place of a persisted result: the first
/// `max_chars` characters, cut back to just after the last newline when that
/// newline lies past half of them. The flag says whether anything was cut.
pub fn preview(full: &str, max_chars: usize) -> (&str, bool) {
    let Some((cut, _)) = full.char_indices().nth(max_chars) else {
        return (full, false);
    };
    let head = &full[..cut];
    if let Some(newline) = head.rfind('\n') {
        let newline_chars = head[..newline].chars().count();
        if newline_chars > max_chars / 2 {
            return (&head[..=newline], true);
        }
    }
    (head, true)
}

/// The text the model sees instead of a result saved at `path`, with the
/// default 1,500-character preview:
///
/// ```text
/// <persisted-output>
/// This tool result was too large (120,000 characters, 117.2 KB).
/// Full output saved to: /tmp/caduceus-results/call_1.txt
/// Use the read_file tool with offset and limit to access specific sections of this output.
///
/// Preview (first 1497 chars):
/// <preview>
/// ...
/// </persisted-output>
/// ```
///
/// The `\n...` line appears only when the preview is not the whole text.
pub fn persisted_preview(full: &str, path: &str) -> String {
    persisted_preview_with(full, path, DEFAULT_PREVIEW_CHARS)
}

/// [`persisted_preview`] with a preview of `preview_chars` characters.
pub fn persisted_preview_with(full: &str, path: &str, preview_chars: usize) -> String {
    let total = full.chars().count();
    let (shown, has_more) = preview(full, preview_chars);
    let mut msg = format!(
        "{PERSISTED_OUTPUT_TAG}\n\
         This tool result was too large ({} characters, {}).\n\
         Full output saved to: {path}\n\
         Use the read_file tool with offset and limit to access specific sections of this output.\n\n\
         Preview (first {} chars):\n{shown}",
        group_thousands(total as u64),
        human_size(total),
        shown.chars().count(),
    );
    if has_more {
        msg.push_str("\n...");
    }
    msg.push('\n');
    msg.push_str(PERSISTED_OUTPUT_CLOSING_TAG);
    msg
}

/// The text the model sees when the result could not be saved in the
/// sandbox: the default preview and
/// `\n\n[Truncated: tool response was 120,000 chars. Full output could not be saved to sandbox.]`.
pub fn unsaved_preview(full: &str) -> String {
    unsaved_preview_with(full, DEFAULT_PREVIEW_CHARS)
}

/// [`unsaved_preview`] with a preview of `preview_chars` characters.
pub fn unsaved_preview_with(full: &str, preview_chars: usize) -> String {
    let (shown, _) = preview(full, preview_chars);
    format!(
        "{shown}\n\n[Truncated: tool response was {} chars. Full output could not be saved to sandbox.]",
        group_thousands(full.chars().count() as u64)
    )
}

/// Whether `content` is already a persisted-output replacement.
pub fn is_persisted(content: &str) -> bool {
    content.contains(PERSISTED_OUTPUT_TAG)
}

/// hermes' size label: the character count read as bytes, `117.2 KB` or
/// `9.5 MB`, one decimal.
fn human_size(chars: usize) -> String {
    let kb = chars as f64 / 1024.0;
    if kb >= 1024.0 {
        format!("{:.1} MB", kb / 1024.0)
    } else {
        format!("{kb:.1} KB")
    }
}

#[cfg(test)]
#[path = "persist_tests.rs"]
mod tests;
