use super::*;

#[test]
fn a_sequence_split_across_chunks_is_reassembled() {
    let text = "héllo wörld €𝄞";
    let bytes = text.as_bytes();
    for split in 0..bytes.len() {
        let mut stream = Utf8Stream::default();
        let mut out = stream.decode(&bytes[..split]);
        out.push_str(&stream.decode(&bytes[split..]));
        out.push_str(stream.finish());
        assert_eq!(out, text, "split at {split}");
    }
}

#[test]
fn invalid_bytes_become_replacement_characters_as_the_lossy_decoder_makes_them() {
    let mut stream = Utf8Stream::default();
    assert_eq!(stream.decode(b"a\xffb"), "a\u{FFFD}b");
    assert_eq!(stream.decode(b"c\xe2\x82"), "c");
    assert!(stream.has_pending());
    assert_eq!(stream.finish(), "\u{FFFD}");
    assert_eq!(stream.finish(), "");

    // Every byte-at-a-time split of a nasty input decodes as the whole does.
    let nasty: &[u8] = b"\xe2\x82x\xf0\x9f\x98\xc3(\xed\xa0\x80ok\xf4\x90\x80\x80\xe2\x82\xac";
    let whole = String::from_utf8_lossy(nasty);
    let mut stream = Utf8Stream::default();
    let mut out = String::new();
    for byte in nasty {
        stream.push(std::slice::from_ref(byte), |text| out.push_str(text));
    }
    out.push_str(stream.finish());
    assert_eq!(out, whole);
}
