//! The browser toolset on the worker: a headless Chromium per task, driven
//! over the Chrome DevTools Protocol.
//!
//! CDP is spoken over `--remote-debugging-pipe` (NUL-separated JSON on fds 3
//! and 4) rather than through chromiumoxide or a websocket: the ten tools
//! need a dozen CDP methods, the pipe needs no port, no extra dependency and
//! no 55 s / 2.5 GB compile of generated CDP bindings, and the browser dies
//! with its pipe when the worker does.

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

/// The ten browser tools.
pub const TOOLS: &[&str] = &[
    "browser_navigate",
    "browser_snapshot",
    "browser_click",
    "browser_type",
    "browser_scroll",
    "browser_back",
    "browser_press",
    "browser_get_images",
    "browser_vision",
    "browser_console",
];

/// Whether `tool` is one of the browser tools.
pub fn is_browser_tool(tool: &str) -> bool {
    TOOLS.contains(&tool)
}

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
                json!({"type": "error", "text": text, "source": "exception"})
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

/// One task's browser: the Chromium process, its page and the refs handed out.
pub struct BrowserSession {
    child: Mutex<Option<Child>>,
    cdp: Cdp,
    page: String,
    /// `@eN` → backend DOM node id; stable for the session (a node keeps its ref).
    refs: std::sync::Mutex<(HashMap<i64, usize>, Vec<i64>)>,
    last_used: std::sync::Mutex<Instant>,
    profile: std::path::PathBuf,
    pid: Option<u32>,
}

impl BrowserSession {
    /// Starts Chromium with a fresh profile under `profile_root`, attached to one page.
    pub async fn start(
        program: &str,
        profile_root: &std::path::Path,
        owner: &str,
        task_id: &str,
    ) -> Result<Arc<BrowserSession>, BrowserError> {
        let safe: String = task_id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        let profile = profile_root.join(format!(
            "{PROFILE_PREFIX}{owner}-{safe}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let spawn_err = |source| BrowserError::Spawn {
            program: program.to_owned(),
            source,
        };
        std::fs::create_dir_all(&profile).map_err(spawn_err)?;
        // The shell moves our pipes onto fds 3 and 4, where Chromium's pipe
        // mode expects them (no unsafe pre_exec needed).
        let script = r#"exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null"#;
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(script)
            .arg(program)
            .arg("--headless=new")
            .arg("--remote-debugging-pipe")
            .arg(format!("--user-data-dir={}", profile.display()))
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
        let mut child = command.spawn().map_err(spawn_err)?;
        let pid = child.id();
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(BrowserError::Closed);
        };
        let pending: Pending = Arc::default();
        let console: Arc<std::sync::Mutex<Vec<Value>>> = Arc::default();
        tokio::spawn(read_loop(stdout, pending.clone(), console.clone()));
        let cdp = Cdp {
            stdin: Mutex::new(stdin),
            pending,
            next_id: AtomicU64::new(1),
            console,
        };
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
        for method in ["Page.enable", "Runtime.enable", "DOM.enable"] {
            cdp.call(Some(&page), method, json!({})).await?;
        }
        Ok(Arc::new(BrowserSession {
            child: Mutex::new(Some(child)),
            cdp,
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

    /// Kills the browser and removes its profile directory.
    pub async fn close(&self) {
        if let Some(mut child) = self.child.lock().await.take() {
            let _ = child.kill().await;
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

    /// Runs one browser tool; the answer is hermes-shaped JSON.
    pub async fn run(&self, tool: &str, args: &Map<String, Value>) -> Result<Value, BrowserError> {
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
                let nav = self.page_call("Page.navigate", json!({"url": url})).await?;
                if let Some(error) = nav["errorText"].as_str() {
                    return Err(BrowserError::Input(format!(
                        "Navigation to {url} failed: {error}"
                    )));
                }
                self.wait_loaded().await;
                let (url, title) = self.location().await;
                json!({"success": true, "url": url, "title": title})
            }
            "browser_snapshot" => {
                let snapshot = self.snapshot(flag("full")).await?;
                let count = self.refs.lock().map(|r| r.1.len()).unwrap_or(0);
                json!({"success": true, "snapshot": snapshot, "element_count": count})
            }
            "browser_click" => {
                let reference = text("ref");
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
                let reference = text("ref");
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
                            "Invalid direction '{direction}': use 'up' or 'down'"
                        )));
                    }
                };
                self.evaluate(&format!(
                    "window.scrollBy(0, {sign} * window.innerHeight * 0.8)"
                ))
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
                let (url, title) = self.location().await;
                json!({"success": true, "url": url, "title": title})
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
                        "Array.from(document.images).filter(i=>i.src).map(i=>({src:i.currentSrc||i.src,alt:i.alt||''}))",
                    )
                    .await?;
                let count = images.as_array().map(Vec::len).unwrap_or(0);
                json!({"success": true, "images": images, "count": count})
            }
            "browser_console" => {
                let messages: Vec<Value> = match self.cdp.console.lock() {
                    Ok(mut console) if flag("clear") => std::mem::take(&mut *console),
                    Ok(console) => console.clone(),
                    Err(_) => Vec::new(),
                };
                let (errors, logs): (Vec<Value>, Vec<Value>) = messages
                    .into_iter()
                    .partition(|m| m["source"] == "exception");
                let total = logs.len() + errors.len();
                let mut answer = json!({
                    "success": true,
                    "console_messages": logs,
                    "js_errors": errors,
                    "total_messages": total,
                });
                let expression = text("expression");
                if !expression.is_empty() {
                    match self.evaluate(&expression).await {
                        Ok(value) => answer["result"] = value,
                        Err(err) => answer["expression_error"] = json!(err.to_string()),
                    }
                }
                answer
            }
            "browser_vision" => {
                return Err(BrowserError::Input(
                    "browser_vision needs a configured vision model; none is configured on this worker"
                        .into(),
                ));
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

/// The browsers of one worker, one per task, each closed after
/// `inactivity_timeout` without a call, when its environment ends, or when
/// the worker stops.
pub struct Browsers {
    program: Option<String>,
    profile_root: std::path::PathBuf,
    owner: String,
    inactivity_timeout: Duration,
    sessions: Mutex<HashMap<String, Arc<BrowserSession>>>,
}

impl std::fmt::Debug for Browsers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browsers")
            .field("program", &self.program)
            .field("inactivity_timeout", &self.inactivity_timeout)
            .finish_non_exhaustive()
    }
}

impl Default for Browsers {
    fn default() -> Self {
        Browsers::new(
            find_chromium(),
            std::env::temp_dir(),
            "worker",
            DEFAULT_INACTIVITY_TIMEOUT,
        )
    }
}

impl Browsers {
    pub fn new(
        program: Option<String>,
        profile_root: std::path::PathBuf,
        owner: &str,
        inactivity_timeout: Duration,
    ) -> Browsers {
        Browsers {
            program,
            profile_root,
            owner: owner.to_owned(),
            inactivity_timeout,
            sessions: Mutex::default(),
        }
    }

    /// Whether this worker can offer the browser toolset.
    pub fn available(&self) -> bool {
        self.program.is_some()
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
        let program = self.program.as_deref().ok_or_else(|| {
            BrowserError::Input("Chromium is not installed on this worker".into())
        })?;
        let session =
            BrowserSession::start(program, &self.profile_root, &self.owner, task_id).await?;
        sessions.insert(task_id.to_owned(), session.clone());
        let this = Arc::downgrade(self);
        let task = task_id.to_owned();
        let watched = Arc::downgrade(&session);
        let timeout = self.inactivity_timeout;
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
            tracing::info!(task = task_id, "closing an idle browser");
            session.close().await;
        }
    }

    /// Closes the task's browser (its environment ended).
    pub async fn close_task(&self, task_id: &str) {
        let session = self.sessions.lock().await.remove(task_id);
        if let Some(session) = session {
            session.close().await;
        }
    }

    /// Closes every browser (graceful stop).
    pub async fn close_all(&self) {
        let sessions: Vec<_> = self.sessions.lock().await.drain().map(|(_, s)| s).collect();
        for session in sessions {
            session.close().await;
        }
    }

    /// Runs one browser tool call for the task; always exactly one reply.
    pub async fn run(
        self: &Arc<Self>,
        task_id: &str,
        tool: &str,
        args: &Map<String, Value>,
    ) -> ToolReply {
        let result = match self.session(task_id).await {
            Ok(session) => session.run(tool, args).await,
            Err(err) => Err(err),
        };
        match result {
            Ok(value) => ToolReply::json(&value),
            Err(err) => {
                ToolReply::error(json!({"success": false, "error": err.to_string()}).to_string())
            }
        }
    }
}
