//! [`ReplayModel`] (`replay:FILE`): plays recorded assistant turns from a JSON-lines
//! file, so that a whole session — with real tool execution — runs offline.
//!
//! Each conversation (identified by its first user message) is routed to the lines
//! whose `match` is the longest substring of that message ("" or no `match` = the
//! default lines) and consumes them in file order with its own cursor. The file
//! format is specified in the crate README. A conversation that already holds
//! assistant turns (one resumed from a transcript after a restart, in a new
//! process) is never behind them: its cursor starts past that many lines.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::error::LlmError;
use crate::message::{ChatMessage, Role, ToolCall};
use crate::model::{ChatModel, EventSink, report_whole_turn};
use crate::request::ChatRequest;
use crate::text::shorten;
use crate::turn::{AssistantTurn, FinishReason, Usage};

const KNOWN_KEYS: &[&str] = &[
    "match",
    "role",
    "content",
    "tool_calls",
    "reasoning_content",
    "finish_reason",
    "usage",
    "delay_ms",
    "expect_tool_results",
    "expect_contains",
];

/// One recorded turn and the checks to run before replaying it.
#[derive(Debug, Clone)]
struct ReplayLine {
    line: usize,
    match_key: String,
    turn: AssistantTurn,
    delay: Option<Duration>,
    expect_tool_results: Option<usize>,
    expect_contains: Option<String>,
}

/// A [`ChatModel`] that replays a script. Thread-safe: concurrent conversations
/// (delegated children) each advance their own cursor.
#[derive(Debug)]
pub struct ReplayModel {
    file: String,
    lines: Vec<ReplayLine>,
    /// Distinct `match` strings, longest first, so routing picks the most specific.
    match_keys: Vec<String>,
    /// Lines consumed so far, per conversation (keyed by its first user message).
    cursors: Mutex<HashMap<String, usize>>,
    default_delay: Option<Duration>,
}

impl ReplayModel {
    /// Reads and validates a replay file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LlmError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| LlmError::ReplayIo {
            file: file.clone(),
            source,
        })?;
        ReplayModel::from_jsonl(&file, &text)
    }

    /// Parses replay lines from `text`; `file` names the source in error messages.
    pub fn from_jsonl(file: &str, text: &str) -> Result<Self, LlmError> {
        let mut lines = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with("//") {
                continue;
            }
            let line = index + 1;
            let parsed = parse_line(line, trimmed).map_err(|detail| LlmError::ReplayFormat {
                file: file.to_string(),
                line,
                detail,
            })?;
            lines.push(parsed);
        }
        let mut match_keys: Vec<String> = Vec::new();
        for line in &lines {
            if !match_keys.contains(&line.match_key) {
                match_keys.push(line.match_key.clone());
            }
        }
        match_keys.sort_by_key(|key| std::cmp::Reverse(key.len()));
        Ok(ReplayModel {
            file: file.to_string(),
            lines,
            match_keys,
            cursors: Mutex::new(HashMap::new()),
            default_delay: None,
        })
    }

    /// Waits this long before every turn whose line has no `delay_ms` (for demos).
    pub fn with_default_delay(mut self, delay: Duration) -> Self {
        self.default_delay = Some(delay);
        self
    }

    /// Number of recorded turns in the file.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The `match` string whose lines a conversation replays.
    fn route(&self, conversation: &str) -> &str {
        self.match_keys
            .iter()
            .find(|key| conversation.contains(key.as_str()))
            .map(String::as_str)
            .unwrap_or("")
    }

    /// Takes the conversation's next line, advancing its cursor; `answered`
    /// is how many assistant turns the request already holds.
    fn next_line(&self, conversation: &str, answered: usize) -> Result<ReplayLine, LlmError> {
        let match_key = self.route(conversation);
        let mut cursors = self.cursors.lock().unwrap_or_else(PoisonError::into_inner);
        let used = cursors.entry(conversation.to_string()).or_insert(0);
        *used = (*used).max(answered);
        let next = self
            .lines
            .iter()
            .filter(|line| line.match_key == match_key)
            .nth(*used)
            .cloned();
        match next {
            Some(line) => {
                *used += 1;
                Ok(line)
            }
            None => Err(LlmError::ReplayExhausted {
                file: self.file.clone(),
                conversation: shorten(conversation, 80),
                match_key: match_key.to_string(),
                used: *used,
            }),
        }
    }

    fn check_expectations(&self, line: &ReplayLine, request: &ChatRequest) -> Result<(), LlmError> {
        let mismatch = |detail: String| LlmError::ReplayMismatch {
            file: self.file.clone(),
            line: line.line,
            detail,
        };
        let since_last_turn = messages_since_last_assistant(&request.messages);
        if let Some(expected) = line.expect_tool_results {
            let actual = since_last_turn
                .iter()
                .filter(|message| message.role == Role::Tool)
                .count();
            if actual != expected {
                return Err(mismatch(format!(
                    "expected {expected} tool result(s) since the last assistant turn, \
                     the request has {actual}"
                )));
            }
        }
        if let Some(needle) = &line.expect_contains {
            let text: Vec<String> = since_last_turn
                .iter()
                .map(|message| message.text().into_owned())
                .collect();
            let text = text.join("\n");
            if !text.contains(needle.as_str()) {
                return Err(mismatch(format!(
                    "expected the messages since the last assistant turn to contain {needle:?}; \
                     they are: {:?}",
                    shorten(&text, 500)
                )));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ChatModel for ReplayModel {
    async fn complete(
        &self,
        request: &ChatRequest,
        events: EventSink<'_>,
    ) -> Result<AssistantTurn, LlmError> {
        let conversation = request.first_user_text().unwrap_or_default();
        let answered = request
            .messages
            .iter()
            .filter(|message| message.role == Role::Assistant)
            .count();
        let line = self.next_line(&conversation, answered)?;
        self.check_expectations(&line, request)?;
        if let Some(delay) = line.delay.or(self.default_delay)
            && !delay.is_zero()
        {
            tokio::time::sleep(delay).await;
        }
        let turn = line.turn;
        report_whole_turn(&turn, events);
        Ok(turn)
    }

    fn describe(&self) -> String {
        format!("replay:{} ({} recorded turns)", self.file, self.lines.len())
    }
}

/// One replay-file line recording `turn`, for tools that record live sessions.
pub fn replay_line(turn: &AssistantTurn, match_key: Option<&str>) -> String {
    let mut object = Map::new();
    if let Some(key) = match_key.filter(|key| !key.is_empty()) {
        object.insert("match".into(), Value::String(key.to_string()));
    }
    object.insert(
        "content".into(),
        turn.content
            .clone()
            .map(Value::String)
            .unwrap_or(Value::Null),
    );
    if !turn.tool_calls.is_empty() {
        let calls = turn.tool_calls.iter().map(ToolCall::to_wire).collect();
        object.insert("tool_calls".into(), Value::Array(calls));
    }
    Value::Object(object).to_string()
}

fn messages_since_last_assistant(messages: &[ChatMessage]) -> &[ChatMessage] {
    let start = messages
        .iter()
        .rposition(|message| message.role == Role::Assistant)
        .map_or(0, |position| position + 1);
    &messages[start..]
}

fn parse_line(line: usize, text: &str) -> Result<ReplayLine, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|error| format!("not valid JSON: {error}"))?;
    let object = value
        .as_object()
        .ok_or_else(|| format!("expected a JSON object, got {}", shorten(text, 80)))?;
    if let Some(unknown) = object
        .keys()
        .find(|key| !KNOWN_KEYS.contains(&key.as_str()))
    {
        return Err(format!(
            "unknown field {unknown:?} (known fields: {})",
            KNOWN_KEYS.join(", ")
        ));
    }
    if let Some(role) = object.get("role")
        && role.as_str() != Some("assistant")
    {
        return Err(format!("\"role\" must be \"assistant\", got {role}"));
    }
    if !object.contains_key("content") && !object.contains_key("tool_calls") {
        return Err("a line needs \"content\" and/or \"tool_calls\"".to_string());
    }
    let content = optional_string(object, "content")?;
    let tool_calls = match object.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(calls)) => calls
            .iter()
            .enumerate()
            .map(|(position, call)| {
                let mut call = ToolCall::from_wire(call)
                    .map_err(|error| format!("tool_calls[{position}]: {error}"))?;
                if call.id.is_empty() {
                    call.id = format!("call_l{line}_{position}");
                }
                Ok(call)
            })
            .collect::<Result<Vec<_>, String>>()?,
        Some(other) => return Err(format!("\"tool_calls\" must be an array, got {other}")),
    };
    let finish_reason = optional_string(object, "finish_reason")?
        .map(|reason| FinishReason::from_wire(&reason))
        .unwrap_or_else(|| FinishReason::inferred(!tool_calls.is_empty()));
    let usage = match object.get("usage") {
        None | Some(Value::Null) => None,
        Some(usage) => {
            Some(Usage::from_wire(usage).ok_or_else(|| "\"usage\" must be an object".to_string())?)
        }
    };
    Ok(ReplayLine {
        line,
        match_key: optional_string(object, "match")?.unwrap_or_default(),
        turn: AssistantTurn {
            content: content.filter(|text| !text.is_empty()),
            tool_calls,
            finish_reason,
            usage,
            reasoning: optional_string(object, "reasoning_content")?,
        },
        delay: optional_count(object, "delay_ms")?.map(Duration::from_millis),
        expect_tool_results: optional_count(object, "expect_tool_results")?
            .map(|count| count as usize),
        expect_contains: optional_string(object, "expect_contains")?,
    })
}

fn optional_string(object: &Map<String, Value>, key: &str) -> Result<Option<String>, String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(other) => Err(format!("{key:?} must be a string, got {other}")),
    }
}

fn optional_count(object: &Map<String, Value>, key: &str) -> Result<Option<u64>, String> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("{key:?} must be a non-negative integer, got {value}")),
    }
}

#[cfg(test)]
#[path = "replay_tests.rs"]
mod tests;
