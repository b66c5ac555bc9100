//! Syntax checks of structured files, in process.
//!
//! JSON, YAML and TOML that do not parse are refused before anything is
//! written (hermes' fail-closed gate); every write reports a `lint` object in
//! hermes' shape. Other languages are reported as skipped: hermes shells out
//! to `python -m py_compile`, `node --check` and friends inside the sandbox,
//! which a file-system API cannot do.

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

use crate::paths;

/// Extensions whose content must parse before it is written.
pub fn is_gated(extension: &str) -> bool {
    matches!(extension, ".json" | ".yaml" | ".yml" | ".toml")
}

/// `Err(message)` when `content` is not valid for `extension` (hermes'
/// message shapes: `JSONDecodeError: …`, `YAMLError: …`, `TOMLDecodeError: …`).
/// Unknown extensions pass.
pub fn check(extension: &str, content: &str) -> Result<(), String> {
    match extension {
        ".json" => check_json(content),
        ".yaml" | ".yml" => check_yaml(content),
        ".toml" => check_toml(content),
        _ => Ok(()),
    }
}

/// The `lint` object of a write or patch result for `path` now holding `content`.
pub fn report(path: &str, content: &str) -> Value {
    let extension = paths::extension(path);
    if !is_gated(&extension) {
        return json!({
            "status": "skipped",
            "message": format!("No linter for {extension} files"),
        });
    }
    match check(&extension, content) {
        Ok(()) => json!({"status": "ok", "output": ""}),
        Err(message) => json!({"status": "error", "output": message}),
    }
}

/// hermes' refusal text for content that fails the gate.
pub fn refusal(path: &str, extension: &str, message: &str) -> String {
    format!(
        "Refusing to write '{path}': candidate content fails {extension} syntax validation ({message}). The file was NOT created or modified. Fix the content and retry."
    )
}

fn check_json(content: &str) -> Result<(), String> {
    serde_json::from_str::<IgnoredAny>(content)
        .map(drop)
        .map_err(|error| {
            let location = format!(" at line {} column {}", error.line(), error.column());
            let text = error.to_string();
            let message = text.strip_suffix(&location).unwrap_or(&text);
            format!(
                "JSONDecodeError: {message} (line {}, column {})",
                error.line(),
                error.column()
            )
        })
}

/// Syntax only, every document of a stream: multi-document files and custom
/// tags (`!Ref`, `!vault`) are valid YAML even if no single loader takes them.
fn check_yaml(content: &str) -> Result<(), String> {
    for document in serde_yaml::Deserializer::from_str(content) {
        IgnoredAny::deserialize(document).map_err(|error| format!("YAMLError: {error}"))?;
    }
    Ok(())
}

fn check_toml(content: &str) -> Result<(), String> {
    toml::from_str::<toml::Table>(content)
        .map(drop)
        .map_err(|error| {
            let message = error.message().trim_end();
            match error.span() {
                Some(span) => {
                    let (line, column) = line_column(content, span.start);
                    format!("TOMLDecodeError: {message} (at line {line}, column {column})")
                }
                None => format!("TOMLDecodeError: {message}"),
            }
        })
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..crate::text::floor_boundary(text, offset)];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rsplit('\n')
        .next()
        .map_or(0, |last| last.chars().count())
        + 1;
    (line, column)
}

#[cfg(test)]
#[path = "lint_tests.rs"]
mod tests;
