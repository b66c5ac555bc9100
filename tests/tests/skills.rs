//! The skill tools end to end: `caduceus call` against a served coordinator
//! (the skills live in its `$CADUCEUS_HOME/skills`), and an agent session
//! whose recorded model creates a skill, views it and follows it with
//! `terminal`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_pass_by_value
)]

use caduceus_tests::Fleet;
use serde_json::{Value, json};

const SKILL: &str = "---\nname: greet\ndescription: Write a greeting file\nversion: 0.1.0\n---\n# Greet\n1. Run `echo hello > greeting.txt`\n";

#[test]
fn skills_through_caduceus_call() {
    let fleet = Fleet::new();
    let coordinator = fleet.serve(&[]);
    let call = |tool: &str, args: Value| fleet.call(&coordinator, tool, &args, "t1");

    let empty = call("skills_list", json!({}));
    assert_eq!(empty["success"], true, "{empty}");
    assert_eq!(empty["skills"], json!([]));

    let created = call(
        "skill_manage",
        json!({"action": "create", "name": "greet", "category": "basics", "content": SKILL}),
    );
    assert_eq!(created["message"], "Skill 'greet' created.", "{created}");
    let on_disk = fleet.home.path().join("skills/basics/greet/SKILL.md");
    assert_eq!(std::fs::read_to_string(&on_disk).unwrap(), SKILL);

    let listed = call("skills_list", json!({"category": "basics"}));
    assert_eq!(
        listed["skills"],
        json!([{"name": "greet", "description": "Write a greeting file", "category": "basics"}])
    );

    let patched = call(
        "skill_manage",
        json!({"action": "patch", "name": "greet", "old_string": "echo hello", "new_string": "echo hi"}),
    );
    assert_eq!(
        patched["message"],
        "Patched SKILL.md in skill 'greet' (1 replacement)."
    );
    let viewed = call("skill_view", json!({"name": "greet"}));
    assert!(
        viewed["content"]
            .as_str()
            .unwrap()
            .contains("echo hi > greeting.txt"),
        "{viewed}"
    );
    assert_eq!(viewed["version"], "0.1.0");

    let refused = call(
        "skill_manage",
        json!({"action": "create", "name": "Bad", "content": SKILL}),
    );
    assert_eq!(refused["success"], false);
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .starts_with("Invalid skill name 'Bad'."),
        "{refused}"
    );
    let escape = call(
        "skill_manage",
        json!({"action": "write_file", "name": "greet", "file_path": "../../x.md", "file_content": "x"}),
    );
    assert_eq!(escape["error"], "Path traversal ('..') is not allowed.");
    let missing = call("skill_view", json!({"name": "nope"}));
    assert_eq!(missing["error"], "Skill 'nope' not found.");
    assert_eq!(missing["available_skills"], json!(["greet"]));
}

fn tool_call(id: &str, name: &str, args: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
}

#[test]
fn a_session_creates_views_and_follows_a_skill() {
    let fleet = Fleet::new();
    let work = tempfile::tempdir().unwrap();
    let turns = [
        json!({"tool_calls": [tool_call("c1", "skill_manage", json!({"action": "create", "name": "greet", "content": SKILL}))]}),
        json!({"tool_calls": [tool_call("c2", "skill_view", json!({"name": "greet"}))], "expect_contains": "created"}),
        json!({"tool_calls": [tool_call("c3", "terminal", json!({"command": "echo hello > greeting.txt && cat greeting.txt"}))], "expect_contains": "echo hello > greeting.txt"}),
        json!({"content": "Followed the greet skill.", "expect_contains": "hello"}),
    ];
    let path = work.path().join("session.jsonl");
    std::fs::write(
        &path,
        turns.iter().map(|t| format!("{t}\n")).collect::<String>(),
    )
    .unwrap();
    let out = fleet
        .command()
        .current_dir(work.path())
        .env("CADUCEUS_LOG", "error")
        .args(["run", "--model", &format!("replay:{}", path.display())])
        .arg("Greet, the way the skill says")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "Followed the greet skill.\n"
    );
    assert!(fleet.home.path().join("skills/greet/SKILL.md").is_file());
    assert_eq!(
        std::fs::read_to_string(work.path().join("greeting.txt")).unwrap(),
        "hello\n"
    );
}
