#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::*;

fn definition(name: &str, parameters: &Value) -> Value {
    json!({"type": "function", "function": {"name": name, "description": format!("{name} does things"), "parameters": parameters}})
}

#[test]
fn every_fleet_tool_gains_an_optional_environment_argument() {
    let tools = fleet_tools(&[definition(
        "terminal",
        &json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
    )]);
    assert_eq!(tools.len(), 1);
    let schema = &tools[0].input_schema;
    assert_eq!(schema["properties"]["environment"]["type"], "string");
    assert_eq!(schema["properties"]["command"]["type"], "string");
    assert_eq!(
        schema["required"],
        json!(["command"]),
        "environment stays optional"
    );
}

#[test]
fn a_tool_without_parameters_still_gets_an_object_schema() {
    let tools = fleet_tools(&[json!({"function": {"name": "noargs"}})]);
    assert_eq!(tools[0].input_schema["type"], "object");
    assert!(tools[0].input_schema["properties"]["environment"].is_object());
}

#[test]
fn agent_loop_tools_are_not_offered() {
    let tools = fleet_tools(&[
        definition("todo", &json!({})),
        definition("clarify", &json!({})),
        definition("delegate_task", &json!({})),
        definition("memory", &json!({})),
        definition("session_search", &json!({})),
        definition("read_file", &json!({})),
    ]);
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["read_file"]);
}

#[test]
fn the_environment_tools_cannot_be_shadowed_by_a_registry_tool() {
    let tools = fleet_tools(&[definition(ENVIRONMENT_CREATE, &json!({}))]);
    assert!(tools.is_empty());
}
