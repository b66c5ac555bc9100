use super::*;

#[tokio::test]
async fn private_addresses_are_refused_unless_allowed() {
    for url in [
        "http://127.0.0.1:8080/",
        "http://10.1.2.3/",
        "http://172.16.0.1/",
        "http://192.168.1.1/",
        "http://100.64.0.1/",
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
        "http://metadata.google.internal./computeMetadata/v1/",
        "http://instance-data/latest/",
        // all of 169.254/16, not only the well-known hosts
        "http://169.254.1.1/",
        "http://169.254.0.1/",
        // the other spellings of 169.254.169.254 a URL parser accepts
        "http://2852039166/",
        "http://0xa9fea9fe/",
        "http://0251.0376.0251.0376/",
        "http://169.254.43518/",
        // ... and the IPv6 forms that lead to it
        "http://[::ffff:a9fe:a9fe]/",
        "http://[::169.254.169.254]/",
        "http://[::ffff:0:169.254.169.254]/",
        "http://[64:ff9b::169.254.169.254]/",
        "http://[2002:a9fe:a9fe::1]/",
        "http://[2001:0:a9fe:a9fe::1]/",
        "http://100.100.100.200/latest/meta-data/",
        "http://192.0.0.192/",
    ] {
        assert_eq!(check(url, true).await, Err(Refusal::Metadata), "{url}");
    }
}

/// Every IPv6 form that carries a private IPv4 address is as private as it.
#[test]
fn ipv6_forms_of_private_addresses_are_private() {
    let table: &[(&str, bool)] = &[
        // (address, private)
        ("::ffff:127.0.0.1", true),
        ("::127.0.0.1", true),
        ("::ffff:0:10.0.0.1", true),
        ("64:ff9b::7f00:1", true),
        ("64:ff9b::10.1.2.3", true),
        ("64:ff9b::8.8.8.8", false),
        ("64:ff9b:1::8.8.8.8", true),
        ("2002:7f00:1::", true),
        ("2002:c0a8:101::1", true),
        ("2002:808:808::1", false),
        // Teredo: the client's IPv4 is stored inverted (127.0.0.1 -> 80ff:fffe)
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", true),
        ("2001:0:7f00:1::", true),
        ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", false),
        ("fec0::1", true),
        ("feff::1", true),
        ("fe80::1", true),
        ("fc00::1", true),
        ("fd12:3456::1", true),
        ("100::1", true),
        ("2001:db8::1", true),
        ("::", true),
        ("::1", true),
        ("ff02::1", true),
        ("2606:4700::1111", false),
        ("2a00:1450:4001::200e", false),
    ];
    for (text, private) in table {
        let ip: IpAddr = text.parse().unwrap();
        assert_eq!(is_private(&ip), *private, "{text}");
    }
    let v4: &[(&str, bool)] = &[
        ("127.0.0.1", true),
        ("127.255.255.254", true),
        ("10.0.0.1", true),
        ("172.31.255.255", true),
        ("172.32.0.1", false),
        ("192.168.0.1", true),
        ("100.64.0.1", true),
        ("100.127.255.255", true),
        ("100.128.0.1", false),
        ("198.18.0.1", true),
        ("192.0.0.8", true),
        ("192.0.2.1", true),
        ("203.0.113.9", true),
        ("240.0.0.1", true),
        ("255.255.255.255", true),
        ("224.0.0.1", true),
        ("0.1.2.3", true),
        ("8.8.8.8", false),
        ("93.184.216.34", false),
    ];
    for (text, private) in v4 {
        let ip: IpAddr = text.parse().unwrap();
        assert_eq!(is_private(&ip), *private, "{text}");
    }
}

#[test]
fn the_metadata_floor_holds_in_every_form() {
    for text in [
        "169.254.169.254",
        "169.254.0.0",
        "169.254.255.255",
        "169.254.170.2",
        "100.100.100.200",
        "192.0.0.192",
        "fd00:ec2::254",
        "::ffff:169.254.169.254",
        "::169.254.169.254",
        "64:ff9b::a9fe:a9fe",
        "2002:a9fe:a9fe::",
        "2001:0:a9fe:a9fe::",
        "2001:0:4136:e378:8000:63bf:5601:5601",
    ] {
        let ip: IpAddr = text.parse().unwrap();
        assert_eq!(judge(&[ip], true), Err(Refusal::Metadata), "{text}");
    }
    for text in [
        "169.253.255.255",
        "169.255.0.1",
        "fe80::a9fe:a9fe",
        "8.8.8.8",
    ] {
        let ip: IpAddr = text.parse().unwrap();
        assert_eq!(judge(&[ip], true), Ok(()), "{text}");
    }
}

#[tokio::test]
async fn public_addresses_and_inert_schemes_pass() {
    for url in [
        "http://93.184.216.34/",
        "https://[2606:2800:220:1::1]/",
        "http://[64:ff9b::5db8:d822]/",
        "http://[2002:5db8:d822::1]/",
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

/// The fetch behind web_extract and vision_analyze refuses a URL carrying a
/// credential before any connection (the server sees nothing).
#[tokio::test]
async fn a_url_carrying_a_credential_is_never_requested() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        while let Ok(_socket) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    for url in [
        format!("{base}/?k=sk-proj-abcdefghijklmnopqrstuvwxyz0123456789"),
        format!("{base}/img/%73k-proj-abcdefghijklmnopqrstuvwxyz0123456789.png"),
    ] {
        assert!(matches!(
            fetch(&url, limits(true)).await,
            Err(FetchError::Refused(Refusal::Secret))
        ));
    }
    assert_eq!(seen.load(Ordering::SeqCst), 0);
}
