//! `web_search` on the coordinator: the query goes to the search backend
//! the operator configured — today SearXNG (`SEARXNG_URL`, its JSON API) —
//! and the answer is hermes' `{"success", "data": {"web": [...]}}`. The
//! tool is offered only while a backend is configured (`requires_env`).
//! Its result is wrapped as untrusted content by the agent loop.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value, json};

use caduceus_common::result::ToolReply;

use crate::call::CallContext;
use crate::registry::{Handler, LocalTool, ParallelClass, RegistryError, ToolEntry};

/// The variable that names the SearXNG instance (hermes' name).
pub const SEARXNG_URL: &str = "SEARXNG_URL";
/// hermes' SearXNG request timeout.
const SEARCH_TIMEOUT: Duration = Duration::from_secs(15);

/// The SearXNG backend (hermes `plugins/web/searxng`).
struct SearxngSearch {
    http: reqwest::Client,
}

#[async_trait]
impl LocalTool for SearxngSearch {
    async fn call(&self, _ctx: &CallContext, args: Map<String, Value>) -> ToolReply {
        let query = args.get("query").and_then(Value::as_str).unwrap_or("");
        let limit = args
            .get("limit")
            .and_then(|v| {
                v.as_i64()
                    .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
            })
            .unwrap_or(5)
            .clamp(1, 100) as usize;
        let base = caduceus_common::process_env::var(SEARXNG_URL).unwrap_or_default();
        let document = searxng(&self.http, base.trim(), query, limit).await;
        ToolReply::success_document(&document)
    }
}

/// One search against the instance at `base`: hermes' request
/// (`/search?q=…&format=json&pageno=1`) and its normalization (results
/// sorted by `score`, highest first, cut to `limit`).
pub async fn searxng(http: &reqwest::Client, base: &str, query: &str, limit: usize) -> Value {
    let base = base.trim_end_matches('/');
    if base.is_empty() {
        return json!({"success": false, "error": "SEARXNG_URL is not set"});
    }
    let Ok(url) = reqwest::Url::parse_with_params(
        &format!("{base}/search"),
        &[("q", query), ("format", "json"), ("pageno", "1")],
    ) else {
        return json!({"success": false, "error": "SEARXNG_URL is not a valid URL"});
    };
    let shown = shown(&url);
    let sent = http
        .get(url)
        .header(reqwest::header::ACCEPT, "application/json")
        .timeout(SEARCH_TIMEOUT)
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(err) => {
            return json!({"success": false, "error": format!("Could not reach SearXNG at {shown}: {}", describe(&err.without_url()))});
        }
    };
    if !response.status().is_success() {
        return json!({"success": false, "error": format!("SearXNG returned HTTP {}", response.status().as_u16())});
    }
    let Ok(data) = response.json::<Value>().await else {
        return json!({"success": false, "error": "Could not parse SearXNG response as JSON"});
    };
    let mut results: Vec<&Value> = data["results"].as_array().into_iter().flatten().collect();
    // Stable, as Python's sorted(): equal scores keep SearXNG's order.
    results.sort_by(|a, b| score(b).total_cmp(&score(a)));
    let web: Vec<Value> = results
        .into_iter()
        .take(limit)
        .enumerate()
        .map(|(i, r)| {
            json!({
                "title": text(&r["title"]),
                "url": text(&r["url"]),
                "description": text(&r["content"]),
                "position": i + 1,
            })
        })
        .collect();
    json!({"success": true, "data": {"web": web}})
}

fn score(result: &Value) -> f64 {
    match &result["score"] {
        Value::Number(n) => n.as_f64().unwrap_or(0.0),
        Value::String(s) => s.parse().unwrap_or(0.0),
        _ => 0.0,
    }
}

/// Python's `str(r.get(key, ""))` for the fields SearXNG sends as strings.
fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The instance as errors name it: scheme, host and port only — a
/// `user:password@` or a `?token=` of `SEARXNG_URL` is a credential.
fn shown(url: &reqwest::Url) -> String {
    let mut text = format!("{}://{}", url.scheme(), url.host_str().unwrap_or_default());
    if let Some(port) = url.port() {
        text.push_str(&format!(":{port}"));
    }
    text
}

fn describe(err: &reqwest::Error) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The registry entry of `web_search`, offered while `SEARXNG_URL` is set.
pub fn search_entry() -> Result<ToolEntry, RegistryError> {
    let invalid = |reason: String| RegistryError::InvalidSchema {
        name: "web_search".to_owned(),
        reason,
    };
    let schema: Value = serde_json::from_str(include_str!("../../schemas/web_search.json"))
        .map_err(|err| invalid(err.to_string()))?;
    // reqwest is built without a crypto provider (ring is the process's).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .user_agent(concat!("caduceus/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|err| invalid(err.to_string()))?;
    Ok(ToolEntry::new(
        "web_search",
        "web",
        schema,
        Handler::Local(Arc::new(SearxngSearch { http })),
    )
    .with_parallel(ParallelClass::Safe)
    .with_emoji("🔍")
    .with_requires_env(&[SEARXNG_URL])
    .with_max_result_size(100_000))
}

#[cfg(test)]
#[path = "web_tests.rs"]
mod tests;
