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
