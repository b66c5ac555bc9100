#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use http_body_util::BodyExt;

struct Fixed;

#[async_trait::async_trait]
impl Exposition for Fixed {
    fn authorize(&self, authorization: Option<&str>) -> Result<(), String> {
        match authorization {
            Some("Bearer right") => Ok(()),
            _ => Err("missing or wrong token".to_owned()),
        }
    }
    async fn render(&self) -> String {
        "# EOF\n".to_owned()
    }
}

async fn body(response: Response<Full<Bytes>>) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[tokio::test]
async fn a_scrape_with_the_token_gets_openmetrics_text() {
    let response = respond(&Fixed, &Method::GET, "/metrics", Some("Bearer right")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()[CONTENT_TYPE], CONTENT_TYPE_OPENMETRICS);
    assert_eq!(body(response).await, "# EOF\n");
}

#[tokio::test]
async fn nothing_is_served_without_the_token() {
    for auth in [None, Some("Bearer wrong"), Some("right")] {
        let response = respond(&Fixed, &Method::GET, "/metrics", auth).await;
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{auth:?}");
        assert_eq!(response.headers()[WWW_AUTHENTICATE], "Bearer");
        assert!(!body(response).await.contains("EOF"));
    }
}

#[tokio::test]
async fn only_get_metrics_exists() {
    let other = respond(&Fixed, &Method::GET, "/", Some("Bearer right")).await;
    assert_eq!(other.status(), StatusCode::NOT_FOUND);
    let post = respond(&Fixed, &Method::POST, "/metrics", Some("Bearer right")).await;
    assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[test]
fn histograms_count_what_they_observe() {
    let mut registry = prometheus_client::registry::Registry::with_prefix("t");
    let histogram = latency_histogram();
    registry.register("latency_seconds", "latency", histogram.clone());
    histogram.observe(0.0002);
    histogram.observe(700.0);
    let text = encode(&registry);
    assert!(text.contains("t_latency_seconds_count 2"), "{text}");
    assert!(
        text.contains("t_latency_seconds_bucket{le=\"0.00025\"} 1"),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
}
