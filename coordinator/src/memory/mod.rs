//! `memory`: the agent's curated memory (hermes `tools/memory_tool.py`),
//! kept on the coordinator so that every session of the fleet shares one.
//!
//! Two stores under `$CADUCEUS_HOME/memories/`: `MEMORY.md` (the agent's
//! notes, 2,200 characters) and `USER.md` (the user profile, 1,375),
//! entries separated by `\n§\n`. `add` appends, `replace` and `remove` find
//! the one entry containing `old_text`, `operations` applies a batch
//! all-or-nothing against the final size. A session's system prompt gets a
//! snapshot taken when it starts ([`MemoryStore::snapshot`]); writes change
//! the files at once but show in the next session's prompt.
//!
//! One writer at a time: every read-modify-write holds an exclusive lock on
//! `<file>.lock` (a file lock, so concurrent sessions and even several
//! coordinators on one home are safe), and the file is replaced atomically
//! (readers see the old file or the new one). A file someone else edited
//! into a shape the tool would not write is backed up and left alone.

pub mod threats;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use crate::call::{CallContext, ToolReply};
use crate::registry::{Handler, LocalTool, ParallelClass, RegistryError, ToolEntry};

pub const ENTRY_DELIMITER: &str = "\n§\n";
/// hermes' defaults (`memory.memory_char_limit`, `memory.user_char_limit`).
pub const MEMORY_CHAR_LIMIT: usize = 2200;
pub const USER_CHAR_LIMIT: usize = 1375;

/// Which file an operation works on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Memory,
    User,
}

impl Target {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "memory" => Some(Target::Memory),
            "user" => Some(Target::User),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Target::Memory => "memory",
            Target::User => "user",
        }
    }

    fn file_name(self) -> &'static str {
        match self {
            Target::Memory => "MEMORY.md",
            Target::User => "USER.md",
        }
    }

    fn header(self) -> &'static str {
        match self {
            Target::Memory => "MEMORY (your personal notes)",
            Target::User => "USER PROFILE (who the user is)",
        }
    }
}

/// The two memory files of one home.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    dir: PathBuf,
    memory_limit: usize,
    user_limit: usize,
}

fn chars(text: &str) -> usize {
    text.chars().count()
}

fn thousands(n: usize) -> String {
    caduceus_common::text::group_thousands(n as u64)
}

/// The one entry `old_text` names, or the answer that says why there is
/// none (no match, or several) for an action that would `verb` it.
fn locate(entries: &[String], old_text: &str, verb: &str) -> Result<usize, Value> {
    match find_one(entries, old_text) {
        Ok(Some(index)) => Ok(index),
        Ok(None) => Err(json!({
            "success": false,
            "error": format!("No entry matched '{old_text}'. Check current_entries below and retry with the exact text of the entry you want to {verb}."),
            "current_entries": entries,
        })),
        Err(matches) => Err(json!({
            "success": false,
            "error": format!("Multiple entries matched '{old_text}'. Be more specific."),
            "matches": matches,
        })),
    }
}

fn joined_len(entries: &[String]) -> usize {
    if entries.is_empty() {
        0
    } else {
        chars(&entries.join(ENTRY_DELIMITER))
    }
}

fn percent(current: usize, limit: usize) -> usize {
    (current * 100).checked_div(limit).unwrap_or(0).min(100)
}

fn failure(error: impl Into<String>) -> Value {
    json!({"success": false, "error": error.into()})
}

/// The entries of a file's text: split on the delimiter, trimmed, empty
/// ones dropped, duplicates dropped (first kept).
fn parse_entries(raw: &str) -> Vec<String> {
    let mut entries: Vec<String> = Vec::new();
    for entry in raw.split(ENTRY_DELIMITER).map(str::trim) {
        if !entry.is_empty() && !entries.iter().any(|e| e == entry) {
            entries.push(entry.to_owned());
        }
    }
    entries
}

fn previews(entries: &[&String]) -> Vec<String> {
    entries
        .iter()
        .map(|e| {
            if chars(e) > 80 {
                format!("{}...", e.chars().take(80).collect::<String>())
            } else {
                (*e).clone()
            }
        })
        .collect()
}

/// Indexes of the entries containing `needle`; `Err` when they differ.
fn find_one(entries: &[String], needle: &str) -> Result<Option<usize>, Vec<String>> {
    let matches: Vec<usize> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.contains(needle))
        .map(|(i, _)| i)
        .collect();
    let Some(&first) = matches.first() else {
        return Ok(None);
    };
    let distinct: Vec<&String> = {
        let mut seen: Vec<&String> = Vec::new();
        for &i in &matches {
            if !seen.contains(&&entries[i]) {
                seen.push(&entries[i]);
            }
        }
        seen
    };
    if distinct.len() > 1 {
        return Err(previews(
            &matches.iter().map(|&i| &entries[i]).collect::<Vec<_>>(),
        ));
    }
    Ok(Some(first))
}

impl MemoryStore {
    /// The store of `$CADUCEUS_HOME/memories` with hermes' limits.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        MemoryStore {
            dir: dir.into(),
            memory_limit: MEMORY_CHAR_LIMIT,
            user_limit: USER_CHAR_LIMIT,
        }
    }

    pub fn with_limits(mut self, memory: usize, user: usize) -> Self {
        self.memory_limit = memory;
        self.user_limit = user;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, target: Target) -> PathBuf {
        self.dir.join(target.file_name())
    }

    fn limit(&self, target: Target) -> usize {
        match target {
            Target::Memory => self.memory_limit,
            Target::User => self.user_limit,
        }
    }

    /// The live entries of `target` (what the tool's answers show).
    pub fn entries(&self, target: Target) -> Vec<String> {
        std::fs::read_to_string(self.path(target))
            .map(|raw| parse_entries(&raw))
            .unwrap_or_default()
    }

    /// The blocks a new session's system prompt carries, taken now: each
    /// non-empty store with its header and usage. Entries that match a
    /// threat pattern (written behind the tool's back) are replaced by a
    /// placeholder; the files keep them, for the user to see and remove.
    pub fn snapshot(&self) -> Option<String> {
        let blocks: Vec<String> = [Target::Memory, Target::User]
            .into_iter()
            .filter_map(|target| self.render_block(target))
            .collect();
        (!blocks.is_empty()).then(|| blocks.join("\n\n"))
    }

    fn render_block(&self, target: Target) -> Option<String> {
        let entries: Vec<String> = self
            .entries(target)
            .into_iter()
            .map(|entry| {
                if entry.starts_with("[BLOCKED:") {
                    return entry;
                }
                let findings = threats::scan(&entry);
                if findings.is_empty() {
                    entry
                } else {
                    format!(
                        "[BLOCKED: {} entry contained threat pattern(s): {}. Removed from system prompt; use memory(action=remove) to delete the original.]",
                        target.file_name(),
                        findings.join(", ")
                    )
                }
            })
            .collect();
        if entries.is_empty() {
            return None;
        }
        let content = entries.join(ENTRY_DELIMITER);
        let current = chars(&content);
        let limit = self.limit(target);
        let separator = "═".repeat(46);
        Some(format!(
            "{separator}\n{} [{}% — {}/{} chars]\n{separator}\n{content}",
            target.header(),
            percent(current, limit),
            thousands(current),
            thousands(limit)
        ))
    }

    /// Holds the target's lock file for a read-modify-write.
    fn lock(&self, target: Target) -> Result<File, String> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("cannot create {}: {e}", self.dir.display()))?;
        let lock_path = self.dir.join(format!("{}.lock", target.file_name()));
        let file = File::options()
            .create(true)
            .append(true)
            .open(&lock_path)
            .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?;
        file.lock()
            .map_err(|e| format!("cannot lock {}: {e}", lock_path.display()))?;
        Ok(file)
    }

    fn save(&self, target: Target, entries: &[String]) -> Result<(), String> {
        let path = self.path(target);
        let tmp = self.dir.join(format!(
            ".mem_{}.tmp",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        ));
        let write = || -> std::io::Result<()> {
            let mut file = File::create(&tmp)?;
            file.write_all(entries.join(ENTRY_DELIMITER).as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("Failed to write memory file {}: {e}", path.display())
        })
    }

    /// When the file holds what the tool would not have written (a manual
    /// edit, a shell append): backs it up and returns the backup's path, so
    /// that a rewrite does not silently lose the foreign text.
    fn drift(&self, target: Target) -> Option<String> {
        let path = self.path(target);
        let raw = std::fs::read_to_string(&path).ok()?;
        if raw.trim().is_empty() {
            return None;
        }
        let parsed: Vec<&str> = raw
            .split(ENTRY_DELIMITER)
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .collect();
        let round_trip = parsed.join(ENTRY_DELIMITER);
        let longest = parsed.iter().map(|e| chars(e)).max().unwrap_or(0);
        if raw.trim() == round_trip && longest <= self.limit(target) {
            return None;
        }
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let backup = self.dir.join(format!("{}.bak.{stamp}", target.file_name()));
        Some(match std::fs::write(&backup, raw) {
            Ok(()) => backup.display().to_string(),
            Err(_) => format!(
                "{} (BACKUP FAILED — file unchanged on disk)",
                backup.display()
            ),
        })
    }

    fn drift_error(&self, target: Target, backup: &str) -> Value {
        json!({
            "success": false,
            "error": format!(
                "Refusing to write {}: file on disk has content that wouldn't round-trip through the memory tool (likely added by the patch tool, a shell append, a manual edit, or a concurrent session). A snapshot was saved to {backup}. Resolve the drift first — either rewrite the file as a clean §-delimited list of entries, or move the extra content out — then retry. This guard exists to prevent silent data loss.",
                target.file_name()
            ),
            "drift_backup": backup,
            "remediation": "Open the .bak file, integrate the missing entries into the memory tool one at a time via memory(action=add, content=...), then remove or rewrite the original file to a clean state.",
        })
    }

    fn success(&self, target: Target, entries: &[String], message: &str) -> Value {
        let current = joined_len(entries);
        let limit = self.limit(target);
        json!({
            "success": true,
            "done": true,
            "target": target.as_str(),
            "usage": format!("{}% — {}/{} chars", percent(current, limit), thousands(current), thousands(limit)),
            "entry_count": entries.len(),
            "message": message,
            "note": "Write saved. This update is complete — do not repeat it.",
        })
    }

    fn usage(&self, target: Target, entries: &[String]) -> String {
        format!(
            "{}/{}",
            thousands(joined_len(entries)),
            thousands(self.limit(target))
        )
    }

    pub fn add(&self, target: Target, content: &str) -> Result<Value, String> {
        let content = content.trim();
        if content.is_empty() {
            return Ok(failure("Content cannot be empty."));
        }
        if let Some(blocked) = threats::first_threat_message(content) {
            return Ok(failure(blocked));
        }
        let _lock = self.lock(target)?;
        let mut entries = self.entries(target);
        if entries.iter().any(|e| e == content) {
            return Ok(self.success(
                target,
                &entries,
                "Entry already exists (no duplicate added).",
            ));
        }
        let limit = self.limit(target);
        let mut next = entries.clone();
        next.push(content.to_owned());
        if joined_len(&next) > limit {
            let current = joined_len(&entries);
            return Ok(json!({
                "success": false,
                "error": format!(
                    "Memory at {}/{} chars. Adding this entry ({} chars) would exceed the limit. Consolidate now: use 'replace' to merge overlapping entries into shorter ones or 'remove' stale or less important entries (see current_entries below), then retry this add — all in this turn.",
                    thousands(current), thousands(limit), chars(content)
                ),
                "current_entries": entries,
                "usage": self.usage(target, &entries),
            }));
        }
        entries = next;
        self.save(target, &entries)?;
        Ok(self.success(target, &entries, "Entry added."))
    }

    pub fn replace(&self, target: Target, old_text: &str, content: &str) -> Result<Value, String> {
        let old_text = old_text.trim();
        let content = content.trim();
        if old_text.is_empty() {
            return Ok(failure("old_text cannot be empty."));
        }
        if content.is_empty() {
            return Ok(failure(
                "new_content cannot be empty. Use 'remove' to delete entries.",
            ));
        }
        if let Some(blocked) = threats::first_threat_message(content) {
            return Ok(failure(blocked));
        }
        let _lock = self.lock(target)?;
        if let Some(backup) = self.drift(target) {
            return Ok(self.drift_error(target, &backup));
        }
        let mut entries = self.entries(target);
        let index = match locate(&entries, old_text, "replace") {
            Ok(index) => index,
            Err(answer) => return Ok(answer),
        };
        let limit = self.limit(target);
        let mut next = entries.clone();
        next[index] = content.to_owned();
        let total = joined_len(&next);
        if total > limit {
            return Ok(json!({
                "success": false,
                "error": format!(
                    "Replacement would put memory at {}/{} chars. Shorten the new content, or 'remove' other stale or less important entries to make room (see current_entries below), then retry — all in this turn.",
                    thousands(total), thousands(limit)
                ),
                "current_entries": entries,
                "usage": self.usage(target, &entries),
            }));
        }
        entries = next;
        self.save(target, &entries)?;
        Ok(self.success(target, &entries, "Entry replaced."))
    }

    pub fn remove(&self, target: Target, old_text: &str) -> Result<Value, String> {
        let old_text = old_text.trim();
        if old_text.is_empty() {
            return Ok(failure("old_text cannot be empty."));
        }
        let _lock = self.lock(target)?;
        if let Some(backup) = self.drift(target) {
            return Ok(self.drift_error(target, &backup));
        }
        let mut entries = self.entries(target);
        let index = match locate(&entries, old_text, "remove") {
            Ok(index) => index,
            Err(answer) => return Ok(answer),
        };
        entries.remove(index);
        self.save(target, &entries)?;
        Ok(self.success(target, &entries, "Entry removed."))
    }

    /// Applies `operations` in order against a working copy; writes only when
    /// every one applies and the result fits the limit.
    pub fn apply_batch(&self, target: Target, operations: &[Value]) -> Result<Value, String> {
        if operations.is_empty() {
            return Ok(failure("operations list is empty."));
        }
        for (i, op) in operations.iter().enumerate() {
            let action = op.get("action").and_then(Value::as_str);
            let content = op.get("content").and_then(Value::as_str).unwrap_or("");
            if matches!(action, Some("add" | "replace"))
                && !content.is_empty()
                && let Some(blocked) = threats::first_threat_message(content)
            {
                return Ok(failure(format!("Operation {}: {blocked}", i + 1)));
            }
        }
        let _lock = self.lock(target)?;
        if let Some(backup) = self.drift(target) {
            return Ok(self.drift_error(target, &backup));
        }
        let entries = self.entries(target);
        let batch_error = |message: String| {
            json!({
                "success": false,
                "error": format!("{message} No operations were applied (batch is all-or-nothing)."),
                "current_entries": entries,
                "usage": self.usage(target, &entries),
            })
        };
        let mut working = entries.clone();
        for (i, op) in operations.iter().enumerate() {
            let action = op.get("action").and_then(Value::as_str);
            let text = |key: &str| {
                op.get(key)
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .trim()
                    .to_owned()
            };
            let content = text("content");
            let old_text = text("old_text");
            let pos = format!("Operation {} ({})", i + 1, action.unwrap_or("unknown"));
            match action {
                Some("add") => {
                    if content.is_empty() {
                        return Ok(batch_error(format!("{pos}: content is required.")));
                    }
                    if !working.contains(&content) {
                        working.push(content);
                    }
                }
                Some(action @ ("replace" | "remove")) => {
                    if old_text.is_empty() {
                        return Ok(batch_error(format!("{pos}: old_text is required.")));
                    }
                    if action == "replace" && content.is_empty() {
                        return Ok(batch_error(format!(
                            "{pos}: content is required (use action='remove' to delete)."
                        )));
                    }
                    match find_one(&working, &old_text) {
                        Ok(Some(index)) if action == "replace" => working[index] = content,
                        Ok(Some(index)) => {
                            working.remove(index);
                        }
                        Ok(None) => {
                            return Ok(batch_error(format!(
                                "{pos}: no entry matched '{old_text}'."
                            )));
                        }
                        Err(_) => {
                            return Ok(batch_error(format!(
                                "{pos}: '{old_text}' matched multiple distinct entries -- be more specific."
                            )));
                        }
                    }
                }
                _ => {
                    return Ok(batch_error(format!(
                        "{pos}: unknown action. Use add, replace, or remove."
                    )));
                }
            }
        }
        let limit = self.limit(target);
        let total = joined_len(&working);
        if total > limit {
            return Ok(json!({
                "success": false,
                "error": format!(
                    "After applying all {} operations, memory would be at {}/{} chars -- over the limit. Remove or shorten more entries in the same batch (see current_entries below), then retry.",
                    operations.len(), thousands(total), thousands(limit)
                ),
                "current_entries": entries,
                "usage": self.usage(target, &entries),
            }));
        }
        self.save(target, &working)?;
        Ok(self.success(
            target,
            &working,
            &format!("Applied {} operation(s).", operations.len()),
        ))
    }

    /// The tool: validates the arguments as hermes does and runs the action.
    pub fn call(&self, args: &Map<String, Value>) -> ToolReply {
        let target_name = match args.get("target") {
            None | Some(Value::Null) => "memory".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        let Some(target) = Target::parse(&target_name) else {
            return ToolReply::success_document(&failure(format!(
                "Invalid target '{target_name}'. Use 'memory' or 'user'."
            )));
        };
        let text = |key: &str| match args.get(key) {
            Some(Value::String(s)) => Some(s.as_str()).filter(|s| !s.is_empty()),
            _ => None,
        };
        let result = match args.get("operations") {
            Some(Value::Array(operations)) if !operations.is_empty() => {
                self.apply_batch(target, operations)
            }
            Some(other) if truthy(other) => {
                return ToolReply::success_document(&failure(
                    "operations must be a list of {action, content?, old_text?} objects.",
                ));
            }
            _ => {
                let action = args.get("action").and_then(Value::as_str).unwrap_or("");
                let content = text("content");
                let old_text = text("old_text");
                match (action, content, old_text) {
                    ("add", None, _) => {
                        return ToolReply::success_document(&failure(
                            "Content is required for 'add' action.",
                        ));
                    }
                    ("replace" | "remove", _, None) => {
                        return ToolReply::success_document(&self.missing_old_text(target, action));
                    }
                    ("replace", None, Some(_)) => {
                        return ToolReply::success_document(&failure(
                            "content is required for 'replace' action.",
                        ));
                    }
                    ("add", Some(content), _) => self.add(target, content),
                    ("replace", Some(content), Some(old)) => self.replace(target, old, content),
                    ("remove", _, Some(old)) => self.remove(target, old),
                    (other, _, _) => {
                        return ToolReply::success_document(&failure(format!(
                            "Unknown action '{other}'. Use: add, replace, remove"
                        )));
                    }
                }
            }
        };
        match result {
            Ok(value) => ToolReply::success_document(&value),
            Err(err) => ToolReply::success_document(&failure(err)),
        }
    }

    fn missing_old_text(&self, target: Target, action: &str) -> Value {
        let entries = self.entries(target);
        json!({
            "success": false,
            "error": format!(
                "'{action}' needs old_text -- a short unique substring of the entry to {action}. None was provided. Reissue the {action} with old_text set to part of one of the current_entries below."
            ),
            "current_entries": entries,
            "usage": self.usage(target, &entries),
        })
    }
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
    }
}

/// The registry's handler of `memory`: file work off the async threads.
pub struct MemoryTool {
    pub store: Arc<MemoryStore>,
}

#[async_trait]
impl LocalTool for MemoryTool {
    async fn call(&self, _ctx: &CallContext, args: Map<String, Value>) -> ToolReply {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || store.call(&args))
            .await
            .unwrap_or_else(|err| ToolReply::error(format!("memory failed: {err}")))
    }
}

/// The registry entry of `memory` over `store`.
pub fn registry_entry(store: Arc<MemoryStore>) -> Result<ToolEntry, RegistryError> {
    let schema: Value =
        serde_json::from_str(include_str!("../../schemas/memory.json")).map_err(|err| {
            RegistryError::InvalidSchema {
                name: "memory".to_owned(),
                reason: err.to_string(),
            }
        })?;
    Ok(ToolEntry::new(
        "memory",
        "memory",
        schema,
        Handler::Local(Arc::new(MemoryTool { store })),
    )
    .with_parallel(ParallelClass::Sequential)
    .with_emoji("🧠"))
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
