//! The worker's half of `vision_analyze` and `browser_vision`: the image —
//! fetched through the URL judge, read from the task's environment, decoded
//! from a `data:` URL, or a screenshot of the task's browser — goes back to
//! the coordinator as `{"success": true, "image": {"mime", "data", "bytes"}}`,
//! and the coordinator asks the vision model (its key stays there). The
//! model never reads this document: the coordinator replaces it.

use std::time::Duration;

use base64::Engine;
use serde_json::{Map, Value, json};

use caduceus_common::result::{CallStatus, ToolReply};

use crate::env::Environment;
use crate::tools::web::WebSettings;
use crate::url_guard::{self, FetchLimits};

pub const TOOL: &str = "vision_analyze";
/// hermes' `_MAX_BASE64_BYTES` is 20 MB of base64; the raw image may be
/// three quarters of that.
const MAX_IMAGE_BYTES: usize = 15 * 1024 * 1024;
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// hermes' failure document of `vision_analyze`.
fn failure(error: &str) -> ToolReply {
    let body = json!({
        "success": false,
        "error": format!("Error analyzing image: {error}"),
        "analysis": format!("There was a problem with the request and the image could not be analyzed. Error: {error}"),
    });
    ToolReply::new(CallStatus::Error, caduceus_common::result::to_json(&body))
}

/// The document the coordinator turns into the vision model's request.
pub fn image_document(mime: &str, bytes: &[u8], extra: Map<String, Value>) -> ToolReply {
    let mut doc = Map::new();
    doc.insert("success".to_owned(), Value::Bool(true));
    doc.insert(
        "image".to_owned(),
        json!({
            "mime": mime,
            "data": base64::engine::general_purpose::STANDARD.encode(bytes),
            "bytes": bytes.len(),
        }),
    );
    doc.extend(extra);
    ToolReply::json(&Value::Object(doc))
}

/// `vision_analyze(image_url, question)`: the image's bytes.
pub async fn run(web: &WebSettings, env: &Environment, args: &Map<String, Value>) -> ToolReply {
    let source = args
        .get("image_url")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim();
    if source.is_empty() {
        return failure("image_url is required");
    }
    let bytes = match load(web, env, source).await {
        Ok(bytes) => bytes,
        Err(err) => return failure(&err),
    };
    match sniff(&bytes) {
        Some(mime) => image_document(mime, &bytes, Map::new()),
        None => failure(&format!(
            "'{}' is not an image this tool reads (PNG, JPEG, GIF, WebP or BMP)",
            shorten(source)
        )),
    }
}

async fn load(web: &WebSettings, env: &Environment, source: &str) -> Result<Vec<u8>, String> {
    let lower = source.to_ascii_lowercase();
    if lower.starts_with("data:") {
        let (meta, data) = source
            .split_once(',')
            .ok_or_else(|| "malformed data: URL".to_owned())?;
        if !meta.to_ascii_lowercase().ends_with(";base64") {
            return Err("only base64 data: URLs are read".to_owned());
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|err| format!("the data: URL is not valid base64: {err}"))?;
        if bytes.len() > MAX_IMAGE_BYTES {
            return Err(too_large());
        }
        return Ok(bytes);
    }
    if lower.starts_with("http://") || lower.starts_with("https://") {
        let limits = FetchLimits {
            allow_private: web.allow_private_urls,
            timeout: FETCH_TIMEOUT,
            max_bytes: MAX_IMAGE_BYTES,
        };
        return match url_guard::fetch(source, limits).await {
            Ok(fetched) => Ok(fetched.body),
            Err(url_guard::FetchError::TooLarge(_)) => Err(too_large()),
            Err(err) => Err(err.to_string()),
        };
    }
    if let Some((scheme, _)) = source.split_once("://") {
        return Err(format!(
            "'{scheme}://' sources are not read; use http(s), data: or a file path"
        ));
    }
    // A path in the task's environment (`file:` prefix allowed, as hermes).
    let asked = source.strip_prefix("file:").unwrap_or(source);
    let path = caduceus_files::paths::canonical_path(
        &env.shell.cwd(),
        asked,
        Some(&env.sandbox.home_dir()),
    );
    let read = env
        .sandbox
        .files()
        .read_range(&path, 0, Some(MAX_IMAGE_BYTES as u64 + 1))
        .await
        .map_err(|err| format!("reading {path}: {err}"))?;
    match read {
        None => Err(format!("file not found: {path}")),
        Some(file) if file.data.len() > MAX_IMAGE_BYTES => Err(too_large()),
        Some(file) => Ok(file.data),
    }
}

fn too_large() -> String {
    format!(
        "the image is larger than {} MB",
        MAX_IMAGE_BYTES / (1024 * 1024)
    )
}

fn shorten(source: &str) -> String {
    if source.chars().count() > 80 {
        format!("{}…", source.chars().take(80).collect::<String>())
    } else {
        source.to_owned()
    }
}

/// The MIME type by magic bytes (never by extension or header).
pub fn sniff(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else if bytes.starts_with(b"BM") && bytes.len() > 14 {
        Some("image/bmp")
    } else {
        None
    }
}

/// Saves a `browser_vision` screenshot in the task's environment:
/// `<tmp>/caduceus-screenshots/browser_screenshot_<id>.png`.
pub async fn save_screenshot(env: &Environment, png: &[u8]) -> Option<String> {
    let path = format!(
        "{}/caduceus-screenshots/browser_screenshot_{}.png",
        env.sandbox.temp_dir().trim_end_matches('/'),
        uuid::Uuid::new_v4().simple()
    );
    match env.sandbox.files().write_atomic(&path, png).await {
        Ok(_) => Some(path),
        Err(err) => {
            tracing::warn!(task = %env.task_id, "could not save a screenshot: {err}");
            None
        }
    }
}

#[cfg(test)]
#[path = "image_tests.rs"]
mod tests;
