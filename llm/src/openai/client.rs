//! [`OpenAiClient`]: a [`ChatModel`] that talks to any OpenAI-compatible
//! `POST {base_url}/chat/completions` endpoint, streamed or not, with retries.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use reqwest::{Response, Url};
use serde_json::{Map, Value};
use tokio::time::{Instant, timeout, timeout_at};

use crate::config::{ENV_MODEL, LlmConfig};
use crate::error::LlmError;
use crate::model::{ChatModel, EventSink, report_whole_turn};
use crate::openai::assembler::StreamAssembler;
use crate::openai::retry::{RetryPolicy, retry_after, should_retry_header};
use crate::openai::sse::{ChunkError, EventError, event_data, split_payloads};
use crate::openai::wire::{self, ApiError};
use crate::request::ChatRequest;
use crate::text::shorten;
use crate::turn::{AssistantTurn, StreamEvent};

/// A client for one OpenAI-compatible endpoint. Cheap to share (`Arc`) between
/// concurrent sessions; connections are pooled.
pub struct OpenAiClient {
    http: reqwest::Client,
    endpoint: Url,
    /// The endpoint without user info or query, for messages and logs.
    endpoint_label: String,
    model: String,
    stream: bool,
    timeout: Duration,
    retry: RetryPolicy,
    extra_body: Map<String, Value>,
}

impl fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("endpoint", &self.endpoint_label)
            .field("model", &self.model)
            .field("stream", &self.stream)
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// Why one attempt failed.
#[derive(Debug)]
enum Failure {
    Status {
        status: u16,
        error: ApiError,
        retry_after: Option<Duration>,
        should_retry: Option<bool>,
    },
    /// Connection refused or reset, or the body stopped early.
    Transport(String),
    Timeout,
    /// The server sent `{"error": …}` inside a streamed answer.
    InStream(ApiError),
    /// A 200 answer we cannot read; retrying would not help.
    Invalid(String),
}

impl Failure {
    fn is_retryable(&self) -> bool {
        match self {
            Failure::Status {
                status,
                should_retry,
                ..
            } => should_retry.unwrap_or_else(|| RetryPolicy::is_retryable_status(*status)),
            Failure::Transport(_) | Failure::Timeout => true,
            Failure::InStream(error) => {
                let status = error.numeric_code.and_then(|code| u16::try_from(code).ok());
                status.is_some_and(RetryPolicy::is_retryable_status)
                    || matches!(
                        error.code.as_deref(),
                        Some("server_error" | "rate_limit_exceeded" | "overloaded_error")
                    )
            }
            Failure::Invalid(_) => false,
        }
    }

    fn reason(&self, timeout: Duration) -> String {
        match self {
            Failure::Status { status, error, .. } => format!("HTTP {status}: {}", error.message),
            Failure::Transport(detail) | Failure::Invalid(detail) => detail.clone(),
            Failure::Timeout => format!("no answer within {} s", timeout.as_secs_f64()),
            Failure::InStream(error) => format!("error in stream: {}", error.message),
        }
    }
}

impl OpenAiClient {
    /// Builds a client. Fails on an unusable base URL, header or timeout; does not
    /// contact the server.
    pub fn new(config: LlmConfig) -> Result<Self, LlmError> {
        // reqwest is built without a default TLS provider; without one installed it
        // panics on the first HTTPS client. Another part of the process may have
        // installed it already, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();

        let endpoint = chat_completions_url(&config.base_url)?;
        let timeout = config.timeout()?;
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout()?)
            .default_headers(default_headers(&config)?)
            .user_agent(concat!("caduceus/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|error| LlmError::Config(format!("cannot build the HTTP client: {error}")))?;
        Ok(OpenAiClient {
            http,
            endpoint_label: label(&endpoint),
            endpoint,
            model: config.model.trim().to_string(),
            stream: config.stream,
            timeout,
            retry: RetryPolicy {
                max_retries: config.max_retries,
                initial_delay: Duration::from_millis(config.retry_initial_delay_ms),
                max_retry_after: config.max_retry_after()?,
            },
            extra_body: config.extra_body,
        })
    }

    /// A client configured from `OPENAI_BASE_URL`, `OPENAI_API_KEY` and
    /// `CADUCEUS_MODEL` (other settings at their defaults).
    pub fn from_env() -> Result<Self, LlmError> {
        OpenAiClient::new(LlmConfig::from_env())
    }

    /// The chat-completions URL, without credentials or query.
    pub fn endpoint(&self) -> &str {
        &self.endpoint_label
    }

    /// The configured model name (requests may name another).
    pub fn model(&self) -> &str {
        &self.model
    }

    async fn attempt(&self, body: &Bytes, events: EventSink<'_>) -> Result<AssistantTurn, Failure> {
        let deadline = Instant::now() + self.timeout;
        let accept = if self.stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        let sending = self
            .http
            .post(self.endpoint.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, accept)
            .body(body.clone())
            .send();
        let response = match timeout_at(deadline, sending).await {
            Err(_elapsed) => return Err(Failure::Timeout),
            Ok(Err(error)) => return Err(Failure::Transport(describe_reqwest_error(&error))),
            Ok(Ok(response)) => response,
        };
        if !response.status().is_success() {
            return Err(read_error_status(response, deadline).await);
        }
        let is_event_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("text/event-stream"));
        // Decide by what the server sent, not what we asked for: some servers ignore
        // the `stream` flag.
        if is_event_stream {
            self.read_event_stream(response, events).await
        } else {
            read_json_answer(response, deadline, events).await
        }
    }

    async fn read_event_stream(
        &self,
        response: Response,
        events: EventSink<'_>,
    ) -> Result<AssistantTurn, Failure> {
        // The timeout is per chunk, so keep-alive comments keep a slow answer going.
        let wait = self.timeout;
        let chunks = futures::stream::unfold(response.bytes_stream(), move |mut body| async move {
            let chunk = match timeout(wait, body.next()).await {
                Err(_elapsed) => Err(ChunkError::Timeout),
                Ok(None) => return None,
                Ok(Some(Err(error))) => Err(ChunkError::Transport(describe_reqwest_error(&error))),
                Ok(Some(Ok(chunk))) => Ok(chunk),
            };
            Some((chunk, body))
        });
        let mut events_data = std::pin::pin!(event_data(chunks));
        let mut assembler = StreamAssembler::new();
        while let Some(data) = events_data.next().await {
            let data = match data {
                Ok(data) => data,
                Err(EventError::Chunk(ChunkError::Timeout)) => return Err(Failure::Timeout),
                Err(EventError::Chunk(ChunkError::Transport(detail))) => {
                    return Err(Failure::Transport(detail));
                }
                Err(EventError::Invalid(detail)) => {
                    return Err(Failure::Invalid(format!(
                        "the event stream cannot be read: {detail}"
                    )));
                }
            };
            if fold_event(&data, &mut assembler, &mut *events)? {
                return Ok(assembler.finish());
            }
        }
        if assembler.has_finished() {
            // Some servers end the stream without `data: [DONE]`.
            return Ok(assembler.finish());
        }
        Err(Failure::Transport(
            "the stream ended before the answer was complete (no finish_reason, no [DONE])"
                .to_string(),
        ))
    }

    fn error_for(&self, failure: Failure, attempts: u32) -> LlmError {
        let endpoint = self.endpoint_label.clone();
        match failure {
            Failure::Status { status, error, .. } => LlmError::Api {
                endpoint,
                status,
                message: error.message,
                code: error.code,
                attempts,
            },
            Failure::Transport(detail) => LlmError::Connection {
                endpoint,
                attempts,
                detail,
            },
            Failure::Timeout => LlmError::Timeout {
                endpoint,
                timeout: self.timeout,
                attempts,
            },
            Failure::InStream(error) => LlmError::StreamError {
                endpoint,
                message: error.message,
                code: error.code,
                attempts,
            },
            Failure::Invalid(detail) => LlmError::InvalidResponse { endpoint, detail },
        }
    }
}

#[async_trait]
impl ChatModel for OpenAiClient {
    async fn complete(
        &self,
        request: &ChatRequest,
        events: EventSink<'_>,
    ) -> Result<AssistantTurn, LlmError> {
        let model = if request.model.trim().is_empty() {
            self.model.as_str()
        } else {
            request.model.as_str()
        };
        if model.is_empty() {
            return Err(LlmError::Config(format!(
                "no model name: set {ENV_MODEL} or `llm.model`"
            )));
        }
        let body = wire::request_body(request, model, self.stream, &self.extra_body)
            .and_then(|body| serde_json::to_vec(&body))
            .map_err(|error| LlmError::Config(format!("cannot encode the request: {error}")))?;
        let body = Bytes::from(body);
        tracing::debug!(
            endpoint = %self.endpoint_label,
            model,
            messages = request.messages.len(),
            tools = request.tools.len(),
            stream = self.stream,
            "chat completion request"
        );

        let mut attempt: u32 = 1;
        loop {
            let failure = match self.attempt(&body, &mut *events).await {
                Ok(turn) => return Ok(turn),
                Err(failure) => failure,
            };
            if !failure.is_retryable() || attempt > self.retry.max_retries {
                return Err(self.error_for(failure, attempt));
            }
            let requested_wait = match &failure {
                Failure::Status { retry_after, .. } => *retry_after,
                _ => None,
            };
            let delay = match requested_wait {
                Some(wait) if wait > self.retry.max_retry_after => {
                    let mut error = self.error_for(failure, attempt);
                    if let LlmError::Api { message, .. } = &mut error {
                        message.push_str(&format!(
                            " (the server asks to retry after {} s, longer than the {} s \
                             this client waits)",
                            wait.as_secs_f64(),
                            self.retry.max_retry_after.as_secs_f64()
                        ));
                    }
                    return Err(error);
                }
                Some(wait) => wait,
                None => self.retry.backoff(attempt),
            };
            let reason = failure.reason(self.timeout);
            tracing::warn!(
                endpoint = %self.endpoint_label,
                attempt,
                delay_ms = delay.as_millis() as u64,
                reason,
                "chat completion failed; retrying"
            );
            events(StreamEvent::Retrying {
                attempt,
                delay,
                reason,
            });
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }

    fn describe(&self) -> String {
        let mode = if self.stream {
            "streaming"
        } else {
            "non-streaming"
        };
        let model = if self.model.is_empty() {
            "<model set per request>"
        } else {
            &self.model
        };
        format!("{model} via {} ({mode})", self.endpoint_label)
    }
}

/// Folds one SSE event into the turn. Returns true at `data: [DONE]`.
fn fold_event(
    data: &str,
    assembler: &mut StreamAssembler,
    events: EventSink<'_>,
) -> Result<bool, Failure> {
    for payload in split_payloads(data) {
        let payload = payload.trim();
        if payload == "[DONE]" {
            return Ok(true);
        }
        if payload.is_empty() {
            continue;
        }
        let chunk: Value = serde_json::from_str(payload).map_err(|error| {
            Failure::Invalid(format!(
                "a stream event is not JSON ({error}): {}",
                shorten(payload, 200)
            ))
        })?;
        if let Some(error) = ApiError::from_error_object(&chunk) {
            return Err(Failure::InStream(error));
        }
        assembler.push(&chunk, &mut *events);
    }
    Ok(false)
}

async fn read_json_answer(
    response: Response,
    deadline: Instant,
    events: EventSink<'_>,
) -> Result<AssistantTurn, Failure> {
    let body = match timeout_at(deadline, response.bytes()).await {
        Err(_elapsed) => return Err(Failure::Timeout),
        Ok(Err(error)) => return Err(Failure::Transport(describe_reqwest_error(&error))),
        Ok(Ok(body)) => body,
    };
    let value: Value = serde_json::from_slice(&body).map_err(|error| {
        Failure::Invalid(format!(
            "the body is not JSON ({error}): {}",
            shorten(&String::from_utf8_lossy(&body), 200)
        ))
    })?;
    if let Some(error) = ApiError::from_error_object(&value) {
        // A 200 carrying an error object: treat it like the error it is.
        return Err(Failure::InStream(error));
    }
    let turn = wire::parse_completion(&value).map_err(Failure::Invalid)?;
    report_whole_turn(&turn, events);
    Ok(turn)
}

async fn read_error_status(response: Response, deadline: Instant) -> Failure {
    let status = response.status();
    let headers = response.headers();
    let retry_after = retry_after(headers);
    let should_retry = should_retry_header(headers);
    // A server that sends an error status and then stalls must not hang us.
    let body = timeout_at(deadline, response.bytes())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
    Failure::Status {
        status: status.as_u16(),
        error: ApiError::from_body(&body, status.canonical_reason().unwrap_or("")),
        retry_after,
        should_retry,
    }
}

/// `{base_url}/chat/completions`, keeping the base URL's query (Azure's
/// `?api-version=`); a base URL that already ends in `/chat/completions` is used as is.
fn chat_completions_url(base_url: &str) -> Result<Url, LlmError> {
    let base = base_url.trim();
    let mut url = Url::parse(base)
        .map_err(|error| LlmError::Config(format!("base_url {base:?} is not a URL: {error}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(LlmError::Config(format!(
            "base_url {base:?} must start with http:// or https://"
        )));
    }
    if !url
        .path()
        .trim_end_matches('/')
        .ends_with("/chat/completions")
    {
        let mut segments = url
            .path_segments_mut()
            .map_err(|()| LlmError::Config(format!("base_url {base:?} cannot have a path")))?;
        segments.pop_if_empty().push("chat").push("completions");
    }
    Ok(url)
}

fn label(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

fn default_headers(config: &LlmConfig) -> Result<HeaderMap, LlmError> {
    let mut headers = HeaderMap::new();
    if let Some(api_key) = config.api_key.as_deref().map(str::trim)
        && !api_key.is_empty()
    {
        let mut value = HeaderValue::from_str(&format!("Bearer {api_key}")).map_err(|_| {
            LlmError::Config("the API key contains characters not allowed in a header".into())
        })?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    for (name, value) in &config.extra_headers {
        let header_name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| LlmError::Config(format!("extra header name {name:?} is not valid")))?;
        // Header values may be credentials: never echo them in errors.
        let mut header_value = HeaderValue::from_str(value).map_err(|_| {
            LlmError::Config(format!("the value of extra header {name:?} is not valid"))
        })?;
        header_value.set_sensitive(true);
        headers.insert(header_name, header_value);
    }
    Ok(headers)
}

/// The chain of causes of a reqwest error ("client error (Connect): tcp connect
/// error: Connection refused (os error 111)"), without reqwest's own top line,
/// which only repeats the URL.
fn describe_reqwest_error(error: &reqwest::Error) -> String {
    let mut causes: Vec<String> = Vec::new();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if causes.last() != Some(&text) {
            causes.push(text);
        }
        source = cause.source();
    }
    let kind = if error.is_timeout() {
        "timed out: "
    } else {
        ""
    };
    if causes.is_empty() {
        format!("{kind}{error}")
    } else {
        format!("{kind}{}", causes.join(": "))
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
