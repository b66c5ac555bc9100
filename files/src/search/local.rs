//! In-process search with ripgrep's own crates: `ignore` walks the tree the way
//! `rg` does (`.gitignore` / `.ignore` / `.rgignore` inside git repos, hidden
//! entries skipped, symlinks not followed, `--glob` overrides), `grep-searcher`
//! scans each file line by line and skips it at the first NUL byte.
//!
//! Files are searched in path order so that a capped answer is still the
//! first N hits of the full, deterministic answer. This is blocking code; the
//! async caller runs it on the blocking pool.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkMatch};
use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;

use super::{
    FileCount, FileHit, LineHit, OutputMode, SearchHits, SearchQuery, SearchTarget, sort_by_mtime,
};
use crate::fs::FsError;

/// Runs `query` against the local file system.
pub fn search(query: &SearchQuery) -> Result<SearchHits, FsError> {
    let root = Path::new(&query.root);
    if std::fs::metadata(root).is_err() {
        return Ok(SearchHits::RootNotFound);
    }
    match &query.target {
        SearchTarget::Files { glob } => search_names(query, root, glob),
        SearchTarget::Content {
            pattern,
            file_glob,
            mode,
            context,
        } => {
            let matcher = build_matcher(pattern)?;
            let files = walk(root, file_glob.as_deref())?;
            let mut searcher = SearcherBuilder::new()
                .line_number(true)
                .binary_detection(BinaryDetection::quit(0))
                .before_context(*context)
                .after_context(*context)
                .build();
            match mode {
                OutputMode::Content => search_lines(query, &files, &matcher, &mut searcher),
                OutputMode::FilesOnly | OutputMode::Count => {
                    search_counts(query, &files, &matcher, &mut searcher, *mode)
                }
            }
        }
    }
}

/// A line-oriented matcher, as `rg` builds one without `--multiline`.
fn build_matcher(pattern: &str) -> Result<RegexMatcher, FsError> {
    RegexMatcherBuilder::new()
        .line_terminator(Some(b'\n'))
        .build(pattern)
        .map_err(|error| FsError::Search(error.to_string()))
}

/// Regular files under `root` that `rg` would search, sorted by path.
fn walk(root: &Path, glob: Option<&str>) -> Result<Vec<(String, PathBuf)>, FsError> {
    let mut builder = WalkBuilder::new(root);
    builder
        .standard_filters(true)
        .add_custom_ignore_filename(".rgignore")
        .follow_links(false);
    if let Some(glob) = glob {
        let base = if root.is_dir() {
            root
        } else {
            root.parent().unwrap_or(root)
        };
        let mut overrides = OverrideBuilder::new(base);
        overrides
            .add(glob)
            .map_err(|error| FsError::Search(format!("invalid glob {glob:?}: {error}")))?;
        let overrides = overrides
            .build()
            .map_err(|error| FsError::Search(format!("invalid glob {glob:?}: {error}")))?;
        builder.overrides(overrides);
    }
    let mut files: Vec<(String, PathBuf)> = builder
        .build()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_some_and(|kind| kind.is_file()))
        .map(|entry| {
            let path = entry.into_path();
            (path.to_string_lossy().into_owned(), path)
        })
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

/// File names matching `glob`, among the files `rg` would search. The glob
/// filters names only: as an `rg --glob` override it would also whitelist
/// directories (`*` would list `.git/` and ignored build trees).
fn search_names(query: &SearchQuery, root: &Path, glob: &str) -> Result<SearchHits, FsError> {
    let matcher = globset::Glob::new(glob)
        .map_err(|error| FsError::Search(format!("invalid glob {glob:?}: {error}")))?
        .compile_matcher();
    let mut files: Vec<FileHit> = walk(root, None)?
        .into_iter()
        .filter(|(_, path)| path.file_name().is_some_and(|name| matcher.is_match(name)))
        .map(|(display, path)| FileHit {
            mtime_ns: mtime_ns(&path),
            path: display,
        })
        .collect();
    sort_by_mtime(&mut files);
    let complete = files.len() <= query.max_entries;
    files.truncate(query.max_entries);
    Ok(SearchHits::Files { files, complete })
}

fn mtime_ns(path: &Path) -> Option<i64> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    let since = modified.duration_since(UNIX_EPOCH).ok()?;
    i64::try_from(since.as_nanos()).ok()
}

fn search_lines(
    query: &SearchQuery,
    files: &[(String, PathBuf)],
    matcher: &RegexMatcher,
    searcher: &mut Searcher,
) -> Result<SearchHits, FsError> {
    let mut lines = Vec::new();
    // One more than asked for tells "exactly max" from "more than max".
    let wanted = query.max_entries.saturating_add(1);
    for (display, path) in files {
        let mut sink = LineSink {
            path: display,
            lines: &mut lines,
            wanted,
        };
        // Unreadable files are skipped, as rg skips them with a warning.
        let _ = searcher.search_path(matcher, path, &mut sink);
        if lines.len() >= wanted {
            break;
        }
    }
    let complete = lines.len() <= query.max_entries;
    lines.truncate(query.max_entries);
    Ok(SearchHits::Lines { lines, complete })
}

fn search_counts(
    query: &SearchQuery,
    files: &[(String, PathBuf)],
    matcher: &RegexMatcher,
    searcher: &mut Searcher,
    mode: OutputMode,
) -> Result<SearchHits, FsError> {
    let mut counts = Vec::new();
    let wanted = query.max_entries.saturating_add(1);
    for (display, path) in files {
        let mut sink = CountSink {
            count: 0,
            stop_at_first: mode == OutputMode::FilesOnly,
        };
        if searcher.search_path(matcher, path, &mut sink).is_err() || sink.count == 0 {
            continue;
        }
        counts.push(FileCount {
            path: display.clone(),
            count: sink.count,
        });
        if counts.len() >= wanted {
            break;
        }
    }
    let complete = counts.len() <= query.max_entries;
    counts.truncate(query.max_entries);
    Ok(match mode {
        OutputMode::FilesOnly => SearchHits::Files {
            files: counts
                .into_iter()
                .map(|count| FileHit {
                    path: count.path,
                    mtime_ns: None,
                })
                .collect(),
            complete,
        },
        _ => SearchHits::Counts { counts, complete },
    })
}

/// Decodes one reported line without its terminator.
fn line_text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

struct LineSink<'a> {
    path: &'a str,
    lines: &'a mut Vec<LineHit>,
    wanted: usize,
}

impl LineSink<'_> {
    fn push(&mut self, first_line: Option<u64>, bytes: &[u8], is_context: bool) -> bool {
        let first_line = first_line.unwrap_or(0);
        // Without multi-line mode a report is one line; split anyway so a
        // backend quirk can never glue two lines together.
        for (index, line) in bytes.split_inclusive(|&byte| byte == b'\n').enumerate() {
            self.lines.push(LineHit {
                path: self.path.to_owned(),
                line: first_line + index as u64,
                text: line_text(line),
                is_context,
            });
        }
        self.lines.len() < self.wanted
    }
}

impl Sink for LineSink<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, found: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        Ok(self.push(found.line_number(), found.bytes(), false))
    }

    fn context(&mut self, _: &Searcher, near: &SinkContext<'_>) -> Result<bool, std::io::Error> {
        Ok(self.push(near.line_number(), near.bytes(), true))
    }
}

struct CountSink {
    count: u64,
    stop_at_first: bool,
}

impl Sink for CountSink {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, found: &SinkMatch<'_>) -> Result<bool, std::io::Error> {
        self.count += found.lines().count() as u64;
        Ok(!self.stop_at_first)
    }
}

#[cfg(test)]
#[path = "local_tests.rs"]
mod tests;
