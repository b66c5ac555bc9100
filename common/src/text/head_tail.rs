//! Bounded capture of a stream that may be gigabytes long, producing exactly
//! what [`truncate_head_tail`](super::truncate_head_tail) produces on the
//! whole stream.

use super::truncate::{first_chars, last_chars, render_parts, split_budget};

const REPLACEMENT: &str = "\u{FFFD}";

/// Streaming head/tail capture.
///
/// Bytes arrive in arbitrary chunks; UTF-8 sequences split across chunks are
/// reassembled and invalid bytes become U+FFFD exactly as
/// [`String::from_utf8_lossy`] would on the whole stream. Memory stays
/// O(`max_chars`) however much is pushed.
///
/// ```
/// use caduceus_common::text::{truncate_head_tail, HeadTailBuffer};
/// let mut buf = HeadTailBuffer::new(100);
/// for _ in 0..1000 {
///     buf.push("héllo wörld\n".as_bytes());
/// }
/// assert_eq!(buf.total_chars(), 12_000);
/// let full = "héllo wörld\n".repeat(1000);
/// assert_eq!(buf.finish(), truncate_head_tail(&full, 100));
/// ```
#[derive(Debug, Clone)]
pub struct HeadTailBuffer {
    max_chars: usize,
    head_limit: usize,
    tail_limit: usize,
    /// The first `head_limit` characters of the stream (fewer until then).
    head: String,
    head_chars: usize,
    /// The last characters of the stream: at least `tail_limit` of them once
    /// that many arrived, at most `2 · tail_limit` between compactions.
    tail: String,
    tail_chars: usize,
    total_chars: usize,
    /// An incomplete UTF-8 sequence at the end of the last chunk.
    pending: [u8; 4],
    pending_len: usize,
}

impl HeadTailBuffer {
    /// A buffer whose [`finish`](Self::finish) output has at most `max_chars`
    /// characters (0 is treated as 1).
    pub fn new(max_chars: usize) -> Self {
        let max_chars = max_chars.max(1);
        let (head_limit, tail_limit) = split_budget(max_chars);
        Self {
            max_chars,
            head_limit,
            tail_limit,
            head: String::new(),
            head_chars: 0,
            tail: String::new(),
            tail_chars: 0,
            total_chars: 0,
            pending: [0; 4],
            pending_len: 0,
        }
    }

    /// Appends raw output bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        let mut rest = bytes;
        if self.pending_len > 0 {
            rest = self.complete_pending(rest);
        }
        // `str::from_utf8` validates ASCII runs a word at a time, which
        // `utf8_chunks` does not. Valid text up to a character the chunk's
        // end cut is validated once; the rest takes `from_utf8_lossy`'s
        // steps: the valid prefix, then one U+FFFD per maximal invalid
        // sequence.
        let cut = rest.len() - cut_sequence_len(rest);
        if let Ok(text) = std::str::from_utf8(&rest[..cut]) {
            self.accept(text);
            rest = &rest[cut..];
        }
        loop {
            let err = match std::str::from_utf8(rest) {
                Ok(text) => return self.accept(text),
                Err(err) => err,
            };
            let (valid, broken) = rest.split_at(err.valid_up_to());
            if let Ok(valid) = std::str::from_utf8(valid) {
                self.accept(valid);
            }
            match err.error_len() {
                Some(invalid_len) => {
                    self.accept(REPLACEMENT);
                    rest = &broken[invalid_len..];
                }
                // A sequence cut by the end of the chunk: keep it for the next.
                None => {
                    self.pending[..broken.len()].copy_from_slice(broken);
                    self.pending_len = broken.len();
                    return;
                }
            }
        }
    }

    /// Characters received so far (an incomplete trailing sequence not yet
    /// counted).
    pub fn total_chars(&self) -> usize {
        self.total_chars
    }

    /// Whether the output so far exceeds `max_chars` and will be cut.
    pub fn is_truncated(&self) -> bool {
        self.total_chars + usize::from(self.pending_len > 0) > self.max_chars
    }

    /// Bytes of memory held for text (capacity, not length).
    pub fn retained_bytes(&self) -> usize {
        self.head.capacity() + self.tail.capacity() + self.pending.len()
    }

    /// The capture, cut as [`truncate_head_tail`](super::truncate_head_tail)
    /// would cut the whole stream.
    pub fn finish(self) -> String {
        self.finish_with_suffix("")
    }

    /// The capture with a status suffix kept whole, as
    /// [`truncate_head_tail_with_suffix`](super::truncate_head_tail_with_suffix).
    pub fn finish_with_suffix(mut self, suffix: &str) -> String {
        if self.pending_len > 0 {
            // A stream that ends inside a sequence: one U+FFFD, as the lossy
            // decoder does.
            self.pending_len = 0;
            self.accept(REPLACEMENT);
        }
        self.render(suffix)
    }

    /// A snapshot of the capture so far (an incomplete trailing sequence is
    /// left out), for progress reports while the stream is still open.
    pub fn render(&self, suffix: &str) -> String {
        let full = || {
            // Everything fits, so the tail still holds what the head lacks.
            let missing = self.total_chars - self.head_chars;
            let mut text = self.head.clone();
            text.push_str(last_chars(&self.tail, missing));
            text
        };
        render_parts(
            &self.head,
            &self.tail,
            full,
            self.total_chars,
            self.max_chars,
            suffix,
        )
    }

    /// Feeds the bytes that finish (or break) the pending sequence; returns
    /// the input not consumed.
    fn complete_pending<'b>(&mut self, bytes: &'b [u8]) -> &'b [u8] {
        let have = self.pending_len;
        let needed = sequence_len(self.pending[0]).saturating_sub(have);
        let take = needed.min(bytes.len());
        let mut candidate = [0u8; 4];
        candidate[..have].copy_from_slice(&self.pending[..have]);
        candidate[have..have + take].copy_from_slice(&bytes[..take]);
        let candidate = &candidate[..have + take];
        match std::str::from_utf8(candidate) {
            Ok(complete) => {
                self.pending_len = 0;
                self.accept(complete);
                &bytes[take..]
            }
            Err(err) => match err.error_len() {
                // Broken: the maximal invalid prefix becomes one U+FFFD and
                // the offending byte starts afresh.
                Some(invalid_len) => {
                    self.pending_len = 0;
                    self.accept(REPLACEMENT);
                    &bytes[invalid_len.saturating_sub(have)..]
                }
                // Still incomplete: the chunk was too short.
                None => {
                    self.pending[..candidate.len()].copy_from_slice(candidate);
                    self.pending_len = candidate.len();
                    &[]
                }
            },
        }
    }

    fn accept(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let chars = text.chars().count();
        self.total_chars += chars;

        if self.head_chars < self.head_limit {
            let taken = first_chars(text, self.head_limit - self.head_chars);
            self.head.push_str(taken);
            self.head_chars += taken.chars().count();
        }

        if chars >= self.tail_limit {
            self.tail.clear();
            self.tail.push_str(last_chars(text, self.tail_limit));
            self.tail_chars = self.tail_limit;
            return;
        }
        self.tail.push_str(text);
        self.tail_chars += chars;
        if self.tail_chars > 2 * self.tail_limit {
            let keep_from = self.tail.len() - last_chars(&self.tail, self.tail_limit).len();
            self.tail.replace_range(..keep_from, "");
            self.tail_chars = self.tail_limit;
        }
    }
}

/// The length of the UTF-8 sequence a lead byte starts (1 for anything that
/// cannot lead a multi-byte sequence).
fn sequence_len(lead: u8) -> usize {
    match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 1,
    }
}

/// How many bytes at the end of `bytes` start a character that the end
/// cuts short (its lead byte announces more bytes than follow), else 0.
fn cut_sequence_len(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let byte = bytes[bytes.len() - back];
        // The last byte that is not a continuation byte (10xxxxxx).
        if byte & 0xC0 != 0x80 {
            return if sequence_len(byte) > back { back } else { 0 };
        }
    }
    0
}

#[cfg(test)]
#[path = "head_tail_tests.rs"]
mod tests;
