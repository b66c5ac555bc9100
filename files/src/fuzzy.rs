//! Find-and-replace that tolerates the ways a model misquotes a file: hermes'
//! nine matching strategies, tried in order until one finds the text.
//!
//! 1. `exact`
//! 2. `line_trimmed` — each line compared with surrounding whitespace removed
//! 3. `whitespace_normalized` — runs of spaces/tabs collapse to one space
//! 4. `indentation_flexible` — leading whitespace ignored
//! 5. `escape_normalized` — `\n`, `\t`, `\r` written out in `old_string`
//! 6. `trimmed_boundary` — only the first and last lines trimmed
//! 7. `unicode_normalized` — smart quotes, dashes, ellipsis, NBSP vs ASCII
//! 8. `block_anchor` — first and last lines equal, middle similar
//! 9. `context_aware` — most lines at least 80 % similar
//!
//! After a non-exact match the replacement is re-indented to the file's indent,
//! literal `\t`/`\r` become real ones where the file has them, escape drift
//! (`\'` that the file never had) is refused, and a `unicode_normalized` match
//! keeps the file's typographic characters where the edit did not touch them.
//!
//! Positions are byte offsets into UTF-8 text; every strategy reports matches
//! on character boundaries.

use std::fmt;

use similar::{Algorithm, DiffOp, capture_diff_slices};

/// Which strategy found the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Exact,
    LineTrimmed,
    WhitespaceNormalized,
    IndentationFlexible,
    EscapeNormalized,
    TrimmedBoundary,
    UnicodeNormalized,
    BlockAnchor,
    ContextAware,
}

impl Strategy {
    pub const ALL: [Strategy; 9] = [
        Strategy::Exact,
        Strategy::LineTrimmed,
        Strategy::WhitespaceNormalized,
        Strategy::IndentationFlexible,
        Strategy::EscapeNormalized,
        Strategy::TrimmedBoundary,
        Strategy::UnicodeNormalized,
        Strategy::BlockAnchor,
        Strategy::ContextAware,
    ];

    /// hermes' name for the strategy.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Exact => "exact",
            Strategy::LineTrimmed => "line_trimmed",
            Strategy::WhitespaceNormalized => "whitespace_normalized",
            Strategy::IndentationFlexible => "indentation_flexible",
            Strategy::EscapeNormalized => "escape_normalized",
            Strategy::TrimmedBoundary => "trimmed_boundary",
            Strategy::UnicodeNormalized => "unicode_normalized",
            Strategy::BlockAnchor => "block_anchor",
            Strategy::ContextAware => "context_aware",
        }
    }

    /// Similarity strategies may match text that differs in substance.
    fn is_approximate(self) -> bool {
        matches!(self, Strategy::BlockAnchor | Strategy::ContextAware)
    }

    fn find(self, content: &str, pattern: &str) -> Vec<Span> {
        match self {
            Strategy::Exact => exact(content, pattern),
            Strategy::LineTrimmed => line_trimmed(content, pattern),
            Strategy::WhitespaceNormalized => whitespace_normalized(content, pattern),
            Strategy::IndentationFlexible => indentation_flexible(content, pattern),
            Strategy::EscapeNormalized => escape_normalized(content, pattern),
            Strategy::TrimmedBoundary => trimmed_boundary(content, pattern),
            Strategy::UnicodeNormalized => unicode_normalized(content, pattern),
            Strategy::BlockAnchor => block_anchor(content, pattern),
            Strategy::ContextAware => context_aware(content, pattern),
        }
    }
}

/// A matched byte range `[start, end)` of the content.
pub type Span = (usize, usize);

/// A successful replacement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    pub content: String,
    pub count: usize,
    pub strategy: Strategy,
}

/// Why nothing was replaced; `Display` gives hermes' texts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MatchError {
    EmptyOld,
    Identical,
    Ambiguous(usize),
    EscapeDrift(String),
    NotFound,
}

impl fmt::Display for MatchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MatchError::EmptyOld => f.write_str("old_string cannot be empty"),
            MatchError::Identical => f.write_str("old_string and new_string are identical"),
            MatchError::Ambiguous(count) => write!(
                f,
                "Found {count} matches for old_string. Provide more context to make it unique, or use replace_all=True."
            ),
            MatchError::EscapeDrift(message) => f.write_str(message),
            MatchError::NotFound => {
                f.write_str("Could not find a match for old_string in the file")
            }
        }
    }
}

/// Replaces `old` by `new` in `content` with the first strategy that finds it.
/// Without `replace_all` the match must be unique. With `replace_all` the two
/// similarity strategies are not used, so that an approximate match can never
/// rewrite many places at once.
pub fn fuzzy_find_and_replace(
    content: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<Replaced, MatchError> {
    if old.is_empty() {
        return Err(MatchError::EmptyOld);
    }
    if old == new {
        return Err(MatchError::Identical);
    }
    for strategy in Strategy::ALL {
        if replace_all && strategy.is_approximate() {
            continue;
        }
        let spans = strategy.find(content, old);
        if spans.is_empty() {
            continue;
        }
        if spans.len() > 1 && !replace_all {
            return Err(MatchError::Ambiguous(spans.len()));
        }
        if strategy != Strategy::Exact
            && let Some(message) = escape_drift(content, &spans, old, new)
        {
            return Err(MatchError::EscapeDrift(message));
        }
        let mut replacement = unescape_controls(new, content, &spans);
        if strategy == Strategy::UnicodeNormalized {
            replacement = preserve_unicode(content, &spans, old, &replacement);
        }
        let reindent_from = (strategy != Strategy::Exact).then_some(old);
        let count = spans.len();
        return Ok(Replaced {
            content: apply(content, &spans, &replacement, reindent_from),
            count,
            strategy,
        });
    }
    Err(MatchError::NotFound)
}

/// hermes' "Did you mean one of these sections?" suffix for a plain not-found,
/// or `""` when nothing in the file resembles the first line of `old`.
pub fn no_match_hint(old: &str, content: &str) -> String {
    let closest = closest_lines(old, content);
    if closest.is_empty() {
        String::new()
    } else {
        format!("\n\nDid you mean one of these sections?\n{closest}")
    }
}

/// Up to three snippets (`   N| line`, two lines of context) around the lines
/// most similar to the first non-blank line of `old`, separated by `---`.
pub fn closest_lines(old: &str, content: &str) -> String {
    const CONTEXT: usize = 2;
    let old_lines: Vec<&str> = old.lines().collect();
    let content_lines: Vec<&str> = content.lines().collect();
    let Some(anchor) = old_lines
        .iter()
        .map(|line| line.trim())
        .find(|line| !line.is_empty())
    else {
        return String::new();
    };
    let mut scored: Vec<(f64, usize)> = content_lines
        .iter()
        .enumerate()
        .filter_map(|(index, line)| {
            let line = line.trim();
            if line.is_empty() || length_bound(anchor, line) <= 0.3 {
                return None;
            }
            let score = similarity(anchor, line);
            (score > 0.3).then_some((score, index))
        })
        .collect();
    // Stable: equal scores keep file order, as Python's sort does.
    scored.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut seen = Vec::new();
    let mut parts = Vec::new();
    for (_, index) in scored.into_iter().take(3) {
        let start = index.saturating_sub(CONTEXT);
        let end = (index + old_lines.len() + CONTEXT).min(content_lines.len());
        if seen.contains(&(start, end)) {
            continue;
        }
        seen.push((start, end));
        let snippet: Vec<String> = (start..end)
            .map(|line| format!("{:4}| {}", line + 1, content_lines[line]))
            .collect();
        parts.push(snippet.join("\n"));
    }
    parts.join("\n---\n")
}

/// `SequenceMatcher(None, a, b).ratio()` over characters: `2·M / (|a| + |b|)`
/// with M the matched characters of a minimal diff (1.0 for two empty strings).
pub fn similarity(a: &str, b: &str) -> f64 {
    let left: Vec<char> = a.chars().collect();
    let right: Vec<char> = b.chars().collect();
    let total = left.len() + right.len();
    if total == 0 {
        return 1.0;
    }
    let matched: usize = capture_diff_slices(Algorithm::Myers, &left, &right)
        .iter()
        .map(|op| match op {
            DiffOp::Equal { len, .. } => *len,
            _ => 0,
        })
        .sum();
    2.0 * matched as f64 / total as f64
}

/// The best ratio two strings of these lengths could reach; cheap to compute.
fn length_bound(a: &str, b: &str) -> f64 {
    let (left, right) = (a.chars().count(), b.chars().count());
    if left + right == 0 {
        1.0
    } else {
        2.0 * left.min(right) as f64 / (left + right) as f64
    }
}

// ---------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------

/// Non-overlapping occurrences, as `str.replace` counts them.
fn exact(content: &str, pattern: &str) -> Vec<Span> {
    content
        .match_indices(pattern)
        .map(|(start, found)| (start, start + found.len()))
        .collect()
}

/// `content` split on `\n` with each line's byte offset.
struct Lines<'a> {
    lines: Vec<&'a str>,
    starts: Vec<usize>,
    content_len: usize,
}

impl<'a> Lines<'a> {
    fn new(content: &'a str) -> Self {
        let lines: Vec<&str> = content.split('\n').collect();
        let mut starts = Vec::with_capacity(lines.len());
        let mut offset = 0;
        for line in &lines {
            starts.push(offset);
            offset += line.len() + 1;
        }
        Self {
            lines,
            starts,
            content_len: content.len(),
        }
    }

    /// Span of lines `[first, end)` without the last line's `\n`.
    fn span(&self, first: usize, end: usize) -> Span {
        let last = end - 1;
        let stop = (self.starts[last] + self.lines[last].len()).min(self.content_len);
        (self.starts[first], stop)
    }
}

/// Windows of `content` whose lines, transformed, equal the pattern's lines
/// transformed the same way.
fn windows_equal_after(content: &str, pattern: &str, transform: fn(&str) -> &str) -> Vec<Span> {
    let lines = Lines::new(content);
    let wanted: Vec<&str> = pattern.split('\n').map(transform).collect();
    let normalized: Vec<&str> = lines.lines.iter().map(|line| transform(line)).collect();
    if wanted.len() > normalized.len() {
        return Vec::new();
    }
    (0..=normalized.len() - wanted.len())
        .filter(|&first| normalized[first..first + wanted.len()] == wanted[..])
        .map(|first| lines.span(first, first + wanted.len()))
        .collect()
}

fn line_trimmed(content: &str, pattern: &str) -> Vec<Span> {
    windows_equal_after(content, pattern, str::trim)
}

fn indentation_flexible(content: &str, pattern: &str) -> Vec<Span> {
    windows_equal_after(content, pattern, str::trim_start)
}

fn whitespace_normalized(content: &str, pattern: &str) -> Vec<Span> {
    let (normalized, sources) = collapse_blanks(content);
    let (wanted, _) = collapse_blanks(pattern);
    exact(&normalized, &wanted)
        .into_iter()
        .map(|(start, end)| (sources[start].0, sources[end - 1].1))
        .collect()
}

/// Collapses runs of spaces and tabs to one space; for every byte of the
/// result, the original byte range it came from.
fn collapse_blanks(text: &str) -> (String, Vec<Span>) {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut sources = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if matches!(bytes[index], b' ' | b'\t') {
            let start = index;
            while index < bytes.len() && matches!(bytes[index], b' ' | b'\t') {
                index += 1;
            }
            out.push(b' ');
            sources.push((start, index));
        } else {
            out.push(bytes[index]);
            sources.push((index, index + 1));
            index += 1;
        }
    }
    // Only ASCII blanks were replaced by ASCII, so the bytes stay valid UTF-8.
    (String::from_utf8_lossy(&out).into_owned(), sources)
}

fn escape_normalized(content: &str, pattern: &str) -> Vec<Span> {
    let unescaped = pattern
        .replace("\\n", "\n")
        .replace("\\t", "\t")
        .replace("\\r", "\r");
    if unescaped == pattern {
        return Vec::new();
    }
    exact(content, &unescaped)
}

fn trimmed_boundary(content: &str, pattern: &str) -> Vec<Span> {
    let lines = Lines::new(content);
    let wanted: Vec<&str> = pattern.split('\n').collect();
    let count = wanted.len();
    if count > lines.lines.len() {
        return Vec::new();
    }
    let edge_trimmed = |block: &[&str], index: usize| -> bool {
        let trim = index == 0 || index == count - 1;
        let (have, want) = (block[index], wanted[index]);
        if trim {
            have.trim() == want.trim()
        } else {
            have == want
        }
    };
    (0..=lines.lines.len() - count)
        .filter(|&first| {
            let block = &lines.lines[first..first + count];
            (0..count).all(|index| edge_trimmed(block, index))
        })
        .map(|first| lines.span(first, first + count))
        .collect()
}

/// hermes' `UNICODE_MAP`: typographic characters and their ASCII stand-ins.
fn unicode_replacement(c: char) -> Option<&'static str> {
    match c {
        '\u{201c}' | '\u{201d}' => Some("\""),
        '\u{2018}' | '\u{2019}' => Some("'"),
        '\u{2014}' => Some("--"),
        '\u{2013}' => Some("-"),
        '\u{2026}' => Some("..."),
        '\u{00a0}' => Some(" "),
        _ => None,
    }
}

fn unicode_normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match unicode_replacement(c) {
            Some(ascii) => out.push_str(ascii),
            None => out.push(c),
        }
    }
    out
}

/// Per character of the original: its byte offset there and the byte offset
/// of its replacement in the normalized text (plus one sentinel each).
struct UnicodeMap {
    original: Vec<usize>,
    normalized: Vec<usize>,
}

impl UnicodeMap {
    fn new(text: &str) -> Self {
        let mut original = Vec::new();
        let mut normalized = Vec::new();
        let mut position = 0;
        for (offset, c) in text.char_indices() {
            original.push(offset);
            normalized.push(position);
            position += unicode_replacement(c).map_or(c.len_utf8(), str::len);
        }
        original.push(text.len());
        normalized.push(position);
        Self {
            original,
            normalized,
        }
    }

    /// The original span of a normalized one; `None` when it starts inside an
    /// expansion (an em dash half matched).
    fn to_original(&self, (start, end): Span) -> Option<Span> {
        let first = self.normalized.binary_search(&start).ok()?;
        let last = first + self.normalized[first..].partition_point(|&position| position < end);
        Some((
            self.original[first],
            self.original[last.min(self.original.len() - 1)],
        ))
    }
}

fn unicode_normalized(content: &str, pattern: &str) -> Vec<Span> {
    let normalized_content = unicode_normalize(content);
    let normalized_pattern = unicode_normalize(pattern);
    if normalized_content == content && normalized_pattern == pattern {
        return Vec::new();
    }
    let mut spans = exact(&normalized_content, &normalized_pattern);
    if spans.is_empty() {
        spans = line_trimmed(&normalized_content, &normalized_pattern);
    }
    if spans.is_empty() {
        return Vec::new();
    }
    let map = UnicodeMap::new(content);
    spans
        .into_iter()
        .filter_map(|span| map.to_original(span))
        .collect()
}

fn block_anchor(content: &str, pattern: &str) -> Vec<Span> {
    let normalized_pattern = unicode_normalize(pattern);
    let wanted: Vec<&str> = normalized_pattern.split('\n').collect();
    let count = wanted.len();
    if count < 2 {
        return Vec::new();
    }
    let normalized_content = unicode_normalize(content);
    let have: Vec<&str> = normalized_content.split('\n').collect();
    // Normalization never adds or removes a newline, so line numbers agree.
    let lines = Lines::new(content);
    if count > have.len() {
        return Vec::new();
    }
    let (first_line, last_line) = (wanted[0].trim(), wanted[count - 1].trim());
    let candidates: Vec<usize> = (0..=have.len() - count)
        .filter(|&first| {
            have[first].trim() == first_line && have[first + count - 1].trim() == last_line
        })
        .collect();
    let threshold = if candidates.len() == 1 { 0.50 } else { 0.70 };
    let pattern_middle = wanted[1..count - 1].join("\n");
    candidates
        .into_iter()
        .filter(|&first| {
            count <= 2
                || similarity(
                    &have[first + 1..first + count - 1].join("\n"),
                    &pattern_middle,
                ) >= threshold
        })
        .map(|first| lines.span(first, first + count))
        .collect()
}

fn context_aware(content: &str, pattern: &str) -> Vec<Span> {
    let wanted: Vec<&str> = pattern.split('\n').map(str::trim).collect();
    let lines = Lines::new(content);
    let have: Vec<&str> = lines.lines.iter().map(|line| line.trim()).collect();
    let count = wanted.len();
    if count > have.len() {
        return Vec::new();
    }
    // A strict majority of lines must be ≥ 80 % similar. hermes accepts half,
    // which lets one unrelated line in a two-line pattern pass.
    let needed = count / 2 + 1;
    (0..=have.len() - count)
        .filter(|&first| {
            let mut similar_lines = 0;
            for (index, want) in wanted.iter().enumerate() {
                let line = have[first + index];
                if length_bound(want, line) >= 0.80 && similarity(want, line) >= 0.80 {
                    similar_lines += 1;
                    if similar_lines >= needed {
                        return true;
                    }
                }
                if similar_lines + (count - index - 1) < needed {
                    return false;
                }
            }
            false
        })
        .map(|first| lines.span(first, first + count))
        .collect()
}

// ---------------------------------------------------------------------------
// Replacement shaping
// ---------------------------------------------------------------------------

fn matched_text(content: &str, spans: &[Span]) -> String {
    spans
        .iter()
        .map(|&(start, end)| &content[start..end])
        .collect()
}

/// `\'` or `\"` in both strings but nowhere in the matched text: the transport
/// added backslashes, and writing them would corrupt the file.
fn escape_drift(content: &str, spans: &[Span], old: &str, new: &str) -> Option<String> {
    if !new.contains("\\'") && !new.contains("\\\"") {
        return None;
    }
    let matched = matched_text(content, spans);
    for (suspect, plain) in [("\\'", "'"), ("\\\"", "\"")] {
        if new.contains(suspect) && old.contains(suspect) && !matched.contains(suspect) {
            return Some(format!(
                "Escape-drift detected: old_string and new_string contain the literal sequence {} but the matched region of the file does not. This is almost always a tool-call serialization artifact where an apostrophe or quote got prefixed with a spurious backslash. Re-read the file with read_file and pass old_string/new_string without backslash-escaping {} characters.",
                crate::text::py_repr(suspect),
                crate::text::py_repr(plain)
            ));
        }
    }
    None
}

/// Literal `\t` / `\r` in `new` become real ones when the matched text has
/// real ones (`\n` is left alone: it survives JSON and is common in code).
fn unescape_controls(new: &str, content: &str, spans: &[Span]) -> String {
    if !new.contains("\\t") && !new.contains("\\r") {
        return new.to_owned();
    }
    let matched = matched_text(content, spans);
    let mut out = new.to_owned();
    if out.contains("\\t") && matched.contains('\t') {
        out = out.replace("\\t", "\t");
    }
    if out.contains("\\r") && matched.contains('\r') {
        out = out.replace("\\r", "\r");
    }
    out
}

/// After a `unicode_normalized` match: apply only the model's edit to the
/// file's own text, so untouched em dashes and smart quotes survive.
fn preserve_unicode(content: &str, spans: &[Span], old: &str, new: &str) -> String {
    let region = matched_text(content, spans);
    let normalized_old = unicode_normalize(old);
    if normalized_old != unicode_normalize(&region) {
        return new.to_owned();
    }
    let region_chars: Vec<char> = region.chars().collect();
    // Character index in the normalized region where each region character starts.
    let mut normalized_start = Vec::with_capacity(region_chars.len() + 1);
    let mut position = 0;
    for c in &region_chars {
        normalized_start.push(position);
        position += unicode_replacement(*c).map_or(1, |ascii| ascii.chars().count());
    }
    normalized_start.push(position);
    let first_at = |index: usize| normalized_start.partition_point(|&start| start < index);

    let old_chars: Vec<char> = normalized_old.chars().collect();
    let new_chars: Vec<char> = new.chars().collect();
    let mut out = String::with_capacity(new.len());
    for op in capture_diff_slices(Algorithm::Myers, &old_chars, &new_chars) {
        match op {
            DiffOp::Equal { old_index, len, .. } => {
                let from = first_at(old_index).min(region_chars.len());
                let to = first_at(old_index + len).min(region_chars.len());
                out.extend(&region_chars[from..to.max(from)]);
            }
            DiffOp::Insert {
                new_index, new_len, ..
            }
            | DiffOp::Replace {
                new_index, new_len, ..
            } => out.extend(&new_chars[new_index..new_index + new_len]),
            DiffOp::Delete { .. } => {}
        }
    }
    out
}

fn leading_blanks(line: &str) -> &str {
    &line[..line.len() - line.trim_start_matches([' ', '\t']).len()]
}

fn first_meaningful_line(text: &str) -> Option<&str> {
    text.split('\n').find(|line| !line.trim().is_empty())
}

/// Moves `new` from the indent the model used (first meaningful line of `old`)
/// to the indent the file has (first meaningful line of the matched region).
fn reindent(region: &str, old: &str, new: &str) -> String {
    if new.is_empty() {
        return String::new();
    }
    let (Some(old_first), Some(file_first)) =
        (first_meaningful_line(old), first_meaningful_line(region))
    else {
        return new.to_owned();
    };
    let (old_indent, file_indent) = (leading_blanks(old_first), leading_blanks(file_first));
    if old_indent == file_indent {
        return new.to_owned();
    }
    new.split('\n')
        .map(|line| {
            if line.trim().is_empty() {
                line.to_owned()
            } else if let Some(rest) = line.strip_prefix(old_indent) {
                format!("{file_indent}{rest}")
            } else {
                format!("{file_indent}{}", line.trim_start_matches([' ', '\t']))
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Writes the replacement over every span (later spans overlapping an earlier
/// one are skipped rather than corrupting the text).
fn apply(content: &str, spans: &[Span], new: &str, reindent_from: Option<&str>) -> String {
    let mut sorted = spans.to_vec();
    sorted.sort_unstable();
    let mut out = String::with_capacity(content.len() + new.len() * sorted.len());
    let mut cursor = 0;
    for (start, end) in sorted {
        if start < cursor {
            continue;
        }
        out.push_str(&content[cursor..start]);
        match reindent_from {
            Some(old) => out.push_str(&reindent(&content[start..end], old, new)),
            None => out.push_str(new),
        }
        cursor = end;
    }
    out.push_str(&content[cursor..]);
    out
}

#[cfg(test)]
#[path = "fuzzy_tests.rs"]
mod tests;
