#![allow(clippy::unwrap_used, clippy::panic)]

use super::*;

fn decode_chunks(chunks: Vec<Result<Bytes, ChunkError>>) -> Vec<Result<String, EventError>> {
    futures::executor::block_on(event_data(stream::iter(chunks)).collect::<Vec<_>>())
}

fn decode_in_pieces(bytes: &[u8], piece: usize) -> Vec<String> {
    let chunks = bytes
        .chunks(piece)
        .map(|chunk| Ok(Bytes::copy_from_slice(chunk)))
        .collect();
    decode_chunks(chunks)
        .into_iter()
        .map(|event| match event {
            Ok(data) => data,
            Err(error) => panic!("{error:?}"),
        })
        .collect()
}

#[test]
fn events_end_at_blank_lines() {
    let bytes = b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n";
    assert_eq!(
        decode_in_pieces(bytes, bytes.len()),
        vec!["{\"a\":1}", "{\"b\":2}", "[DONE]"]
    );
}

#[test]
fn every_split_point_and_line_ending_gives_the_same_events() {
    let expected = vec!["{\"a\":\"é\"}", "first\nsecond", "[DONE]"];
    for ending in ["\n", "\r\n", "\r"] {
        let bytes = format!(
            ": keep-alive{e}{e}data: {{\"a\":\"é\"}}{e}{e}event: message{e}id: 7{e}data: first{e}data: second{e}{e}data: [DONE]{e}{e}",
            e = ending
        );
        for piece in 1..=bytes.len() {
            assert_eq!(
                decode_in_pieces(bytes.as_bytes(), piece),
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

#[test]
fn a_failing_source_ends_the_events_with_its_error() {
    let events = decode_chunks(vec![
        Ok(Bytes::from_static(b"data: {\"a\":1}\n\ndata: {\"b\"")),
        Err(ChunkError::Timeout),
        Ok(Bytes::from_static(b":2}\n\n")),
    ]);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0].as_ref().unwrap(), "{\"a\":1}");
    assert!(matches!(
        events[1],
        Err(EventError::Chunk(ChunkError::Timeout))
    ));
}

#[test]
fn invalid_utf8_in_data_is_an_error() {
    let events = decode_chunks(vec![Ok(Bytes::from_static(b"data: \xff\xfe\n\n"))]);
    assert!(
        matches!(events.as_slice(), [Err(EventError::Invalid(_))]),
        "{events:?}"
    );
}
