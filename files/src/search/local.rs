//! In-process search with ripgrep's own crates: `ignore` walks the tree the way
//! `rg` does (`.gitignore` / `.ignore` / `.rgignore` inside git repos, hidden
//! entries skipped, symlinks not followed, `--glob` overrides), `grep-searcher`
//! scans each file line by line and skips it at the first NUL byte.
//!
//! Files are searched in path order (by a few threads when there are many) so
//! that a capped answer is still the first N hits of the full, deterministic
//! answer. This is blocking code; the async caller runs it on the blocking pool.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
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
            let mut builder = SearcherBuilder::new();
            builder
                .line_number(true)
                .binary_detection(BinaryDetection::quit(0))
                .before_context(*context)
                .after_context(*context);
            match mode {
                OutputMode::Content => Ok(search_lines(query, &files, &matcher, &builder)),
                OutputMode::FilesOnly | OutputMode::Count => {
                    Ok(search_counts(query, &files, &matcher, &builder, *mode))
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
    builder: &SearcherBuilder,
) -> SearchHits {
    // One more than asked for tells "exactly max" from "more than max".
    let wanted = query.max_entries.saturating_add(1);
    let per_file = search_in_order(files, wanted, builder, |searcher, display, path| {
        let mut lines = Vec::new();
        let mut sink = LineSink {
            path: display,
            lines: &mut lines,
            wanted,
        };
        // Unreadable files are skipped, as rg skips them with a warning.
        let _ = searcher.search_path(matcher, path, &mut sink);
        (lines.len(), lines)
    });
    let mut lines: Vec<LineHit> = per_file.into_iter().flatten().collect();
    let complete = lines.len() <= query.max_entries;
    lines.truncate(query.max_entries);
    SearchHits::Lines { lines, complete }
}

fn search_counts(
    query: &SearchQuery,
    files: &[(String, PathBuf)],
    matcher: &RegexMatcher,
    builder: &SearcherBuilder,
    mode: OutputMode,
) -> SearchHits {
    let wanted = query.max_entries.saturating_add(1);
    let per_file = search_in_order(files, wanted, builder, |searcher, display, path| {
        let mut sink = CountSink {
            count: 0,
            stop_at_first: mode == OutputMode::FilesOnly,
        };
        let found = searcher.search_path(matcher, path, &mut sink).is_ok() && sink.count > 0;
        let entry = found.then(|| FileCount {
            path: display.to_owned(),
            count: sink.count,
        });
        (usize::from(found), entry)
    });
    let mut counts: Vec<FileCount> = per_file.into_iter().flatten().collect();
    let complete = counts.len() <= query.max_entries;
    counts.truncate(query.max_entries);
    match mode {
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
    }
}

/// Files per worker thread below which searching in parallel does not pay.
const FILES_PER_WORKER: usize = 64;
const MAX_WORKERS: usize = 4;

/// Searches `files` in order and returns each searched file's result, in file
/// order, stopping once `wanted` entries were found (`search_one` returns
/// how many entries its result holds). Large lists are shared by a few
/// threads that take files in increasing order, so every file before the
/// last one taken was searched: the answer is the same as a sequential
/// search's, only sooner.
fn search_in_order<T, F>(
    files: &[(String, PathBuf)],
    wanted: usize,
    builder: &SearcherBuilder,
    search_one: F,
) -> Vec<T>
where
    T: Send,
    F: Fn(&mut Searcher, &str, &Path) -> (usize, T) + Sync,
{
    let workers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(MAX_WORKERS)
        .min(files.len() / FILES_PER_WORKER)
        .max(1);
    let mut results: Vec<(usize, usize, T)> = Vec::new();
    if workers == 1 {
        let mut searcher = builder.build();
        let mut found = 0;
        for (index, (display, path)) in files.iter().enumerate() {
            let (size, result) = search_one(&mut searcher, display, path);
            found += size;
            results.push((index, size, result));
            if found >= wanted {
                break;
            }
        }
    } else {
        let next = AtomicUsize::new(0);
        let found = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers)
                .map(|_| {
                    scope.spawn(|| {
                        let mut searcher = builder.build();
                        let mut mine = Vec::new();
                        while found.load(Ordering::Relaxed) < wanted {
                            let index = next.fetch_add(1, Ordering::Relaxed);
                            let Some((display, path)) = files.get(index) else {
                                break;
                            };
                            let (size, result) = search_one(&mut searcher, display, path);
                            found.fetch_add(size, Ordering::Relaxed);
                            mine.push((index, size, result));
                        }
                        mine
                    })
                })
                .collect();
            for handle in handles {
                // A worker that panicked loses its files; the rest still count.
                if let Ok(mut mine) = handle.join() {
                    results.append(&mut mine);
                }
            }
        });
        results.sort_by_key(|(index, _, _)| *index);
    }
    // Keep the prefix a sequential search would have produced.
    let mut total = 0;
    let mut kept = Vec::with_capacity(results.len());
    for (_, size, result) in results {
        if total >= wanted {
            break;
        }
        total += size;
        kept.push(result);
    }
    kept
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
