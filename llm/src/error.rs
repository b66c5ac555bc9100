//! The one error type of this crate. Every variant's message is written for a person
//! reading a log or a CLI error: it names the endpoint (or replay file), what went
//! wrong, and how many attempts were made.

use std::time::Duration;

/// Why a model turn could not be produced.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The configuration cannot work (bad URL, bad header, no model name, bad timeout).
    #[error("invalid model configuration: {0}")]
    Config(String),

    /// The server answered with an HTTP error status. Non-retryable statuses (most
    /// 4xx) fail on the first attempt; retryable ones (408, 409, 429, 5xx) only after
    /// the retry budget is spent.
    #[error("{}", describe_api_error(endpoint, *status, message, code.as_deref(), *attempts))]
    Api {
        endpoint: String,
        status: u16,
        /// `error.message` of the OpenAI error JSON, or the body text when the
        /// server sent something else.
        message: String,
        /// `error.code` (or `error.type`) when present, e.g. `context_length_exceeded`.
        code: Option<String>,
        attempts: u32,
    },

    /// The server could not be reached, or the connection broke before a complete
    /// answer arrived.
    #[error("could not complete a request to {endpoint} after {attempts} attempt(s): {detail}")]
    Connection {
        endpoint: String,
        attempts: u32,
        detail: String,
    },

    /// No answer (or, when streaming, no new bytes) within the configured timeout.
    #[error(
        "{endpoint} did not answer within {} s ({attempts} attempt(s))",
        timeout.as_secs_f64()
    )]
    Timeout {
        endpoint: String,
        timeout: Duration,
        attempts: u32,
    },

    /// The server reported an error inside a streamed (or 200) answer.
    #[error("{endpoint} reported an error in its answer{} after {attempts} attempt(s): {message}",
        code.as_deref().map(|code| format!(" ({code})")).unwrap_or_default())]
    StreamError {
        endpoint: String,
        message: String,
        code: Option<String>,
        attempts: u32,
    },

    /// The server answered 200 but the body is not a chat completion we understand.
    #[error("{endpoint} sent a response that is not a valid chat completion: {detail}")]
    InvalidResponse { endpoint: String, detail: String },

    /// The replay file could not be read.
    #[error("cannot read replay file {file}: {source}")]
    ReplayIo {
        file: String,
        #[source]
        source: std::io::Error,
    },

    /// A line of the replay file is not a valid recorded turn.
    #[error("replay file {file} line {line}: {detail}")]
    ReplayFormat {
        file: String,
        line: usize,
        detail: String,
    },

    /// A conversation asked for more turns than the replay file has for it.
    #[error(
        "replay file {file} has no turn left for conversation {conversation:?} \
         (lines matching {match_key:?}; {used} turn(s) already replayed)"
    )]
    ReplayExhausted {
        file: String,
        /// The conversation's first user message (shortened).
        conversation: String,
        /// The `match` string that routed this conversation ("" = default lines).
        match_key: String,
        used: usize,
    },

    /// A replayed line's `expect_*` check failed: the session diverged from the script.
    #[error("replay file {file} line {line}: {detail}")]
    ReplayMismatch {
        file: String,
        line: usize,
        detail: String,
    },
}

impl LlmError {
    /// The HTTP status when the server answered with an error status.
    pub fn status(&self) -> Option<u16> {
        match self {
            LlmError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True when the server rejected the request because the conversation no longer
    /// fits the model's context window, so the agent loop can compress and retry.
    pub fn is_context_length_exceeded(&self) -> bool {
        let (LlmError::Api { code, message, .. } | LlmError::StreamError { code, message, .. }) =
            self
        else {
            return false;
        };
        if code.as_deref() == Some("context_length_exceeded") {
            return true;
        }
        let message = message.to_ascii_lowercase();
        [
            "context length",
            "context_length",
            "context window",
            "too many tokens",
        ]
        .iter()
        .any(|needle| message.contains(needle))
    }
}

fn describe_api_error(
    endpoint: &str,
    status: u16,
    message: &str,
    code: Option<&str>,
    attempts: u32,
) -> String {
    let code = code.map(|code| format!(" ({code})")).unwrap_or_default();
    let attempts = if attempts > 1 {
        format!(" after {attempts} attempts")
    } else {
        String::new()
    };
    format!("{endpoint} answered HTTP {status}{code}{attempts}: {message}")
}
