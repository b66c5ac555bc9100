//! Parser of the V4A patch format (codex `apply_patch`), as hermes reads it:
//!
//! ```text
//! *** Begin Patch
//! *** Update File: src/app.py
//! *** Move to: src/main.py          (optional: rename while updating)
//! @@ def greet @@                   (optional context hint)
//!  context line
//! -removed line
//! +added line
//! *** Add File: notes.md
//! +first line
//! *** Delete File: old.py
//! *** Move File: a.py -> b.py
//! *** End Patch
//! ```
//!
//! Differences from hermes 0.19.0's parser: markers count only at the start of
//! a line, so `+*** End Patch` inside added content is content; CRLF patch
//! bodies are read as LF; `*** Move to:` renames the file being updated (hermes
//! read it as a context line) and `*** End of File` is ignored; a hint line
//! without a closing `@@` (`@@ class Foo`) still counts as a hint.

use crate::text::py_repr;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOp {
    Add {
        path: String,
        lines: Vec<String>,
    },
    Delete {
        path: String,
    },
    Move {
        from: String,
        to: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        hunks: Vec<Hunk>,
    },
}

impl PatchOp {
    /// Every path the operation names, in header order.
    pub fn paths(&self) -> Vec<&str> {
        match self {
            PatchOp::Add { path, .. } | PatchOp::Delete { path } => vec![path],
            PatchOp::Move { from, to } => vec![from, to],
            PatchOp::Update { path, move_to, .. } => {
                let mut paths = vec![path.as_str()];
                paths.extend(move_to.as_deref());
                paths
            }
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hunk {
    pub hint: Option<String>,
    pub lines: Vec<HunkLine>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HunkLine {
    Context(String),
    Remove(String),
    Add(String),
}

impl Hunk {
    /// Text to find: context and removed lines.
    pub fn search_text(&self) -> Option<String> {
        let lines: Vec<&str> = self
            .lines
            .iter()
            .filter_map(|line| match line {
                HunkLine::Context(text) | HunkLine::Remove(text) => Some(text.as_str()),
                HunkLine::Add(_) => None,
            })
            .collect();
        (!lines.is_empty()).then(|| lines.join("\n"))
    }

    /// Text to put in its place: context and added lines.
    pub fn replacement_text(&self) -> String {
        self.lines
            .iter()
            .filter_map(|line| match line {
                HunkLine::Context(text) | HunkLine::Add(text) => Some(text.as_str()),
                HunkLine::Remove(_) => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// A hunk with only context lines changes nothing (models emit such
    /// anchors between real hunks).
    pub fn is_inert(&self) -> bool {
        self.lines
            .iter()
            .all(|line| matches!(line, HunkLine::Context(_)))
    }
}

/// `***` marker lines: `*** <words…> <rest>`, whitespace between the words
/// as hermes' regexes allow (`***Update  File:x` counts). Returns the trimmed rest.
fn marker<'a>(line: &'a str, words: &[&str]) -> Option<&'a str> {
    let mut rest = line.strip_prefix("***")?.trim_start();
    for (index, word) in words.iter().enumerate() {
        rest = rest.strip_prefix(word)?;
        if index + 1 < words.len() {
            let trimmed = rest.trim_start();
            if trimmed.len() == rest.len() {
                return None;
            }
            rest = trimmed;
        }
    }
    Some(rest.trim())
}

/// A header naming a path: the path must not be empty.
fn path_marker<'a>(line: &'a str, words: &[&str]) -> Option<&'a str> {
    marker(line, words).filter(|rest| !rest.is_empty())
}

fn is_begin(line: &str) -> bool {
    marker(line, &["Begin Patch"]).is_some_and(str::is_empty)
}

fn is_end(line: &str) -> bool {
    marker(line, &["End Patch"]).is_some_and(str::is_empty)
}

/// `@@ hint @@` or codex's `@@ hint`; `None` for a bare `@@`.
fn hunk_hint(line: &str) -> Option<String> {
    let rest = line.strip_prefix("@@")?.trim_start();
    let hint = match rest.get(1..).and_then(|tail| tail.find("@@")) {
        Some(close) => rest[..close + 1].trim_end(),
        None => rest.trim_matches('@').trim(),
    };
    (!hint.is_empty()).then(|| hint.to_owned())
}

/// Parses a patch. An empty patch is `Ok(vec![])`; a malformed one is hermes'
/// `Parse error: …` text.
pub fn parse(patch: &str) -> Result<Vec<PatchOp>, String> {
    let lines: Vec<&str> = patch
        .split('\n')
        .map(|line| line.strip_suffix('\r').unwrap_or(line))
        .collect();
    let start = lines
        .iter()
        .position(|line| is_begin(line))
        .map_or(0, |index| index + 1);
    let end = lines[start..]
        .iter()
        .position(|line| is_end(line))
        .map_or(lines.len(), |index| start + index);

    let mut builder = Builder::default();
    for line in &lines[start..end] {
        builder.line(line);
    }
    let ops = builder.finish();

    let mut errors = Vec::new();
    for op in &ops {
        match op {
            PatchOp::Update {
                path,
                move_to,
                hunks,
            } => {
                if path.is_empty() {
                    errors.push("Operation with empty file path".to_owned());
                }
                if hunks.is_empty() && move_to.is_none() {
                    errors.push(format!("UPDATE {}: no hunks found", py_repr(path)));
                }
            }
            PatchOp::Add { path, .. } | PatchOp::Delete { path } if path.is_empty() => {
                errors.push("Operation with empty file path".to_owned());
            }
            PatchOp::Move { from, to } => {
                if from.is_empty() {
                    errors.push("Operation with empty file path".to_owned());
                }
                if to.is_empty() {
                    errors.push(format!(
                        "MOVE {}: missing destination path (expected 'src -> dst')",
                        py_repr(from)
                    ));
                }
            }
            _ => {}
        }
    }
    if errors.is_empty() {
        Ok(ops)
    } else {
        Err(format!("Parse error: {}", errors.join("; ")))
    }
}

#[derive(Default)]
struct Builder {
    ops: Vec<PatchOp>,
    /// The Add or Update being filled.
    open: Option<PatchOp>,
    hunk: Option<Hunk>,
}

impl Builder {
    fn line(&mut self, line: &str) {
        if let Some(path) = path_marker(line, &["Update", "File:"]) {
            self.close();
            self.open = Some(PatchOp::Update {
                path: path.to_owned(),
                move_to: None,
                hunks: Vec::new(),
            });
        } else if let Some(path) = path_marker(line, &["Add", "File:"]) {
            self.close();
            self.open = Some(PatchOp::Add {
                path: path.to_owned(),
                lines: Vec::new(),
            });
        } else if let Some(path) = path_marker(line, &["Delete", "File:"]) {
            self.close();
            self.ops.push(PatchOp::Delete {
                path: path.to_owned(),
            });
        } else if let Some((from, to)) = path_marker(line, &["Move", "File:"]).and_then(split_move)
        {
            self.close();
            self.ops.push(PatchOp::Move {
                from: from.to_owned(),
                to: to.to_owned(),
            });
        } else if let Some(to) = path_marker(line, &["Move", "to:"]) {
            if let Some(PatchOp::Update { move_to, .. }) = &mut self.open {
                *move_to = Some(to.to_owned());
            }
        } else if marker(line, &["End", "of", "File"]).is_some_and(str::is_empty) {
            // codex closes an end-anchored hunk with this; nothing to do.
        } else if line.starts_with("@@") {
            if matches!(self.open, Some(PatchOp::Update { .. })) {
                self.close_hunk();
                self.hunk = Some(Hunk {
                    hint: hunk_hint(line),
                    lines: Vec::new(),
                });
            }
        } else if !line.is_empty() {
            self.content(line);
        }
    }

    fn content(&mut self, line: &str) {
        match &mut self.open {
            Some(PatchOp::Add { lines, .. }) => {
                if let Some(text) = line.strip_prefix('+') {
                    lines.push(text.to_owned());
                }
            }
            Some(PatchOp::Update { .. }) => {
                let parsed = if let Some(text) = line.strip_prefix('+') {
                    Some(HunkLine::Add(text.to_owned()))
                } else if let Some(text) = line.strip_prefix('-') {
                    Some(HunkLine::Remove(text.to_owned()))
                } else if let Some(text) = line.strip_prefix(' ') {
                    Some(HunkLine::Context(text.to_owned()))
                } else if line.starts_with('\\') {
                    // "\ No newline at end of file"
                    None
                } else {
                    Some(HunkLine::Context(line.to_owned()))
                };
                if let Some(parsed) = parsed {
                    self.hunk
                        .get_or_insert_with(Hunk::default)
                        .lines
                        .push(parsed);
                }
            }
            _ => {}
        }
    }

    fn close_hunk(&mut self) {
        if let Some(hunk) = self.hunk.take()
            && !hunk.lines.is_empty()
            && let Some(PatchOp::Update { hunks, .. }) = &mut self.open
        {
            hunks.push(hunk);
        }
    }

    fn close(&mut self) {
        self.close_hunk();
        if let Some(op) = self.open.take() {
            self.ops.push(op);
        }
    }

    fn finish(mut self) -> Vec<PatchOp> {
        self.close();
        self.ops
    }
}

/// `a.py -> b.py` → (`a.py`, `b.py`), split at the first `->` after a
/// non-empty source.
fn split_move(rest: &str) -> Option<(&str, &str)> {
    let arrow = rest.get(1..)?.find("->")? + 1;
    let (from, to) = (rest[..arrow].trim(), rest[arrow + 2..].trim());
    (!from.is_empty()).then_some((from, to))
}

#[cfg(test)]
#[path = "v4a_tests.rs"]
mod tests;
