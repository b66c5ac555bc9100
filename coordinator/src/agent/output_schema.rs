//! `delegate_task`'s `output_schema` (hermes 0.21): a JSON Schema the
//! child's final answer must satisfy. The child is told the contract up
//! front; when its answer does not validate it gets exactly one correction
//! turn carrying the validation errors; a second miss keeps its raw text,
//! marked unvalidated. Validation is `boon` (drafts 4 to 2020-12) with a
//! loader that refuses every URL: a schema from the model can name no file
//! or address for the coordinator to read.

use serde::Serialize;
use serde_json::Value;

/// What the check found, for the child's result entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SchemaCheck {
    pub valid: bool,
    pub errors: Vec<String>,
}

/// hermes' note on an entry whose answer never validated.
pub const UNVALIDATED_NOTE: &str = "The summary is the subagent's raw final text: it did not validate against output_schema even after one correction turn, so treat it as unvalidated and extract what you need from it.";

struct NoLoader;

impl boon::UrlLoader for NoLoader {
    fn load(&self, url: &str) -> Result<Value, Box<dyn std::error::Error>> {
        Err(format!("output_schema may not load {url}: only the schema itself is used").into())
    }
}

const LOCATION: &str = "urn:caduceus:output_schema";

/// A compiled schema.
pub struct OutputSchema {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
}

impl OutputSchema {
    /// Compiles `schema` (an object or a boolean); the error is the reason.
    pub fn compile(schema: &Value) -> Result<Self, String> {
        if !matches!(schema, Value::Object(_) | Value::Bool(_)) {
            return Err("it must be a JSON Schema object".to_owned());
        }
        let mut compiler = boon::Compiler::new();
        compiler.use_loader(Box::new(NoLoader));
        // Schemas without `$schema` are read as the current draft, always
        // the same one (boon's own default may move).
        compiler.set_default_draft(boon::Draft::V2020_12);
        let mut schemas = boon::Schemas::new();
        compiler
            .add_resource(LOCATION, schema.clone())
            .map_err(|e| format!("{e:#}"))?;
        let index = compiler
            .compile(LOCATION, &mut schemas)
            .map_err(|e| format!("{e:#}"))?;
        Ok(OutputSchema { schemas, index })
    }

    /// Checks an answer: the JSON value in it (tolerating prose or a code
    /// fence around it, as hermes does) against the schema.
    pub fn check(&self, answer: &str) -> SchemaCheck {
        let Some(value) = extract_json(answer) else {
            return SchemaCheck {
                valid: false,
                errors: vec!["the answer contains no JSON value".to_owned()],
            };
        };
        match self.schemas.validate(&value, self.index) {
            Ok(()) => SchemaCheck {
                valid: true,
                errors: Vec::new(),
            },
            Err(err) => {
                // The alternate form lists one "at '<path>': <reason>" per
                // line under a heading that names our internal location.
                let text = format!("{err:#}");
                let mut errors: Vec<String> = text
                    .lines()
                    .skip(1)
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned)
                    .collect();
                if errors.is_empty() {
                    errors.push(text.replace(LOCATION, "output_schema"));
                }
                SchemaCheck {
                    valid: false,
                    errors: bounded(errors),
                }
            }
        }
    }
}

/// The JSON value of an answer: the whole text, else the inside of its first
/// code fence, else the span from the first `{`/`[` to the last `}`/`]`.
pub fn extract_json(answer: &str) -> Option<Value> {
    let text = answer.trim();
    if let Ok(value) = serde_json::from_str(text) {
        return Some(value);
    }
    if let Some(start) = text.find("```") {
        let after = &text[start + 3..];
        // Skip the fence's language tag line.
        let body = after.split_once('\n').map_or(after, |(_, rest)| rest);
        if let Some(end) = body.find("```")
            && let Ok(value) = serde_json::from_str(body[..end].trim())
        {
            return Some(value);
        }
    }
    let start = text.find(['{', '['])?;
    let end = text.rfind(['}', ']'])?;
    (end > start)
        .then(|| serde_json::from_str(&text[start..=end]).ok())
        .flatten()
}

/// The contract in the child's system prompt.
pub fn contract(schema: &Value) -> String {
    let pretty = serde_json::to_string_pretty(schema).unwrap_or_else(|_| schema.to_string());
    format!(
        "\nOUTPUT CONTRACT:\nYour final answer must be ONLY a JSON value that validates against this JSON Schema: return ONLY the JSON value — no prose, no code fence.\n{pretty}"
    )
}

/// How the correction turn begins: a session's transcript holding one has
/// used its correction (read back when a restarted session resumes).
pub const CORRECTION_PREFIX: &str = "Your final answer does not satisfy the output contract (the JSON Schema in your instructions).";

/// At most this many validation errors are kept (a large answer against a
/// strict schema can fail in thousands of places)…
pub const MAX_ERRORS: usize = 20;
/// …each at most this many characters (an error may quote the value).
pub const MAX_ERROR_CHARS: usize = 500;

/// The one correction turn: the errors verbatim, the schema not re-pasted.
pub fn correction(errors: &[String]) -> String {
    let listed: Vec<String> = errors.iter().map(|e| format!("- {e}")).collect();
    format!(
        "{CORRECTION_PREFIX} Validation errors:\n{}\nReply again with ONLY the corrected JSON value — no prose, no code fence.",
        listed.join("\n")
    )
}

/// Whether a transcript shows the correction turn already given.
pub fn corrected_in(messages: &[caduceus_llm::ChatMessage]) -> bool {
    messages
        .iter()
        .any(|m| m.role == caduceus_llm::Role::User && m.text().starts_with(CORRECTION_PREFIX))
}

/// The errors as kept: the first [`MAX_ERRORS`], each cut to
/// [`MAX_ERROR_CHARS`], and a last line saying how many more there were.
fn bounded(errors: Vec<String>) -> Vec<String> {
    let total = errors.len();
    let mut kept: Vec<String> = errors
        .into_iter()
        .take(MAX_ERRORS)
        .map(|e| {
            if e.chars().count() > MAX_ERROR_CHARS {
                format!("{}…", e.chars().take(MAX_ERROR_CHARS).collect::<String>())
            } else {
                e
            }
        })
        .collect();
    if total > MAX_ERRORS {
        kept.push(format!("… and {} more error(s)", total - MAX_ERRORS));
    }
    kept
}

/// hermes-style note on a validated answer that had to be trimmed for the
/// parent's context: the summary no longer parses, the file holds it whole.
pub fn trimmed_note(full_path: Option<&str>) -> String {
    match full_path {
        Some(path) => format!(
            "The answer validated against output_schema but was longer than delegation.max_summary_chars, so the summary above is trimmed and is not valid JSON; the complete validated JSON is in {path} (read_file)."
        ),
        None => "The answer validated against output_schema but was longer than delegation.max_summary_chars, so the summary above is trimmed and is not valid JSON; the complete text could not be saved.".to_owned(),
    }
}

#[cfg(test)]
#[path = "output_schema_tests.rs"]
mod tests;
