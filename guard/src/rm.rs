//! What an `rm` deletes.
//!
//! Shared by the hardline floor (an `rm` the shell runs whose operand is `/`, a system
//! directory or the home directory) and by the dangerous rules (recursive deletes, and
//! deletes in system paths).

pub(crate) const ROOT_FILESYSTEM: &str = "recursive delete of root filesystem";
pub(crate) const SYSTEM_DIRECTORY: &str = "recursive delete of system directory";
pub(crate) const HOME_DIRECTORY: &str = "recursive delete of home directory";
pub(crate) const ROOT_PATH: &str = "delete in root path";
pub(crate) const RECURSIVE: &str = "recursive delete";
pub(crate) const RECURSIVE_LONG: &str = "recursive delete (long flag)";

use crate::normalize::PARSER_LIMIT_DESCRIPTION;

/// Directories directly under `/` whose recursive deletion has no recovery path: hermes'
/// list, the other `lib` directories, and their macOS counterparts.
const PROTECTED_TOP_DIRECTORIES: &[&str] = &[
    "home", "root", "etc", "usr", "var", "bin", "sbin", "boot", "lib", "lib32", "lib64", "libx32",
    "users", "system", "library", "private",
];

/// Top-level trees where even a non-recursive delete needs approval. Home trees are
/// not here: `rm /home/me/notes.txt` is as ordinary as `rm ~/notes.txt`.
const SYSTEM_TREES: &[&str] = &[
    "etc",
    "usr",
    "bin",
    "sbin",
    "boot",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "var",
    "opt",
    "sys",
    "proc",
    "dev",
    "srv",
    "system",
    "library",
    "private",
    "applications",
];

/// Largest number of words a brace expression may expand to; beyond it the operand is
/// reported as a parser limit rather than checked partially.
const MAX_BRACE_EXPANSION: usize = 256;
/// Brace operands longer than this are not expanded (real paths are far shorter).
const MAX_BRACE_OPERAND: usize = 1_024;
/// Brace groups expanded one inside the other.
const MAX_BRACE_GROUPS: usize = 12;

/// Hardline check for one `rm` operand (after quote removal).
pub(crate) fn protected_target(operand: &str) -> Option<&'static str> {
    if !operand.contains('{') {
        return protected_single(operand);
    }
    if operand.len() > MAX_BRACE_OPERAND {
        return Some(PARSER_LIMIT_DESCRIPTION);
    }
    let mut expanded = Vec::new();
    let complete = brace_expand(operand, &mut expanded, 0);
    expanded
        .iter()
        .find_map(|candidate| protected_single(candidate))
        .or_else(|| (!complete).then_some(PARSER_LIMIT_DESCRIPTION))
}

/// `/`, a protected top-level directory, anything inside a system tree, or the home
/// directory itself: where tools other than `rm` that delete or overwrite need approval.
pub(crate) fn is_system_path(operand: &str) -> bool {
    if protected_single(operand).is_some() {
        return true;
    }
    operand.starts_with('/')
        && normalize_components(operand)
            .first()
            .is_some_and(|top| is_listed(top, SYSTEM_TREES))
}

fn protected_single(operand: &str) -> Option<&'static str> {
    if let Some(rest) = strip_home_prefix(operand) {
        let components = normalize_components(rest);
        let escapes_home = rest
            .split('/')
            .find(|c| !c.is_empty() && *c != ".")
            .is_some_and(|c| c == "..");
        return (components.is_empty() || escapes_home).then_some(HOME_DIRECTORY);
    }
    if !operand.starts_with('/') {
        return None;
    }
    match normalize_components(operand).as_slice() {
        [] => Some(ROOT_FILESYSTEM),
        [directory] if is_listed(directory, PROTECTED_TOP_DIRECTORIES) => Some(SYSTEM_DIRECTORY),
        _ => None,
    }
}

/// `~`, `~/…`, `$HOME`, `${HOME}` (optionally followed by a path): the rest of the path.
fn strip_home_prefix(operand: &str) -> Option<&str> {
    ["${HOME}", "$HOME", "~"].iter().find_map(|prefix| {
        operand
            .strip_prefix(prefix)
            .filter(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// Lexically resolves `.`, `..` and repeated slashes, and drops a trailing `*`/`.*` glob
/// (deleting `/usr/*` is deleting `/usr`).
fn normalize_components(path: &str) -> Vec<&str> {
    let mut components: Vec<&str> = Vec::new();
    for component in path.split('/') {
        match component {
            "" | "." => {}
            ".." => {
                components.pop();
            }
            other => components.push(other),
        }
    }
    if components.last().is_some_and(|last| {
        !last.is_empty()
            && last.trim_start_matches('.').chars().all(|c| c == '*')
            && last.contains('*')
    }) {
        components.pop();
    }
    components
}

fn is_listed(directory: &str, list: &[&str]) -> bool {
    list.iter()
        .any(|entry| entry.eq_ignore_ascii_case(directory))
}

/// Expands `a{b,c}d` brace expressions (the shell does this before `rm` sees its
/// operands). Returns `false` when the expansion was cut short by the limits.
fn brace_expand(word: &str, out: &mut Vec<String>, depth: usize) -> bool {
    if out.len() >= MAX_BRACE_EXPANSION || depth >= MAX_BRACE_GROUPS {
        return false;
    }
    let Some((open, close)) = find_brace_group(word) else {
        out.push(word.to_string());
        return true;
    };
    let (prefix, inner, suffix) = (&word[..open], &word[open + 1..close], &word[close + 1..]);
    split_top_level_commas(inner)
        .into_iter()
        .all(|alternative| brace_expand(&format!("{prefix}{alternative}{suffix}"), out, depth + 1))
}

/// The first `{…}` group containing a top-level comma.
fn find_brace_group(word: &str) -> Option<(usize, usize)> {
    let bytes = word.as_bytes();
    for open in (0..bytes.len()).filter(|i| bytes[*i] == b'{') {
        let mut depth = 0usize;
        let mut has_comma = false;
        for (offset, b) in bytes[open..].iter().enumerate() {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        if has_comma {
                            return Some((open, open + offset));
                        }
                        break;
                    }
                }
                b',' if depth == 1 => has_comma = true,
                _ => {}
            }
        }
    }
    None
}

fn split_top_level_commas(inner: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, b) in inner.bytes().enumerate() {
        match b {
            b'{' => depth += 1,
            b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
}

/// What a run of `rm` arguments asks for, accumulated argument by argument.
#[derive(Debug, Clone, Copy, Default)]
struct Arguments {
    short_recursive: bool,
    long_recursive: bool,
    absolute: bool,
    in_system_tree: bool,
}

impl Arguments {
    /// One argument while options are still being read.
    fn argument(argument: &str) -> Self {
        if argument.len() > 1 && argument.starts_with('-') {
            match argument.strip_prefix("--") {
                Some(long) => Self {
                    long_recursive: !long.is_empty() && "recursive".starts_with(long),
                    ..Self::default()
                },
                None => Self {
                    short_recursive: argument[1..].contains(['r', 'R']),
                    ..Self::default()
                },
            }
        } else {
            Self::operand(argument)
        }
    }

    /// One operand (after `--`, or not looking like an option).
    fn operand(operand: &str) -> Self {
        if !operand.starts_with('/') {
            return Self::default();
        }
        Self {
            absolute: true,
            in_system_tree: match normalize_components(operand).first() {
                None => true,
                Some(top) => is_listed(top, SYSTEM_TREES),
            },
            ..Self::default()
        }
    }

    fn and(self, other: Self) -> Self {
        Self {
            short_recursive: self.short_recursive || other.short_recursive,
            long_recursive: self.long_recursive || other.long_recursive,
            absolute: self.absolute || other.absolute,
            in_system_tree: self.in_system_tree || other.in_system_tree,
        }
    }

    fn classify(self) -> Option<&'static str> {
        let recursive = self.short_recursive || self.long_recursive;
        if (recursive && self.absolute) || self.in_system_tree {
            Some(ROOT_PATH)
        } else if self.short_recursive {
            Some(RECURSIVE)
        } else if self.long_recursive {
            Some(RECURSIVE_LONG)
        } else {
            None
        }
    }
}

/// A word that names `rm` (`rm`, `RM`, `/bin/rm`, `"rm` at the start of quoted text) but
/// not an option ending in `rm` such as `docker run --rm`.
fn is_rm_word(word: &str) -> bool {
    let bytes = word.as_bytes();
    let n = bytes.len();
    n >= 2
        && bytes[n - 2..].eq_ignore_ascii_case(b"rm")
        && (n == 2
            || !(bytes[n - 3].is_ascii_alphanumeric() || matches!(bytes[n - 3], b'_' | b'-')))
}

fn more_severe(current: Option<&'static str>, found: &'static str) -> Option<&'static str> {
    let rank = |description: &str| match description {
        ROOT_PATH => 0,
        RECURSIVE => 1,
        _ => 2,
    };
    match current {
        Some(existing) if rank(existing) <= rank(found) => Some(existing),
        _ => Some(found),
    }
}

/// Scans flat text for `rm` invocations (also inside quotes and other programs' arguments,
/// as hermes does) and returns the most severe classification of their arguments (flags
/// may follow operands, as GNU `rm` permutes them; `--` ends the options):
///
/// * recursive with an absolute operand, or any operand inside a system tree →
///   "delete in root path";
/// * otherwise `-r`/`-R` in a short-flag bundle → "recursive delete";
/// * otherwise `--recursive` (or an abbreviation) → "recursive delete (long flag)".
///
/// Each command segment (up to `;`, `&`, `|`, newline, `)` or a backtick) is read once,
/// backwards, keeping a summary of the words after each position both as options and as
/// plain operands (after `--`), so any number of `rm` words costs linear time.
pub(crate) fn scan_text(text: &str) -> Option<&'static str> {
    let mut best: Option<&'static str> = None;
    for segment in text.split([';', '&', '|', '\n', ')', '`']) {
        let words: Vec<&str> = segment.split_whitespace().collect();
        if !words.iter().any(|word| is_rm_word(word)) {
            continue;
        }
        let mut as_arguments = Arguments::default();
        let mut as_operands = Arguments::default();
        for word in words.iter().rev() {
            if is_rm_word(word)
                && let Some(description) = as_arguments.classify()
            {
                best = more_severe(best, description);
                if best == Some(ROOT_PATH) {
                    return best;
                }
            }
            let word = word.trim_matches(['"', '\'']);
            let operand = Arguments::operand(word);
            as_arguments = if word == "--" {
                as_operands
            } else {
                as_arguments.and(Arguments::argument(word))
            };
            as_operands = as_operands.and(operand);
        }
    }
    best
}

#[cfg(test)]
#[path = "rm_tests.rs"]
mod tests;
