use super::*;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A loopback server that counts connections, records the first request
/// head and answers `ok`.
async fn counting_server() -> (u16, Arc<AtomicUsize>, Arc<std::sync::Mutex<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(std::sync::Mutex::new(String::new()));
    let (c, s) = (count.clone(), seen.clone());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let s = s.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = socket.read(&mut buf).await.unwrap_or(0);
                *s.lock().unwrap() = String::from_utf8_lossy(&buf[..n]).into_owned();
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    (port, count, seen)
}

/// Sends `request` through the proxy; everything it answered.
async fn through(proxy: &GuardedProxy, request: &str) -> String {
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_private_host_is_refused_at_connect_and_nothing_reaches_it() {
    let (port, count, _) = counting_server().await;
    let refused = LastRefused::default();
    let proxy = GuardedProxy::start(false, refused.clone()).await.unwrap();
    for host in ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]", "2130706433"] {
        let answer = through(&proxy, &format!("CONNECT {host}:{port} HTTP/1.1\r\n\r\n")).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{host}: {answer}");
        let answer = through(
            &proxy,
            &format!("GET http://{host}:{port}/x HTTP/1.1\r\nhost: {host}\r\n\r\n"),
        )
        .await;
        assert_eq!(answer, "", "{host}: a refused plain request gets no answer");
    }
    assert_eq!(
        count.load(Ordering::SeqCst),
        0,
        "no connection reached the server"
    );
    let last = refused.lock().unwrap().clone().unwrap();
    assert_eq!(last.1, guard::Refusal::Private);
}

#[tokio::test]
async fn metadata_is_refused_even_when_private_urls_are_allowed() {
    let refused = LastRefused::default();
    let proxy = GuardedProxy::start(true, refused.clone()).await.unwrap();
    let answer = through(&proxy, "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let answer = through(
        &proxy,
        "GET http://[64:ff9b::a9fe:a9fe]/latest/ HTTP/1.1\r\n\r\n",
    )
    .await;
    assert_eq!(answer, "");
    assert_eq!(
        refused.lock().unwrap().clone().unwrap().1,
        guard::Refusal::Metadata
    );
}

#[tokio::test]
async fn an_allowed_plain_request_is_sent_once_to_the_judged_address_without_hop_headers() {
    let (port, count, seen) = counting_server().await;
    let proxy = GuardedProxy::start(true, LastRefused::default())
        .await
        .unwrap();
    let answer = through(
        &proxy,
        &format!(
            "GET http://localhost:{port}/page?q=1 HTTP/1.1\r\nHost: localhost:{port}\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic c2VjcmV0\r\n\r\n"
        ),
    )
    .await;
    assert!(answer.ends_with("ok"), "{answer}");
    assert_eq!(count.load(Ordering::SeqCst), 1);
    let head = seen.lock().unwrap().clone();
    assert!(head.starts_with("GET /page?q=1 HTTP/1.1\r\n"), "{head}");
    assert!(head.contains("Connection: close\r\n"), "{head}");
    assert!(!head.to_ascii_lowercase().contains("proxy-"), "{head}");
}

#[tokio::test]
async fn an_allowed_tunnel_carries_bytes_both_ways() {
    let (port, count, seen) = counting_server().await;
    let proxy = GuardedProxy::start(true, LastRefused::default())
        .await
        .unwrap();
    let answer = through(
        &proxy,
        &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nGET /t HTTP/1.1\r\n\r\n"),
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 200 Connection Established\r\n\r\nHTTP/1.1 200 OK"),
        "{answer}"
    );
    assert_eq!(count.load(Ordering::SeqCst), 1);
    assert!(seen.lock().unwrap().starts_with("GET /t"));
}

#[tokio::test]
async fn a_client_that_never_finishes_its_head_or_floods_it_is_dropped() {
    let proxy = GuardedProxy::start(true, LastRefused::default())
        .await
        .unwrap();
    let flood = "x".repeat(MAX_HEAD + 10);
    assert_eq!(through(&proxy, &flood).await, "");
    assert!(
        through(&proxy, "CONNECT nowhere HTTP/1.1\r\n\r\n")
            .await
            .starts_with("HTTP/1.1 400")
    );
}
