//! Finding the end-of-command marker `\n\x1e<token> <code> <cwd>\x1e\n` in a
//! byte stream that arrives in arbitrary chunks.

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    memchr::memmem::find(haystack, needle)
}

/// Passes through everything before the marker and parses the marker.
pub struct MarkerScanner {
    prefix: Vec<u8>,
    /// Bytes that might be the start of the marker, held back.
    held: Vec<u8>,
    /// Once the prefix is seen: the rest of the marker line.
    tail: Option<Vec<u8>>,
}

impl MarkerScanner {
    pub fn new(token: &str) -> Self {
        MarkerScanner {
            prefix: format!("\n\x1e{token} ").into_bytes(),
            held: Vec::new(),
            tail: None,
        }
    }

    /// A scanner for `\x1e<token> <code> <rest>\x1e\n` without the leading
    /// newline: only a `\x1e` is ever held back, so live output (a trailing
    /// newline included) shows at once.
    pub fn bare(token: &str) -> Self {
        MarkerScanner {
            prefix: format!("\x1e{token} ").into_bytes(),
            held: Vec::new(),
            tail: None,
        }
    }

    /// Emits whatever was held back (the stream ended without a marker).
    pub fn flush(&mut self, emit: &mut dyn FnMut(&[u8])) {
        if self.tail.is_none() && !self.held.is_empty() {
            emit(&self.held);
            self.held.clear();
        }
    }

    /// Feeds bytes; output before the marker goes to `emit`. Returns the exit
    /// code and cwd once the whole marker has arrived.
    ///
    /// Output is scanned where it lies: only the few bytes at a chunk's end that
    /// could begin the marker are copied and held back, so megabytes of output
    /// cost one vectorised search, not a copy and a byte-by-byte compare.
    pub fn feed(&mut self, data: &[u8], emit: &mut dyn FnMut(&[u8])) -> Option<(i32, String)> {
        if let Some(tail) = self.tail.as_mut() {
            tail.extend_from_slice(data);
            return parse_marker_tail(tail);
        }
        // A marker that began in the held-back bytes. They are a prefix of the
        // marker's prefix, so each start in them either continues into `data`
        // or is ruled out without searching.
        let held = std::mem::take(&mut self.held);
        for start in 0..held.len() {
            let begun = &held[start..];
            if !self.prefix.starts_with(begun) {
                continue;
            }
            let rest = &self.prefix[begun.len()..];
            if data.starts_with(rest) {
                emit_some(emit, &held[..start]);
                return self.begin_tail(&data[rest.len()..]);
            }
            if rest.starts_with(data) {
                // Still could be the marker: hold on to all of it.
                emit_some(emit, &held[..start]);
                self.held = [begun, data].concat();
                return None;
            }
        }
        emit_some(emit, &held);
        if let Some(at) = find(data, &self.prefix) {
            emit_some(emit, &data[..at]);
            return self.begin_tail(&data[at + self.prefix.len()..]);
        }
        // Keep back only what could still become the prefix.
        let cut = data.len() - longest_prefix_suffix(data, &self.prefix);
        emit_some(emit, &data[..cut]);
        self.held = data[cut..].to_vec();
        None
    }

    fn begin_tail(&mut self, after_prefix: &[u8]) -> Option<(i32, String)> {
        let tail = after_prefix.to_vec();
        let parsed = parse_marker_tail(&tail);
        self.tail = Some(tail);
        parsed
    }
}

fn emit_some(emit: &mut dyn FnMut(&[u8]), bytes: &[u8]) {
    if !bytes.is_empty() {
        emit(bytes);
    }
}

/// Length of the longest suffix of `data` that is a proper prefix of `prefix`.
fn longest_prefix_suffix(data: &[u8], prefix: &[u8]) -> usize {
    let max = prefix.len().saturating_sub(1).min(data.len());
    (1..=max)
        .rev()
        .find(|&k| data[data.len() - k..] == prefix[..k])
        .unwrap_or(0)
}

/// Parses `<code> <cwd>\x1e\n` once complete.
fn parse_marker_tail(tail: &[u8]) -> Option<(i32, String)> {
    let end = find(tail, b"\x1e\n")?;
    let text = String::from_utf8_lossy(&tail[..end]);
    let (code, cwd) = text.split_once(' ')?;
    Some((code.trim().parse().unwrap_or(1), cwd.to_owned()))
}

/// Finds a command's start acknowledgement (`\x1e<token>+\x1e`) in the stream
/// before the command's own output. What precedes it (a background job of an
/// earlier command printing) is passed through; once it is found, the bytes
/// after it are the command's.
pub struct AckScanner {
    needle: Vec<u8>,
    /// Bytes not yet passed on: at most a partial acknowledgement at the end.
    pending: Vec<u8>,
    seen: bool,
}

impl AckScanner {
    pub fn new(needle: Vec<u8>) -> Self {
        AckScanner {
            needle,
            pending: Vec::new(),
            seen: false,
        }
    }

    pub fn seen(&self) -> bool {
        self.seen
    }

    /// Before the acknowledgement: passes on what cannot be part of it and
    /// returns `None`; at it: passes on what came before it and returns the
    /// bytes after it. After it: returns `data` as it is.
    pub fn feed<'a>(
        &mut self,
        data: &'a [u8],
        emit: &mut dyn FnMut(&[u8]),
    ) -> Option<std::borrow::Cow<'a, [u8]>> {
        use std::borrow::Cow;
        if self.seen {
            return Some(Cow::Borrowed(data));
        }
        self.pending.extend_from_slice(data);
        if let Some(at) = find(&self.pending, &self.needle) {
            self.seen = true;
            emit_some(emit, &self.pending[..at]);
            let rest = self.pending[at + self.needle.len()..].to_vec();
            self.pending = Vec::new();
            return Some(Cow::Owned(rest));
        }
        let cut = self.pending.len() - longest_prefix_suffix(&self.pending, &self.needle);
        emit_some(emit, &self.pending[..cut]);
        self.pending.drain(..cut);
        None
    }

    /// Emits whatever was held back (the stream ended first).
    pub fn flush(&mut self, emit: &mut dyn FnMut(&[u8])) {
        emit_some(emit, &self.pending);
        self.pending.clear();
    }
}
