//! The browser's only way out: an HTTP proxy in the worker, one per browser
//! session, that Chromium is started with (`--proxy-server`, loopback not
//! bypassed). Every connection Chromium opens — documents, subresources,
//! `fetch`, WebSockets, popups and out-of-process frames alike — is a
//! `CONNECT host:port` or an absolute-form `GET http://host/…` here; the
//! host is resolved and judged by [`guard::resolve_judged`] and the socket
//! is opened to the judged address and no other. Chromium never resolves a
//! page's host itself, so a DNS answer that changes after the judgement
//! (rebinding) never reaches a socket, and proxy settings of the worker's
//! environment (`http_proxy`, …) are not used (`--proxy-server` overrides
//! them).
//!
//! Plain-http requests are forwarded one per connection (`Connection:
//! close` upstream): a kept-alive proxy connection could carry the next
//! request to another host past the judgement.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::LastRefused;
use crate::url_guard as guard;

/// Longest request head read before the connection is dropped.
const MAX_HEAD: usize = 64 * 1024;
/// A client that sends no complete head in this time is dropped.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Headers that belong to the hop between Chromium and us.
const HOP_HEADERS: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "te",
    "upgrade",
];

/// A running proxy; dropping it stops accepting (connections under way end
/// with the browser that holds them).
pub(super) struct GuardedProxy {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GuardedProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GuardedProxy {
    /// Listens on a loopback port of its own.
    pub(super) async fn start(
        allow_private: bool,
        refused: LastRefused,
    ) -> std::io::Result<GuardedProxy> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let refused = refused.clone();
                tokio::spawn(async move {
                    if let Err(err) = serve(client, allow_private, refused).await {
                        tracing::debug!(%err, "browser proxy connection ended");
                    }
                });
            }
        });
        Ok(GuardedProxy { addr, task })
    }

    /// Chromium's `--proxy-server` value.
    pub(super) fn server_arg(&self) -> String {
        format!("--proxy-server=http://{}", self.addr)
    }
}

/// One client connection: a CONNECT tunnel or one plain-http request.
async fn serve(
    mut client: TcpStream,
    allow_private: bool,
    refused: LastRefused,
) -> std::io::Result<()> {
    let (head, rest) = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(Some(read))) => read,
        Ok(Ok(None)) | Err(_) => return Ok(()),
        Ok(Err(err)) => return Err(err),
    };
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (method, target, version) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or("HTTP/1.1"),
    );
    if method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, port)) = target
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h, p.parse::<u16>().ok()?)))
        else {
            return client.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        };
        let shown = format!("https://{target}/");
        let mut upstream = match open(host, port, allow_private, &shown, &refused).await {
            Ok(upstream) => upstream,
            Err(Some(_)) => {
                return client
                    .write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
            Err(None) => {
                return client
                    .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
                    .await;
            }
        };
        client
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await?;
        upstream.write_all(&rest).await?;
        tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
        return Ok(());
    }
    let Ok(url) = url::Url::parse(target) else {
        return client.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
    };
    if url.scheme() != "http" {
        return client.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
    }
    let (Some(host), Some(port)) = (url.host_str(), url.port_or_known_default()) else {
        return client.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
    };
    // No answer at all when refused or unreachable: Chromium fails the
    // navigation (an answer would be shown as the page), and the refusal
    // slot says why.
    let Ok(mut upstream) = open(host, port, allow_private, url.as_str(), &refused).await else {
        return Ok(());
    };
    let mut path = url.path().to_owned();
    if let Some(query) = url.query() {
        path.push('?');
        path.push_str(query);
    }
    let mut forwarded = format!("{method} {path} {version}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let name = line.split(':').next().unwrap_or_default().trim();
        if !HOP_HEADERS.iter().any(|h| name.eq_ignore_ascii_case(h)) {
            forwarded.push_str(line);
            forwarded.push_str("\r\n");
        }
    }
    forwarded.push_str("Connection: close\r\n\r\n");
    upstream.write_all(forwarded.as_bytes()).await?;
    upstream.write_all(&rest).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// Connects to the judged addresses of `host`; `Err(Some)` = refused (and
/// recorded for the navigation's error), `Err(None)` = unreachable.
async fn open(
    host: &str,
    port: u16,
    allow_private: bool,
    shown: &str,
    refused: &LastRefused,
) -> Result<TcpStream, Option<guard::Refusal>> {
    let addresses = match guard::resolve_judged(host, port, allow_private).await {
        Ok(addresses) => addresses,
        Err(refusal) => {
            tracing::info!(url = shown, ?refusal, "browser connection refused");
            if let Ok(mut last) = refused.lock() {
                *last = Some((shown.to_owned(), refusal.clone()));
            }
            return Err(Some(refusal));
        }
    };
    for address in addresses {
        if let Ok(Ok(stream)) =
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await
        {
            return Ok(stream);
        }
    }
    Err(None)
}

/// The request head up to its blank line, and what came after it;
/// `None` when the client closed first or sent more than [`MAX_HEAD`].
async fn read_head(client: &mut TcpStream) -> std::io::Result<Option<(Vec<u8>, Vec<u8>)>> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = memchr::memmem::find(&buf, b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            buf.truncate(end);
            return Ok(Some((buf, rest)));
        }
        if buf.len() > MAX_HEAD {
            return Ok(None);
        }
    }
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
mod tests;
