//! Shell hooks: the `hooks:` section of the configuration in hermes' layout
//! (`agent/shell_hooks.py`), and the `hooks:` of a plugin's manifest, both
//! run as executables with hermes' JSON on stdin and stdout.
//!
//! ```yaml
//! hooks:
//!   pre_tool_call:
//!     - matcher: "terminal|patch"     # regex, full match on the tool name
//!       command: "~/hooks/check.py --strict"
//!       timeout: 10                   # seconds (60; at most 300)
//!       fail_closed: true             # a failing hook blocks (default: false): one that
//!                                     # exits non-zero, times out, or answers non-JSON
//!   post_tool_call:
//!     - command: "~/hooks/log.sh"
//!   on_session_start: [{command: …}]
//! ```
//!
//! stdin: `{"hook_event_name", "tool_name", "tool_input", "session_id",
//! "cwd", "extra"}`; a `pre_tool_call` hook blocks the call by printing
//! `{"decision": "block", "reason": …}` or `{"action": "block", "message": …}`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use regex::Regex;
use serde_json::{Map, Value, json};

use caduceus_coordinator::dispatch::{
    HookDecision, PostToolCall, PreToolCall, SessionEvent, SessionEventKind, ToolHook,
};

use crate::PluginError;
use crate::exec::{self, Ended, Exec};

/// hermes' default and largest hook timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
pub const MAX_TIMEOUT: Duration = Duration::from_secs(300);
/// What a hook may print; more is a failure.
const MAX_HOOK_OUTPUT: usize = 1024 * 1024;
/// hermes' block message when a hook gives none.
const DEFAULT_BLOCK_MESSAGE: &str = "Blocked by shell hook.";

/// The events caduceus fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookEvent {
    PreToolCall,
    PostToolCall,
    OnSessionStart,
    OnSessionEnd,
    SubagentStart,
    SubagentStop,
}

impl HookEvent {
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "pre_tool_call" => HookEvent::PreToolCall,
            "post_tool_call" => HookEvent::PostToolCall,
            "on_session_start" => HookEvent::OnSessionStart,
            "on_session_end" => HookEvent::OnSessionEnd,
            "subagent_start" => HookEvent::SubagentStart,
            "subagent_stop" => HookEvent::SubagentStop,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::PreToolCall => "pre_tool_call",
            HookEvent::PostToolCall => "post_tool_call",
            HookEvent::OnSessionStart => "on_session_start",
            HookEvent::OnSessionEnd => "on_session_end",
            HookEvent::SubagentStart => "subagent_start",
            HookEvent::SubagentStop => "subagent_stop",
        }
    }

    fn of(kind: SessionEventKind) -> Self {
        match kind {
            SessionEventKind::Start => HookEvent::OnSessionStart,
            SessionEventKind::End => HookEvent::OnSessionEnd,
            SessionEventKind::SubagentStart => HookEvent::SubagentStart,
            SessionEventKind::SubagentStop => HookEvent::SubagentStop,
        }
    }
}

/// hermes hook names caduceus accepts in a configuration but never fires.
const HERMES_ONLY_EVENTS: &[&str] = &[
    "transform_terminal_output",
    "transform_tool_result",
    "transform_llm_output",
    "pre_llm_call",
    "post_llm_call",
    "pre_verify",
    "pre_api_request",
    "post_api_request",
    "api_request_error",
    "on_session_finalize",
    "on_session_reset",
    "pre_gateway_dispatch",
    "pre_approval_request",
    "post_approval_response",
    "kanban_task_claimed",
    "kanban_task_completed",
    "kanban_task_blocked",
];

/// One configured hook.
#[derive(Debug, Clone)]
pub struct HookSpec {
    pub event: HookEvent,
    /// Full match on the tool name (`pre_tool_call`, `post_tool_call` only).
    pub matcher: Option<Regex>,
    pub command: String,
    pub timeout: Duration,
    /// A hook that fails (cannot start, times out, exits non-zero without an
    /// answer) blocks the call instead of being ignored.
    pub fail_closed: bool,
}

impl HookSpec {
    fn matches(&self, tool: &str) -> bool {
        self.matcher.as_ref().is_none_or(|m| m.is_match(tool))
    }
}

/// Parses a `hooks:` section (hermes' layout). Entries hermes would skip
/// with a warning are skipped with a warning; a section that is not a
/// mapping, or an entry without a command, is an error here — a hook the
/// operator wrote and that silently never runs is worse than a refusal to
/// start.
pub fn parse_hooks(section: Option<&serde_yaml::Value>) -> Result<Vec<HookSpec>, PluginError> {
    let Some(section) = section.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let serde_yaml::Value::Mapping(events) = section else {
        return Err(PluginError::Hooks(
            "hooks must be a mapping of event names to lists of hooks".to_owned(),
        ));
    };
    let mut specs = Vec::new();
    for (name, entries) in events {
        let name = name.as_str().unwrap_or_default();
        if name == "output_spill" {
            continue;
        }
        let Some(event) = HookEvent::parse(name) else {
            if HERMES_ONLY_EVENTS.contains(&name) {
                tracing::warn!("hooks.{name}: a hermes hook caduceus does not fire; ignored");
            } else {
                tracing::warn!(
                    "hooks.{name}: unknown hook event (caduceus fires pre_tool_call, post_tool_call, on_session_start, on_session_end, subagent_start, subagent_stop); ignored"
                );
            }
            continue;
        };
        let entries = match entries {
            serde_yaml::Value::Null => continue,
            serde_yaml::Value::Sequence(entries) => entries,
            _ => {
                return Err(PluginError::Hooks(format!(
                    "hooks.{name} must be a list of hook definitions"
                )));
            }
        };
        for (index, entry) in entries.iter().enumerate() {
            specs.push(parse_entry(event, name, index, entry)?);
        }
    }
    Ok(specs)
}

fn parse_entry(
    event: HookEvent,
    name: &str,
    index: usize,
    entry: &serde_yaml::Value,
) -> Result<HookSpec, PluginError> {
    let at = || format!("hooks.{name}[{index}]");
    let command = entry
        .get("command")
        .and_then(serde_yaml::Value::as_str)
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .ok_or_else(|| PluginError::Hooks(format!("{} needs a non-empty command", at())))?;
    let matcher = match entry.get("matcher") {
        None | Some(serde_yaml::Value::Null) => None,
        Some(serde_yaml::Value::String(m)) if m.trim().is_empty() => None,
        Some(serde_yaml::Value::String(m)) => {
            if !matches!(event, HookEvent::PreToolCall | HookEvent::PostToolCall) {
                tracing::warn!(
                    "{}.matcher is only honoured for pre_tool_call and post_tool_call; the hook fires on every {name}",
                    at()
                );
                None
            } else {
                // hermes: re.fullmatch; an invalid regex is a literal name.
                let pattern = m.trim();
                let anchored = format!("^(?:{pattern})$");
                Some(Regex::new(&anchored).unwrap_or_else(|err| {
                    tracing::warn!("{}.matcher {pattern:?} is not a valid regex ({err}); matching the name literally", at());
                    Regex::new(&format!("^{}$", regex::escape(pattern))).unwrap_or_else(|_| never())
                }))
            }
        }
        Some(_) => {
            return Err(PluginError::Hooks(format!(
                "{}.matcher must be a string regex",
                at()
            )));
        }
    };
    let timeout = match entry.get("timeout") {
        None | Some(serde_yaml::Value::Null) => DEFAULT_TIMEOUT,
        Some(value) => match value.as_f64() {
            Some(secs) if secs.is_finite() && secs >= 1.0 => {
                Duration::from_secs_f64(secs).min(MAX_TIMEOUT)
            }
            _ => {
                tracing::warn!(
                    "{}.timeout must be a number of seconds >= 1; using 60",
                    at()
                );
                DEFAULT_TIMEOUT
            }
        },
    };
    let fail_closed = entry
        .get("fail_closed")
        .and_then(serde_yaml::Value::as_bool)
        .unwrap_or(false);
    Ok(HookSpec {
        event,
        matcher,
        command: command.to_owned(),
        timeout,
        fail_closed,
    })
}

/// A regex that matches nothing (the fallback of a fallback).
fn never() -> Regex {
    #[allow(clippy::unwrap_used)] // a constant pattern
    Regex::new("[^\\s\\S]").unwrap()
}

/// Where a hook's command runs and what it sees.
#[derive(Debug, Clone)]
pub struct HookOrigin {
    /// `config`, or the plugin's name.
    pub label: String,
    /// The working directory (a plugin's directory; the coordinator's cwd
    /// for configured hooks).
    pub dir: PathBuf,
    /// Variables on top of the base set (a plugin's declared ones).
    pub env: Vec<(String, String)>,
}

/// One hook, ready to run.
pub struct ShellHook {
    pub spec: HookSpec,
    pub origin: Arc<HookOrigin>,
}

impl ShellHook {
    /// Runs the command with `payload`; `Ok(stdout)`, or why it failed.
    async fn fire(&self, payload: &Value) -> Result<String, String> {
        let argv = exec::split_command(&self.spec.command)
            .map_err(|e| format!("its command cannot be parsed: {e}"))?;
        let outcome = exec::run(&Exec {
            argv,
            cwd: self.origin.dir.clone(),
            env: self.origin.env.clone(),
            stdin: payload.to_string().into_bytes(),
            timeout: self.spec.timeout,
            max_output: MAX_HOOK_OUTPUT,
        })
        .await;
        let stdout = outcome.stdout_text();
        match outcome.ended {
            Ended::Exited(Some(0)) => Ok(stdout),
            Ended::Exited(code) => {
                let reason = match code {
                    Some(code) => format!("it exited with status {code}"),
                    None => "it was killed by a signal".to_owned(),
                };
                self.warn(&format!("{reason}; stderr: {}", tail(&outcome.stderr)));
                // hermes still reads the answer of a hook that exits non-zero.
                if block_message(&stdout).is_some() {
                    Ok(stdout)
                } else {
                    Err(reason)
                }
            }
            Ended::TimedOut => Err(format!(
                "it timed out after {}s",
                self.spec.timeout.as_secs_f64()
            )),
            Ended::TooMuchOutput => Err(format!("it printed more than {MAX_HOOK_OUTPUT} bytes")),
            Ended::NotStarted(message) => Err(message),
        }
    }

    fn warn(&self, message: &str) {
        tracing::warn!(
            event = self.spec.event.as_str(),
            hook = %self.spec.command,
            origin = %self.origin.label,
            "hook: {message}"
        );
    }

    fn payload(
        &self,
        tool: Option<&str>,
        input: Option<&Map<String, Value>>,
        session_id: Option<&str>,
        extra: Map<String, Value>,
    ) -> Value {
        let cwd = std::env::current_dir()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        json!({
            "hook_event_name": self.spec.event.as_str(),
            "tool_name": tool,
            "tool_input": input,
            "session_id": session_id.unwrap_or_default(),
            "cwd": cwd,
            "extra": Value::Object(extra),
        })
    }
}

/// The block message of a `pre_tool_call` answer (both of hermes' shapes),
/// or `None` when the answer does not block.
pub fn block_message(stdout: &str) -> Option<String> {
    let Ok(Value::Object(answer)) = serde_json::from_str::<Value>(stdout.trim()) else {
        return None;
    };
    let text = |key: &str| {
        answer
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    if answer.get("action").and_then(Value::as_str) == Some("block") {
        return Some(
            text("message")
                .or_else(|| text("reason"))
                .unwrap_or_else(|| DEFAULT_BLOCK_MESSAGE.to_owned()),
        );
    }
    if answer.get("decision").and_then(Value::as_str) == Some("block") {
        return Some(
            text("reason")
                .or_else(|| text("message"))
                .unwrap_or_else(|| DEFAULT_BLOCK_MESSAGE.to_owned()),
        );
    }
    None
}

/// An answer that says something but not as a JSON object (empty output is
/// a hook with nothing to say).
fn unreadable_answer(stdout: &str) -> bool {
    let trimmed = stdout.trim();
    !trimmed.is_empty() && !matches!(serde_json::from_str::<Value>(trimmed), Ok(Value::Object(_)))
}

fn tail(text: &str) -> String {
    let trimmed = text.trim();
    let count = trimmed.chars().count();
    if count <= 400 {
        return trimmed.to_owned();
    }
    trimmed.chars().skip(count - 400).collect()
}

fn context_extra(
    task_id: &str,
    tool_call_id: Option<&str>,
    session_id: Option<&str>,
) -> Map<String, Value> {
    let mut extra = Map::new();
    extra.insert("task_id".to_owned(), json!(task_id));
    extra.insert("tool_call_id".to_owned(), json!(tool_call_id));
    extra.insert("session_id".to_owned(), json!(session_id));
    extra
}

#[async_trait]
impl ToolHook for ShellHook {
    async fn pre_tool_call(&self, call: &PreToolCall<'_>) -> HookDecision {
        if self.spec.event != HookEvent::PreToolCall || !self.spec.matches(call.tool) {
            return HookDecision::Continue;
        }
        let session = call.ctx.session_id.as_deref();
        let payload = self.payload(
            Some(call.tool),
            Some(call.args),
            session,
            context_extra(&call.ctx.task_id, call.ctx.tool_call_id.as_deref(), session),
        );
        match self.fire(&payload).await {
            Ok(stdout) => match block_message(&stdout) {
                Some(message) => {
                    tracing::info!(tool = call.tool, hook = %self.spec.command, "pre_tool_call hook blocked the call");
                    HookDecision::Block { message }
                }
                // A fail-closed hook whose answer cannot be read has failed:
                // it may have meant to block (a typo in its JSON must not
                // let the call through).
                None if self.spec.fail_closed && unreadable_answer(&stdout) => {
                    let reason = "its answer is not a JSON object";
                    self.warn(reason);
                    HookDecision::Block {
                        message: format!(
                            "Blocked: the pre_tool_call hook `{}` failed ({reason}) and is fail-closed, so the call was not run.",
                            self.spec.command
                        ),
                    }
                }
                None => HookDecision::Continue,
            },
            Err(reason) => {
                self.warn(&reason);
                if self.spec.fail_closed {
                    HookDecision::Block {
                        message: format!(
                            "Blocked: the pre_tool_call hook `{}` failed ({reason}) and is fail-closed, so the call was not run.",
                            self.spec.command
                        ),
                    }
                } else {
                    HookDecision::Continue
                }
            }
        }
    }

    async fn post_tool_call(&self, call: &PostToolCall<'_>) {
        let result = call.result;
        if self.spec.event != HookEvent::PostToolCall || !self.spec.matches(&result.tool) {
            return;
        }
        let session = call.ctx.session_id.as_deref();
        let mut extra = context_extra(&call.ctx.task_id, call.ctx.tool_call_id.as_deref(), session);
        let error_message = serde_json::from_str::<Value>(&result.body)
            .ok()
            .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned));
        extra.insert("result".to_owned(), json!(result.body));
        extra.insert("status".to_owned(), json!(result.status.as_str()));
        extra.insert("error_type".to_owned(), json!(result.error_type()));
        extra.insert(
            "error_message".to_owned(),
            json!(error_message.filter(|_| result.error_type().is_some())),
        );
        extra.insert(
            "duration_ms".to_owned(),
            json!(u64::try_from(result.duration.as_millis()).unwrap_or(u64::MAX)),
        );
        extra.insert("worker".to_owned(), json!(result.worker));
        let payload = self.payload(
            Some(&result.tool),
            result.arguments.as_ref(),
            session,
            extra,
        );
        if let Err(reason) = self.fire(&payload).await {
            self.warn(&reason);
        }
    }

    async fn session_event(&self, event: &SessionEvent<'_>) {
        if self.spec.event != HookEvent::of(event.kind) {
            return;
        }
        let mut extra = event.data.clone();
        extra.insert("task_id".to_owned(), json!(event.task_id));
        extra.insert(
            "parent_session_id".to_owned(),
            json!(event.parent_session_id),
        );
        let payload = self.payload(None, None, Some(event.session_id), extra);
        if let Err(reason) = self.fire(&payload).await {
            self.warn(&reason);
        }
    }
}

#[cfg(test)]
#[path = "hooks_tests.rs"]
mod tests;
