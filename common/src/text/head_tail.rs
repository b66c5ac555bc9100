//! Bounded capture of a stream that may be gigabytes long, producing exactly
//! what [`truncate_head_tail`](super::truncate_head_tail) produces on the
//! whole stream.

use super::tail_window::TailWindow;
use super::truncate::{first_chars, render_parts, split_budget};
use super::utf8_stream::Utf8Stream;

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
    head: Head,
    /// The last `tail_limit` characters of the stream; it also counts every
    /// character received.
    tail: TailWindow,
    decoder: Utf8Stream,
}

/// The first `limit` characters of the stream (fewer until then).
#[derive(Debug, Clone)]
struct Head {
    limit: usize,
    text: String,
    chars: usize,
}

impl Head {
    fn push(&mut self, text: &str) {
        if self.chars < self.limit {
            let taken = first_chars(text, self.limit - self.chars);
            self.text.push_str(taken);
            self.chars += taken.chars().count();
        }
    }
}

impl HeadTailBuffer {
    /// A buffer whose [`finish`](Self::finish) output has at most `max_chars`
    /// characters (0 is treated as 1).
    pub fn new(max_chars: usize) -> Self {
        let max_chars = max_chars.max(1);
        let (head_limit, tail_limit) = split_budget(max_chars);
        Self {
            max_chars,
            head: Head {
                limit: head_limit,
                text: String::new(),
                chars: 0,
            },
            tail: TailWindow::new(tail_limit),
            decoder: Utf8Stream::default(),
        }
    }

    /// Appends raw output bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        let Self {
            head,
            tail,
            decoder,
            ..
        } = self;
        decoder.push(bytes, |text| {
            head.push(text);
            tail.push(text);
        });
    }

    /// Characters received so far (an incomplete trailing sequence not yet
    /// counted).
    pub fn total_chars(&self) -> usize {
        self.tail.total_chars()
    }

    /// Whether the output so far exceeds `max_chars` and will be cut.
    pub fn is_truncated(&self) -> bool {
        self.total_chars() + usize::from(self.decoder.has_pending()) > self.max_chars
    }

    /// Bytes of memory held for text (capacity, not length).
    pub fn retained_bytes(&self) -> usize {
        self.head.text.capacity() + self.tail.retained_bytes()
    }

    /// The capture, cut as [`truncate_head_tail`](super::truncate_head_tail)
    /// would cut the whole stream.
    pub fn finish(self) -> String {
        self.finish_with_suffix("")
    }

    /// The capture with a status suffix kept whole, as
    /// [`truncate_head_tail_with_suffix`](super::truncate_head_tail_with_suffix).
    pub fn finish_with_suffix(mut self, suffix: &str) -> String {
        let rest = self.decoder.finish();
        self.head.push(rest);
        self.tail.push(rest);
        self.render(suffix)
    }

    /// A snapshot of the capture so far (an incomplete trailing sequence is
    /// left out), for progress reports while the stream is still open.
    pub fn render(&self, suffix: &str) -> String {
        let full = || {
            // Everything fits, so the tail still holds what the head lacks.
            let missing = self.total_chars() - self.head.chars;
            let mut text = self.head.text.clone();
            text.push_str(self.tail.last(missing));
            text
        };
        render_parts(
            &self.head.text,
            self.tail.text(),
            full,
            self.total_chars(),
            self.max_chars,
            suffix,
        )
    }
}

#[cfg(test)]
#[path = "head_tail_tests.rs"]
mod tests;
