//! The browser toolset on the worker: a headless Chromium per task, driven
//! over the Chrome DevTools Protocol.
//!
//! CDP is spoken over `--remote-debugging-pipe` (NUL-separated JSON on fds 3
//! and 4) rather than through chromiumoxide or a websocket: the ten tools
//! need a dozen CDP methods, the pipe needs no port, no extra dependency and
//! no 55 s / 2.5 GB compile of generated CDP bindings, and the browser dies
//! with its pipe when the worker does.
//!
//! Three cleanup layers, each enough on its own (see README.md "Browser"):
//! the idle timeout (`browser.inactivity_timeout`), the end of the task's
//! environment and the worker's stop ([`Browsers::close_all`]), and the
//! host ledger: Chromium runs in its own session carrying the worker's
//! ledger tag and its profile directory is listed there, so the guardian
//! (worker killed) or the next worker's sweep (guardian killed too) ends it.

use crate::url_guard as guard;

mod proxy;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{Mutex, oneshot};

use caduceus_common::result::ToolReply;

/// hermes' `browser.inactivity_timeout` default.
pub const DEFAULT_INACTIVITY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long one CDP command may take before the call fails instead of hanging.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// Marks our profile directories, so a sweep can tell them from others'.
pub const PROFILE_PREFIX: &str = "caduceus-browser-";
/// hermes' `SNAPSHOT_SUMMARIZE_THRESHOLD`: longer snapshots are cut at a line.
const SNAPSHOT_MAX_CHARS: usize = 15_000;
/// Most `[N]` labels an annotated screenshot carries.
const MAX_ANNOTATIONS: usize = 300;

/// How this worker runs its browsers.
#[derive(Debug, Clone)]
pub struct BrowserSettings {
    /// The Chromium binary; `None` = the toolset is not offered.
    pub program: Option<String>,
    /// Where profile directories are made (the host's temp directory).
    pub profile_root: std::path::PathBuf,
    /// Names the worker in profile directory names.
    pub owner: String,
    /// hermes' `browser.inactivity_timeout`.
    pub inactivity_timeout: Duration,
    /// hermes' `browser.allow_private_urls`: loopback, private and link-local
    /// addresses may be opened (metadata endpoints never).
    pub allow_private_urls: bool,
}

impl Default for BrowserSettings {
    fn default() -> Self {
        BrowserSettings {
            program: find_chromium(),
            profile_root: std::path::PathBuf::from(crate::backends::local::host_temp_dir()),
            owner: "worker".to_owned(),
            inactivity_timeout: DEFAULT_INACTIVITY_TIMEOUT,
            allow_private_urls: false,
        }
    }
}

pub use caduceus_common::browser::{TOOLS, is_browser_tool};

#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    #[error("could not start Chromium ({program}): {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("the browser closed its DevTools pipe")]
    Closed,
    #[error("CDP {method} timed out after {secs} s")]
    Timeout { method: String, secs: u64 },
    #[error("CDP {method} failed: {message}")]
    Protocol { method: String, message: String },
    #[error("{0}")]
    Input(String),
}

/// Where Chromium is found: `CADUCEUS_CHROMIUM` or the first of the usual
/// names on PATH. `None` = the toolset is not offered by this worker.
pub fn find_chromium() -> Option<String> {
    if let Ok(path) = std::env::var("CADUCEUS_CHROMIUM")
        && !path.is_empty()
    {
        return Some(path);
    }
    let path = std::env::var("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in path.split(':') {
            let candidate = std::path::Path::new(dir).join(name);
            if candidate.is_file() {
                return Some(candidate.to_string_lossy().into_owned());
            }
        }
    }
    None
}

type Pending = Arc<std::sync::Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>;

/// A connection to one Chromium over its DevTools pipe.
struct Cdp {
    stdin: Mutex<ChildStdin>,
    pending: Pending,
    next_id: AtomicU64,
    console: Arc<std::sync::Mutex<Vec<Value>>>,
}

impl Cdp {
    async fn call(
        &self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, BrowserError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .map_err(|_| BrowserError::Closed)?
            .insert(id, tx);
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        {
            let mut stdin = self.stdin.lock().await;
            stdin
                .write_all(&bytes)
                .await
                .map_err(|_| BrowserError::Closed)?;
            stdin.flush().await.map_err(|_| BrowserError::Closed)?;
        }
        match tokio::time::timeout(COMMAND_TIMEOUT, rx).await {
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err(message))) => Err(BrowserError::Protocol {
                method: method.to_owned(),
                message,
            }),
            Ok(Err(_)) => Err(BrowserError::Closed),
            Err(_) => {
                if let Ok(mut pending) = self.pending.lock() {
                    pending.remove(&id);
                }
                Err(BrowserError::Timeout {
                    method: method.to_owned(),
                    secs: COMMAND_TIMEOUT.as_secs(),
                })
            }
        }
    }
}

/// Reads NUL-separated CDP messages: answers go to their caller, console
/// events and uncaught exceptions into the console log.
async fn read_loop(
    stdout: tokio::process::ChildStdout,
    pending: Pending,
    console: Arc<std::sync::Mutex<Vec<Value>>>,
    paused: tokio::sync::mpsc::UnboundedSender<Value>,
) {
    let mut reader = BufReader::new(stdout);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(0, &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if buf.last() == Some(&0) {
            buf.pop();
        }
        let Ok(message) = serde_json::from_slice::<Value>(&buf) else {
            continue;
        };
        if let Some(id) = message.get("id").and_then(Value::as_u64) {
            let sender = pending.lock().ok().and_then(|mut p| p.remove(&id));
            if let Some(sender) = sender {
                let result = match message.get("error") {
                    Some(error) => Err(error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("unknown error")
                        .to_owned()),
                    None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                };
                let _ = sender.send(result);
            }
            continue;
        }
        let entry = match message.get("method").and_then(Value::as_str) {
            Some("Fetch.requestPaused") => {
                let _ = paused.send(message["params"].clone());
                continue;
            }
            Some("Runtime.consoleAPICalled") => {
                let params = &message["params"];
                let text = params["args"]
                    .as_array()
                    .map(|args| {
                        args.iter()
                            .map(remote_object_text)
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_default();
                json!({"type": params["type"].as_str().unwrap_or("log"), "text": text, "source": "console"})
            }
            Some("Runtime.exceptionThrown") => {
                let details = &message["params"]["exceptionDetails"];
                let text = details["exception"]["description"]
                    .as_str()
                    .or_else(|| details["text"].as_str())
                    .unwrap_or("uncaught exception");
                json!({"message": text, "source": "exception"})
            }
            _ => continue,
        };
        if let Ok(mut console) = console.lock() {
            // Bounded: a page logging in a loop must not grow the worker.
            if console.len() >= 1000 {
                console.remove(0);
            }
            console.push(entry);
        }
    }
    // The pipe is gone: every caller still waiting gets an answer.
    if let Ok(mut pending) = pending.lock() {
        pending.clear();
    }
}

fn remote_object_text(object: &Value) -> String {
    match object.get("value") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => object["description"]
            .as_str()
            .or_else(|| object["type"].as_str())
            .unwrap_or("")
            .to_owned(),
    }
}

/// Proxy settings Chromium would otherwise read from the environment
/// (`--proxy-server` wins over them; removed so that nothing suggests otherwise).
const PROXY_ENV: &[&str] = &[
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "auto_proxy",
];

/// The last request the gate or the proxy refused: its URL and why.
type LastRefused = Arc<std::sync::Mutex<Option<(String, guard::Refusal)>>>;

/// Every request of the page (documents, redirects, subresources, `fetch`)
/// waits here until its address is judged, so that a refusal is a clear
/// error before anything is sent. It is not what enforces the judgement:
/// Chromium would resolve the host again itself (DNS rebinding), and
/// popups, workers and WebSockets are not paused here; the proxy
/// ([`proxy`]) judges every connection and connects to the judged address.
/// Ends when the pipe does.
async fn request_gate(
    cdp: std::sync::Weak<Cdp>,
    page: String,
    mut paused: tokio::sync::mpsc::UnboundedReceiver<Value>,
    allow_private: bool,
    refused: LastRefused,
) {
    // Host -> verdict: a page's hundred requests cost one DNS answer each host.
    let mut verdicts: HashMap<String, Result<(), guard::Refusal>> = HashMap::new();
    while let Some(params) = paused.recv().await {
        let Some(cdp) = cdp.upgrade() else {
            return;
        };
        let request_id = params["requestId"].clone();
        let url = params["request"]["url"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let host = url::Url::parse(&url)
            .ok()
            .map(|u| format!("{}://{}", u.scheme(), u.host_str().unwrap_or_default()));
        let verdict = match host.as_ref().and_then(|h| verdicts.get(h)) {
            Some(verdict) => verdict.clone(),
            None => {
                let verdict = guard::check(&url, allow_private).await;
                if let Some(host) = host {
                    verdicts.insert(host, verdict.clone());
                }
                verdict
            }
        };
        let page = page.clone();
        match verdict {
            Ok(()) => {
                tokio::spawn(async move {
                    let _ = cdp
                        .call(
                            Some(&page),
                            "Fetch.continueRequest",
                            json!({"requestId": request_id}),
                        )
                        .await;
                });
            }
            Err(refusal) => {
                tracing::info!(%url, ?refusal, "browser request refused");
                if let Ok(mut last) = refused.lock() {
                    *last = Some((url, refusal));
                }
                tokio::spawn(async move {
                    let _ = cdp
                        .call(
                            Some(&page),
                            "Fetch.failRequest",
                            json!({"requestId": request_id, "errorReason": "BlockedByClient"}),
                        )
                        .await;
                });
            }
        }
    }
}

/// One task's browser: the Chromium process, its page and the refs handed out.
pub struct BrowserSession {
    child: Mutex<Option<Child>>,
    cdp: Arc<Cdp>,
    /// The browser's only route out ([`proxy`]); stopped on close.
    proxy: std::sync::Mutex<Option<proxy::GuardedProxy>>,
    /// What the request gate or the proxy refused last (for the navigation's error).
    refused: LastRefused,
    page: String,
    /// `@eN` → backend DOM node id; stable for the session (a node keeps its ref).
    refs: std::sync::Mutex<(HashMap<i64, usize>, Vec<i64>)>,
    last_used: std::sync::Mutex<Instant>,
    profile: std::path::PathBuf,
    pid: Option<u32>,
}

impl BrowserSession {
    /// Starts Chromium with a fresh profile under `profile_root`, attached
    /// to one page. With a ledger, the profile is listed in it and Chromium
    /// carries the ledger's tag, in a session of its own (the sweep signals
    /// whole sessions of tagged processes).
    pub async fn start(
        program: &str,
        profile_root: &std::path::Path,
        owner: &str,
        task_id: &str,
        ledger: Option<&crate::backends::ledger::HostLedger>,
        allow_private: bool,
    ) -> Result<Arc<BrowserSession>, BrowserError> {
        let safe = |text: &str| -> String {
            text.chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .take(40)
                .collect()
        };
        let profile = profile_root.join(format!(
            "{PROFILE_PREFIX}{}-{}-{}",
            safe(owner),
            safe(task_id),
            uuid::Uuid::new_v4().simple()
        ));
        let spawn_err = |source| BrowserError::Spawn {
            program: program.to_owned(),
            source,
        };
        if let Some(ledger) = ledger {
            // Listed before it exists: a worker killed right now leaves
            // nothing the sweep does not know of.
            ledger.record_dir(&profile.display().to_string());
        }
        std::fs::create_dir_all(&profile).map_err(spawn_err)?;
        let refused = LastRefused::default();
        let proxy = proxy::GuardedProxy::start(allow_private, refused.clone())
            .await
            .map_err(spawn_err)?;
        // The shell moves our pipes onto fds 3 and 4, where Chromium's pipe
        // mode expects them (no unsafe pre_exec needed), and `setsid` (it
        // does not fork: sh is no group leader) gives Chromium and its
        // helpers a session of their own, so that closing it can end them all.
        let script = r#"if command -v setsid >/dev/null 2>&1; then exec setsid "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null; fi; exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null"#;
        let mut command = Command::new("sh");
        if let Some(ledger) = ledger {
            let (key, value) = ledger.tag();
            command.env(key, value);
        }
        command
            .arg("-c")
            .arg(script)
            .arg(program)
            .arg("--headless=new")
            .arg("--remote-debugging-pipe")
            .arg(format!("--user-data-dir={}", profile.display()))
            // Every connection through the worker's judge, loopback included
            // (Chromium bypasses proxies for loopback unless told not to).
            .arg(proxy.server_arg())
            .arg("--proxy-bypass-list=<-loopback>")
            .args([
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-sync",
                "--mute-audio",
                "--window-size=1280,800",
                "about:blank",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        for var in PROXY_ENV {
            command.env_remove(var);
        }
        let mut child = command.spawn().map_err(spawn_err)?;
        let pid = child.id();
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(BrowserError::Closed);
        };
        let pending: Pending = Arc::default();
        let console: Arc<std::sync::Mutex<Vec<Value>>> = Arc::default();
        let (paused_tx, paused_rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(read_loop(
            stdout,
            pending.clone(),
            console.clone(),
            paused_tx,
        ));
        let cdp = Arc::new(Cdp {
            stdin: Mutex::new(stdin),
            pending,
            next_id: AtomicU64::new(1),
            console,
        });
        let targets = cdp.call(None, "Target.getTargets", json!({})).await?;
        let target_id = targets["targetInfos"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["type"] == "page"))
            .and_then(|t| t["targetId"].as_str())
            .map(str::to_owned);
        let target_id = match target_id {
            Some(id) => id,
            None => cdp
                .call(None, "Target.createTarget", json!({"url": "about:blank"}))
                .await?["targetId"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        };
        let attached = cdp
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
            )
            .await?;
        let page = attached["sessionId"]
            .as_str()
            .ok_or(BrowserError::Closed)?
            .to_owned();
        tokio::spawn(request_gate(
            Arc::downgrade(&cdp),
            page.clone(),
            paused_rx,
            allow_private,
            refused.clone(),
        ));
        // The gate first: no request of the page goes out unjudged.
        cdp.call(
            Some(&page),
            "Fetch.enable",
            json!({"patterns": [{"urlPattern": "*", "requestStage": "Request"}]}),
        )
        .await?;
        for method in ["Page.enable", "Runtime.enable", "DOM.enable"] {
            cdp.call(Some(&page), method, json!({})).await?;
        }
        Ok(Arc::new(BrowserSession {
            child: Mutex::new(Some(child)),
            cdp,
            proxy: std::sync::Mutex::new(Some(proxy)),
            refused,
            page,
            refs: std::sync::Mutex::default(),
            last_used: std::sync::Mutex::new(Instant::now()),
            profile,
            pid,
        }))
    }

    /// The process id of the browser (for tests and the sweep).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    fn touch(&self) {
        if let Ok(mut last) = self.last_used.lock() {
            *last = Instant::now();
        }
    }

    fn idle_for(&self) -> Duration {
        self.last_used
            .lock()
            .map(|l| l.elapsed())
            .unwrap_or_default()
    }

    /// Kills the browser and every helper process of its session, and
    /// removes its profile directory.
    pub async fn close(&self) {
        if let Some(mut child) = self.child.lock().await.take() {
            // Only a session Chromium leads is ours to end (without setsid
            // it shares the worker's).
            let leads_session = self.pid.is_some_and(|pid| session_of(pid) == Some(pid));
            let _ = child.kill().await;
            if leads_session && let Some(pid) = self.pid {
                kill_session(pid).await;
            }
        }
        if let Ok(mut proxy) = self.proxy.lock() {
            proxy.take();
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }

    async fn page_call(&self, method: &str, params: Value) -> Result<Value, BrowserError> {
        self.cdp.call(Some(&self.page), method, params).await
    }

    async fn evaluate(&self, expression: &str) -> Result<Value, BrowserError> {
        let result = self
            .page_call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
            )
            .await?;
        if let Some(details) = result.get("exceptionDetails") {
            let text = details["exception"]["description"]
                .as_str()
                .or_else(|| details["text"].as_str())
                .unwrap_or("exception");
            return Err(BrowserError::Input(text.to_owned()));
        }
        Ok(result["result"]
            .get("value")
            .cloned()
            .unwrap_or(Value::Null))
    }

    /// Waits (bounded) until the document has loaded.
    async fn wait_loaded(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Value::String(state)) = self.evaluate("document.readyState").await
                && state == "complete"
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn location(&self) -> (String, String) {
        let value = self
            .evaluate("[location.href, document.title]")
            .await
            .unwrap_or(Value::Null);
        (
            value[0].as_str().unwrap_or_default().to_owned(),
            value[1].as_str().unwrap_or_default().to_owned(),
        )
    }

    fn ref_for(&self, backend: i64) -> String {
        let Ok(mut refs) = self.refs.lock() else {
            return String::new();
        };
        let (by_node, nodes) = &mut *refs;
        let n = *by_node.entry(backend).or_insert_with(|| {
            nodes.push(backend);
            nodes.len()
        });
        format!("@e{n}")
    }

    fn node_for(&self, reference: &str) -> Result<i64, BrowserError> {
        let n: usize = reference
            .trim()
            .trim_start_matches('@')
            .trim_start_matches('e')
            .parse()
            .map_err(|_| {
                BrowserError::Input(format!(
                    "Invalid ref '{reference}': use a ref like @e1 from browser_snapshot"
                ))
            })?;
        self.refs
            .lock()
            .ok()
            .and_then(|r| r.1.get(n.wrapping_sub(1)).copied())
            .ok_or_else(|| {
                BrowserError::Input(format!(
                    "Unknown ref '{reference}': take a browser_snapshot first"
                ))
            })
    }

    /// The accessibility tree as indented text; interactive and named nodes get refs.
    pub async fn snapshot(&self, full: bool) -> Result<String, BrowserError> {
        let tree = self
            .page_call("Accessibility.getFullAXTree", json!({}))
            .await?;
        let nodes = tree["nodes"].as_array().cloned().unwrap_or_default();
        let by_id: HashMap<&str, &Value> = nodes
            .iter()
            .filter_map(|n| n["nodeId"].as_str().map(|id| (id, n)))
            .collect();
        let mut out = String::new();
        if let Some(root) = nodes.first() {
            self.render(root, &by_id, 0, full, &mut out);
        }
        Ok(out)
    }

    fn render(
        &self,
        node: &Value,
        by_id: &HashMap<&str, &Value>,
        depth: usize,
        full: bool,
        out: &mut String,
    ) {
        let role = node["role"]["value"].as_str().unwrap_or("");
        let name = node["name"]["value"].as_str().unwrap_or("").trim();
        let ignored = node["ignored"].as_bool().unwrap_or(false);
        let interactive = matches!(
            role,
            "button"
                | "link"
                | "textbox"
                | "searchbox"
                | "checkbox"
                | "radio"
                | "combobox"
                | "listbox"
                | "option"
                | "menuitem"
                | "tab"
                | "switch"
                | "slider"
                | "spinbutton"
        );
        let noise = matches!(
            role,
            "none" | "generic" | "InlineTextBox" | "LineBreak" | ""
        );
        // Compact mode (hermes' default) drops nameless structural nodes.
        let shown = !ignored && (interactive || (!noise && (full || !name.is_empty())));
        let mut child_depth = depth;
        if shown && !(role == "StaticText" && !full && depth > 0 && name.is_empty()) {
            out.push_str(&"  ".repeat(depth));
            out.push_str("- ");
            out.push_str(role);
            if !name.is_empty() {
                out.push_str(&format!(" \"{name}\""));
            }
            if let Some(backend) = node["backendDOMNodeId"].as_i64()
                && (interactive || role == "heading" || role == "img")
            {
                out.push_str(&format!(" [ref={}]", self.ref_for(backend)));
            }
            if let Some(value) = node["value"]["value"].as_str()
                && !value.is_empty()
            {
                out.push_str(&format!(" value=\"{value}\""));
            }
            out.push('\n');
            child_depth += 1;
        }
        if role == "StaticText" {
            return;
        }
        for child in node["childIds"].as_array().into_iter().flatten() {
            if let Some(child) = child.as_str().and_then(|id| by_id.get(id)) {
                self.render(child, by_id, child_depth, full, out);
            }
        }
    }

    async fn call_on(&self, reference: &str, function: &str) -> Result<Value, BrowserError> {
        let backend = self.node_for(reference)?;
        let resolved = self
            .page_call("DOM.resolveNode", json!({"backendNodeId": backend}))
            .await
            .map_err(|_| {
                BrowserError::Input(format!(
                    "Element {reference} is no longer on the page: take a new browser_snapshot"
                ))
            })?;
        let object = resolved["object"]["objectId"].as_str().unwrap_or_default();
        let result = self
            .page_call(
                "Runtime.callFunctionOn",
                json!({"objectId": object, "functionDeclaration": function, "returnByValue": true}),
            )
            .await?;
        Ok(result["result"]
            .get("value")
            .cloned()
            .unwrap_or(Value::Null))
    }

    async fn press_key(&self, key: &str) -> Result<(), BrowserError> {
        let (code, vk, text) = match key {
            "Enter" => ("Enter", 13, "\r"),
            "Tab" => ("Tab", 9, ""),
            "Escape" => ("Escape", 27, ""),
            "Backspace" => ("Backspace", 8, ""),
            "ArrowUp" => ("ArrowUp", 38, ""),
            "ArrowDown" => ("ArrowDown", 40, ""),
            "ArrowLeft" => ("ArrowLeft", 37, ""),
            "ArrowRight" => ("ArrowRight", 39, ""),
            "PageDown" => ("PageDown", 34, ""),
            "PageUp" => ("PageUp", 33, ""),
            "Home" => ("Home", 36, ""),
            "End" => ("End", 35, ""),
            "Space" | " " => ("Space", 32, " "),
            other if other.chars().count() == 1 => ("", 0, other),
            other => {
                return Err(BrowserError::Input(format!(
                    "Unknown key '{other}' (use e.g. Enter, Tab, Escape, ArrowDown or one character)"
                )));
            }
        };
        let key = if key == "Space" { " " } else { key };
        let mut down =
            json!({"type": "keyDown", "key": key, "code": code, "windowsVirtualKeyCode": vk});
        if !text.is_empty() {
            down["text"] = json!(text);
        }
        self.page_call("Input.dispatchKeyEvent", down).await?;
        self.page_call(
            "Input.dispatchKeyEvent",
            json!({"type": "keyUp", "key": key, "code": code, "windowsVirtualKeyCode": vk}),
        )
        .await?;
        Ok(())
    }

    /// A PNG of the viewport, base64 (CDP's own encoding). With `annotate`,
    /// every ref of the last snapshot still on the page gets a `[N]` label
    /// (N of `@eN`) for the shot, removed again afterwards.
    pub async fn screenshot(&self, annotate: bool) -> Result<String, BrowserError> {
        self.touch();
        if annotate {
            let nodes: Vec<i64> = self.refs.lock().map(|r| r.1.clone()).unwrap_or_default();
            // Bounded: a page with thousands of refs gets its first few hundred.
            for (i, backend) in nodes.iter().enumerate().take(MAX_ANNOTATIONS) {
                let Ok(resolved) = self
                    .page_call("DOM.resolveNode", json!({"backendNodeId": backend}))
                    .await
                else {
                    continue;
                };
                let Some(object) = resolved["object"]["objectId"].as_str() else {
                    continue;
                };
                let label = format!(
                    "function(){{var r=this.getBoundingClientRect();if(!r.width&&!r.height)return;var d=document.createElement('div');d.className='__caduceus_ref_label';d.textContent='[{n}]';d.style.cssText='position:fixed;z-index:2147483647;left:'+Math.max(0,r.left)+'px;top:'+Math.max(0,r.top-14)+'px;background:#ffeb3b;color:#000;font:bold 11px monospace;padding:0 2px;border:1px solid #000;pointer-events:none';document.documentElement.appendChild(d);}}",
                    n = i + 1
                );
                let _ = self
                    .page_call(
                        "Runtime.callFunctionOn",
                        json!({"objectId": object, "functionDeclaration": label}),
                    )
                    .await;
            }
        }
        let shot = self
            .page_call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        if annotate {
            let _ = self
                .evaluate("document.querySelectorAll('.__caduceus_ref_label').forEach(function(e){e.remove()})")
                .await;
        }
        let data = shot?["data"].as_str().unwrap_or_default().to_owned();
        if data.is_empty() {
            return Err(BrowserError::Protocol {
                method: "Page.captureScreenshot".to_owned(),
                message: "no image data".to_owned(),
            });
        }
        self.touch();
        Ok(data)
    }

    fn element_count(&self) -> usize {
        self.refs.lock().map(|r| r.1.len()).unwrap_or(0)
    }

    /// Runs one browser tool; the answer is hermes' document for it.
    pub async fn run(
        &self,
        tool: &str,
        args: &Map<String, Value>,
        allow_private: bool,
    ) -> Result<Value, BrowserError> {
        self.touch();
        let text = |key: &str| {
            args.get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        let flag = |key: &str| args.get(key).and_then(Value::as_bool).unwrap_or(false);
        let result = match tool {
            "browser_navigate" => {
                let url = text("url");
                if url.is_empty() {
                    return Err(BrowserError::Input("url is required".into()));
                }
                if guard::carries_secret(&url) {
                    return Err(BrowserError::Input(guard::Refusal::Secret.to_string()));
                }
                if let Err(refusal) = guard::check(&url, allow_private).await {
                    return Err(BrowserError::Input(refusal.to_string()));
                }
                if let Ok(mut last) = self.refused.lock() {
                    last.take();
                }
                let nav = self.page_call("Page.navigate", json!({"url": url})).await?;
                if let Some(error) = nav["errorText"].as_str()
                    && !error.is_empty()
                {
                    let refused = self.refused.lock().ok().and_then(|mut l| l.take());
                    let host_of = |u: &str| {
                        url::Url::parse(u).ok().and_then(|u| {
                            Some((u.host_str()?.to_owned(), u.port_or_known_default()))
                        })
                    };
                    return Err(BrowserError::Input(match refused {
                        // The page's own host, judged again when the proxy
                        // connected (its DNS answer changed since the check).
                        Some((target, refusal)) if host_of(&target) == host_of(&url) => {
                            format!("{refusal} (when connecting)")
                        }
                        // Otherwise the URL passed, so a redirect was stopped.
                        Some((_, guard::Refusal::Metadata)) => {
                            "Blocked: redirect landed on a cloud metadata endpoint".to_owned()
                        }
                        Some((target, _)) => format!(
                            "Blocked: redirect landed on a private/internal address ({target})"
                        ),
                        None => format!("Navigation to {url} failed: {error}"),
                    }));
                }
                self.wait_loaded().await;
                let (final_url, title) = self.location().await;
                let snapshot = self.snapshot(false).await?;
                json!({
                    "success": true,
                    "url": final_url,
                    "title": title,
                    "snapshot": truncate_snapshot(&snapshot),
                    "element_count": self.element_count(),
                })
            }
            "browser_snapshot" => {
                let snapshot = self.snapshot(flag("full")).await?;
                json!({
                    "success": true,
                    "snapshot": truncate_snapshot(&snapshot),
                    "element_count": self.element_count(),
                })
            }
            "browser_click" => {
                let mut reference = text("ref");
                if !reference.starts_with('@') {
                    reference = format!("@{reference}");
                }
                self.call_on(
                    &reference,
                    "function(){this.scrollIntoView({block:'center'});this.click();return true;}",
                )
                .await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
                self.wait_loaded().await;
                json!({"success": true, "clicked": reference})
            }
            "browser_type" => {
                let mut reference = text("ref");
                if !reference.starts_with('@') {
                    reference = format!("@{reference}");
                }
                let value = text("text");
                // hermes' type fills the field: clear it, then insert as keystrokes would.
                self.call_on(
                    &reference,
                    "function(){this.focus();if('value' in this){this.value='';}return true;}",
                )
                .await?;
                self.page_call("Input.insertText", json!({"text": value}))
                    .await?;
                json!({"success": true, "typed": value, "element": reference})
            }
            "browser_scroll" => {
                let direction = text("direction");
                let sign = match direction.as_str() {
                    "down" => 1,
                    "up" => -1,
                    _ => {
                        return Err(BrowserError::Input(format!(
                            "Invalid direction '{direction}'. Use 'up' or 'down'."
                        )));
                    }
                };
                // hermes scrolls 500 px, about half a viewport.
                self.evaluate(&format!("window.scrollBy(0, {sign} * 500)"))
                    .await?;
                json!({"success": true, "scrolled": direction})
            }
            "browser_back" => {
                let history = self
                    .page_call("Page.getNavigationHistory", json!({}))
                    .await?;
                let index = history["currentIndex"].as_i64().unwrap_or(0);
                if index <= 0 {
                    return Err(BrowserError::Input("No previous page in history".into()));
                }
                let entry = &history["entries"][(index - 1) as usize];
                self.page_call(
                    "Page.navigateToHistoryEntry",
                    json!({"entryId": entry["id"]}),
                )
                .await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
                self.wait_loaded().await;
                let (url, _) = self.location().await;
                json!({"success": true, "url": url})
            }
            "browser_press" => {
                let key = text("key");
                self.press_key(&key).await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
                self.wait_loaded().await;
                json!({"success": true, "pressed": key})
            }
            "browser_get_images" => {
                let images = self
                    .evaluate(
                        "[...document.images].map(img => ({src: img.src, alt: img.alt || '', width: img.naturalWidth, height: img.naturalHeight})).filter(img => img.src && !img.src.startsWith('data:'))",
                    )
                    .await?;
                let count = images.as_array().map(Vec::len).unwrap_or(0);
                json!({"success": true, "images": images, "count": count})
            }
            "browser_console" => {
                if let Some(expression) = args.get("expression").and_then(Value::as_str) {
                    let value = self.evaluate(expression).await?;
                    // hermes parses a string that holds JSON, and names the
                    // type as Python would.
                    let value = match value {
                        Value::String(s) => serde_json::from_str(&s).unwrap_or(Value::String(s)),
                        other => other,
                    };
                    let kind = python_type(&value);
                    json!({"success": true, "result": value, "result_type": kind})
                } else {
                    let messages: Vec<Value> = match self.cdp.console.lock() {
                        Ok(mut console) if flag("clear") => std::mem::take(&mut *console),
                        Ok(console) => console.clone(),
                        Err(_) => Vec::new(),
                    };
                    let (errors, logs): (Vec<Value>, Vec<Value>) = messages
                        .into_iter()
                        .partition(|m| m["source"] == "exception");
                    json!({
                        "success": true,
                        "total_messages": logs.len(),
                        "total_errors": errors.len(),
                        "console_messages": logs,
                        "js_errors": errors,
                    })
                }
            }
            other => {
                return Err(BrowserError::Input(format!(
                    "Unknown browser tool '{other}'"
                )));
            }
        };
        self.touch();
        Ok(result)
    }
}

/// The name Python's `type(x).__name__` gives the JSON value (hermes'
/// `result_type`).
fn python_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// hermes' `_truncate_snapshot`: cut at a line boundary, say how much is left.
fn truncate_snapshot(snapshot: &str) -> String {
    if snapshot.len() <= SNAPSHOT_MAX_CHARS {
        return snapshot.to_owned();
    }
    let lines: Vec<&str> = snapshot.split('\n').collect();
    let mut kept = Vec::new();
    let mut chars = 0;
    for line in &lines {
        if chars + line.len() + 1 > SNAPSHOT_MAX_CHARS - 110 {
            break;
        }
        kept.push(*line);
        chars += line.len() + 1;
    }
    let remaining = lines.len() - kept.len();
    let mut out = kept.join("\n");
    out.push_str(&format!(
        "\n\n[... {remaining} more lines truncated, use browser_snapshot for full content]"
    ));
    out
}

/// The session id of a process (`/proc/<pid>/stat` field 6).
fn session_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(3)?.parse().ok()
}

/// SIGKILLs every process of session `sid` (Chromium's zygote, renderers
/// and utility processes outlive a killed browser process for a while), and
/// again until none is left alive: a helper forked while the last round was
/// killing, or one still dying, would otherwise outlive `close` (seen as a
/// Chromium left after a worker's graceful stop under load). Bounded: after
/// two seconds the ledger's sweep is the layer that remains.
async fn kill_session(sid: u32) {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let alive = session_members(sid);
        if alive.is_empty() || Instant::now() >= deadline {
            return;
        }
        for pid in alive {
            if let Ok(pid) = i32::try_from(pid) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Live (not zombie) processes of session `sid`.
fn session_members(sid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                    return false;
                };
                let mut fields = rest.split_whitespace();
                let state = fields.next();
                // state, ppid, pgrp, session
                let session = fields.nth(2).and_then(|s| s.parse::<u32>().ok());
                state != Some("Z") && session == Some(sid)
            })
        })
        .collect()
}

/// The browsers of one worker, one per task, each closed after
/// `inactivity_timeout` without a call, when its environment ends, or when
/// the worker stops.
pub struct Browsers {
    settings: BrowserSettings,
    ledger: Option<Arc<crate::backends::ledger::HostLedger>>,
    sessions: Mutex<HashMap<String, Arc<BrowserSession>>>,
}

impl std::fmt::Debug for Browsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browsers")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Browsers {
    pub fn new(
        settings: BrowserSettings,
        ledger: Option<Arc<crate::backends::ledger::HostLedger>>,
    ) -> Browsers {
        Browsers {
            settings,
            ledger,
            sessions: Mutex::default(),
        }
    }

    /// Whether this worker can offer the browser toolset.
    pub fn available(&self) -> bool {
        self.settings.program.is_some()
    }

    /// The tasks whose browser is running.
    pub async fn open_tasks(&self) -> Vec<String> {
        let mut tasks: Vec<String> = self.sessions.lock().await.keys().cloned().collect();
        tasks.sort();
        tasks
    }

    /// The task's browser, started on first use.
    pub async fn session(
        self: &Arc<Self>,
        task_id: &str,
    ) -> Result<Arc<BrowserSession>, BrowserError> {
        let mut sessions = self.sessions.lock().await;
        if let Some(session) = sessions.get(task_id) {
            return Ok(session.clone());
        }
        let program = self.settings.program.as_deref().ok_or_else(|| {
            BrowserError::Input(
                "Chromium is not installed on this worker (apt-get install chromium, or set CADUCEUS_CHROMIUM)"
                    .into(),
            )
        })?;
        let session = BrowserSession::start(
            program,
            &self.settings.profile_root,
            &self.settings.owner,
            task_id,
            self.ledger.as_deref(),
            self.settings.allow_private_urls,
        )
        .await?;
        tracing::info!(task = task_id, pid = ?session.pid(), "browser started");
        sessions.insert(task_id.to_owned(), session.clone());
        let this = Arc::downgrade(self);
        let task = task_id.to_owned();
        let watched = Arc::downgrade(&session);
        let timeout = self.settings.inactivity_timeout;
        tokio::spawn(async move {
            loop {
                let Some(session) = watched.upgrade() else {
                    return;
                };
                let idle = session.idle_for();
                drop(session);
                if idle >= timeout {
                    if let Some(browsers) = this.upgrade() {
                        browsers.close_if_same(&task, &watched).await;
                    }
                    return;
                }
                tokio::time::sleep((timeout - idle).max(Duration::from_millis(100))).await;
            }
        });
        Ok(session)
    }

    async fn close_if_same(&self, task_id: &str, which: &std::sync::Weak<BrowserSession>) {
        let mut sessions = self.sessions.lock().await;
        let same = sessions
            .get(task_id)
            .is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), which.as_ptr()));
        if same && let Some(session) = sessions.remove(task_id) {
            drop(sessions);
            tracing::info!(task = task_id, "closing an idle browser");
            session.close().await;
        }
    }

    /// Closes the task's browser (its environment ended).
    pub async fn close_task(&self, task_id: &str) {
        let session = self.sessions.lock().await.remove(task_id);
        if let Some(session) = session {
            tracing::info!(task = task_id, "browser closed with its environment");
            session.close().await;
        }
    }

    /// Closes every browser (graceful stop).
    pub async fn close_all(&self) {
        let sessions: Vec<_> = self.sessions.lock().await.drain().map(|(_, s)| s).collect();
        futures::future::join_all(sessions.iter().map(|s| s.close())).await;
    }

    /// A screenshot (PNG, base64) of the task's page for `browser_vision`.
    pub async fn screenshot(
        self: &Arc<Self>,
        task_id: &str,
        annotate: bool,
    ) -> Result<String, BrowserError> {
        self.session(task_id).await?.screenshot(annotate).await
    }

    /// Runs one browser tool call for the task; always exactly one reply.
    pub async fn run(
        self: &Arc<Self>,
        task_id: &str,
        tool: &str,
        args: &Map<String, Value>,
    ) -> ToolReply {
        let result = match self.session(task_id).await {
            Ok(session) => {
                session
                    .run(tool, args, self.settings.allow_private_urls)
                    .await
            }
            Err(err) => Err(err),
        };
        match result {
            Ok(value) => ToolReply::json(&value),
            Err(err) => {
                ToolReply::failed_json(&json!({"success": false, "error": err.to_string()}))
            }
        }
    }
}
