use super::*;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Answers every request with `status` and `body`; returns its base URL and
/// the request lines it saw.
async fn answer(
    status: &'static str,
    body: String,
) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = vec![0u8; 8192];
            let n = socket.read(&mut buf).await.unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]);
            log.lock()
                .unwrap()
                .push(head.lines().next().unwrap_or_default().to_owned());
            let reply = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(reply.as_bytes()).await;
        }
    });
    (base, seen)
}

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

#[tokio::test]
async fn results_are_sorted_by_score_cut_to_the_limit_and_numbered() {
    let body = json!({"results": [
        {"title": "low", "url": "https://a.example/", "content": "a", "score": 0.5},
        {"title": "high", "url": "https://b.example/", "content": "b", "score": 3.0},
        {"title": "mid", "url": "https://c.example/", "content": "c", "score": 1.0},
    ]})
    .to_string();
    let (base, seen) = answer("200 OK", body).await;
    let found = searxng(&client(), &base, "rust & tokio", 2).await;
    assert_eq!(
        found,
        json!({"success": true, "data": {"web": [
            {"title": "high", "url": "https://b.example/", "description": "b", "position": 1},
            {"title": "mid", "url": "https://c.example/", "description": "c", "position": 2},
        ]}})
    );
    let line = seen.lock().unwrap()[0].clone();
    assert!(
        line.starts_with("GET /search?q=rust+%26+tokio&format=json&pageno=1 "),
        "{line}"
    );
}

#[tokio::test]
async fn backend_failures_are_hermes_errors() {
    let (base, _) = answer("500 Internal Server Error", String::new()).await;
    assert_eq!(
        searxng(&client(), &base, "q", 5).await,
        json!({"success": false, "error": "SearXNG returned HTTP 500"})
    );
    let (base, _) = answer("200 OK", "<html>".to_owned()).await;
    assert_eq!(
        searxng(&client(), &base, "q", 5).await,
        json!({"success": false, "error": "Could not parse SearXNG response as JSON"})
    );
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let unreachable = searxng(&client(), &closed, "q", 5).await;
    assert!(
        unreachable["error"]
            .as_str()
            .unwrap()
            .starts_with(&format!("Could not reach SearXNG at {closed}")),
        "{unreachable}"
    );
}

/// `SEARXNG_URL` may carry a password or a token; no error repeats them.
#[tokio::test]
async fn the_instances_credentials_are_not_in_any_error() {
    // A port nothing listens on: the connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let got = searxng(
        &client(),
        &format!("http://admin:hunter2pass@127.0.0.1:{port}/?token=tok3n"),
        "q",
        5,
    )
    .await;
    let error = got["error"].as_str().unwrap();
    assert!(
        error.starts_with(&format!(
            "Could not reach SearXNG at http://127.0.0.1:{port}: "
        )),
        "{error}"
    );
    for secret in ["hunter2pass", "admin", "tok3n"] {
        assert!(!error.contains(secret), "{error}");
    }
    let bad = searxng(&client(), "http://admin:hunter2pass@[::1", "q", 5).await;
    assert_eq!(bad["error"], "SEARXNG_URL is not a valid URL");
}
