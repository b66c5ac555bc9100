//! Search for backends that can only run commands (SSH exec, `docker exec`,
//! Modal/Daytona process APIs): [`shell_command`] builds one POSIX `sh` script,
//! the backend runs it and hands stdout, stderr and the exit code to
//! [`parse_shell_output`], which returns the same [`SearchHits`] as the local search.
//!
//! The script prefers `rg` (gitignore-aware, `--null` separated so any file name
//! parses) and falls back to `find | xargs grep -E` (hidden entries pruned,
//! binaries skipped with `-I`, no `.gitignore`). Its first output line names the
//! tool that ran, so the parser never guesses the format.

use super::{
    FileCount, FileHit, LineHit, OutputMode, SearchHits, SearchQuery, SearchTarget, sort_by_mtime,
    sort_lines,
};
use crate::fs::FsError;

const MARK_RG: &str = "#caduceus-search:rg";
const MARK_GREP: &str = "#caduceus-search:grep";
const MARK_FIND: &str = "#caduceus-search:find";
const MARK_ROOT_NOT_FOUND: &str = "#caduceus-search:root-not-found";
const MARK_NO_TOOL: &str = "#caduceus-search:no-tool";

pub use caduceus_common::text::shell_quote;

/// The whole script: root check, then `rg` when installed, else the fallback.
pub fn shell_command(query: &SearchQuery) -> String {
    format!(
        "root={root}\n\
         if [ ! -e \"$root\" ]; then echo '{MARK_ROOT_NOT_FOUND}'; exit 0; fi\n\
         if command -v rg >/dev/null 2>&1; then\n{rg}\nelse\n{fallback}\nfi\n",
        root = shell_quote(&query.root),
        rg = rg_command(query),
        fallback = fallback_command(query),
    )
}

/// The `rg` branch alone (expects `$root` to be set). Output is capped with
/// `head` a little above [`SearchQuery::max_entries`].
pub fn rg_command(query: &SearchQuery) -> String {
    let cap = output_line_cap(query);
    match &query.target {
        // The name glob is applied by `case` on the base name, not as an rg
        // override (which would also whitelist hidden and ignored directories).
        SearchTarget::Files { glob } => format!(
            "echo '{MARK_RG}'; pat={glob}; rg --no-config --files --sortr=modified -- \"$root\" | \
             while IFS= read -r f; do case \"${{f##*/}}\" in $pat) printf '%s\\n' \"$f\";; esac; done | head -n {cap}",
            glob = shell_quote(glob),
        ),
        SearchTarget::Content {
            pattern,
            file_glob,
            mode,
            context,
        } => {
            let mut args = vec![
                "rg --no-config --color=never --no-heading --with-filename --line-number --sort=path"
                    .to_owned(),
            ];
            match mode {
                OutputMode::Content => {
                    args.push("--null".to_owned());
                    if *context > 0 {
                        args.push(format!("--context={context}"));
                    }
                }
                OutputMode::FilesOnly => args.push("--files-with-matches".to_owned()),
                OutputMode::Count => args.push("--null --count".to_owned()),
            }
            if let Some(glob) = file_glob {
                args.push(format!("--glob={}", shell_quote(glob)));
            }
            args.push(format!("--regexp={}", shell_quote(pattern)));
            args.push("-- \"$root\"".to_owned());
            format!("echo '{MARK_RG}'; {} | head -n {cap}", args.join(" "))
        }
    }
}

/// The branch used when `rg` is missing (expects `$root` to be set): `find`
/// prunes hidden entries below the root, `grep -E` does the matching.
pub fn fallback_command(query: &SearchQuery) -> String {
    let cap = output_line_cap(query);
    match &query.target {
        SearchTarget::Files { glob } => {
            let walk = format!(
                "find \"$root\" -mindepth 1 -name '.*' -prune -o -type f -name {glob}",
                glob = shell_quote(glob)
            );
            // BusyBox find has no -printf: list without times then.
            format!(
                "echo '{MARK_FIND}'; {{ {walk} -printf '%T@ %p\\n' 2>/dev/null || {walk} -print; }} | head -n {cap}"
            )
        }
        SearchTarget::Content {
            pattern,
            file_glob,
            mode,
            context,
        } => {
            let name_test = match file_glob {
                Some(glob) if glob.contains('/') => {
                    format!(" -path {}", shell_quote(&format!("*/{glob}")))
                }
                Some(glob) => format!(" -name {}", shell_quote(glob)),
                None => String::new(),
            };
            let mut grep = vec!["grep -E -n -H -I".to_owned()];
            match mode {
                OutputMode::Content if *context > 0 => grep.push(format!("-C {context}")),
                OutputMode::Content => {}
                OutputMode::FilesOnly => grep.push("-l".to_owned()),
                OutputMode::Count => grep.push("-c".to_owned()),
            }
            grep.push(format!("-e {}", shell_quote(pattern)));
            format!(
                "if ! command -v grep >/dev/null 2>&1; then echo '{MARK_NO_TOOL}'; exit 0; fi\n\
                 echo '{MARK_GREP}'\n\
                 if [ -d \"$root\" ]; then find \"$root\" -mindepth 1 -name '.*' -prune -o -type f{name_test} -print0 2>/dev/null; \
                 else printf '%s\\0' \"$root\"; fi | xargs -0 {grep} -- | head -n {cap}",
                grep = grep.join(" "),
            )
        }
    }
}

/// Lines of output that surely hold `max_entries + 1` entries (context mode
/// interleaves `--` separators, at most one per entry).
fn output_line_cap(query: &SearchQuery) -> usize {
    query.max_entries.saturating_add(1).saturating_mul(2)
}

/// Parses what the script printed into hits, sorted like the local search.
/// `stderr` may be empty when a backend merges it into stdout; tool
/// diagnostics (`rg: …`, `grep: …`) are then recognised and skipped.
pub fn parse_shell_output(
    query: &SearchQuery,
    stdout: &str,
    stderr: &str,
    exit_code: i32,
) -> Result<SearchHits, FsError> {
    let mut lines = stdout.lines();
    let marker = lines
        .find(|line| line.starts_with("#caduceus-search:"))
        .unwrap_or("");
    let rest: Vec<&str> = lines.collect();
    let tool = match marker {
        MARK_ROOT_NOT_FOUND => return Ok(SearchHits::RootNotFound),
        MARK_NO_TOOL => {
            return Err(FsError::Search(
                "Content search requires ripgrep (rg) or grep. Install ripgrep: \
                 https://github.com/BurntSushi/ripgrep#installation"
                    .to_owned(),
            ));
        }
        MARK_RG | MARK_GREP | MARK_FIND => marker,
        _ => {
            return Err(FsError::Search(format!(
                "search script failed (exit {exit_code}): {}",
                first_nonempty(stderr, stdout)
            )));
        }
    };
    // Every real output line names a path under the root (find prefixes its
    // time); anything else is a diagnostic that reached stdout.
    let is_payload = |line: &&str| {
        **line == *"--"
            || line.starts_with(query.root.as_str())
            || (tool == MARK_FIND
                && line
                    .split_once(' ')
                    .is_some_and(|(_, path)| path.starts_with(query.root.as_str())))
    };
    let body: Vec<&str> = rest
        .iter()
        .copied()
        .filter(|line| is_payload(line))
        .collect();
    if body.is_empty() {
        // rg exits 2 on errors (a bad regex leaves no payload, only diagnostics).
        let noise: Vec<&str> = rest
            .iter()
            .copied()
            .filter(|line| !line.trim().is_empty())
            .collect();
        let message = if stderr.trim().is_empty() {
            noise.join("\n")
        } else {
            stderr.trim().to_owned()
        };
        if !message.is_empty() {
            return Err(FsError::Search(message));
        }
    }
    let cap_hit = body.len() >= output_line_cap(query);
    let hits = match &query.target {
        SearchTarget::Files { .. } => parse_file_list(&body, tool == MARK_FIND),
        SearchTarget::Content { mode, .. } => match mode {
            OutputMode::Content => parse_lines(&body, tool == MARK_RG),
            OutputMode::FilesOnly => {
                let mut files: Vec<FileHit> = body
                    .iter()
                    .map(|path| FileHit {
                        path: (*path).to_owned(),
                        mtime_ns: None,
                    })
                    .collect();
                files.sort_by(|a, b| a.path.cmp(&b.path));
                SearchHits::Files {
                    files,
                    complete: true,
                }
            }
            OutputMode::Count => parse_counts(&body, tool == MARK_RG),
        },
    };
    Ok(cap_entries(hits, query.max_entries, cap_hit))
}

fn parse_file_list(body: &[&str], with_times: bool) -> SearchHits {
    let mut files: Vec<FileHit> = body
        .iter()
        .map(|line| {
            if with_times
                && let Some((time, path)) = line.split_once(' ')
                && let Ok(seconds) = time.parse::<f64>()
            {
                return FileHit {
                    path: path.to_owned(),
                    mtime_ns: Some((seconds * 1e9) as i64),
                };
            }
            FileHit {
                path: (*line).to_owned(),
                mtime_ns: None,
            }
        })
        .collect();
    // rg already printed newest first; find's times are sorted here. Without
    // times the order the tool printed is all there is.
    if files.iter().all(|file| file.mtime_ns.is_some()) {
        sort_by_mtime(&mut files);
    }
    SearchHits::Files {
        files,
        complete: true,
    }
}

fn parse_lines(body: &[&str], nul_separated: bool) -> SearchHits {
    let mut hits = Vec::with_capacity(body.len());
    if nul_separated {
        // rg --null: `path\0N:text` for matches, `path\0N-text` for context.
        for line in body {
            let Some((path, rest)) = line.split_once('\0') else {
                continue;
            };
            if let Some(hit) = split_number(rest).map(|(number, separator, text)| LineHit {
                path: path.to_owned(),
                line: number,
                text: text.to_owned(),
                is_context: separator == '-',
            }) {
                hits.push(hit);
            }
        }
    } else {
        // grep: `path:N:text` and `path-N-text`. Paths of context lines are
        // recognised by the match lines around them, which makes `a-1-b.py`
        // style names parse; a line in a file with no match is impossible.
        let mut known_paths: Vec<&str> = Vec::new();
        for line in body {
            if let Some((path, number, text)) = split_match_line(line) {
                if known_paths.last() != Some(&path) {
                    known_paths.push(path);
                }
                hits.push(LineHit {
                    path: path.to_owned(),
                    line: number,
                    text: text.to_owned(),
                    is_context: false,
                });
            }
        }
        for line in body {
            if *line == "--" || split_match_line(line).is_some() {
                continue;
            }
            let parsed = known_paths.iter().find_map(|path| {
                let rest = line.strip_prefix(path)?.strip_prefix('-')?;
                let (number, separator, text) = split_number(rest)?;
                (separator == '-').then_some((*path, number, text))
            });
            if let Some((path, number, text)) = parsed {
                hits.push(LineHit {
                    path: path.to_owned(),
                    line: number,
                    text: text.to_owned(),
                    is_context: true,
                });
            }
        }
    }
    sort_lines(&mut hits);
    SearchHits::Lines {
        lines: hits,
        complete: true,
    }
}

fn parse_counts(body: &[&str], nul_separated: bool) -> SearchHits {
    let mut counts: Vec<FileCount> = body
        .iter()
        .filter_map(|line| {
            let (path, count) = if nul_separated {
                line.split_once('\0')?
            } else {
                line.rsplit_once(':')?
            };
            let count: u64 = count.trim().parse().ok()?;
            (count > 0).then(|| FileCount {
                path: path.to_owned(),
                count,
            })
        })
        .collect();
    counts.sort_by(|a, b| a.path.cmp(&b.path));
    SearchHits::Counts {
        counts,
        complete: true,
    }
}

/// `N:text` or `N-text` → (N, separator, text).
fn split_number(rest: &str) -> Option<(u64, char, &str)> {
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let number = rest[..digits].parse().ok()?;
    let separator = rest[digits..].chars().next()?;
    matches!(separator, ':' | '-').then(|| (number, separator, &rest[digits + 1..]))
}

/// `path:N:text` with the first `:N:` as separator.
fn split_match_line(line: &str) -> Option<(&str, u64, &str)> {
    let mut search_from = 0;
    while let Some(found) = line[search_from..].find(':') {
        let colon = search_from + found;
        if colon > 0
            && let Some((number, ':', text)) = split_number(&line[colon + 1..])
        {
            return Some((&line[..colon], number, text));
        }
        search_from = colon + 1;
    }
    None
}

fn cap_entries(hits: SearchHits, max: usize, cap_hit: bool) -> SearchHits {
    match hits {
        SearchHits::Lines { mut lines, .. } => {
            let complete = lines.len() <= max && !cap_hit;
            lines.truncate(max);
            SearchHits::Lines { lines, complete }
        }
        SearchHits::Files { mut files, .. } => {
            let complete = files.len() <= max && !cap_hit;
            files.truncate(max);
            SearchHits::Files { files, complete }
        }
        SearchHits::Counts { mut counts, .. } => {
            let complete = counts.len() <= max && !cap_hit;
            counts.truncate(max);
            SearchHits::Counts { counts, complete }
        }
        SearchHits::RootNotFound => SearchHits::RootNotFound,
    }
}

fn first_nonempty<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.trim().is_empty() {
        b.trim()
    } else {
        a.trim()
    }
}

#[cfg(test)]
#[path = "shell_tests.rs"]
mod tests;
