//! The `llm:` configuration section and its environment overrides.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::LlmError;

pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";
pub const ENV_BASE_URL: &str = "OPENAI_BASE_URL";
pub const ENV_API_KEY: &str = "OPENAI_API_KEY";
pub const ENV_MODEL: &str = "CADUCEUS_MODEL";

/// How to reach the model. Deserializes from the coordinator's `llm:` section; every
/// field is optional. `Debug` never shows the API key.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmConfig {
    /// Base URL of an OpenAI-compatible API; requests go to `{base_url}/chat/completions`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer …` when set. Local servers usually need none.
    pub api_key: Option<String>,
    /// Model name, or `replay:FILE` for the offline replay model.
    pub model: String,
    /// Ask for a streamed (SSE) answer.
    pub stream: bool,
    /// Non-streaming: the whole request. Streaming: until the response headers, and
    /// then the longest silence allowed between two chunks.
    pub timeout_seconds: f64,
    pub connect_timeout_seconds: f64,
    /// Retries after the first attempt, for 408/409/429/5xx, connection errors and
    /// timeouts.
    pub max_retries: u32,
    /// First backoff delay; doubles per retry (with jitter), capped at 30 s.
    pub retry_initial_delay_ms: u64,
    /// A `Retry-After` longer than this is not waited for: the 429 is reported.
    pub max_retry_after_seconds: f64,
    /// Added to every request (e.g. `HTTP-Referer`, `api-key` for Azure).
    #[serde(alias = "headers")]
    pub extra_headers: BTreeMap<String, String>,
    /// Merged into every request body; fields set by the request win.
    pub extra_body: Map<String, Value>,
}

impl Default for LlmConfig {
    fn default() -> Self {
        LlmConfig {
            base_url: DEFAULT_BASE_URL.to_string(),
            api_key: None,
            model: String::new(),
            stream: true,
            timeout_seconds: 300.0,
            connect_timeout_seconds: 10.0,
            max_retries: 3,
            retry_initial_delay_ms: 1000,
            max_retry_after_seconds: 60.0,
            extra_headers: BTreeMap::new(),
            extra_body: Map::new(),
        }
    }
}

impl fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redacted_headers: BTreeMap<&str, &str> = self
            .extra_headers
            .keys()
            .map(|name| (name.as_str(), "<redacted>"))
            .collect();
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field("stream", &self.stream)
            .field("timeout_seconds", &self.timeout_seconds)
            .field("connect_timeout_seconds", &self.connect_timeout_seconds)
            .field("max_retries", &self.max_retries)
            .field("retry_initial_delay_ms", &self.retry_initial_delay_ms)
            .field("max_retry_after_seconds", &self.max_retry_after_seconds)
            .field("extra_headers", &redacted_headers)
            .field("extra_body", &self.extra_body)
            .finish()
    }
}

impl LlmConfig {
    /// Defaults overridden by `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `CADUCEUS_MODEL`.
    pub fn from_env() -> Self {
        LlmConfig::default().with_env_overrides()
    }

    /// Applies `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `CADUCEUS_MODEL` on top of
    /// this configuration (environment variables override files).
    pub fn with_env_overrides(self) -> Self {
        self.with_overrides_from(|name| std::env::var(name).ok())
    }

    /// Like [`LlmConfig::with_env_overrides`], reading variables through `lookup`.
    /// Empty values are ignored.
    pub fn with_overrides_from(mut self, lookup: impl Fn(&str) -> Option<String>) -> Self {
        let non_empty = |name: &str| lookup(name).filter(|value| !value.trim().is_empty());
        if let Some(base_url) = non_empty(ENV_BASE_URL) {
            self.base_url = base_url;
        }
        if let Some(api_key) = non_empty(ENV_API_KEY) {
            self.api_key = Some(api_key);
        }
        if let Some(model) = non_empty(ENV_MODEL) {
            self.model = model;
        }
        self
    }

    /// The replay file when `model` is `replay:FILE`.
    pub fn replay_file(&self) -> Option<&str> {
        self.model.strip_prefix("replay:").map(str::trim)
    }

    pub(crate) fn timeout(&self) -> Result<Duration, LlmError> {
        seconds("timeout_seconds", self.timeout_seconds)
    }

    pub(crate) fn connect_timeout(&self) -> Result<Duration, LlmError> {
        seconds("connect_timeout_seconds", self.connect_timeout_seconds)
    }

    pub(crate) fn max_retry_after(&self) -> Result<Duration, LlmError> {
        seconds("max_retry_after_seconds", self.max_retry_after_seconds)
    }
}

fn seconds(field: &str, value: f64) -> Result<Duration, LlmError> {
    if value <= 0.0 {
        return Err(LlmError::Config(format!(
            "{field} must be a positive number of seconds, got {value}"
        )));
    }
    Duration::try_from_secs_f64(value).map_err(|error| {
        LlmError::Config(format!(
            "{field} = {value} is not a usable duration: {error}"
        ))
    })
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
