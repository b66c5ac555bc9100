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

const SCRIPTED: &str = "---\nname: greet\ndescription: Greet from a script\nversion: 0.1.0\n---\n# Greet\nRun `bash scripts/greet.sh` from the skill's directory.\n";

/// Created on the coordinator, viewed in a task: the skill's files are in
/// the task's environment on the worker (another process, another machine
/// for SSH and Docker), the script runs there, a patch shows there before
/// the next call and the unchanged script is not copied again.
async fn a_skill_follows_into_the_environment_on(
    backend: caduceus_tests::conformance::BackendUnderTest,
) {
    let stand = caduceus_tests::conformance::Stand::start(backend).await;
    let mut control = stand.control().await;
    let task = "skill-env";
    let created = control
        .call(
            task,
            "skill_manage",
            &json!({"action": "create", "name": "greet", "category": "basics", "content": SCRIPTED}),
        )
        .await;
    assert_eq!(created["success"], true, "{created}");
    let script = control
        .call(
            task,
            "skill_manage",
            &json!({"action": "write_file", "name": "greet", "file_path": "scripts/greet.sh", "file_content": "echo hello from the skill\n"}),
        )
        .await;
    assert_eq!(script["success"], true, "{script}");

    let viewed = control
        .call(task, "skill_view", &json!({"name": "greet"}))
        .await;
    assert_eq!(viewed["success"], true, "{viewed}");
    assert!(viewed.get("skill_files_unavailable").is_none(), "{viewed}");
    let dir = viewed["skill_dir"].as_str().unwrap().to_owned();
    assert!(
        dir.ends_with("/caduceus-skills/basics/greet"),
        "skill_dir is not the environment's copy: {viewed}"
    );
    assert_eq!(
        viewed["linked_files"],
        json!({"scripts": ["scripts/greet.sh"]})
    );

    // Used: the skill's own script runs inside the environment.
    let ran = control
        .terminal(
            task,
            &format!("cd {dir} && bash scripts/greet.sh && stat -c %Y.%i scripts/greet.sh"),
            None,
        )
        .await;
    let out = ran["output"].as_str().unwrap_or_default().to_owned();
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("hello from the skill"), "{ran}");
    let script_stamp = lines.next().unwrap_or_default().to_owned();
    assert!(!script_stamp.is_empty(), "{ran}");

    // Patched on the coordinator: the next call sees it, the script is
    // the same file as before (not written again).
    let patched = control
        .call(
            task,
            "skill_manage",
            &json!({"action": "patch", "name": "greet", "old_string": "Run `bash", "new_string": "Then run `bash"}),
        )
        .await;
    assert_eq!(
        patched["message"],
        "Patched SKILL.md in skill 'greet' (1 replacement)."
    );
    let after = control
        .terminal(
            task,
            &format!("grep -c 'Then run' {dir}/SKILL.md; stat -c %Y.%i {dir}/scripts/greet.sh"),
            None,
        )
        .await;
    assert_eq!(
        after["output"],
        format!("1\n{script_stamp}").as_str(),
        "{after}"
    );

    // A removed file goes from the environment too.
    let removed = control
        .call(
            task,
            "skill_manage",
            &json!({"action": "remove_file", "name": "greet", "file_path": "scripts/greet.sh"}),
        )
        .await;
    assert_eq!(removed["success"], true, "{removed}");
    let gone = control
        .terminal(
            task,
            &format!("ls {dir}/scripts 2>&1 | wc -l; ls {dir}"),
            None,
        )
        .await;
    assert_eq!(gone["output"], "0\nSKILL.md\nscripts", "{gone}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_skill_follows_into_a_local_environment() {
    a_skill_follows_into_the_environment_on(caduceus_tests::conformance::BackendUnderTest::local())
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_skill_follows_into_a_docker_environment_on_another_worker() {
    let Some(backend) = caduceus_tests::conformance::BackendUnderTest::docker().ready_or_skip()
    else {
        return;
    };
    a_skill_follows_into_the_environment_on(backend).await;
}

#[test]
fn without_a_worker_the_view_says_the_files_stayed_on_the_coordinator() {
    let fleet = Fleet::new();
    let coordinator = fleet.serve(&[]);
    let created = fleet.call(
        &coordinator,
        "skill_manage",
        &json!({"action": "create", "name": "greet", "content": SKILL}),
        "t1",
    );
    assert_eq!(created["success"], true, "{created}");
    let viewed = fleet.call(&coordinator, "skill_view", &json!({"name": "greet"}), "t1");
    assert_eq!(viewed["success"], true, "{viewed}");
    assert_eq!(
        viewed["skill_files_unavailable"],
        "No attached worker offers the 'local' backend, so the skill's files were not copied into an environment."
    );
    assert_eq!(
        viewed["skill_dir"],
        fleet.home.path().join("skills/greet").display().to_string()
    );
}
