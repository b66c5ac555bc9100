//! The scripted server's HTTP/1.1: read one request (Content-Length bodies only),
//! write one response, close.

use std::sync::{Arc, PoisonError};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::render::{completion_json, stream_payloads};
use super::{Action, RecordedRequest, ScriptedResponse, Shared};

const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Raw SSE bodies are written in pieces this small, to split lines and CRLFs across
/// network reads on the client side.
const RAW_PIECE_BYTES: usize = 7;

pub(super) async fn serve_connection(mut socket: TcpStream, shared: Arc<Shared>) {
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    // Errors writing to a client that went away are not the test's business.
    let _ = answer(&mut socket, &shared, request).await;
}

async fn answer(
    socket: &mut TcpStream,
    shared: &Shared,
    request: RecordedRequest,
) -> std::io::Result<()> {
    let route = request.path.split('?').next().unwrap_or_default();
    if request.method != "POST" || route != "/v1/chat/completions" {
        let body = json!({ "error": { "message": format!("no route for {} {}", request.method, request.path) } });
        return write_json(socket, 404, &[], &body.to_string()).await;
    }
    let number = {
        let mut requests = shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        requests.push(request.clone());
        requests.len()
    };
    let Some(response) = shared.take_response(&request.first_user_text()) else {
        let message = format!("ScriptedServer: no scripted response left for request #{number}");
        let body = json!({ "error": { "message": message, "type": "script_exhausted" } });
        return write_json(socket, 400, &[], &body.to_string()).await;
    };
    let ScriptedResponse {
        delay,
        chunk_delay,
        headers,
        action,
        ..
    } = response;
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let model = request
        .body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("scripted")
        .to_string();
    match action {
        Action::CloseConnection => socket.shutdown().await,
        Action::Status { status, body } => write_json(socket, status, &headers, &body).await,
        Action::RawSse(body) => {
            // Byte pieces, so a piece may also end inside a UTF-8 character.
            let pieces = body.as_bytes().chunks(RAW_PIECE_BYTES);
            write_event_stream(socket, &headers, chunk_delay, pieces).await
        }
        Action::Turn(turn) if request.is_streaming() => {
            let include_usage = request
                .body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                == Some(true);
            let events: Vec<String> = stream_payloads(&turn, &model, number, include_usage)
                .into_iter()
                .map(|payload| format!("data: {payload}\n\n"))
                .collect();
            let mut frames = vec![": keep-alive\n\n".as_bytes()];
            frames.extend(events.iter().map(String::as_bytes));
            write_event_stream(socket, &headers, chunk_delay, frames.into_iter()).await
        }
        Action::Turn(turn) => {
            let body = completion_json(&turn, &model, number).to_string();
            write_json(socket, 200, &headers, &body).await
        }
    }
}

async fn read_request(socket: &mut TcpStream) -> Option<RecordedRequest> {
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(position) = find(&buffer, b"\r\n\r\n") {
            break position;
        }
        if buffer.len() > MAX_HEAD_BYTES {
            return None;
        }
        let mut chunk = [0u8; 4096];
        let read = socket.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split_whitespace();
    let method = request_line.next()?.to_string();
    let path = request_line.next()?.to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    let content_length = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = buffer[head_end + 4..].to_vec();
    while body.len() < content_length {
        let mut chunk = [0u8; 8192];
        let read = socket.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..read]);
    }
    Some(RecordedRequest {
        method,
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

async fn write_json(
    socket: &mut TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &str,
) -> std::io::Result<()> {
    let mut head = status_line(status);
    head.push_str("content-type: application/json\r\n");
    head.push_str(&format!("content-length: {}\r\n", body.len()));
    push_headers(&mut head, headers);
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body.as_bytes()).await?;
    socket.flush().await
}

/// A chunked `text/event-stream` answer; each frame is one HTTP chunk, flushed alone.
async fn write_event_stream<'a>(
    socket: &mut TcpStream,
    headers: &[(String, String)],
    chunk_delay: Duration,
    frames: impl Iterator<Item = &'a [u8]>,
) -> std::io::Result<()> {
    let mut head = status_line(200);
    head.push_str("content-type: text/event-stream\r\n");
    head.push_str("cache-control: no-cache\r\n");
    head.push_str("transfer-encoding: chunked\r\n");
    push_headers(&mut head, headers);
    head.push_str("\r\n");
    socket.write_all(head.as_bytes()).await?;
    socket.flush().await?;
    for frame in frames {
        if frame.is_empty() {
            continue;
        }
        if !chunk_delay.is_zero() {
            tokio::time::sleep(chunk_delay).await;
        }
        socket
            .write_all(format!("{:x}\r\n", frame.len()).as_bytes())
            .await?;
        socket.write_all(frame).await?;
        socket.write_all(b"\r\n").await?;
        socket.flush().await?;
    }
    socket.write_all(b"0\r\n\r\n").await?;
    socket.flush().await
}

fn status_line(status: u16) -> String {
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|code| code.canonical_reason())
        .unwrap_or("Scripted");
    format!("HTTP/1.1 {status} {reason}\r\nconnection: close\r\n")
}

fn push_headers(head: &mut String, headers: &[(String, String)]) {
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}
