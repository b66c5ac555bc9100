//! The four tool entry points. Each takes the model's already-parsed JSON
//! arguments and returns a [`ToolReply`]: how the call ended and the result
//! document in hermes' spelling (`json.dumps(…, ensure_ascii=False)`).

mod patch;
mod read;
mod search;
mod write;

use serde_json::{Map, Value};

use caduceus_common::result::ToolReply;

pub use patch::patch;
pub use read::read_file;
pub use search::search_files;
pub use write::write_file;

use crate::fs::FileSystem;
use crate::paths;
use crate::safety::{self, SafetyAnchors};
use crate::tracker::ReadTracker;

/// Limits and anchors of the file tools (hermes' defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileToolsConfig {
    /// Characters of numbered content one read returns (`file_read_max_chars`).
    pub max_read_chars: usize,
    /// Upper bound of read_file's `limit` (`tool_output.max_lines`).
    pub max_read_lines: usize,
    /// Characters shown of one line before `... [truncated]`
    /// (`tool_output.max_line_length`).
    pub max_line_length: usize,
    /// Writes must land under one of these `:`-separated directories
    /// (`CADUCEUS_WRITE_SAFE_ROOT`); `None` allows everything not denied.
    pub write_safe_root: Option<String>,
    /// The caduceus home inside this environment, whose config, credentials
    /// and state are protected; `None` means `~/.caduceus`.
    pub caduceus_home: Option<String>,
    /// Entries a search collects before it stops counting (`total_count` is
    /// then a lower bound and `limit_reason` says so).
    pub max_search_entries: usize,
}

impl Default for FileToolsConfig {
    fn default() -> Self {
        Self {
            max_read_chars: 100_000,
            max_read_lines: 2000,
            max_line_length: 2000,
            write_safe_root: None,
            caduceus_home: None,
            max_search_entries: 10_000,
        }
    }
}

/// Everything a tool call needs besides its arguments.
#[derive(Clone, Copy)]
pub struct FileToolContext<'a> {
    /// File access inside the task's environment.
    pub fs: &'a dyn FileSystem,
    /// The environment's live shell cwd; relative paths resolve against it.
    pub cwd: &'a str,
    /// The environment user's home, for `~`.
    pub home: Option<&'a str>,
    /// The task's read-loop state.
    pub tracker: &'a ReadTracker,
    pub config: &'a FileToolsConfig,
}

impl<'a> FileToolContext<'a> {
    /// Absolute normalized path of a path argument.
    pub fn resolve(&self, path: &str) -> String {
        paths::canonical_path(self.cwd, path, self.home)
    }

    /// The path as the model wrote it, `~` expanded (what hermes' messages show).
    fn expanded(&self, path: &str) -> String {
        paths::expand_tilde(path, self.home)
    }

    fn caduceus_home(&self) -> Option<String> {
        match (&self.config.caduceus_home, self.home) {
            (Some(home), _) => Some(paths::canonical_path(self.cwd, home, self.home)),
            (None, Some(home)) => Some(paths::join(home, ".caduceus")),
            (None, None) => None,
        }
    }

    /// The lexical path and, when it differs, the symlink-resolved one.
    async fn candidates(&self, resolved: &str) -> Vec<String> {
        let mut candidates = vec![resolved.to_owned()];
        if let Ok(real) = self.fs.resolve_symlinks(resolved).await
            && real != resolved
        {
            candidates.push(real);
        }
        candidates
    }

    /// The write guards every tool that writes a path the model chose goes
    /// through (`write_file`, and `text_to_speech`'s `output_path`): system
    /// paths, the caduceus config, credential files and the write safe
    /// root. `Ok` is the resolved path to write, with its candidates (the
    /// lexical path and the symlink-resolved one).
    pub async fn check_write(&self, path: &str) -> Result<(String, Vec<String>), WriteRefusal> {
        let resolved = self.resolve(path);
        let candidates = self.candidates(&resolved).await;
        let anchors = Anchors::of(self);
        if let Some(message) =
            safety::sensitive_write_error(path, &as_strs(&candidates), anchors.get())
        {
            return Err(WriteRefusal::Sensitive(message));
        }
        let safe_roots = self.safe_roots().await;
        match safety::write_denied_error(
            &resolved,
            &as_strs(&candidates),
            anchors.get(),
            &safe_roots,
            "Write",
        ) {
            Some(message) => Err(WriteRefusal::Denied(message)),
            None => Ok((resolved, candidates)),
        }
    }

    /// Safe roots, resolved the same way as the paths compared to them.
    async fn safe_roots(&self) -> Vec<String> {
        let Some(spec) = &self.config.write_safe_root else {
            return Vec::new();
        };
        let mut roots = Vec::new();
        for root in spec.split(':').filter(|root| !root.trim().is_empty()) {
            let lexical = self.resolve(root.trim());
            let real = self
                .fs
                .resolve_symlinks(&lexical)
                .await
                .unwrap_or_else(|_| lexical.clone());
            roots.push(lexical);
            if !roots.contains(&real) {
                roots.push(real);
            }
        }
        roots
    }
}

/// Why [`FileToolContext::check_write`] refused a path (hermes answers the
/// two guards in different shapes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteRefusal {
    /// A system path or the caduceus config (`_check_sensitive_path`).
    Sensitive(String),
    /// A credential file or outside the write safe root (`get_write_denied_error`).
    Denied(String),
}

impl WriteRefusal {
    pub fn message(&self) -> &str {
        match self {
            WriteRefusal::Sensitive(message) | WriteRefusal::Denied(message) => message,
        }
    }
}

/// Rules anchored for one call (owns the computed caduceus home).
struct Anchors {
    home: Option<String>,
    caduceus_home: Option<String>,
}

impl Anchors {
    fn of(ctx: &FileToolContext<'_>) -> Self {
        Self {
            home: ctx.home.map(str::to_owned),
            caduceus_home: ctx.caduceus_home(),
        }
    }

    fn get(&self) -> SafetyAnchors<'_> {
        SafetyAnchors {
            home: self.home.as_deref(),
            caduceus_home: self.caduceus_home.as_deref(),
        }
    }
}

fn as_strs(values: &[String]) -> Vec<&str> {
    values.iter().map(String::as_str).collect()
}

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

type Args = Map<String, Value>;

fn arg_str<'a>(args: &'a Args, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// Python's `int(value)` with a default for anything that does not convert.
fn arg_int(args: &Args, key: &str, default: i64) -> i64 {
    match args.get(key) {
        Some(Value::Number(number)) => number
            .as_i64()
            .or_else(|| {
                number
                    .as_f64()
                    .filter(|value| value.is_finite())
                    .map(|value| value as i64)
            })
            .unwrap_or(default),
        Some(Value::String(text)) => text.trim().parse().unwrap_or(default),
        Some(Value::Bool(flag)) => i64::from(*flag),
        _ => default,
    }
}

fn arg_bool(args: &Args, key: &str) -> bool {
    match args.get(key) {
        Some(Value::Bool(flag)) => *flag,
        Some(Value::String(text)) => text.trim().eq_ignore_ascii_case("true"),
        Some(Value::Number(number)) => number.as_f64().is_some_and(|value| value != 0.0),
        _ => false,
    }
}

/// A successful result in hermes' spelling.
fn reply<T: serde::Serialize>(value: &T) -> ToolReply {
    ToolReply::json(value)
}

/// A failed result: a document with an `error` field and more.
fn failed_json<T: serde::Serialize>(value: &T) -> ToolReply {
    ToolReply::failed_json(value)
}

/// A failed result: `{"error": message}`.
fn error_json(message: impl Into<String>) -> ToolReply {
    ToolReply::error(message)
}

/// hermes' workspace-divergence warning: a relative path that resolved
/// outside the cwd (only possible through `..`).
fn outside_cwd_warning(ctx: &FileToolContext<'_>, path: &str, resolved: &str) -> Option<String> {
    let expanded = ctx.expanded(path);
    if expanded.starts_with('/') || paths::is_within(resolved, &paths::normalize(ctx.cwd)) {
        return None;
    }
    Some(format!(
        "Relative path {} resolved to {}, which is OUTSIDE the active workspace ({}). The edit will land in a different directory than the terminal's cwd. If this is not intended (e.g. a git-worktree session writing into the main checkout), pass an absolute path under the workspace instead.",
        crate::text::py_repr(path),
        crate::text::py_repr(resolved),
        crate::text::py_repr(&paths::normalize(ctx.cwd))
    ))
}

fn stale_warning(path: &str) -> String {
    format!(
        "Warning: {path} was modified since you last read it (external edit or concurrent agent). The content you read may be stale. Consider re-reading the file to verify before writing."
    )
}

#[cfg(test)]
pub(crate) mod test_support;
