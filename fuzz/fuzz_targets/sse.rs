//! The SSE decoding of streamed model answers (`llm/src/openai/sse.rs`, included by
//! path: the llm crate's HTTP stack is not needed to fuzz it). The first byte sets the
//! chunk size, so events and UTF-8 characters split across chunks are exercised; every
//! event's data is then split into payloads as the client does.
#![no_main]

use bytes::Bytes;
use futures::StreamExt;
use libfuzzer_sys::fuzz_target;

#[allow(dead_code, clippy::all)]
#[path = "../../llm/src/openai/sse.rs"]
mod sse;

fuzz_target!(|data: &[u8]| {
    let Some((&size, body)) = data.split_first() else {
        return;
    };
    let size = usize::from(size).max(1);
    let chunks: Vec<Result<Bytes, sse::ChunkError>> = body
        .chunks(size)
        .map(|chunk| Ok(Bytes::copy_from_slice(chunk)))
        .collect();
    let events = futures::executor::block_on(
        sse::event_data(futures::stream::iter(chunks)).collect::<Vec<_>>(),
    );
    for event in events.into_iter().flatten() {
        for payload in sse::split_payloads(&event) {
            assert!(event.contains(payload));
        }
    }
});
