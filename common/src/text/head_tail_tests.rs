use super::super::{truncate_head_tail, truncate_head_tail_with_suffix};
use super::*;

/// Small deterministic generator, so failures reproduce.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Bytes mixing ASCII, 2/3/4-byte characters and invalid UTF-8 (lone
/// continuation bytes, truncated sequences, overlong and surrogate forms).
fn mixed_bytes(rng: &mut XorShift, len: usize) -> Vec<u8> {
    const PIECES: &[&[u8]] = &[
        b"a",
        b"xyz ",
        b"\n",
        "é".as_bytes(),
        "日本".as_bytes(),
        "🦀".as_bytes(),
        b"\x80",
        b"\xE6\x97",
        b"\xF0\x9F\xA6",
        b"\xC0\xAF",
        b"\xED\xA0\x80",
        b"\xFF",
    ];
    let mut out = Vec::with_capacity(len + 4);
    while out.len() < len {
        out.extend_from_slice(PIECES[rng.below(PIECES.len())]);
    }
    out
}

fn push_in_random_chunks(buf: &mut HeadTailBuffer, bytes: &[u8], rng: &mut XorShift) {
    let mut at = 0;
    while at < bytes.len() {
        let size = match rng.below(4) {
            0 => 1,
            1 => 1 + rng.below(4),
            2 => 1 + rng.below(64),
            _ => 1 + rng.below(4096),
        };
        let end = (at + size).min(bytes.len());
        buf.push(&bytes[at..end]);
        if rng.below(8) == 0 {
            buf.push(&[]);
        }
        at = end;
    }
}

#[test]
fn streaming_equals_truncating_the_whole_text() {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    for round in 0..600 {
        let len = match round % 3 {
            0 => rng.below(64),
            1 => rng.below(1024),
            _ => rng.below(20_000),
        };
        let bytes = mixed_bytes(&mut rng, len);
        let full = String::from_utf8_lossy(&bytes);
        let max = match rng.below(3) {
            0 => rng.below(8),
            1 => 1 + rng.below(300),
            _ => 1 + rng.below(5_000),
        };
        let mut buf = HeadTailBuffer::new(max);
        push_in_random_chunks(&mut buf, &bytes, &mut rng);
        if rng.below(4) == 0 {
            let suffix = "\n[Command interrupted]";
            let expected = truncate_head_tail_with_suffix(&full, max, suffix);
            assert_eq!(
                buf.finish_with_suffix(suffix),
                expected,
                "round {round} max {max}"
            );
        } else {
            let expected = truncate_head_tail(&full, max);
            assert_eq!(buf.finish(), expected, "round {round} max {max} len {len}");
        }
    }
}

#[test]
fn sequences_split_byte_by_byte_are_reassembled() {
    let text = "a日🦀é\n".repeat(50);
    let mut buf = HeadTailBuffer::new(10_000);
    for byte in text.as_bytes() {
        buf.push(std::slice::from_ref(byte));
    }
    assert_eq!(buf.total_chars(), 250);
    assert_eq!(buf.finish(), text);
}

#[test]
fn invalid_and_unfinished_bytes_become_replacement_characters() {
    let mut buf = HeadTailBuffer::new(100);
    buf.push(b"ok \xFF ");
    buf.push(b"\xE6\x97"); // first two bytes of 日
    buf.push(b"X"); // breaks it
    buf.push(b" \xF0\x9F"); // stream ends inside a sequence
    assert_eq!(buf.finish(), "ok \u{FFFD} \u{FFFD}X \u{FFFD}");
}

#[test]
fn snapshot_render_leaves_the_buffer_usable() {
    let mut buf = HeadTailBuffer::new(100);
    buf.push(b"first ");
    assert_eq!(buf.render(""), "first ");
    assert!(!buf.is_truncated());
    buf.push(&[b'x'; 200]);
    assert!(buf.is_truncated());
    assert_eq!(buf.render("").chars().count(), 100);
    assert_eq!(buf.total_chars(), 206);
}

#[test]
fn one_gigabyte_in_64_kib_chunks_keeps_memory_bounded() {
    // A chunk of mixed-width characters whose 64 KiB boundary splits one.
    let unit = "héllo wörld 日本 🦀\n";
    let mut chunk = unit.repeat(65_536 / unit.len() + 1).into_bytes();
    chunk.truncate(65_536);
    let max_chars = 50_000;
    let mut buf = HeadTailBuffer::new(max_chars);
    let mut pushed: u64 = 0;
    let mut peak = 0;
    while pushed < 1 << 30 {
        buf.push(&chunk);
        pushed += chunk.len() as u64;
        peak = peak.max(buf.retained_bytes());
    }
    // At most 4 bytes per character, a head, and a tail of at most twice its
    // share plus one chunk before compaction, with allocator slack.
    assert!(peak <= 16 * max_chars + 2 * 65_536, "peak {peak} bytes");
    // Every character is at most 4 bytes.
    assert!(buf.total_chars() as u64 >= pushed / 4);
    let out = buf.finish();
    assert_eq!(out.chars().count(), max_chars);
    assert!(out.contains("chars omitted out of"));
}

#[test]
fn mostly_ascii_streams_equal_truncating_the_whole_text() {
    // Long ASCII runs with a rare wide or invalid byte sequence, so the cuts
    // land both inside all-ASCII stretches and across wide characters.
    let mut rng = XorShift(0x2545_F491_4F6C_DD1D);
    for round in 0..200 {
        let len = rng.below(40_000);
        let mut bytes = Vec::with_capacity(len + 4);
        while bytes.len() < len {
            match rng.below(200) {
                0 => bytes.extend_from_slice("日".as_bytes()),
                1 => bytes.extend_from_slice("🦀".as_bytes()),
                2 => bytes.push(0xFF),
                _ => bytes.push(b'a' + rng.below(26) as u8),
            }
        }
        let full = String::from_utf8_lossy(&bytes);
        let max = 1 + rng.below(8_000);
        let mut buf = HeadTailBuffer::new(max);
        push_in_random_chunks(&mut buf, &bytes, &mut rng);
        assert_eq!(
            buf.finish(),
            truncate_head_tail(&full, max),
            "round {round} max {max} len {len}"
        );
    }
}
