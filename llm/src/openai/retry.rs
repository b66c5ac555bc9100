//! When and how long to wait before trying a request again.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::HeaderMap;

/// Longest backoff between two attempts, whatever the attempt number.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub(crate) struct RetryPolicy {
    pub(crate) max_retries: u32,
    pub(crate) initial_delay: Duration,
    /// A server-requested wait longer than this is not honoured: the error is reported.
    pub(crate) max_retry_after: Duration,
}

impl RetryPolicy {
    /// Exponential backoff with jitter for the retry following failed attempt
    /// `attempt` (1-based): `initial * 2^(attempt-1)`, capped, then scaled by a random
    /// factor in [0.5, 1.0] so that many clients do not retry in lockstep.
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(16);
        let base = self
            .initial_delay
            .saturating_mul(1u32 << exponent)
            .min(MAX_BACKOFF);
        let jitter = 0.5 + (random_u64() % 1000) as f64 / 2000.0;
        base.mul_f64(jitter)
    }

    pub(crate) fn is_retryable_status(status: u16) -> bool {
        matches!(status, 408 | 409 | 429) || status >= 500
    }
}

/// The wait a server asks for: `retry-after-ms` (OpenAI) or `Retry-After` in
/// seconds. The HTTP-date form of `Retry-After` is not supported (exponential
/// backoff applies instead).
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| {
        headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|value| value.is_finite() && *value >= 0.0)
    };
    if let Some(millis) = number("retry-after-ms") {
        return Duration::try_from_secs_f64(millis / 1000.0).ok();
    }
    number("retry-after").and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
}

/// The server's explicit verdict (`x-should-retry: true|false`), which the OpenAI API
/// sends to override the status-based rule.
pub(crate) fn should_retry_header(headers: &HeaderMap) -> Option<bool> {
    match headers.get("x-should-retry")?.to_str().ok()?.trim() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    }
}

/// A random number good enough for jitter and generated ids (not for secrets).
/// `RandomState` is seeded randomly per process and varies per instance.
pub(crate) fn random_u64() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or_default();
    hasher.write_u128(nanos);
    hasher.finish()
}

#[cfg(test)]
#[path = "retry_tests.rs"]
mod tests;
