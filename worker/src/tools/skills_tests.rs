use serde_json::{Value, json};

use super::*;
use crate::env::{test_env, test_manager};

fn args(value: Value) -> Map<String, Value> {
    let Value::Object(map) = value else {
        panic!("not an object")
    };
    map
}

#[tokio::test]
async fn files_are_written_under_the_environments_temp_dir_and_removed() {
    let (manager, _) = test_manager();
    let env = test_env(&manager, "task").await;
    let reply = run(
        &env,
        &args(json!({"write": [
            {"path": "basics/greet/SKILL.md", "content_base64": "IyBHcmVldAo="},
            {"path": "basics/greet/scripts/greet.sh", "content_base64": "ZWNobyBoaQo="},
        ], "remove": ["basics/greet/old.md"]})),
    )
    .await;
    let answer: Value = serde_json::from_str(&reply.body).unwrap();
    let root = root(&env.sandbox.temp_dir());
    assert_eq!(
        answer,
        json!({"root": root, "written": 2, "removed": 1}),
        "{}",
        reply.body
    );
    let script = std::path::Path::new(&root).join("basics/greet/scripts/greet.sh");
    assert_eq!(std::fs::read_to_string(&script).unwrap(), "echo hi\n");

    let reply = run(
        &env,
        &args(json!({"write": [], "remove": ["basics/greet/scripts/greet.sh"]})),
    )
    .await;
    assert!(reply.body.contains("\"removed\": 1"), "{}", reply.body);
    assert!(!script.exists());
}

#[tokio::test]
async fn paths_out_of_the_root_and_bad_content_are_refused() {
    let (manager, _) = test_manager();
    let env = test_env(&manager, "task").await;
    for path in ["../escape", "/etc/passwd", "a/../../b", ""] {
        let reply = run(
            &env,
            &args(json!({"write": [{"path": path, "content_base64": "eA=="}]})),
        )
        .await;
        assert_eq!(
            reply.body,
            caduceus_common::result::tool_error(format!("skill_sync: refused path '{path}'")),
        );
    }
    let reply = run(
        &env,
        &args(json!({"write": [{"path": "a/b", "content_base64": "%%%"}]})),
    )
    .await;
    assert!(reply.body.contains("is not base64"), "{}", reply.body);
}
