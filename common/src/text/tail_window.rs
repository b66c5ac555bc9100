//! The last characters of a stream in bounded memory: the tail half of a
//! head/tail capture, and a background process's rolling output window
//! (hermes keeps its last 200,000 characters).

use super::truncate::last_chars;

/// The last `max_chars` characters pushed. Grows to twice that before
/// compacting, so pushing is amortised O(1) per character.
#[derive(Debug, Clone)]
pub struct TailWindow {
    max_chars: usize,
    text: String,
    chars: usize,
    total_chars: usize,
}

impl TailWindow {
    /// A window of `max_chars` characters (0 is treated as 1).
    pub fn new(max_chars: usize) -> Self {
        TailWindow {
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
        self.total_chars += n;
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
    pub fn total_chars(&self) -> usize {
        self.total_chars
    }

    pub fn is_empty(&self) -> bool {
        self.chars == 0
    }

    /// Bytes of memory held (capacity, not length).
    pub fn retained_bytes(&self) -> usize {
        self.text.capacity()
    }
}

#[cfg(test)]
#[path = "tail_window_tests.rs"]
mod tests;
