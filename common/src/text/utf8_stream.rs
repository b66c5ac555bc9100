//! Incremental lossy UTF-8 decoding: bytes arrive in arbitrary chunks (pipe
//! reads, gRPC frames), and the text must come out exactly as
//! [`String::from_utf8_lossy`] would decode the whole stream.

const REPLACEMENT: &str = "\u{FFFD}";

/// Decodes a byte stream chunk by chunk. A sequence split across chunks is
/// reassembled; each maximal invalid sequence becomes one U+FFFD; nothing is
/// allocated (text is handed to the caller as borrowed slices).
///
/// ```
/// use caduceus_common::text::Utf8Stream;
/// let mut stream = Utf8Stream::default();
/// let euro = "€".as_bytes();
/// assert_eq!(stream.decode(&euro[..1]), "");
/// assert_eq!(stream.decode(&euro[1..]), "€");
/// assert_eq!(stream.decode(b"a\xffb"), "a\u{FFFD}b");
/// ```
#[derive(Debug, Clone, Default)]
pub struct Utf8Stream {
    /// An incomplete sequence at the end of the last chunk.
    pending: [u8; 4],
    pending_len: usize,
}

impl Utf8Stream {
    /// Feeds `bytes`, handing each decoded run of text to `sink` in order.
    pub fn push(&mut self, bytes: &[u8], mut sink: impl FnMut(&str)) {
        let mut rest = bytes;
        if self.pending_len > 0 {
            rest = self.complete_pending(rest, &mut sink);
        }
        // `str::from_utf8` validates ASCII runs a word at a time, which
        // `utf8_chunks` does not. Valid text up to a character the chunk's
        // end cut is validated once; the rest takes `from_utf8_lossy`'s
        // steps: the valid prefix, then one U+FFFD per maximal invalid
        // sequence.
        let cut = rest.len() - cut_sequence_len(rest);
        if let Ok(text) = std::str::from_utf8(&rest[..cut]) {
            sink(text);
            rest = &rest[cut..];
        }
        loop {
            let err = match std::str::from_utf8(rest) {
                Ok(text) => return sink(text),
                Err(err) => err,
            };
            let (valid, broken) = rest.split_at(err.valid_up_to());
            if let Ok(valid) = std::str::from_utf8(valid) {
                sink(valid);
            }
            match err.error_len() {
                Some(invalid_len) => {
                    sink(REPLACEMENT);
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

    /// The text of `bytes` as one string (see [`push`](Self::push)).
    pub fn decode(&mut self, bytes: &[u8]) -> String {
        let mut out = String::with_capacity(bytes.len());
        self.push(bytes, |text| out.push_str(text));
        out
    }

    /// Whether an incomplete sequence is held back.
    pub fn has_pending(&self) -> bool {
        self.pending_len > 0
    }

    /// What is left at the end of the stream: a stream that ends inside a
    /// sequence gets one U+FFFD, as the lossy decoder gives it.
    pub fn finish(&mut self) -> &'static str {
        if std::mem::take(&mut self.pending_len) > 0 {
            REPLACEMENT
        } else {
            ""
        }
    }

    /// Feeds the bytes that finish (or break) the pending sequence; returns
    /// the input not consumed.
    fn complete_pending<'b>(&mut self, bytes: &'b [u8], sink: &mut impl FnMut(&str)) -> &'b [u8] {
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
                sink(complete);
                &bytes[take..]
            }
            Err(err) => match err.error_len() {
                // Broken: the maximal invalid prefix becomes one U+FFFD and
                // the offending byte starts afresh.
                Some(invalid_len) => {
                    self.pending_len = 0;
                    sink(REPLACEMENT);
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
#[path = "utf8_stream_tests.rs"]
mod tests;
