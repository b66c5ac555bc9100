//! Server-sent events of a streamed answer: byte chunks in, event `data`
//! payloads out.
//!
//! The `sse-stream` crate does the decoding (line endings LF, CRLF or CR, also
//! split across chunks; `:` comments; `data:` lines joined by `\n`; other
//! fields ignored; a UTF-8 character split across chunks decoded whole). Two
//! choices are ours:
//! * the end of the body also ends a last event that has no closing blank line
//!   (the crate, following the spec, would drop it; servers that end with
//!   `data: [DONE]` and no blank line exist), by feeding one `\n\n` after the
//!   last chunk;
//! * invalid UTF-8 in a data line is an error (the answer cannot be trusted).

use bytes::Bytes;
use futures::{Stream, StreamExt, stream};
use sse_stream::SseByteStream;

/// Why the chunk source stopped; carried through the decoder unchanged.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChunkError {
    #[error("no data within the timeout")]
    Timeout,
    #[error("{0}")]
    Transport(String),
}

/// Why the event stream stopped.
#[derive(Debug)]
pub(crate) enum EventError {
    Chunk(ChunkError),
    /// The bytes are not a readable event stream.
    Invalid(String),
}

/// The `data` of every event in `chunks`, in order.
pub(crate) fn event_data<S>(chunks: S) -> impl Stream<Item = Result<String, EventError>>
where
    S: Stream<Item = Result<Bytes, ChunkError>>,
{
    let closed = chunks.chain(stream::once(async { Ok(Bytes::from_static(b"\n\n")) }));
    SseByteStream::new(closed).filter_map(|item| async move {
        match item {
            Ok(event) => event.data.map(Ok),
            Err(sse_stream::Error::Body(source)) => {
                Some(Err(match source.downcast::<ChunkError>() {
                    Ok(chunk) => EventError::Chunk(*chunk),
                    Err(other) => EventError::Invalid(other.to_string()),
                }))
            }
            Err(other) => Some(Err(EventError::Invalid(other.to_string()))),
        }
    })
}

/// Splits one event's data into JSON payloads.
///
/// Normally the data is one JSON document (possibly spread over several `data:`
/// lines). Some servers forget the blank line between events, which glues several
/// `data:` lines into one event; if the whole does not parse but each line does, the
/// lines are the payloads.
pub(crate) fn split_payloads(data: &str) -> Vec<&str> {
    let is_payload = |text: &str| {
        let text = text.trim();
        text == "[DONE]" || serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
    };
    if !data.contains('\n') || is_payload(data) {
        return vec![data];
    }
    let lines: Vec<&str> = data
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    if lines.iter().all(|line| is_payload(line)) {
        lines
    } else {
        vec![data]
    }
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
