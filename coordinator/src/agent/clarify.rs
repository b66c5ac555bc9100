//! `clarify`: a question for the person behind the session (hermes
//! `tools/clarify_tool.py`). The question travels on the session's event
//! stream (`clarify` event) and the answer comes back through
//! `AnswerClarify`. Never runs in parallel with other calls.

use serde::Serialize;
use serde_json::{Map, Value};

use caduceus_common::result::ToolReply;

/// Choices the model may offer; the UI adds an "Other" option.
pub const MAX_CHOICES: usize = 4;

/// hermes' text when no one can answer.
pub const NOT_AVAILABLE: &str = "Clarify tool is not available in this execution context.";

/// A validated question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    pub question: String,
    /// `None`: open-ended.
    pub choices: Option<Vec<String>>,
}

/// Validates the arguments; the error is the result the model reads.
pub fn parse(args: &Map<String, Value>) -> Result<Question, ToolReply> {
    let question = args
        .get("question")
        .and_then(Value::as_str)
        .map(str::trim)
        .unwrap_or_default();
    if question.is_empty() {
        return Err(ToolReply::error("Question text is required."));
    }
    let choices = match args.get("choices") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => {
            let mut flat: Vec<String> = items
                .iter()
                .map(flatten_choice)
                .filter(|c| !c.is_empty())
                .collect();
            flat.truncate(MAX_CHOICES);
            (!flat.is_empty()).then_some(flat)
        }
        Some(_) => return Err(ToolReply::error("choices must be a list of strings.")),
    };
    Ok(Question {
        question: question.to_owned(),
        choices,
    })
}

/// The display text of one choice. Models sometimes send objects
/// (`{"description": …}`); their user-facing field is used, never the raw JSON.
fn flatten_choice(choice: &Value) -> String {
    match choice {
        Value::Null => String::new(),
        Value::String(s) => s.trim().to_owned(),
        Value::Object(object) => ["label", "description", "text", "title"]
            .iter()
            .find_map(|key| {
                object
                    .get(*key)
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_default()
            .to_owned(),
        Value::Array(items) => items
            .iter()
            .map(flatten_choice)
            .collect::<Vec<_>>()
            .join(" ")
            .trim()
            .to_owned(),
        Value::Bool(true) => "True".to_owned(),
        Value::Bool(false) => "False".to_owned(),
        Value::Number(n) => n.to_string(),
    }
}

#[derive(Serialize)]
struct Answered<'a> {
    question: &'a str,
    choices_offered: &'a Option<Vec<String>>,
    user_response: &'a str,
}

/// The result once the user answered.
pub fn answered(question: &Question, answer: &str) -> ToolReply {
    ToolReply::json(&Answered {
        question: &question.question,
        choices_offered: &question.choices,
        user_response: answer.trim(),
    })
}

/// The result when the question could not be put to anyone.
pub fn unavailable() -> ToolReply {
    ToolReply::error(NOT_AVAILABLE)
}

/// The result when the user did not answer in time.
pub fn timed_out(seconds: u64) -> ToolReply {
    ToolReply::error(format!(
        "Failed to get user input: no answer within {seconds}s"
    ))
}

#[cfg(test)]
#[path = "clarify_tests.rs"]
mod tests;
