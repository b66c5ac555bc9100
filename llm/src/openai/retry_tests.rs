use reqwest::header::HeaderValue;

use super::*;

fn policy() -> RetryPolicy {
    RetryPolicy {
        max_retries: 3,
        initial_delay: Duration::from_millis(1000),
        max_retry_after: Duration::from_secs(60),
    }
}

#[test]
fn backoff_doubles_with_jitter_and_is_capped() {
    let policy = policy();
    for _ in 0..50 {
        let first = policy.backoff(1);
        assert!(
            first >= Duration::from_millis(500) && first <= Duration::from_millis(1000),
            "{first:?}"
        );
        let third = policy.backoff(3);
        assert!(
            third >= Duration::from_millis(2000) && third <= Duration::from_millis(4000),
            "{third:?}"
        );
        let late = policy.backoff(30);
        assert!(late >= MAX_BACKOFF / 2 && late <= MAX_BACKOFF, "{late:?}");
    }
}

#[test]
fn jitter_varies() {
    let policy = policy();
    let delays: std::collections::HashSet<Duration> = (0..20).map(|_| policy.backoff(2)).collect();
    assert!(delays.len() > 1);
}

#[test]
fn retryable_statuses() {
    for status in [408, 409, 429, 500, 502, 503, 504, 529] {
        assert!(RetryPolicy::is_retryable_status(status), "{status}");
    }
    for status in [400, 401, 403, 404, 413, 422] {
        assert!(!RetryPolicy::is_retryable_status(status), "{status}");
    }
}

#[test]
fn retry_after_reads_milliseconds_then_seconds() {
    let mut headers = HeaderMap::new();
    assert_eq!(retry_after(&headers), None);
    headers.insert("retry-after", HeaderValue::from_static("2"));
    assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
    headers.insert("retry-after-ms", HeaderValue::from_static("250"));
    assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
}

#[test]
fn retry_after_as_a_date_or_garbage_is_ignored() {
    let mut headers = HeaderMap::new();
    headers.insert(
        "retry-after",
        HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
    );
    assert_eq!(retry_after(&headers), None);
    headers.insert("retry-after", HeaderValue::from_static("-3"));
    assert_eq!(retry_after(&headers), None);
}

#[test]
fn should_retry_header_is_read() {
    let mut headers = HeaderMap::new();
    assert_eq!(should_retry_header(&headers), None);
    headers.insert("x-should-retry", HeaderValue::from_static("false"));
    assert_eq!(should_retry_header(&headers), Some(false));
}
