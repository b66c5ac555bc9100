//! Finding the end-of-command marker `\n\x1e<token> <code> <cwd>\x1e\n` in a
//! byte stream that arrives in arbitrary chunks.

pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
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
    pub fn feed(&mut self, data: &[u8], emit: &mut dyn FnMut(&[u8])) -> Option<(i32, String)> {
        if let Some(tail) = self.tail.as_mut() {
            tail.extend_from_slice(data);
            return parse_marker_tail(tail);
        }
        self.held.extend_from_slice(data);
        if let Some(at) = find(&self.held, &self.prefix) {
            emit(&self.held[..at]);
            let tail = self.held[at + self.prefix.len()..].to_vec();
            self.held.clear();
            let parsed = parse_marker_tail(&tail);
            self.tail = Some(tail);
            return parsed;
        }
        // Keep back only what could still become the prefix.
        let keep = longest_prefix_suffix(&self.held, &self.prefix);
        let cut = self.held.len() - keep;
        if cut > 0 {
            emit(&self.held[..cut]);
            self.held.drain(..cut);
        }
        None
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
    let end = tail.windows(2).position(|w| w == b"\x1e\n")?;
    let text = String::from_utf8_lossy(&tail[..end]);
    let (code, cwd) = text.split_once(' ')?;
    Some((code.trim().parse().unwrap_or(1), cwd.to_owned()))
}
