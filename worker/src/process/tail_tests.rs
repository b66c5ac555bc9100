use super::*;

#[test]
fn utf8_split_across_chunks_is_reassembled() {
    let text = "héllo wörld €𝄞";
    let bytes = text.as_bytes();
    for split in 0..bytes.len() {
        let mut stream = Utf8Stream::default();
        let mut out = stream.decode(&bytes[..split]);
        out.push_str(&stream.decode(&bytes[split..]));
        out.push_str(&stream.finish());
        assert_eq!(out, text, "split at {split}");
    }
}

#[test]
fn invalid_bytes_become_replacement_characters() {
    let mut stream = Utf8Stream::default();
    assert_eq!(stream.decode(b"a\xffb"), "a\u{FFFD}b");
    assert_eq!(stream.decode(b"c\xe2\x82"), "c");
    assert_eq!(stream.finish(), "\u{FFFD}");
}

#[test]
fn the_tail_keeps_the_last_characters_in_bounded_memory() {
    let mut tail = TailBuffer::new(1000);
    for i in 0..100_000 {
        tail.push(&format!("line {i}\n"));
    }
    let text = tail.text();
    assert_eq!(text.chars().count(), 1000);
    assert!(text.ends_with("line 99999\n"));
    assert!(tail.retained_bytes() < 4 * 1000 + 64);
    assert_eq!(tail.last(11), "line 99999\n");
    let mut big = TailBuffer::new(10);
    big.push(&"é".repeat(50));
    assert_eq!(big.text(), "é".repeat(10));
    assert_eq!(big.total_chars(), 50);
}
