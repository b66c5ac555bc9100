//! The rolling output window of a background process (hermes keeps the last
//! 200,000 characters) and the incremental UTF-8 decoding that feeds it.

/// Decodes a byte stream that arrives in arbitrary chunks: a sequence split
/// across chunks is reassembled, invalid bytes become U+FFFD.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Text of `bytes` (plus what was pending), holding back an incomplete
    /// trailing sequence.
    pub fn decode(&mut self, bytes: &[u8]) -> String {
        let mut data = std::mem::take(&mut self.pending);
        data.extend_from_slice(bytes);
        let mut out = String::with_capacity(data.len());
        let mut rest: &[u8] = &data;
        loop {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    out.push_str(text);
                    break;
                }
                Err(err) => {
                    let valid = err.valid_up_to();
                    // The first `valid_up_to` bytes are UTF-8: this copies them.
                    out.push_str(&String::from_utf8_lossy(&rest[..valid]));
                    match err.error_len() {
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            rest = &rest[valid + bad..];
                        }
                        None => {
                            self.pending = rest[valid..].to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    /// What is left at end of stream (an unfinished sequence becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            self.pending.clear();
            "\u{FFFD}".to_owned()
        }
    }
}

/// The last `max_chars` characters of a stream. Grows to twice that before
/// compacting, so pushing is amortised O(1) per character.
#[derive(Debug, Clone)]
pub struct TailBuffer {
    max_chars: usize,
    text: String,
    chars: usize,
    total_chars: u64,
}

impl TailBuffer {
    pub fn new(max_chars: usize) -> Self {
        TailBuffer {
            max_chars: max_chars.max(1),
            text: String::new(),
            chars: 0,
            total_chars: 0,
        }
    }

    pub fn push(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        let n = text.chars().count();
        self.total_chars += n as u64;
        if n >= self.max_chars {
            self.text.clear();
            self.text.push_str(last_chars(text, self.max_chars));
            self.chars = self.max_chars;
            return;
        }
        self.text.push_str(text);
        self.chars += n;
        if self.chars > 2 * self.max_chars {
            let keep_from = self.text.len() - last_chars(&self.text, self.max_chars).len();
            self.text.replace_range(..keep_from, "");
            self.chars = self.max_chars;
        }
    }

    /// The retained window (at most `max_chars` characters).
    pub fn text(&self) -> &str {
        if self.chars > self.max_chars {
            last_chars(&self.text, self.max_chars)
        } else {
            &self.text
        }
    }

    /// The last `n` characters of the window.
    pub fn last(&self, n: usize) -> &str {
        last_chars(self.text(), n)
    }

    /// Characters ever pushed.
    pub fn total_chars(&self) -> u64 {
        self.total_chars
    }

    pub fn is_empty(&self) -> bool {
        self.chars == 0
    }

    /// Bytes held (capacity).
    pub fn retained_bytes(&self) -> usize {
        self.text.capacity()
    }
}

/// The last `n` characters of `s` (all of it if shorter).
pub fn last_chars(s: &str, n: usize) -> &str {
    if n == 0 {
        return &s[s.len()..];
    }
    match s.char_indices().rev().nth(n - 1) {
        Some((i, _)) => &s[i..],
        None => s,
    }
}

#[cfg(test)]
#[path = "tail_tests.rs"]
mod tests;
