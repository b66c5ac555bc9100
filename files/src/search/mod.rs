//! The search primitive behind `search_files`: what a backend is asked and what
//! it answers.
//!
//! Backends return *every* hit up to [`SearchQuery::max_entries`], already
//! sorted; the tool pages, filters secret files and shapes the JSON. Two ways to
//! serve it are provided: [`local::search`] runs in-process (ripgrep's crates,
//! `.gitignore`-aware), and [`shell`] builds one `rg` (else `find | grep`) script
//! and parses its output, for backends that can only run commands.

pub mod local;
pub mod shell;

/// One search request. `root` is absolute and normalized; it may name a file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SearchQuery {
    pub root: String,
    pub target: SearchTarget,
    /// Stop after this many entries (lines, files or counts) and report the
    /// answer as incomplete.
    pub max_entries: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SearchTarget {
    /// Regex search inside files (ripgrep syntax, line by line).
    Content {
        pattern: String,
        /// ripgrep `--glob` semantics: without `/` it matches file names.
        file_glob: Option<String>,
        mode: OutputMode,
        /// Lines of context before and after each match.
        context: usize,
    },
    /// File names matching a glob (see [`file_name_glob`]).
    Files { glob: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OutputMode {
    Content,
    FilesOnly,
    Count,
}

/// What a backend found. Paths start with [`SearchQuery::root`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SearchHits {
    /// The root does not exist (not an error: the tool suggests similar names).
    RootNotFound,
    /// Content mode: matching lines and their context lines, sorted by path
    /// then line number.
    Lines { lines: Vec<LineHit>, complete: bool },
    /// Files-only mode (sorted by path), or the files target (sorted by
    /// modification time, newest first, ties by path).
    Files { files: Vec<FileHit>, complete: bool },
    /// Count mode: matching lines per file, files with none left out, sorted by path.
    Counts {
        counts: Vec<FileCount>,
        complete: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LineHit {
    pub path: String,
    pub line: u64,
    /// The line without its terminator, decoded as UTF-8 (invalid bytes replaced).
    pub text: String,
    pub is_context: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileHit {
    pub path: String,
    pub mtime_ns: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileCount {
    pub path: String,
    pub count: u64,
}

/// The glob the files target matches names with, derived from the model's
/// pattern as hermes does: only the last `/` component counts, and a pattern
/// not starting with `*` gets one (`config` finds `app_config`, `*.py` stays).
pub fn file_name_glob(pattern: &str) -> String {
    let last = pattern.rsplit('/').next().unwrap_or(pattern);
    if last.starts_with('*') {
        last.to_owned()
    } else {
        format!("*{last}")
    }
}

/// Sorts lines by (path, line) and drops duplicates, the order every backend reports.
pub(crate) fn sort_lines(lines: &mut Vec<LineHit>) {
    lines.sort_by(|a, b| a.path.cmp(&b.path).then(a.line.cmp(&b.line)));
    lines.dedup_by(|a, b| a.path == b.path && a.line == b.line);
}

/// Newest first, ties (and unknown times) by path.
pub(crate) fn sort_by_mtime(files: &mut [FileHit]) {
    files.sort_by(|a, b| {
        b.mtime_ns
            .cmp(&a.mtime_ns)
            .then_with(|| a.path.cmp(&b.path))
    });
}

#[cfg(test)]
pub(crate) mod test_fixture;

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
