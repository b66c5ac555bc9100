//! The tool list an MCP client sees: the fleet's worker tools, each with an
//! optional `environment` argument, and the three environment tools.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{Value, json};

pub const ENVIRONMENT_CREATE: &str = "environment_create";
pub const ENVIRONMENT_LIST: &str = "environment_list";
pub const ENVIRONMENT_RELEASE: &str = "environment_release";

/// The argument every fleet tool gains.
pub const ENVIRONMENT_ARG: &str = "environment";

/// Tools of the coordinator's agent loop: they act on a model conversation
/// (its todo list, a question to its user, a child agent) or on the state
/// caduceus keeps for its own sessions (their memory, their transcripts,
/// their skills, their scheduled jobs). An MCP client has its own conversation and state; offered
/// here they would only answer errors or let a client read and rewrite what
/// caduceus' sessions rely on.
const AGENT_LOOP_TOOLS: &[&str] = &[
    "todo",
    "clarify",
    "delegate_task",
    "memory",
    "session_search",
    "skills_list",
    "skill_view",
    "skill_manage",
    "cronjob",
];

/// MCP tools from the registry's OpenAI-shaped definitions.
pub fn fleet_tools(definitions: &[Value]) -> Vec<Tool> {
    definitions
        .iter()
        .filter_map(|definition| {
            let function = definition.get("function")?;
            let name = function.get("name")?.as_str()?;
            if AGENT_LOOP_TOOLS.contains(&name) || is_environment_tool(name) {
                return None;
            }
            let description = function
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let mut schema = match function.get("parameters") {
                Some(Value::Object(schema)) => schema.clone(),
                _ => JsonObject::new(),
            };
            with_environment_argument(&mut schema);
            Some(Tool::new(name.to_owned(), description, Arc::new(schema)))
        })
        .collect()
}

/// Whether `name` is one of the loop's tools, which MCP clients are not offered.
pub fn is_agent_loop_tool(name: &str) -> bool {
    AGENT_LOOP_TOOLS.contains(&name)
}

pub fn is_environment_tool(name: &str) -> bool {
    [ENVIRONMENT_CREATE, ENVIRONMENT_LIST, ENVIRONMENT_RELEASE].contains(&name)
}

fn with_environment_argument(schema: &mut JsonObject) {
    schema
        .entry("type")
        .or_insert_with(|| Value::String("object".to_owned()));
    let properties = schema
        .entry("properties")
        .or_insert_with(|| Value::Object(JsonObject::new()));
    if let Value::Object(properties) = properties {
        properties.insert(
            ENVIRONMENT_ARG.to_owned(),
            json!({
                "type": "string",
                "description": "Environment to run in: an id from environment_create. Omitted: this session's default environment. Calls in different environments run in parallel; calls in one environment run one after another in one shell (its working directory, variables and files persist between them).",
            }),
        );
    }
}

fn object(schema: Value) -> Arc<JsonObject> {
    match schema {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// `environment_create`, `environment_list`, `environment_release`.
pub fn environment_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            ENVIRONMENT_CREATE,
            "Create a new environment (a sandbox on one of the fleet's workers) and return its id. Pass the id as `environment` to any other tool to run there. Each environment keeps its own shell, working directory, files and background processes; different environments may sit on different hosts and run calls in parallel.",
            object(json!({
                "type": "object",
                "properties": {
                    "backend": {
                        "type": "string",
                        "description": "Backend of the sandbox (local, docker, ssh, singularity, ...). Default: the fleet's configured backend."
                    },
                    "labels": {
                        "type": "object",
                        "additionalProperties": {"type": "string"},
                        "description": "Worker labels the environment needs, e.g. {\"gpu\": \"true\"}."
                    }
                }
            })),
        ),
        Tool::new(
            ENVIRONMENT_LIST,
            "List this session's environments: id, worker, backend, working directory, running calls and background processes.",
            object(json!({"type": "object", "properties": {}})),
        )
        .with_annotations(ToolAnnotations::new().read_only(true)),
        Tool::new(
            ENVIRONMENT_RELEASE,
            "Release an environment: its processes end and its sandbox is removed. Its id is unknown afterwards.",
            object(json!({
                "type": "object",
                "properties": {
                    "environment": {"type": "string", "description": "The id environment_create returned."}
                },
                "required": ["environment"]
            })),
        ),
    ]
}

#[cfg(test)]
#[path = "tools_tests.rs"]
mod tests;
