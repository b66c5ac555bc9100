//! Daytona's REST API (`{api_url}/sandbox…`) and toolbox API
//! (`{toolboxProxyUrl}/{sandboxId}/…`) over reqwest: the few calls the
//! backend makes, with the headers the official SDK sends and errors that
//! name the service and the HTTP status.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::Value;

/// The SDK version we speak as. The daemon changes its session output with
/// it (split stdout/stderr, JSON logs from 0.167.0 on), so it is a real
/// version, the one the stand-in was checked against.
pub const SDK_VERSION: &str = "0.226.1";

/// How the worker authenticates.
#[derive(Clone)]
pub enum Credentials {
    /// `DAYTONA_API_KEY`.
    ApiKey(String),
    /// `DAYTONA_JWT_TOKEN` with `DAYTONA_ORGANIZATION_ID`.
    Jwt { token: String, organization: String },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret itself.
        match self {
            Credentials::ApiKey(_) => f.write_str("ApiKey(…)"),
            Credentials::Jwt { organization, .. } => {
                write!(f, "Jwt(…, organization {organization})")
            }
        }
    }
}

impl Credentials {
    /// The secret, for the worker's list of values to mask.
    pub fn secret(&self) -> &str {
        match self {
            Credentials::ApiKey(key) => key,
            Credentials::Jwt { token, .. } => token,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DaytonaError {
    /// The service answered with an error status.
    #[error("Daytona: {status} ({message})")]
    Status { status: StatusCode, message: String },
    /// The request did not get an answer.
    #[error("Daytona: cannot reach {url}: {reason}")]
    Transport { url: String, reason: String },
    /// An answer we cannot use.
    #[error("Daytona: {0}")]
    Protocol(String),
}

impl DaytonaError {
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            DaytonaError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// A request body.
pub enum Payload<'a> {
    None,
    Json(&'a Value),
    /// Bytes sent as they are (`multipart/form-data; boundary=…`).
    Raw {
        content_type: String,
        bytes: &'a [u8],
    },
}

/// One API endpoint with its credentials.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    credentials: Credentials,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("base", &self.base)
            .field("credentials", &self.credentials)
            .finish()
    }
}

/// The message of an error body: the API's NestJS shape and the toolbox's
/// `ErrorResponse` both carry `message` (a string or a list), else `error`.
pub fn error_message(body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(doc) => match doc.get("message").or_else(|| doc.get("error")) {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| {
                    i.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| i.to_string())
                })
                .collect::<Vec<_>>()
                .join("; "),
            _ => body.trim().chars().take(300).collect(),
        },
        Err(_) => body.trim().chars().take(300).collect(),
    }
}

impl Api {
    pub fn new(base: &str, credentials: Credentials) -> Result<Self, DaytonaError> {
        // reqwest is built with `rustls-no-provider`: a process that has not
        // installed one (a library user, a test) gets ring's, as the binary does.
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(format!("caduceus/{}", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| DaytonaError::Protocol(format!("cannot build the HTTP client: {e}")))?;
        Ok(Api {
            http,
            base: base.trim_end_matches('/').to_owned(),
            credentials,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// A call to `url` (absolute) or to `{base}{url}` (a path) with a JSON
    /// body. Connections that fail before the request went out are retried
    /// (up to 3 tries, as the SDK's toolbox client does for stale
    /// connections); nothing is retried on a status, as the SDK does not.
    pub async fn call(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<(StatusCode, String), DaytonaError> {
        let payload = match body {
            Some(body) => Payload::Json(body),
            None => Payload::None,
        };
        self.send(method, url, payload, timeout).await
    }

    /// [`call`](Self::call) with any body (a multipart upload).
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        payload: Payload<'_>,
        timeout: Duration,
    ) -> Result<(StatusCode, String), DaytonaError> {
        let url = if url.starts_with("http://") || url.starts_with("https://") {
            url.to_owned()
        } else {
            format!("{}{url}", self.base)
        };
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut request = self
                .http
                .request(method.clone(), &url)
                .timeout(timeout)
                .header("X-Daytona-Source", "caduceus")
                .header("X-Daytona-SDK-Version", SDK_VERSION);
            request = match &self.credentials {
                Credentials::ApiKey(key) => request.bearer_auth(key),
                Credentials::Jwt {
                    token,
                    organization,
                } => request
                    .bearer_auth(token)
                    .header("X-Daytona-Organization-ID", organization),
            };
            request = match &payload {
                Payload::None => request,
                Payload::Json(body) => request.json(body),
                Payload::Raw {
                    content_type,
                    bytes,
                } => request
                    .header(reqwest::header::CONTENT_TYPE, content_type.as_str())
                    .body(bytes.to_vec()),
            };
            match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    let text = response.text().await.map_err(|e| DaytonaError::Transport {
                        url: url.clone(),
                        reason: e.to_string(),
                    })?;
                    if status.is_success() {
                        return Ok((status, text));
                    }
                    return Err(DaytonaError::Status {
                        status,
                        message: error_message(&text),
                    });
                }
                Err(err) if err.is_connect() && attempt < 3 => {
                    tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
                }
                Err(err) => {
                    let reason = if err.is_timeout() {
                        format!("no answer within {}s", timeout.as_secs())
                    } else {
                        std::error::Error::source(&err)
                            .map(|s| s.to_string())
                            .unwrap_or_else(|| err.to_string())
                    };
                    return Err(DaytonaError::Transport { url, reason });
                }
            }
        }
    }

    /// A call whose answer is JSON.
    pub async fn json(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Value, DaytonaError> {
        let (_, text) = self.call(method, url, body, timeout).await?;
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text)
            .map_err(|e| DaytonaError::Protocol(format!("an answer that is not JSON ({e})")))
    }

    /// `GET /sandbox?labels=…`, every page.
    pub async fn list_by_labels(&self, labels: &Value) -> Result<Vec<Value>, DaytonaError> {
        let encoded = percent_encode(&labels.to_string());
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = format!("/sandbox?labels={encoded}&limit=100");
            if let Some(cursor) = &cursor {
                path.push_str(&format!("&cursor={}", percent_encode(cursor)));
            }
            let page = self
                .json(Method::GET, &path, None, Duration::from_secs(30))
                .await?;
            if let Some(list) = page.get("items").and_then(Value::as_array) {
                items.extend(list.iter().cloned());
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() => cursor = Some(next.to_owned()),
                _ => return Ok(items),
            }
        }
    }
}

/// Percent-encodes everything but unreserved characters (RFC 3986).
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}
