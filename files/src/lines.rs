//! Cutting a window of lines out of a file while counting all of its lines.
//!
//! [`LineCollector`] is fed the file in chunks of any size, keeps only the lines
//! of the window (each capped at a byte budget) and counts the rest, so a huge
//! file costs one pass and no more memory than the page itself. Backends that
//! stream use it directly; [`page_from_bytes`] is the whole-buffer form.

use crate::fs::{FileStamp, FileStat, LineRead};

/// How many leading bytes decide whether a file is binary.
pub const BINARY_SNIFF_BYTES: usize = 1000;

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Which lines [`crate::fs::FileSystem::read_lines`] should return.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LineWindow {
    /// First line to return, 1-based.
    pub offset: usize,
    /// Maximum number of lines to return.
    pub limit: usize,
    /// Bytes kept of each line; longer lines are cut (the caller marks them).
    pub max_line_bytes: usize,
    /// Answer [`LineRead::Binary`] when the first bytes look binary
    /// (see [`looks_binary`]).
    pub detect_binary: bool,
    /// Answer [`LineRead::Unchanged`] without reading when the file still has
    /// this stamp.
    pub unless_unchanged: Option<FileStamp>,
}

/// A window of lines and the file's total line count.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LinePage {
    pub stat: FileStat,
    /// The window's lines, decoded as UTF-8 (invalid bytes replaced), without
    /// their `\n` or `\r\n`; a UTF-8 BOM is removed from line 1; each line holds
    /// at most `max_line_bytes` bytes of the original.
    pub lines: Vec<String>,
    /// Lines in the whole file; a last line without `\n` counts.
    pub total_lines: usize,
}

/// hermes' binary rule: more than 30 % of the first 1000 bytes are control
/// characters other than `\n`, `\r`, `\t`. We also call a file binary when
/// those bytes contain a NUL, which is what git and ripgrep go by (random
/// bytes are only ~11 % control characters and would pass the first rule).
pub fn looks_binary(head: &[u8]) -> bool {
    let sample = &head[..head.len().min(BINARY_SNIFF_BYTES)];
    if sample.is_empty() {
        return false;
    }
    if sample.contains(&0) {
        return true;
    }
    let control = sample
        .iter()
        .filter(|&&byte| byte < 32 && !matches!(byte, b'\n' | b'\r' | b'\t'))
        .count();
    control * 10 > sample.len() * 3
}

/// Applies a [`LineWindow`] to a whole file already in memory.
pub fn page_from_bytes(stat: FileStat, data: &[u8], window: &LineWindow) -> LineRead {
    if window.unless_unchanged.is_some() && stat.stamp() == window.unless_unchanged {
        return LineRead::Unchanged(stat);
    }
    if window.detect_binary && looks_binary(data) {
        return LineRead::Binary(stat);
    }
    let mut collector = LineCollector::new(window);
    collector.feed(data);
    let (lines, total_lines) = collector.finish();
    LineRead::Page(LinePage {
        stat,
        lines,
        total_lines,
    })
}

/// Incremental line windowing; see the module docs.
#[derive(Debug)]
pub struct LineCollector {
    /// 0-based index of the first line kept.
    first: usize,
    /// 0-based index one past the last line kept.
    end: usize,
    max_line_bytes: usize,
    /// 0-based index of the line the next byte belongs to.
    line_index: usize,
    /// The last byte fed was not a `\n`: a final line without terminator is open.
    open_line: bool,
    current: Vec<u8>,
    lines: Vec<String>,
}

impl LineCollector {
    pub fn new(window: &LineWindow) -> Self {
        let first = window.offset.saturating_sub(1);
        Self {
            first,
            end: first.saturating_add(window.limit),
            max_line_bytes: window.max_line_bytes,
            line_index: 0,
            open_line: false,
            current: Vec::new(),
            lines: Vec::new(),
        }
    }

    /// Feeds the next chunk of the file.
    pub fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            if self.line_index >= self.end {
                // Past the window: only count.
                self.line_index += memchr::memchr_iter(b'\n', chunk).count();
                self.open_line = chunk.last() != Some(&b'\n');
                return;
            }
            let in_window = self.line_index >= self.first;
            match memchr::memchr(b'\n', chunk) {
                Some(newline) => {
                    if in_window {
                        self.keep(&chunk[..newline]);
                        self.close_line();
                    }
                    self.line_index += 1;
                    self.open_line = false;
                    chunk = &chunk[newline + 1..];
                }
                None => {
                    if in_window {
                        self.keep(chunk);
                    }
                    self.open_line = true;
                    return;
                }
            }
        }
    }

    /// The kept lines and the total line count.
    pub fn finish(mut self) -> (Vec<String>, usize) {
        if self.open_line {
            if self.line_index >= self.first && self.line_index < self.end {
                self.close_line();
            }
            self.line_index += 1;
        }
        (self.lines, self.line_index)
    }

    fn keep(&mut self, bytes: &[u8]) {
        let room = self.max_line_bytes.saturating_sub(self.current.len());
        self.current
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn close_line(&mut self) {
        let mut bytes: &[u8] = &self.current;
        if self.line_index == 0 && bytes.starts_with(UTF8_BOM) {
            bytes = &bytes[UTF8_BOM.len()..];
        }
        if let Some(stripped) = bytes.strip_suffix(b"\r") {
            bytes = stripped;
        }
        // `from_utf8` checks ASCII a word at a time; `from_utf8_lossy` walks
        // every byte even when there is nothing to replace.
        let line = match std::str::from_utf8(bytes) {
            Ok(text) => text.to_owned(),
            Err(_) => String::from_utf8_lossy(bytes).into_owned(),
        };
        self.lines.push(line);
        self.current.clear();
    }
}

#[cfg(test)]
#[path = "lines_tests.rs"]
mod tests;
