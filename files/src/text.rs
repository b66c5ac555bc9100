//! Small text helpers: line endings, the UTF-8 BOM, read_file's gutter, and
//! Python-compatible renderings used inside hermes' messages.

use std::borrow::Cow;
use std::fmt::Write;

pub const BOM: char = '\u{feff}';

/// The line ending to keep for a file, judged from its first 4096 bytes:
/// `\r\n` if any appears there, else `\n` if any, else unknown.
pub fn detect_line_ending(text: &str) -> Option<&'static str> {
    let mut end = text.len().min(4096);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let head = &text[..end];
    if head.contains("\r\n") {
        Some("\r\n")
    } else if head.contains('\n') {
        Some("\n")
    } else {
        None
    }
}

/// Rewrites every line ending (`\r\n`, lone `\r`, `\n`) as `target`.
pub fn normalize_line_endings(text: &str, target: &str) -> String {
    if target == "\n" && !text.contains('\r') {
        return text.to_owned();
    }
    let unix = text.replace("\r\n", "\n").replace('\r', "\n");
    if target == "\n" {
        unix
    } else {
        unix.replace('\n', target)
    }
}

/// Text without a leading BOM, and whether there was one.
pub fn strip_bom(text: &str) -> (&str, bool) {
    match text.strip_prefix(BOM) {
        Some(rest) => (rest, true),
        None => (text, false),
    }
}

/// The conventions of a file already on disk that a rewrite keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileStyle {
    pub bom: bool,
    pub crlf: bool,
}

impl FileStyle {
    /// Style of existing content (raw, possibly with BOM); `None` for a new file.
    pub fn of(existing: Option<&str>) -> Self {
        match existing {
            Some(text) => Self {
                bom: text.starts_with(BOM),
                crlf: detect_line_ending(text) == Some("\r\n"),
            },
            None => Self::default(),
        }
    }

    /// `text` as it should land on disk: CRLF line endings for a CRLF file,
    /// a BOM for a file that had one (unless `text` brings its own).
    pub fn apply<'a>(self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        if self.crlf {
            out = Cow::Owned(normalize_line_endings(&out, "\r\n"));
        }
        if self.bom && !out.starts_with(BOM) {
            out = Cow::Owned(format!("{BOM}{out}"));
        }
        out
    }
}

/// read_file's gutter: `N|line`, unpadded, lines longer than `max_chars`
/// characters cut with `... [truncated]`.
pub fn number_lines<S: AsRef<str>>(lines: &[S], first_line: usize, max_chars: usize) -> String {
    let mut out = String::with_capacity(lines.iter().map(|line| line.as_ref().len() + 8).sum());
    for (index, line) in lines.iter().enumerate() {
        let line = line.as_ref();
        if index > 0 {
            out.push('\n');
        }
        // Writing into a String cannot fail.
        let _ = write!(out, "{}|", first_line + index);
        // A line of at most `max_chars` bytes has at most that many characters.
        let cut = (line.len() > max_chars)
            .then(|| line.char_indices().nth(max_chars))
            .flatten();
        match cut {
            Some((cut, _)) => {
                out.push_str(&line[..cut]);
                out.push_str("... [truncated]");
            }
            None => out.push_str(line),
        }
    }
    out
}

/// Python's `repr()` of a string, as hermes' messages embed paths with `!r`.
pub fn py_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(text.len() + 2);
    out.push(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `os.path.splitext` on a file name: (`stem`, `.ext`); leading dots
/// belong to the stem.
pub fn split_ext(name: &str) -> (&str, &str) {
    let leading = name.len() - name.trim_start_matches('.').len();
    match name[leading..].rfind('.') {
        Some(dot) => name.split_at(leading + dot),
        None => (name, ""),
    }
}

/// Byte index at most `index` that lies on a character boundary of `text`.
pub fn floor_boundary(text: &str, index: usize) -> usize {
    let mut index = index.min(text.len());
    while !text.is_char_boundary(index) {
        index -= 1;
    }
    index
}

/// Byte offset of the `chars`-th character (or the end).
pub fn char_offset(text: &str, chars: usize) -> usize {
    text.char_indices()
        .nth(chars)
        .map_or(text.len(), |(offset, _)| offset)
}

#[cfg(test)]
#[path = "text_tests.rs"]
mod tests;
