use super::*;

#[tokio::test]
async fn private_addresses_are_refused_unless_allowed() {
    for url in [
        "http://127.0.0.1:8080/",
        "http://10.1.2.3/",
        "http://172.16.0.1/",
        "http://192.168.1.1/",
        "http://100.64.0.1/",
        "http://169.254.1.1/",
        "http://0.0.0.0/",
        "http://[::1]/",
        "http://[fe80::1]/",
        "http://[fd12::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://localhost:3000/",
        "http://app.localhost/",
    ] {
        assert_eq!(check(url, false).await, Err(Refusal::Private), "{url}");
        assert_eq!(check(url, true).await, Ok(()), "{url}");
    }
}

#[tokio::test]
async fn metadata_endpoints_are_refused_even_when_private_urls_are_allowed() {
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        "http://169.254.170.2/v2/credentials",
        "http://[fd00:ec2::254]/",
        "http://metadata.google.internal/computeMetadata/v1/",
    ] {
        assert_eq!(check(url, true).await, Err(Refusal::Metadata), "{url}");
    }
}

#[tokio::test]
async fn public_addresses_and_inert_schemes_pass() {
    for url in [
        "http://93.184.216.34/",
        "https://[2606:2800:220:1::1]/",
        "about:blank",
        "data:text/html,<p>x</p>",
    ] {
        assert_eq!(check(url, false).await, Ok(()), "{url}");
    }
}

#[tokio::test]
async fn other_schemes_are_refused() {
    assert_eq!(
        check("file:///etc/passwd", true).await,
        Err(Refusal::Scheme("file".into()))
    );
    assert_eq!(
        check("chrome://settings", true).await,
        Err(Refusal::Scheme("chrome".into()))
    );
}

/// Serves one canned answer per connection on loopback; the base URL.
async fn answering(reply: &'static str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = vec![0u8; 4096];
            let _ = socket.read(&mut buf).await;
            let _ = socket.write_all(reply.as_bytes()).await;
        }
    });
    base
}

fn limits(allow_private: bool) -> FetchLimits {
    FetchLimits {
        allow_private,
        timeout: Duration::from_secs(10),
        max_bytes: 1024,
    }
}

#[tokio::test]
async fn a_fetch_by_name_is_judged_by_the_resolved_address() {
    let base =
        answering("HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok").await;
    let by_name = base.replace("127.0.0.1", "localhost");
    let refused = fetch(&by_name, limits(false)).await.unwrap_err();
    assert_eq!(
        refused.to_string(),
        "Blocked: URL targets a private or internal address"
    );
    let fetched = fetch(&by_name, limits(true)).await.unwrap();
    assert_eq!(fetched.body, b"ok");
}

#[tokio::test]
async fn every_redirect_hop_is_judged() {
    let base = answering(
        "HTTP/1.1 302 Found\r\nlocation: http://169.254.169.254/latest/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    )
    .await;
    let err = fetch(&base, limits(true)).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Blocked: redirect landed on a cloud metadata endpoint"
    );
    let named = answering(
        "HTTP/1.1 301 Moved\r\nlocation: http://metadata.google.internal/x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(matches!(
        fetch(&named, limits(true)).await,
        Err(FetchError::RedirectRefused(Refusal::Metadata))
    ));
}

#[tokio::test]
async fn a_body_over_the_limit_fails_the_fetch() {
    let base =
        answering("HTTP/1.1 200 OK\r\ncontent-length: 5000\r\nconnection: close\r\n\r\n").await;
    assert!(matches!(
        fetch(&base, limits(true)).await,
        Err(FetchError::TooLarge(1024))
    ));
}

#[test]
fn only_http_urls_are_fetched() {
    let file = url::Url::parse("file:///etc/passwd").unwrap();
    assert_eq!(judge_url(&file, true), Err(Refusal::Scheme("file".into())));
    let mapped = url::Url::parse("http://[::ffff:10.0.0.1]/").unwrap();
    assert_eq!(judge_url(&mapped, false), Err(Refusal::Private));
}
