//! `web_extract`: pages fetched from the task's worker (through the URL
//! judge, so a private address is refused by what its name resolves to and
//! at every redirect), turned into markdown, cut to hermes' per-page budget
//! with the full text saved in the task's environment for `read_file`.

use std::borrow::Cow;
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use caduceus_common::result::ToolReply;

use crate::env::Environment;
pub use crate::url_guard::carries_secret;
use crate::url_guard::{self, FetchLimits};

pub const TOOL: &str = "web_extract";

/// hermes' `DEFAULT_EXTRACT_CHAR_LIMIT`.
pub const DEFAULT_CHAR_LIMIT: usize = 15_000;
/// hermes clamps `char_limit` to 2,000 … 500,000.
const MIN_CHAR_LIMIT: usize = 2_000;
const MAX_CHAR_LIMIT: usize = 500_000;
/// hermes reads at most five URLs per call.
const MAX_URLS: usize = 5;
/// hermes' `MAX_STORED_TEXT_CHARS`: the saved copy is bounded too.
const MAX_STORED_CHARS: usize = 2_000_000;
/// A page larger than this is not read at all.
const MAX_PAGE_BYTES: usize = 10 * 1024 * 1024;
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// How the worker fetches pages.
#[derive(Debug, Clone)]
pub struct WebSettings {
    /// hermes' `security.allow_private_urls`: loopback, private and
    /// link-local addresses may be fetched (metadata endpoints never).
    pub allow_private_urls: bool,
    /// hermes' `web.extract_char_limit` (15,000).
    pub extract_char_limit: usize,
}

impl Default for WebSettings {
    fn default() -> Self {
        WebSettings {
            allow_private_urls: false,
            extract_char_limit: DEFAULT_CHAR_LIMIT,
        }
    }
}

/// One page of the answer (hermes' trimmed result entry).
struct Page {
    url: String,
    title: String,
    content: String,
    error: Option<String>,
}

impl Page {
    fn failed(url: String, error: String) -> Page {
        Page {
            url,
            title: String::new(),
            content: String::new(),
            error: Some(error),
        }
    }

    fn to_json(&self) -> Value {
        json!({"url": self.url, "title": self.title, "content": self.content, "error": self.error})
    }
}

/// Runs `web_extract(urls, char_limit)` for the task's environment.
pub async fn run(
    settings: &WebSettings,
    env: &Environment,
    args: &Map<String, Value>,
) -> ToolReply {
    let items: Vec<Value> = match args.get("urls") {
        Some(Value::Array(items)) => items.iter().take(MAX_URLS).cloned().collect(),
        _ => Vec::new(),
    };
    let limit = match args.get("char_limit").and_then(Value::as_i64) {
        Some(n) => (n.max(0) as usize).clamp(MIN_CHAR_LIMIT, MAX_CHAR_LIMIT),
        None => settings
            .extract_char_limit
            .clamp(MIN_CHAR_LIMIT, MAX_CHAR_LIMIT),
    };
    let mut urls = Vec::new();
    for (index, item) in items.iter().enumerate() {
        let url = match item {
            Value::String(s) => Some(s.trim().to_owned()),
            Value::Object(o) => o
                .get("url")
                .or_else(|| o.get("href"))
                .and_then(Value::as_str)
                .map(|s| s.trim().to_owned()),
            _ => None,
        };
        match url {
            Some(url) if !url.is_empty() => {
                // hermes: a URL carrying a credential is an exfiltration attempt.
                if carries_secret(&url) {
                    return ToolReply::failed_json(&json!({
                        "success": false,
                        "error": url_guard::Refusal::Secret.to_string(),
                    }));
                }
                urls.push(Ok(url));
            }
            _ => urls.push(Err(format!(
                "Invalid URL item at index {index}: expected a URL string or an object with a string 'url' or 'href' field"
            ))),
        }
    }
    if urls.is_empty() {
        return ToolReply::error("Content was inaccessible or not found");
    }
    let limits = FetchLimits {
        allow_private: settings.allow_private_urls,
        timeout: FETCH_TIMEOUT,
        max_bytes: MAX_PAGE_BYTES,
    };
    let pages = futures::future::join_all(urls.into_iter().map(|url| async move {
        match url {
            Ok(url) => extract_one(env, &url, limits, limit).await,
            Err(error) => Page::failed(String::new(), error),
        }
    }))
    .await;
    let all_failed = pages.iter().all(|p| p.error.is_some());
    let document = json!({"results": pages.iter().map(Page::to_json).collect::<Vec<_>>()});
    if all_failed {
        ToolReply::failed_json(&document)
    } else {
        ToolReply::json(&document)
    }
}

async fn extract_one(env: &Environment, url: &str, limits: FetchLimits, limit: usize) -> Page {
    let fetched = match url_guard::fetch(url, limits).await {
        Ok(fetched) => fetched,
        Err(err) => return Page::failed(url.to_owned(), fetch_error_text(&err)),
    };
    let (title, content) =
        match convert_off_the_runtime(fetched.content_type, fetched.charset, fetched.body).await {
            Ok(found) => found,
            Err(error) => return Page::failed(url.to_owned(), error),
        };
    let clean = images_to_placeholders(&content);
    let content = truncate_with_footer(env, &clean, url, limit).await;
    Page {
        url: url.to_owned(),
        title,
        content,
        error: None,
    }
}

/// The model's text for a failed fetch.
fn fetch_error_text(err: &url_guard::FetchError) -> String {
    match err {
        url_guard::FetchError::Refused(_) | url_guard::FetchError::RedirectRefused(_) => {
            err.to_string()
        }
        other => format!("Error extracting content: {other}"),
    }
}

/// Converting a page of up to the fetch cap takes a while and recurses once
/// per level of nesting: it runs on a thread of its own with a large stack,
/// never on the worker's runtime, so a hostile page can neither stall the
/// worker's other calls nor overflow the stack of the thread that serves them.
async fn convert_off_the_runtime(
    content_type: String,
    charset: Option<String>,
    body: Vec<u8>,
) -> Result<(String, String), String> {
    let (done, result) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("web-extract".into())
        .stack_size(64 << 20)
        .spawn(move || {
            let text = decode(charset.as_deref(), &content_type, &body);
            let _ = done.send(readable(&content_type, &text));
        });
    if let Err(err) = spawned {
        return Err(format!("Error extracting content: {err}"));
    }
    result
        .await
        .unwrap_or_else(|_| Err("Error extracting content: the converter failed".to_owned()))
}

/// The body as text: by a byte-order mark, else the header's charset, else
/// (HTML) a `<meta charset>` / `http-equiv` declaration in its first 1024
/// bytes (the HTML standard's prescan window), else UTF-8; undecodable
/// bytes become U+FFFD.
fn decode(charset: Option<&str>, content_type: &str, body: &[u8]) -> String {
    static META: LazyLock<Option<Regex>> = LazyLock::new(|| {
        Regex::new(r#"(?i)<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_:.-]+)"#).ok()
    });
    let declared = charset.map(str::to_owned).or_else(|| {
        if !content_type.contains("html") && !content_type.is_empty() {
            return None;
        }
        let head = String::from_utf8_lossy(&body[..body.len().min(1024)]);
        META.as_ref()?.captures(&head).map(|c| c[1].to_owned())
    });
    let encoding = declared
        .and_then(|label| encoding_rs::Encoding::for_label(label.as_bytes()))
        .unwrap_or(encoding_rs::UTF_8);
    encoding.decode(body).0.into_owned()
}

/// The page's title and its text as markdown (HTML), or the text as it is
/// (plain text, markdown, JSON, XML); other types are refused.
fn readable(content_type: &str, text: &str) -> Result<(String, String), String> {
    let looks_html = {
        let head = text.trim_start().get(..512).unwrap_or(text.trim_start());
        let head = head.to_ascii_lowercase();
        head.starts_with("<!doctype html") || head.starts_with("<html")
    };
    let is_html = matches!(content_type, "text/html" | "application/xhtml+xml")
        || (content_type.is_empty() && looks_html);
    if is_html {
        return Ok(html_to_markdown(text));
    }
    let textual = content_type.starts_with("text/")
        || matches!(
            content_type,
            "application/json" | "application/xml" | "application/javascript" | ""
        )
        || content_type.ends_with("+json")
        || content_type.ends_with("+xml");
    if textual {
        return Ok((String::new(), text.to_owned()));
    }
    Err(format!(
        "Error extracting content: unsupported content type '{content_type}' (web_extract reads HTML and text pages; use vision_analyze for images or the browser for others)"
    ))
}

static TITLE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"(?is)<title[^>]*>(.*?)</title>").ok());

/// hermes' extract backends return boilerplate-free markdown; ours converts
/// the page itself, without scripts, styles and the document head.
pub fn html_to_markdown(html: &str) -> (String, String) {
    if nesting_depth(html) > MAX_NESTING {
        // The converter walks the tree recursively: a page nested deeper than
        // any real document (100k `<div>`s fit in half a megabyte) gets its
        // text without markup instead of a stack overflow.
        return (String::new(), text_without_tags(html));
    }
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec![
            "script", "style", "noscript", "head", "template", "svg", "iframe",
        ])
        .build();
    let title = TITLE
        .as_ref()
        .and_then(|re| re.captures(html))
        .and_then(|c| c.get(1))
        .map(|m| converter.convert(m.as_str()).unwrap_or_default())
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let markdown = converter.convert(html).unwrap_or_else(|_| html.to_owned());
    (title, markdown.trim().to_owned())
}

/// Deeper than real pages nest (a few dozen levels) by far, shallow enough
/// for the converter's recursion on its 64 MiB stack.
const MAX_NESTING: usize = 1_000;

/// An upper bound of the element nesting a parser builds from `html`: open
/// tags minus close tags, void and self-closed elements not counted. Text
/// that only looks like tags (inside scripts) can only raise it.
fn nesting_depth(html: &str) -> usize {
    const VOID: [&str; 14] = [
        "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
        "source", "track", "wbr",
    ];
    // A parser closes these when a sibling opens (`<p>a<p>b` is two
    // paragraphs, not one inside the other): counting them would send pages
    // that never close their paragraphs or items to the plain-text fallback.
    const CLOSED_BY_SIBLING: [&str; 11] = [
        "p", "li", "dt", "dd", "option", "optgroup", "tr", "td", "th", "rp", "rt",
    ];
    let bytes = html.as_bytes();
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] != b'<' {
            i += 1;
            continue;
        }
        let closing = bytes[i + 1] == b'/';
        let start = i + 1 + usize::from(closing);
        let mut end = start;
        while end < bytes.len() && bytes[end].is_ascii_alphanumeric() {
            end += 1;
        }
        if end == start || !bytes[start].is_ascii_alphabetic() {
            i += 1;
            continue;
        }
        let name = html[start..end].to_ascii_lowercase();
        let tag_end = bytes[end..]
            .iter()
            .position(|&b| b == b'>')
            .map_or(bytes.len(), |p| end + p);
        let self_closed = tag_end > 0 && bytes.get(tag_end - 1) == Some(&b'/');
        if CLOSED_BY_SIBLING.contains(&name.as_str()) {
            // neither level counted
        } else if closing {
            depth = depth.saturating_sub(1);
        } else if !self_closed && !VOID.contains(&name.as_str()) {
            depth += 1;
            deepest = deepest.max(depth);
        }
        i = tag_end.max(i + 1);
    }
    deepest
}

static TAG: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"(?s)<[^>]*>").ok());

fn text_without_tags(html: &str) -> String {
    let text = TAG.as_ref().map_or_else(
        || html.to_owned(),
        |re| re.replace_all(html, " ").into_owned(),
    );
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

static MD_B64_IMAGE: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(r"!\[(?P<alt>[^\]]*)\]\(\s*data:image/[^;]+;base64,[A-Za-z0-9+/=\s]+\)").ok()
});
static PAREN_B64_IMAGE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\(\s*data:image/[^;]+;base64,[A-Za-z0-9+/=\s]+\)").ok());
static BARE_B64_IMAGE: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"data:image/[^;]+;base64,[A-Za-z0-9+/=]+").ok());

/// hermes' `convert_base64_images_to_links`: an inline image is a token
/// bomb, so it becomes `[IMAGE: alt]`; real image links stay.
pub fn images_to_placeholders(text: &str) -> String {
    let mut out: Cow<'_, str> = Cow::Borrowed(text);
    if let Some(re) = MD_B64_IMAGE.as_ref() {
        let replaced = re
            .replace_all(&out, |c: &regex::Captures<'_>| {
                let alt = c.name("alt").map(|m| m.as_str().trim()).unwrap_or("");
                if alt.is_empty() {
                    "[IMAGE]".to_owned()
                } else {
                    format!("[IMAGE: {alt}]")
                }
            })
            .into_owned();
        out = Cow::Owned(replaced);
    }
    for re in [PAREN_B64_IMAGE.as_ref(), BARE_B64_IMAGE.as_ref()]
        .into_iter()
        .flatten()
    {
        let replaced = re.replace_all(&out, "[IMAGE]").into_owned();
        out = Cow::Owned(replaced);
    }
    out.into_owned()
}

/// hermes' `_truncate_with_footer`: a page within `limit` characters is
/// whole; a longer one is a head (75 %) and tail (25 %) window cut at lines,
/// with a footer naming the saved full text and the `read_file` call that
/// pages through the omitted middle.
async fn truncate_with_footer(env: &Environment, content: &str, url: &str, limit: usize) -> String {
    let total = content.chars().count();
    if total <= limit {
        return content.to_owned();
    }
    let head_budget = limit * 3 / 4;
    let tail_budget = limit - head_budget;
    let mut head = prefix_chars(content, head_budget);
    if let Some(nl) = head.rfind('\n')
        && head[..nl].chars().count() > head_budget / 2
    {
        head = &head[..nl];
    }
    let mut tail = suffix_chars(content, tail_budget);
    if let Some(nl) = tail.find('\n')
        && tail[..nl].chars().count() < tail_budget / 2
    {
        tail = &tail[nl + 1..];
    }
    let stored = store_full_text(env, url, content).await;
    let rule = "─".repeat(8);
    let mut footer = vec![
        String::new(),
        format!("{rule} [TRUNCATED] {rule}"),
        format!(
            "Showing {} chars (head) + {} chars (tail) of {} total clean characters.",
            thousands(head.chars().count()),
            thousands(tail.chars().count()),
            thousands(total)
        ),
    ];
    match stored {
        Some(path) => {
            let middle_start_line = head.matches('\n').count() + 2;
            footer.push(format!("Full text saved to: {path}"));
            footer.push(format!(
                "To read the omitted middle: read_file path=\"{path}\" offset={middle_start_line} limit=200  (the file is the complete page; raise/lower offset to page through it)."
            ));
        }
        None => footer.push(
            "Full text could not be stored; re-run web_extract on a more specific URL or use browser_navigate for the complete page."
                .to_owned(),
        ),
    }
    footer.push("─".repeat(29));
    format!(
        "{head}\n\n[... middle omitted — see footer ...]\n\n{tail}\n{}",
        footer.join("\n")
    )
}

/// `<tmp>/caduceus-web/<host>-<sha256[:10]>.md` inside the task's sandbox.
async fn store_full_text(env: &Environment, url: &str, content: &str) -> Option<String> {
    let host = url::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_else(|| "page".to_owned());
    let slug: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(60)
        .collect();
    let slug = match slug.trim_matches('-') {
        "" => "page",
        s => s,
    };
    let digest: String = Sha256::digest(url.as_bytes())
        .iter()
        .take(5)
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = format!(
        "{}/caduceus-web",
        env.sandbox.temp_dir().trim_end_matches('/')
    );
    let path = format!("{dir}/{slug}-{digest}.md");
    let total = content.chars().count();
    let stored = if total > MAX_STORED_CHARS {
        format!(
            "{}\n\n[... stored copy truncated at {} chars of {}; re-extract a more specific URL for the rest ...]",
            prefix_chars(content, MAX_STORED_CHARS),
            thousands(MAX_STORED_CHARS),
            thousands(total)
        )
    } else {
        content.to_owned()
    };
    match env
        .sandbox
        .files()
        .write_atomic(&path, stored.as_bytes())
        .await
    {
        Ok(_) => Some(path),
        Err(err) => {
            tracing::warn!(task = %env.task_id, "could not store a page's full text: {err}");
            None
        }
    }
}

fn prefix_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn suffix_chars(s: &str, n: usize) -> &str {
    let total = s.chars().count();
    if n >= total {
        return s;
    }
    match s.char_indices().nth(total - n) {
        Some((i, _)) => &s[i..],
        None => "",
    }
}

/// `15,000`, as Python's `f"{n:,}"`.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
#[path = "web_tests.rs"]
mod tests;
