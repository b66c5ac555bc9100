//! A server-sent-events decoder: bytes in, event `data` payloads out.
//!
//! Follows the SSE rules that matter for chat completions: lines end in LF, CRLF or
//! CR (a CRLF may be split across two network chunks); lines starting with `:` are
//! comments (keep-alives); `data:` lines accumulate and are joined by `\n` when the
//! event ends at a blank line; other fields (`event`, `id`, `retry`) are ignored.
//! Bytes are buffered until a line is complete, so a UTF-8 character split across
//! chunks is decoded whole.

#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    buffer: Vec<u8>,
    data_lines: Vec<String>,
    /// The previous chunk ended in CR, so a leading LF belongs to that line ending.
    skip_leading_lf: bool,
}

impl SseDecoder {
    pub(crate) fn new() -> Self {
        SseDecoder::default()
    }

    /// Feeds bytes; returns the data of every event completed by them.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut bytes = bytes;
        if self.skip_leading_lf && !bytes.is_empty() {
            self.skip_leading_lf = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        self.buffer.extend_from_slice(bytes);

        let mut events = Vec::new();
        let mut line_start = 0;
        let mut position = 0;
        while position < self.buffer.len() {
            let byte = self.buffer[position];
            if byte != b'\n' && byte != b'\r' {
                position += 1;
                continue;
            }
            let line = String::from_utf8_lossy(&self.buffer[line_start..position]).into_owned();
            let mut next = position + 1;
            if byte == b'\r' {
                match self.buffer.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.skip_leading_lf = true,
                }
            }
            if let Some(data) = self.process_line(&line) {
                events.push(data);
            }
            line_start = next;
            position = next;
        }
        self.buffer.drain(..line_start);
        events
    }

    /// Ends the stream: a last line without a line ending and an event without a
    /// closing blank line still count.
    pub(crate) fn finish(&mut self) -> Vec<String> {
        let mut events = Vec::new();
        if !self.buffer.is_empty() {
            let line = String::from_utf8_lossy(&self.buffer).into_owned();
            self.buffer.clear();
            if let Some(data) = self.process_line(&line) {
                events.push(data);
            }
        }
        if let Some(data) = self.dispatch() {
            events.push(data);
        }
        events
    }

    fn process_line(&mut self, line: &str) -> Option<String> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        if field == "data" {
            self.data_lines.push(value.to_string());
        }
        None
    }

    fn dispatch(&mut self) -> Option<String> {
        if self.data_lines.is_empty() {
            return None;
        }
        let data = self.data_lines.join("\n");
        self.data_lines.clear();
        Some(data)
    }
}

/// Splits one event's data into JSON payloads.
///
/// Normally the data is one JSON document (possibly spread over several `data:`
/// lines). Some servers forget the blank line between events, which glues several
/// `data:` lines into one event; if the whole does not parse but each line does, the
/// lines are the payloads.
pub(crate) fn split_payloads(data: &str) -> Vec<&str> {
    let is_payload = |text: &str| {
        let text = text.trim();
        text == "[DONE]" || serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    };
    if !data.contains('\n') || is_payload(data) {
        return vec![data];
    }
    let lines: Vec<&str> = data
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    if lines.iter().all(|line| is_payload(line)) {
        lines
    } else {
        vec![data]
    }
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
