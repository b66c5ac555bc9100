use super::*;

fn decode_in_pieces(stream: &[u8], piece: usize) -> Vec<String> {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    for chunk in stream.chunks(piece) {
        events.extend(decoder.push(chunk));
    }
    events.extend(decoder.finish());
    events
}

#[test]
fn events_end_at_blank_lines() {
    let stream = b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n";
    assert_eq!(
        decode_in_pieces(stream, stream.len()),
        vec!["{\"a\":1}", "{\"b\":2}", "[DONE]"]
    );
}

#[test]
fn every_split_point_and_line_ending_gives_the_same_events() {
    let expected = vec!["{\"a\":\"é\"}", "first\nsecond", "[DONE]"];
    for ending in ["\n", "\r\n", "\r"] {
        let stream = format!(
            ": keep-alive{e}{e}data: {{\"a\":\"é\"}}{e}{e}event: message{e}id: 7{e}data: first{e}data: second{e}{e}data: [DONE]{e}{e}",
            e = ending
        );
        for piece in 1..=stream.len() {
            assert_eq!(
                decode_in_pieces(stream.as_bytes(), piece),
                expected,
                "line ending {ending:?}, pieces of {piece} bytes"
            );
        }
    }
}

#[test]
fn comments_alone_produce_no_event() {
    assert!(decode_in_pieces(b": ping\n\n: ping\n\n", 3).is_empty());
}

#[test]
fn data_without_space_after_colon_is_accepted() {
    assert_eq!(
        decode_in_pieces(b"data:{\"x\":1}\n\n", 4),
        vec!["{\"x\":1}"]
    );
}

#[test]
fn an_unterminated_last_event_is_flushed_at_the_end() {
    assert_eq!(decode_in_pieces(b"data: {\"x\":1}", 5), vec!["{\"x\":1}"]);
    assert_eq!(decode_in_pieces(b"data: {\"x\":1}\n", 5), vec!["{\"x\":1}"]);
}

#[test]
fn glued_events_are_split_into_their_lines() {
    let data = "{\"a\":1}\n{\"b\":2}\n[DONE]";
    assert_eq!(
        split_payloads(data),
        vec!["{\"a\":1}", "{\"b\":2}", "[DONE]"]
    );
}

#[test]
fn json_spread_over_data_lines_stays_one_payload() {
    let data = "{\"a\":\n1}";
    assert_eq!(split_payloads(data), vec![data]);
}
