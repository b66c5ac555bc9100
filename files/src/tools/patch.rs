//! `patch(mode=replace|patch, …)`: fuzzy find-and-replace in one file, or a
//! V4A multi-file patch applied all-or-nothing.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::{Map, Value};

use caduceus_common::result::ToolReply;

use super::{
    Anchors, Args, FileToolContext, arg_bool, arg_str, as_strs, error_json, failed_json,
    outside_cwd_warning, reply, stale_warning,
};
use crate::diff;
use crate::fs::{FileStat, FsError};
use crate::fuzzy::{self, MatchError};
use crate::lint;
use crate::paths;
use crate::safety;
use crate::text::{self, BOM, FileStyle, py_repr};
use crate::v4a::{self, Hunk, PatchOp};

#[derive(Serialize, Default)]
struct PatchOutput {
    success: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    diff: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    files_modified: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    files_created: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    files_deleted: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lint: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(rename = "_warning", skip_serializing_if = "Option::is_none")]
    warning: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    resolved_path: Option<String>,
    #[serde(rename = "_hint", skip_serializing_if = "Option::is_none")]
    hint: Option<String>,
}

impl PatchOutput {
    fn failure(message: impl Into<String>) -> Self {
        Self {
            error: Some(message.into()),
            ..Self::default()
        }
    }
}

/// Edits files; see the crate README for both modes and their results.
pub async fn patch(ctx: &FileToolContext<'_>, args: &Map<String, Value>) -> ToolReply {
    ctx.tracker.note_other_tool();
    match arg_str(args, "mode").unwrap_or("replace") {
        "replace" => replace(ctx, args).await,
        "patch" => apply_v4a(ctx, args).await,
        other => error_json(format!("Unknown mode: {other}")),
    }
}

/// Adds hermes' `_hint` to a not-found failure: a generic nudge, or after three
/// failures on the same file in a row an escalation.
fn finish(
    ctx: &FileToolContext<'_>,
    mut output: PatchOutput,
    failed_path: Option<(&str, &str)>,
) -> ToolReply {
    if let Some(error) = &output.error
        && error.contains("Could not find")
    {
        let failures = failed_path.map_or(0, |(resolved, _)| ctx.tracker.patch_failed(resolved));
        if failures >= 3 {
            let shown = failed_path.map_or("", |(_, shown)| shown);
            output.hint = Some(format!(
                "This is failure #{failures} patching {}. Stop retrying with variations of the same old_string. Either: (1) re-read the file fresh to verify current content, (2) use a longer / more unique old_string with surrounding context lines, or (3) use write_file to replace the entire file if the targeted region is hard to anchor.",
                py_repr(shown)
            ));
        } else if !error.contains("Did you mean one of these sections?") {
            output.hint = Some(
                "old_string not found. Use read_file to verify the current content, or search_files to locate the text."
                    .to_owned(),
            );
        }
    }
    if output.error.is_some() {
        failed_json(&output)
    } else {
        reply(&output)
    }
}

// ---------------------------------------------------------------------------
// Replace mode
// ---------------------------------------------------------------------------

async fn replace(ctx: &FileToolContext<'_>, args: &Args) -> ToolReply {
    let path = match arg_str(args, "path") {
        Some(path) if !path.is_empty() => path,
        _ => return error_json("path required"),
    };
    let resolved = ctx.resolve(path);
    let candidates = ctx.candidates(&resolved).await;
    let anchors = Anchors::of(ctx);
    if let Some(message) = safety::sensitive_write_error(path, &as_strs(&candidates), anchors.get())
    {
        return error_json(message);
    }
    let (Some(old), Some(new)) = (arg_str(args, "old_string"), arg_str(args, "new_string")) else {
        return error_json("old_string and new_string required");
    };
    let replace_all = arg_bool(args, "replace_all");
    let output = replace_in_file(
        ctx,
        path,
        &resolved,
        &candidates,
        &anchors,
        old,
        new,
        replace_all,
    )
    .await;
    finish(ctx, output, Some((&resolved, path)))
}

#[allow(clippy::too_many_arguments)]
async fn replace_in_file(
    ctx: &FileToolContext<'_>,
    path: &str,
    resolved: &str,
    candidates: &[String],
    anchors: &Anchors,
    old: &str,
    new: &str,
    replace_all: bool,
) -> PatchOutput {
    let safe_roots = ctx.safe_roots().await;
    if let Some(message) = safety::write_denied_error(
        resolved,
        &as_strs(candidates),
        anchors.get(),
        &safe_roots,
        "Write",
    ) {
        return PatchOutput::failure(message);
    }
    let (raw, stat) = match ctx.fs.read_range(resolved, 0, None).await {
        Ok(Some(file)) => match String::from_utf8(file.data) {
            Ok(raw) => (raw, file.stat),
            Err(_) => {
                return PatchOutput::failure(format!(
                    "Failed to read file: {resolved} is not UTF-8 text"
                ));
            }
        },
        Ok(None) | Err(_) => {
            return PatchOutput::failure(format!("Failed to read file: {resolved}"));
        }
    };
    let (content, had_bom) = text::strip_bom(&raw);
    let replaced = match fuzzy::fuzzy_find_and_replace(content, old, new, replace_all) {
        Ok(replaced) => replaced,
        Err(error) => {
            let mut message = error.to_string();
            if error == MatchError::NotFound {
                message.push_str(&fuzzy::no_match_hint(old, content));
            }
            return PatchOutput::failure(message);
        }
    };
    // Models send LF; a CRLF file stays CRLF throughout, not just around the edit.
    let new_content = match text::detect_line_ending(content) {
        Some(ending) => text::normalize_line_endings(&replaced.content, ending),
        None => replaced.content,
    };
    let extension = paths::extension(resolved);
    if lint::is_gated(&extension)
        && let Err(message) = lint::check(&extension, &new_content)
    {
        return PatchOutput::failure(format!(
            "Failed to write changes: {}",
            lint::refusal(resolved, &extension, &message)
        ));
    }
    let data = if had_bom {
        format!("{BOM}{new_content}")
    } else {
        new_content.clone()
    };
    let real = candidates.last().map_or(resolved, String::as_str);
    let stale = match ctx.tracker.seen_stamp(real) {
        Some(seen) if stat.stamp() != Some(seen) => Some(stale_warning(path)),
        _ => None,
    };
    let outcome = match ctx.fs.write_atomic(resolved, data.as_bytes()).await {
        Ok(outcome) => outcome,
        Err(error) => {
            return PatchOutput::failure(format!(
                "Failed to write changes: Failed to write file: {error}"
            ));
        }
    };
    ctx.tracker.wrote(real, outcome.stamp());
    ctx.tracker.patch_succeeded(resolved);
    PatchOutput {
        success: true,
        diff: diff::unified(
            content,
            &new_content,
            &diff::label("a", path),
            &diff::label("b", path),
        ),
        files_modified: vec![resolved.to_owned()],
        lint: Some(lint::report(ctx.fs, resolved, Some(content), &new_content).await),
        warning: stale.or_else(|| outside_cwd_warning(ctx, path, resolved)),
        resolved_path: Some(resolved.to_owned()),
        ..PatchOutput::default()
    }
}

// ---------------------------------------------------------------------------
// V4A mode
// ---------------------------------------------------------------------------

async fn apply_v4a(ctx: &FileToolContext<'_>, args: &Args) -> ToolReply {
    let patch_text = match arg_str(args, "patch") {
        Some(text) if !text.is_empty() => text,
        _ => return error_json("patch content required"),
    };
    let ops = match v4a::parse(patch_text) {
        Ok(ops) => ops,
        Err(error) => {
            return finish(
                ctx,
                PatchOutput::failure(format!("Failed to parse patch: {error}")),
                None,
            );
        }
    };
    let anchors = Anchors::of(ctx);
    let cwd = paths::normalize(ctx.cwd);
    for op in &ops {
        for path in op.paths() {
            if paths::has_traversal_component(path) {
                return error_json(format!(
                    "V4A patch header contains '..' traversal: {}. Use the agent's cwd-relative path (no '..') or an absolute path under the working directory in '*** Update File:' / '*** Add File:' / '*** Delete File:' / '*** Move File:' headers.",
                    py_repr(path)
                ));
            }
            let resolved = ctx.resolve(path);
            if ctx.expanded(path).starts_with('/') && !paths::is_within(&resolved, &cwd) {
                return error_json(format!(
                    "V4A patch header names an absolute path outside the working directory ({cwd}): {}. Use a path relative to the agent's cwd in '*** Update File:' / '*** Add File:' / '*** Delete File:' / '*** Move File:' headers, or the replace mode for files elsewhere.",
                    py_repr(path)
                ));
            }
            let candidates = ctx.candidates(&resolved).await;
            if let Some(message) =
                safety::sensitive_write_error(path, &as_strs(&candidates), anchors.get())
            {
                return error_json(message);
            }
        }
    }

    let mut sim = Simulation::default();
    let mut errors = sim.run(ctx, &ops).await;
    if errors.is_empty() {
        errors = sim.check_targets(ctx, &anchors).await;
    }
    if !errors.is_empty() {
        let list: Vec<String> = errors.iter().map(|error| format!("  • {error}")).collect();
        return finish(
            ctx,
            PatchOutput::failure(format!(
                "Patch validation failed (no files were modified):\n{}",
                list.join("\n")
            )),
            None,
        );
    }
    let steps = sim.steps();
    if let Err(message) = execute(ctx, &mut sim, &steps).await {
        return finish(ctx, PatchOutput::failure(message), None);
    }
    reply(&sim.success(ctx, &steps).await)
}

/// What the patch does to one path, simulated in memory first.
struct FileState {
    /// The path as the patch first named it.
    shown: String,
    resolved: String,
    /// Symlink-resolved form, for the tracker and the safety checks.
    real: String,
    original: Option<Vec<u8>>,
    original_stat: Option<FileStat>,
    /// BOM and line endings the final text is written with.
    style: FileStyle,
    /// Simulated content without BOM; `None` = absent.
    current: Option<String>,
    /// A pure move brought the content here from this state.
    moved_from: Option<usize>,
    /// The final content (if any) is shown in `lint`.
    lint: bool,
    /// Written, removed or renamed by [`execute`].
    outcome_stamp: Option<crate::fs::FileStamp>,
}

#[derive(Default)]
struct Simulation {
    files: Vec<FileState>,
    by_path: HashMap<String, usize>,
    diffs: Vec<String>,
    created: Vec<String>,
    deleted: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Write(usize),
    Remove(usize),
    Rename { from: usize, to: usize },
}

impl Simulation {
    /// Index of the state of `path`, reading the file on first use.
    async fn load(&mut self, ctx: &FileToolContext<'_>, path: &str) -> Result<usize, String> {
        let resolved = ctx.resolve(path);
        if let Some(&index) = self.by_path.get(&resolved) {
            return Ok(index);
        }
        let (original, original_stat, current) = match ctx.fs.read_range(&resolved, 0, None).await {
            Ok(Some(file)) => {
                let decoded = String::from_utf8(file.data.clone())
                    .map_err(|_| format!("{path}: file is not UTF-8 text"))?;
                let (body, _) = text::strip_bom(&decoded);
                let body = body.to_owned();
                (Some(file.data), Some(file.stat), Some(body))
            }
            Ok(None) => (None, None, None),
            Err(FsError::IsADirectory(_)) => return Err(format!("{path}: is a directory")),
            Err(error) => return Err(format!("{path}: {error}")),
        };
        let style = FileStyle::of(original.as_deref().map(String::from_utf8_lossy).as_deref());
        let real = ctx
            .candidates(&resolved)
            .await
            .pop()
            .unwrap_or_else(|| resolved.clone());
        self.files.push(FileState {
            shown: path.to_owned(),
            resolved: resolved.clone(),
            real,
            original,
            original_stat,
            style,
            current,
            moved_from: None,
            lint: false,
            outcome_stamp: None,
        });
        let index = self.files.len() - 1;
        self.by_path.insert(resolved, index);
        Ok(index)
    }

    /// Plays every operation on the in-memory copies; returns all problems.
    async fn run(&mut self, ctx: &FileToolContext<'_>, ops: &[PatchOp]) -> Vec<String> {
        let mut errors = Vec::new();
        let mut changes = 0;
        for op in ops {
            if let Err(mut found) = self.run_op(ctx, op, &mut changes).await {
                errors.append(&mut found);
            }
        }
        if errors.is_empty() && changes == 0 {
            errors.push("Patch contains no changes (only context lines were provided)".to_owned());
        }
        errors
    }

    async fn run_op(
        &mut self,
        ctx: &FileToolContext<'_>,
        op: &PatchOp,
        changes: &mut usize,
    ) -> Result<(), Vec<String>> {
        match op {
            PatchOp::Add { path, lines } => {
                let index = self.load(ctx, path).await.map_err(|error| vec![error])?;
                let state = &mut self.files[index];
                if state.current.is_some() {
                    return Err(vec![format!(
                        "{path}: file already exists — use '*** Update File:' to change it"
                    )]);
                }
                // hermes writes added lines joined by newlines, without a final one.
                let content = lines.join("\n");
                self.diffs.push(diff::unified(
                    "",
                    &content,
                    "/dev/null",
                    &diff::label("b", path),
                ));
                state.current = Some(content);
                state.style = FileStyle::default();
                state.lint = true;
                self.created.push(path.clone());
                *changes += 1;
            }
            PatchOp::Delete { path } => {
                let index = self.load(ctx, path).await.map_err(|error| vec![error])?;
                let Some(before) = self.files[index].current.take() else {
                    return Err(vec![format!("{path}: file not found for deletion")]);
                };
                let shown = diff::unified(&before, "", &diff::label("a", path), "/dev/null");
                self.diffs.push(if shown.is_empty() {
                    format!("# Deleted: {path}")
                } else {
                    shown
                });
                self.files[index].lint = false;
                self.deleted.push(path.clone());
                *changes += 1;
            }
            PatchOp::Move { from, to } => {
                let source = self.load(ctx, from).await.map_err(|error| vec![error])?;
                let target = self.load(ctx, to).await.map_err(|error| vec![error])?;
                let mut problems = Vec::new();
                if self.files[source].current.is_none() {
                    problems.push(format!("{from}: source file not found for move"));
                }
                if self.files[target].current.is_some() {
                    problems.push(format!(
                        "{to}: destination already exists — move would overwrite"
                    ));
                }
                if !problems.is_empty() {
                    return Err(problems);
                }
                self.transfer(source, target, true);
                self.diffs.push(format!("# Moved: {from} -> {to}"));
                *changes += 1;
            }
            PatchOp::Update {
                path,
                move_to,
                hunks,
            } => {
                let index = self.load(ctx, path).await.map_err(|error| vec![error])?;
                let Some(before) = self.files[index].current.clone() else {
                    return Err(vec![format!("{path}: File not found: {path}")]);
                };
                let mut text = before.clone();
                let mut problems = Vec::new();
                for (number, hunk) in hunks.iter().enumerate() {
                    match apply_hunk(&mut text, hunk) {
                        Ok(true) => *changes += 1,
                        Ok(false) => {}
                        Err(problem) => problems.push(problem.describe(path, number + 1, &text)),
                    }
                }
                if !problems.is_empty() {
                    return Err(problems);
                }
                let destination = match move_to {
                    Some(to) => {
                        let target = self.load(ctx, to).await.map_err(|error| vec![error])?;
                        if target != index && self.files[target].current.is_some() {
                            return Err(vec![format!(
                                "{to}: destination already exists — move would overwrite"
                            )]);
                        }
                        *changes += 1;
                        target
                    }
                    None => index,
                };
                let to_label = diff::label("b", move_to.as_deref().unwrap_or(path));
                self.diffs.push(diff::unified(
                    &before,
                    &text,
                    &diff::label("a", path),
                    &to_label,
                ));
                self.files[index].current = Some(text);
                if destination != index {
                    self.transfer(index, destination, false);
                }
                self.files[destination].lint = true;
            }
        }
        Ok(())
    }

    /// Moves the simulated content of `from` to `to`.
    fn transfer(&mut self, from: usize, to: usize, pure: bool) {
        let content = self.files[from].current.take();
        let style = self.files[from].style;
        let lint = std::mem::take(&mut self.files[from].lint);
        let target = &mut self.files[to];
        target.current = content;
        target.style = style;
        target.lint = lint;
        target.moved_from = pure.then_some(from);
    }

    /// Bytes a state's final content is written as.
    fn encoded(&self, index: usize) -> Option<Vec<u8>> {
        let state = &self.files[index];
        state
            .current
            .as_deref()
            .map(|content| state.style.apply(content).into_owned().into_bytes())
    }

    /// Write permission and syntax gate for every file the patch changes.
    async fn check_targets(&self, ctx: &FileToolContext<'_>, anchors: &Anchors) -> Vec<String> {
        let safe_roots = ctx.safe_roots().await;
        let mut errors = Vec::new();
        for (index, state) in self.files.iter().enumerate() {
            let encoded = self.encoded(index);
            if encoded == state.original {
                continue;
            }
            let verb = if state.current.is_none() {
                "Delete"
            } else {
                "Write"
            };
            let candidates = [state.resolved.as_str(), state.real.as_str()];
            if let Some(message) = safety::write_denied_error(
                &state.resolved,
                &candidates,
                anchors.get(),
                &safe_roots,
                verb,
            ) {
                errors.push(message);
                continue;
            }
            let extension = paths::extension(&state.resolved);
            if let Some(content) = &state.current
                && lint::is_gated(&extension)
                && let Err(message) = lint::check(&extension, content)
            {
                errors.push(lint::refusal(&state.resolved, &extension, &message));
            }
        }
        errors
    }

    /// The file operations that turn the originals into the simulated result:
    /// renames first, then writes, removals last (so a failed write has not
    /// yet deleted anything it would need to restore).
    fn steps(&self) -> Vec<Step> {
        let mut renames = Vec::new();
        let mut removals = Vec::new();
        let mut renamed_to = vec![false; self.files.len()];
        for (index, state) in self.files.iter().enumerate() {
            if state.original.is_some() && state.current.is_none() {
                // A file that only moved is renamed, which keeps its mode.
                let target = self.files.iter().enumerate().position(|(to, dest)| {
                    dest.moved_from == Some(index)
                        && dest.original.is_none()
                        && self.encoded(to) == state.original
                });
                match target {
                    Some(to) => {
                        renamed_to[to] = true;
                        renames.push(Step::Rename { from: index, to });
                    }
                    None => removals.push(Step::Remove(index)),
                }
            }
        }
        let writes = self.files.iter().enumerate().filter_map(|(index, state)| {
            (state.current.is_some() && !renamed_to[index] && self.encoded(index) != state.original)
                .then_some(Step::Write(index))
        });
        renames.extend(writes);
        renames.append(&mut removals);
        renames
    }

    async fn success(&self, ctx: &FileToolContext<'_>, steps: &[Step]) -> PatchOutput {
        let mut touched = vec![false; self.files.len()];
        for step in steps {
            match *step {
                Step::Write(index) | Step::Remove(index) => touched[index] = true,
                Step::Rename { from, to } => {
                    touched[from] = true;
                    touched[to] = true;
                }
            }
        }
        let mut lint = BTreeMap::new();
        let mut warnings = Vec::new();
        let mut files_modified = Vec::new();
        for (index, state) in self.files.iter().enumerate() {
            if state.lint
                && let Some(content) = &state.current
            {
                let before = state.original.as_deref().map(String::from_utf8_lossy);
                let before = before.as_deref().map(|text| text::strip_bom(text).0);
                lint.insert(
                    state.shown.clone(),
                    lint::report(ctx.fs, &state.resolved, before, content).await,
                );
            }
            if let (Some(seen), Some(stat)) =
                (ctx.tracker.seen_stamp(&state.real), state.original_stat)
                && stat.stamp() != Some(seen)
            {
                warnings.push(stale_warning(&state.shown));
            }
            if touched[index] {
                files_modified.push(state.resolved.clone());
                ctx.tracker.wrote(&state.real, state.outcome_stamp);
                ctx.tracker.patch_succeeded(&state.resolved);
            }
        }
        PatchOutput {
            success: true,
            diff: self.diffs.join("\n"),
            resolved_path: (files_modified.len() == 1).then(|| files_modified[0].clone()),
            files_modified,
            files_created: self.created.clone(),
            files_deleted: self.deleted.clone(),
            lint: (!lint.is_empty()).then(|| Value::Object(lint.into_iter().collect())),
            warning: (!warnings.is_empty()).then(|| warnings.join(" | ")),
            ..PatchOutput::default()
        }
    }
}

/// Runs the steps; on the first failure undoes the ones already done.
async fn execute(
    ctx: &FileToolContext<'_>,
    sim: &mut Simulation,
    steps: &[Step],
) -> Result<(), String> {
    for (done, step) in steps.iter().enumerate() {
        let result = match *step {
            Step::Write(index) => {
                let data = sim.encoded(index).unwrap_or_default();
                match ctx.fs.write_atomic(&sim.files[index].resolved, &data).await {
                    Ok(outcome) => {
                        sim.files[index].outcome_stamp = outcome.stamp();
                        Ok(())
                    }
                    Err(error) => Err((index, error)),
                }
            }
            Step::Remove(index) => ctx
                .fs
                .remove(&sim.files[index].resolved)
                .await
                .map_err(|error| (index, error)),
            Step::Rename { from, to } => ctx
                .fs
                .rename(&sim.files[from].resolved, &sim.files[to].resolved)
                .await
                .map_err(|error| (from, error)),
        };
        if let Err((index, error)) = result {
            let failure = format!("{}: {error}", sim.files[index].shown);
            let rollback_errors = undo(ctx, sim, &steps[..done]).await;
            if rollback_errors.is_empty() {
                return Err(format!(
                    "Apply phase failed; every change was rolled back (no files were modified):\n  • {failure}"
                ));
            }
            let mut lines = vec![format!("  • {failure}")];
            lines.extend(
                rollback_errors
                    .iter()
                    .map(|error| format!("  • rollback: {error}")),
            );
            return Err(format!(
                "Apply phase failed and the rollback was incomplete (state may be inconsistent — run `git diff` to assess):\n{}",
                lines.join("\n")
            ));
        }
    }
    Ok(())
}

async fn undo(ctx: &FileToolContext<'_>, sim: &Simulation, done: &[Step]) -> Vec<String> {
    let mut errors = Vec::new();
    for step in done.iter().rev() {
        let result = match *step {
            Step::Write(index) | Step::Remove(index) => {
                let state = &sim.files[index];
                match &state.original {
                    Some(bytes) => ctx.fs.write_atomic(&state.resolved, bytes).await.map(drop),
                    None => ctx.fs.remove(&state.resolved).await,
                }
                .map_err(|error| format!("{}: {error}", state.shown))
            }
            Step::Rename { from, to } => ctx
                .fs
                .rename(&sim.files[to].resolved, &sim.files[from].resolved)
                .await
                .map_err(|error| format!("{}: {error}", sim.files[to].shown)),
        };
        if let Err(error) = result {
            errors.push(error);
        }
    }
    errors
}

/// Why a hunk did not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HunkProblem {
    HintMissing(String),
    HintAmbiguous(String, usize),
    NotFound {
        hint: Option<String>,
        error: MatchError,
        search: String,
    },
}

impl HunkProblem {
    /// hermes' validation message for hunk `number` of `path`.
    fn describe(&self, path: &str, number: usize, text: &str) -> String {
        match self {
            HunkProblem::HintMissing(hint) => {
                format!("{path}: addition-only hunk context hint '{hint}' not found")
            }
            HunkProblem::HintAmbiguous(hint, count) => format!(
                "{path}: addition-only hunk context hint '{hint}' is ambiguous ({count} occurrences)"
            ),
            HunkProblem::NotFound {
                hint,
                error,
                search,
            } => {
                let label = hint
                    .as_ref()
                    .map_or_else(|| "(no hint)".to_owned(), |hint| format!("'{hint}'"));
                let mut message = format!("{path}: hunk {number} {label} not found — {error}");
                if *error == MatchError::NotFound {
                    message.push_str(&fuzzy::no_match_hint(search, text));
                }
                message
            }
        }
    }
}

/// Applies one hunk to `text`. `Ok(false)` for an inert (context-only) hunk.
fn apply_hunk(text: &mut String, hunk: &Hunk) -> Result<bool, HunkProblem> {
    if hunk.is_inert() {
        return Ok(false);
    }
    let replacement = hunk.replacement_text();
    let Some(search) = hunk.search_text() else {
        insert_added_lines(text, hunk.hint.as_deref(), &replacement)?;
        return Ok(true);
    };
    let error = match fuzzy::fuzzy_find_and_replace(text, &search, &replacement, false) {
        Ok(replaced) => {
            *text = replaced.content;
            return Ok(true);
        }
        Err(error) => error,
    };
    // The hint narrows the search to its surroundings (500 bytes before,
    // 2000 after), which also settles matches that are ambiguous file-wide.
    if let Some(hint) = &hunk.hint
        && let Some(position) = text.find(hint.as_str())
    {
        let start = text::floor_boundary(text, position.saturating_sub(500));
        let end = text::floor_boundary(text, position.saturating_add(2000));
        if let Ok(replaced) =
            fuzzy::fuzzy_find_and_replace(&text[start..end], &search, &replacement, false)
        {
            *text = format!("{}{}{}", &text[..start], replaced.content, &text[end..]);
            return Ok(true);
        }
    }
    Err(HunkProblem::NotFound {
        hint: hunk.hint.clone(),
        error,
        search,
    })
}

/// An addition-only hunk goes after the line holding its hint, or at the end.
fn insert_added_lines(
    text: &mut String,
    hint: Option<&str>,
    added: &str,
) -> Result<(), HunkProblem> {
    let Some(hint) = hint else {
        let body = text.trim_end_matches('\n');
        *text = format!("{body}\n{added}\n");
        return Ok(());
    };
    match count_overlapping(text, hint) {
        0 => Err(HunkProblem::HintMissing(hint.to_owned())),
        1 => {
            let position = text.find(hint).unwrap_or(0);
            match text[position..].find('\n') {
                Some(newline) => text.insert_str(position + newline + 1, &format!("{added}\n")),
                None => {
                    text.push('\n');
                    text.push_str(added);
                }
            }
            Ok(())
        }
        count => Err(HunkProblem::HintAmbiguous(hint.to_owned(), count)),
    }
}

/// Occurrences of `needle`, overlapping ones included (hermes' count).
fn count_overlapping(haystack: &str, needle: &str) -> usize {
    if needle.is_empty() {
        return 0;
    }
    let mut count = 0;
    let mut from = 0;
    while let Some(found) = haystack[from..].find(needle) {
        count += 1;
        let at = from + found;
        from = at + haystack[at..].chars().next().map_or(1, char::len_utf8);
    }
    count
}

#[cfg(test)]
#[path = "patch_tests.rs"]
mod tests;
