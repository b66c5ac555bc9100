//! The `execute_code` definition (hermes `build_execute_code_schema`): its
//! description lists only the sandbox tools the caller may use, so a model
//! never tries a function its script does not have.

use std::sync::Arc;

use serde_json::{Value, json};

use caduceus_common::execute_code::SANDBOX_TOOLS;

use super::{DefinitionContext, SchemaOverrideFn};

pub const NAME: &str = "execute_code";

/// hermes' `_TOOL_DOC_LINES`, in display order.
const DOC_LINES: &[(&str, &str)] = &[
    (
        "web_search",
        "  web_search(query: str, limit: int = 5) -> dict\n    Returns {\"data\": {\"web\": [{\"url\", \"title\", \"description\"}, ...]}}",
    ),
    (
        "web_extract",
        "  web_extract(urls: list[str], char_limit: int = None) -> dict\n    Returns {\"results\": [{\"url\", \"title\", \"content\", \"error\"}, ...]} where content is markdown.",
    ),
    (
        "read_file",
        "  read_file(path: str, offset: int = 1, limit: int = 2000) -> dict\n    Lines are 1-indexed. Returns {\"content\": \"...\", \"total_lines\": N}",
    ),
    (
        "write_file",
        "  write_file(path: str, content: str) -> dict\n    Always overwrites the entire file.",
    ),
    (
        "search_files",
        "  search_files(pattern: str, target=\"content\", path=\".\", file_glob=None, limit=50) -> dict\n    target: \"content\" (search inside files) or \"files\" (find files by name). Returns {\"matches\": [...]}",
    ),
    (
        "patch",
        "  patch(path: str, old_string: str, new_string: str, replace_all: bool = False) -> dict\n    Replaces old_string with new_string in the file.",
    ),
    (
        "terminal",
        "  terminal(command: str, timeout=None, workdir=None) -> dict\n    Foreground only (no background/pty). Returns {\"output\": \"...\", \"exit_code\": N}",
    ),
];

/// The sandbox tools among `names`, in hermes' order.
pub fn sandbox_tools_among<'a>(names: impl Fn(&str) -> bool + 'a) -> Vec<String> {
    SANDBOX_TOOLS
        .iter()
        .filter(|t| names(t))
        .map(|t| (*t).to_owned())
        .collect()
}

/// `description` and `parameters` of `execute_code` offering `tools`.
pub fn schema(tools: &[String]) -> Value {
    let has = |name: &str| tools.iter().any(|t| t == name);
    let tool_lines = DOC_LINES
        .iter()
        .filter(|(name, _)| has(name))
        .map(|(_, doc)| *doc)
        .collect::<Vec<_>>()
        .join("\n");
    let mut examples: Vec<String> = ["web_search", "terminal"]
        .into_iter()
        .filter(|n| has(n))
        .map(str::to_owned)
        .collect();
    if examples.is_empty() {
        let mut sorted = tools.to_vec();
        sorted.sort();
        examples = sorted.into_iter().take(2).collect();
    }
    let import = if examples.is_empty() {
        "...".to_owned()
    } else {
        format!("{}, ...", examples.join(", "))
    };
    // Named only when the caller has it (the description never names a
    // tool the model lacks).
    let same_as = if has("terminal") {
        "terminal()"
    } else {
        "the other tools"
    };
    let parse_what = if has("terminal") {
        "terminal()"
    } else {
        "tool"
    };
    let description = format!(
        "Run a Python script that can call tools programmatically. Use when you need 3+ tool calls with logic between them: filtering/reducing large outputs before they enter context, branching, or loops (N pages/files, retry on failure). Use normal tool calls for single calls, results you must reason over in full, or anything needing user interaction.\n\n\
Each call runs a fresh script inside the task's environment (the same files and working directory as {same_as}); variables do not survive between execute_code calls.\n\n\
Available via `from hermes_tools import ...` (or `caduceus_tools`, the same module):\n\n\
{tool_lines}\n\n\
Limits: 5-minute timeout, max 50 tool calls per call. Stdout over 50KB shows head/tail inline; the FULL text is auto-saved to a file whose path rides in the result.\n\n\
Scripts run in the session's working directory with the environment's python3 (stdlib; check `import x` before relying on other packages).\n\n\
Helpers require imports: `from hermes_tools import json_parse, shell_quote, retry`. json_parse(text) — tolerant json.loads for {parse_what} output; shell_quote(s) — shlex.quote for dynamic shell args; retry(fn, max_attempts=3, delay=2) — exponential backoff."
    );
    json!({
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": format!("Python code to execute. Import tools with `from hermes_tools import {import}` and print your final result to stdout."),
                },
            },
            "required": ["code"],
        },
    })
}

/// The live schema of the registry entry: `description` and `parameters`
/// for the sandbox tools the definitions request offers.
pub fn dynamic_schema() -> SchemaOverrideFn {
    Arc::new(|context: &DefinitionContext<'_>| {
        match schema(&sandbox_tools_among(|t| context.offers(t))) {
            Value::Object(fields) => Some(fields),
            _ => None,
        }
    })
}
