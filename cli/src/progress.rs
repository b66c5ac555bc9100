//! What `caduceus run` shows while a session runs.
//!
//! Human mode (stderr): one line per finished tool call, indented by the
//! session's depth (children under their parent), a line per child started
//! and finished, interim assistant text, notices and errors; while calls run
//! and stderr is a terminal, a spinner line below them. The final answer goes
//! to stdout. `--json` mode: every event as one JSON line on stdout,
//! `{"session_id","seq","kind","data"}`, and nothing else.

use std::collections::HashMap;
use std::io::Write;
use std::time::Instant;

use serde_json::Value;

use caduceus_coordinator::agent::events::preview;
use caduceus_proto::SessionEvent;

const SPINNER: &[&str] = &["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
/// Longest argument summary on a tool line.
const SUMMARY_CHARS: usize = 72;

/// How the root session ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RootFinal {
    pub status: String,
    pub text: Option<String>,
    pub error: Option<String>,
}

/// One `--json` line, fields in reading order.
#[derive(serde::Serialize)]
struct JsonLine<'a> {
    session_id: &'a str,
    seq: u64,
    kind: &'a str,
    data: &'a Value,
}

struct Running {
    session: String,
    call_id: String,
    label: String,
    started: Instant,
}

pub struct Renderer {
    json: bool,
    spinner: bool,
    depths: HashMap<String, u32>,
    running: Vec<Running>,
    frame: usize,
    spinner_drawn: bool,
    root: Option<String>,
    out: Box<dyn Write + Send>,
    err: Box<dyn Write + Send>,
}

impl Renderer {
    /// `spinner`: draw the spinner line (stderr is a terminal).
    pub fn new(
        json: bool,
        spinner: bool,
        out: Box<dyn Write + Send>,
        err: Box<dyn Write + Send>,
    ) -> Self {
        Renderer {
            json,
            spinner: spinner && !json,
            depths: HashMap::new(),
            running: Vec::new(),
            frame: 0,
            spinner_drawn: false,
            root: None,
            out,
            err,
        }
    }

    pub fn root(&self) -> Option<&str> {
        self.root.as_deref()
    }

    /// Shows one event; returns the root's ending once it arrives.
    pub fn event(&mut self, event: &SessionEvent) -> Option<RootFinal> {
        let data: Value = serde_json::from_str(&event.json).unwrap_or(Value::Null);
        // The first event names the root; a reattached stream that starts
        // later (`run --resume --after`) learns it from the root's own start.
        let top_level_start = matches!(event.kind.as_str(), "session_started" | "session_resumed")
            && data["depth"].as_u64() == Some(0);
        if self.root.is_none() || top_level_start {
            self.root = Some(event.session_id.clone());
        }
        let is_root = self.root.as_deref() == Some(event.session_id.as_str());
        if self.json {
            let line = JsonLine {
                session_id: &event.session_id,
                seq: event.seq,
                kind: &event.kind,
                data: &data,
            };
            let _ = writeln!(
                self.out,
                "{}",
                serde_json::to_string(&line).unwrap_or_default()
            );
            let _ = self.out.flush();
        } else {
            self.human(event, &data, is_root);
        }
        if is_root && event.kind == "final" {
            self.clear_spinner();
            return Some(RootFinal {
                status: data["status"].as_str().unwrap_or("failed").to_owned(),
                text: data["text"].as_str().map(str::to_owned),
                error: data["error"].as_str().map(str::to_owned),
            });
        }
        None
    }

    fn indent(&self, session: &str) -> String {
        "  ".repeat(self.depths.get(session).copied().unwrap_or(0) as usize)
    }

    fn line(&mut self, text: &str) {
        self.clear_spinner();
        let _ = writeln!(self.err, "{text}");
        let _ = self.err.flush();
        self.draw_spinner();
    }

    fn human(&mut self, event: &SessionEvent, data: &Value, is_root: bool) {
        let session = event.session_id.as_str();
        match event.kind.as_str() {
            "session_started" => {
                let depth = data["depth"].as_u64().unwrap_or(0) as u32;
                self.depths.insert(session.to_owned(), depth);
                if is_root {
                    let tools = data["tools"].as_array().map(Vec::len).unwrap_or(0);
                    let text = format!(
                        "▶ session {} · model {} · {} tools · task {}",
                        session,
                        data["model"].as_str().unwrap_or("?"),
                        tools,
                        data["task_id"].as_str().unwrap_or("?")
                    );
                    self.line(&text);
                }
            }
            "session_resumed" => {
                let depth = data["depth"].as_u64().unwrap_or(0) as u32;
                self.depths.insert(session.to_owned(), depth);
                let unknown = data["unknown_calls"].as_array().map(Vec::len).unwrap_or(0);
                let text = format!(
                    "{}↻ session {} resumed after a coordinator restart ({} call(s) with an unknown outcome)",
                    self.indent(session),
                    session,
                    unknown
                );
                self.line(&text);
            }
            // Interim text only; the final answer goes to stdout.
            "assistant_text" if data["tool_calls"].as_u64().unwrap_or(0) > 0 => {
                let text = format!(
                    "{}💬 {}",
                    self.indent(session),
                    one_line(data["text"].as_str().unwrap_or_default(), 100)
                );
                self.line(&text);
            }
            "tool_started" => {
                let emoji = data["emoji"]
                    .as_str()
                    .filter(|e| !e.is_empty())
                    .unwrap_or("🔧");
                let tool = data["tool"].as_str().unwrap_or("?");
                let summary = summarize_arguments(tool, &data["arguments"]);
                let label = format!(
                    "{emoji} {tool}{}{summary}",
                    if summary.is_empty() { "" } else { "  " }
                );
                self.running.push(Running {
                    session: session.to_owned(),
                    call_id: data["call_id"].as_str().unwrap_or_default().to_owned(),
                    label,
                    started: Instant::now(),
                });
                self.draw_spinner();
            }
            "tool_finished" => {
                let call_id = data["call_id"].as_str().unwrap_or_default();
                let label = match self
                    .running
                    .iter()
                    .position(|r| r.session == session && r.call_id == call_id)
                {
                    Some(index) => self.running.remove(index).label,
                    None => data["tool"].as_str().unwrap_or("?").to_owned(),
                };
                let status = data["status"].as_str().unwrap_or("ok");
                let mark = if status == "ok" {
                    "✓".to_owned()
                } else {
                    format!("✗ {status}")
                };
                let seconds = data["duration_ms"].as_f64().unwrap_or(0.0) / 1000.0;
                let worker = data["worker"]
                    .as_str()
                    .map(|w| format!("  @{w}"))
                    .unwrap_or_default();
                let text = format!(
                    "{}{label}  {mark} {seconds:.2}s{worker}",
                    self.indent(session)
                );
                self.line(&text);
            }
            "child_started" => {
                let text = format!(
                    "{}↳ subagent {}: {}",
                    self.indent(session),
                    data["task_index"].as_u64().unwrap_or(0) + 1,
                    one_line(data["goal"].as_str().unwrap_or_default(), 90)
                );
                self.line(&text);
            }
            "child_finished" => {
                let status = data["status"].as_str().unwrap_or("?");
                let mark = if status == "completed" { "✓" } else { "✗" };
                let workers = data["workers"]
                    .as_array()
                    .map(|w| {
                        w.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default();
                let mut text = format!(
                    "{}{mark} subagent {} {status} · {} api calls · {}s",
                    self.indent(session),
                    data["task_index"].as_u64().unwrap_or(0) + 1,
                    data["api_calls"].as_u64().unwrap_or(0),
                    data["duration_seconds"].as_f64().unwrap_or(0.0)
                );
                if !workers.is_empty() {
                    text.push_str(&format!(" · on {workers}"));
                }
                if let Some(error) = data["error"].as_str() {
                    text.push_str(&format!(" · {}", one_line(error, 100)));
                }
                self.line(&text);
            }
            "approval_needed" => {
                let text = format!(
                    "{}⚠ approval needed: {} ({})",
                    self.indent(session),
                    one_line(data["command"].as_str().unwrap_or_default(), 80),
                    data["description"].as_str().unwrap_or_default()
                );
                self.line(&text);
            }
            "clarify" => {
                let text = format!(
                    "{}❓ {}",
                    self.indent(session),
                    data["question"].as_str().unwrap_or_default()
                );
                self.line(&text);
            }
            "notice" => {
                let text = format!(
                    "{}🔔 {}",
                    self.indent(session),
                    one_line(data["message"].as_str().unwrap_or_default(), 100)
                );
                self.line(&text);
            }
            "error" => {
                let text = format!(
                    "{}✗ error: {}",
                    self.indent(session),
                    data["message"].as_str().unwrap_or_default()
                );
                self.line(&text);
            }
            "final" if is_root => {
                let status = data["status"].as_str().unwrap_or("?");
                let mark = if matches!(status, "completed" | "max_iterations") {
                    "✓"
                } else {
                    "✗"
                };
                let text = format!(
                    "{mark} {status} · {} api calls · {}s",
                    data["api_calls"].as_u64().unwrap_or(0),
                    data["duration_seconds"].as_f64().unwrap_or(0.0)
                );
                self.line(&text);
                if let Some(answer) = data["text"].as_str() {
                    let _ = writeln!(self.out, "{answer}");
                    let _ = self.out.flush();
                }
            }
            _ => {}
        }
    }

    /// Advances the spinner (called every 100 ms while waiting for events).
    pub fn tick(&mut self) {
        self.frame = self.frame.wrapping_add(1);
        self.draw_spinner();
    }

    fn draw_spinner(&mut self) {
        if !self.spinner {
            return;
        }
        if self.running.is_empty() {
            self.clear_spinner();
            return;
        }
        let first = &self.running[0];
        let mut text = format!(
            "{} {}  {:.1}s",
            SPINNER[self.frame % SPINNER.len()],
            first.label,
            first.started.elapsed().as_secs_f64()
        );
        if self.running.len() > 1 {
            text.push_str(&format!("  (+{} more running)", self.running.len() - 1));
        }
        let _ = write!(self.err, "\r\x1b[2K{}", one_line(&text, 120));
        let _ = self.err.flush();
        self.spinner_drawn = true;
    }

    fn clear_spinner(&mut self) {
        if self.spinner_drawn {
            let _ = write!(self.err, "\r\x1b[2K");
            let _ = self.err.flush();
            self.spinner_drawn = false;
        }
    }
}

/// A short description of a call's arguments for its progress line.
pub fn summarize_arguments(tool: &str, arguments: &Value) -> String {
    let field = |key: &str| {
        arguments
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let text = match tool {
        "terminal" => field("command"),
        "read_file" | "write_file" | "patch" => field("path"),
        "search_files" => field("pattern"),
        "process" => Some(format!(
            "{} {}",
            field("action").unwrap_or_default(),
            field("session_id").unwrap_or_default()
        )),
        "clarify" => field("question"),
        "todo" => arguments
            .get("todos")
            .and_then(Value::as_array)
            .map(|t| format!("{} items", t.len()))
            .or_else(|| Some("read".to_owned())),
        "delegate_task" => match arguments.get("tasks").and_then(Value::as_array) {
            Some(tasks) if !tasks.is_empty() => Some(format!("{} tasks", tasks.len())),
            _ => field("goal"),
        },
        _ => match arguments {
            Value::Object(map) => map.values().find_map(Value::as_str).map(str::to_owned),
            Value::String(raw) => Some(raw.clone()),
            _ => None,
        },
    };
    one_line(text.unwrap_or_default().trim(), SUMMARY_CHARS)
}

/// The text on one line, cut to `max` characters with `…`.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    preview(&flat, max)
}

#[cfg(test)]
#[path = "progress_tests.rs"]
mod tests;
