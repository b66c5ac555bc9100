use super::*;

fn store() -> (tempfile::TempDir, SkillStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SkillStore::new(dir.path().join("skills"));
    (dir, store)
}

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

const SKILL: &str = "---\nname: deploy-app\ndescription: Deploy the app\nversion: 1.2.0\ntags: [ops]\nprerequisites:\n  commands: [docker]\n---\n# Deploy\n1. run make deploy\n";

#[test]
fn create_view_patch_delete_round_trip() {
    let (_d, store) = store();
    let created = store.manage(&args(
        json!({"action": "create", "name": "deploy-app", "category": "devops", "content": SKILL}),
    ));
    assert_eq!(created["success"], true, "{created}");
    assert_eq!(created["path"], "devops/deploy-app");
    assert_eq!(created["category"], "devops");

    let listed = store.list(None);
    assert_eq!(listed["count"], 1);
    assert_eq!(
        listed["skills"][0],
        json!({"name": "deploy-app", "description": "Deploy the app", "category": "devops"})
    );
    assert_eq!(listed["categories"], json!(["devops"]));
    assert_eq!(store.list(Some("other"))["count"], 0);

    let viewed = store.view("deploy-app", None);
    assert_eq!(viewed["success"], true);
    assert_eq!(viewed["content"], SKILL);
    assert_eq!(viewed["version"], "1.2.0");
    assert_eq!(viewed["tags"], json!(["ops"]));
    assert_eq!(viewed["required_commands"], json!(["docker"]));
    assert_eq!(viewed["path"], "devops/deploy-app/SKILL.md");
    assert_eq!(viewed["linked_files"], Value::Null);
    assert_eq!(store.view("devops/deploy-app", None)["name"], "deploy-app");

    let wrote = store.manage(&args(json!({"action": "write_file", "name": "deploy-app", "file_path": "references/api.md", "file_content": "API v2"})));
    assert_eq!(wrote["success"], true, "{wrote}");
    assert_eq!(
        store.view("deploy-app", None)["linked_files"],
        json!({"references": ["references/api.md"]})
    );
    assert_eq!(
        store.view("deploy-app", Some("references/api.md"))["content"],
        "API v2"
    );

    let patched = store.manage(&args(json!({"action": "patch", "name": "deploy-app", "old_string": "make deploy", "new_string": "make release"})));
    assert_eq!(
        patched["message"],
        "Patched SKILL.md in skill 'deploy-app' (1 replacement)."
    );
    assert!(
        store.view("deploy-app", None)["content"]
            .as_str()
            .unwrap()
            .contains("make release")
    );

    let broke = store.manage(&args(json!({"action": "patch", "name": "deploy-app", "old_string": "name: deploy-app\n", "new_string": ""})));
    assert_eq!(
        broke["error"],
        "Patch would break SKILL.md structure: Frontmatter must include 'name' field."
    );

    let removed = store.manage(&args(
        json!({"action": "remove_file", "name": "deploy-app", "file_path": "references/api.md"}),
    ));
    assert_eq!(
        removed["message"],
        "File 'references/api.md' removed from skill 'deploy-app'."
    );
    let deleted = store.manage(&args(json!({"action": "delete", "name": "deploy-app"})));
    assert_eq!(deleted["message"], "Skill 'deploy-app' deleted.");
    assert!(
        !store.root().join("devops").exists(),
        "the emptied category goes too"
    );
    assert_eq!(
        store.view("deploy-app", None)["error"],
        "Skill 'deploy-app' not found."
    );
}

#[test]
fn front_matter_rules_have_hermes_texts() {
    let (_d, store) = store();
    let create = |name: &str, content: &str| {
        store.manage(&args(
            json!({"action": "create", "name": name, "content": content}),
        ))["error"]
            .clone()
    };
    assert_eq!(
        create(&"a".repeat(65), SKILL),
        "Skill name exceeds 64 characters."
    );
    assert_eq!(
        create("Bad Name", SKILL),
        "Invalid skill name 'Bad Name'. Use lowercase letters, numbers, hyphens, dots, and underscores. Must start with a letter or digit."
    );
    assert_eq!(
        create("x", "no front matter"),
        "SKILL.md must start with YAML frontmatter (---). See existing skills for format."
    );
    assert_eq!(
        create("x", "---\nname: x\n"),
        "SKILL.md frontmatter is not closed. Ensure you have a closing '---' line."
    );
    assert_eq!(
        create("x", "---\ndescription: d\n---\nbody\n"),
        "Frontmatter must include 'name' field."
    );
    assert_eq!(
        create("x", "---\nname: x\n---\nbody\n"),
        "Frontmatter must include 'description' field."
    );
    let long = format!(
        "---\nname: x\ndescription: {}\n---\nbody\n",
        "d".repeat(1025)
    );
    assert_eq!(create("x", &long), "Description exceeds 1024 characters.");
    assert_eq!(
        create("x", "---\nname: x\ndescription: d\n---\n  \n"),
        "SKILL.md must have content after the frontmatter (instructions, procedures, etc.)."
    );
    assert_eq!(
        create("x", "---\n- a\n---\nbody\n"),
        "Frontmatter must be a YAML mapping (key: value pairs)."
    );
    let huge = format!("---\nname: x\ndescription: d\n---\n{}", "b".repeat(100_001));
    assert!(
        create("x", &huge)
            .as_str()
            .unwrap()
            .starts_with("SKILL.md content is 100,")
    );
    let bad_category = store.manage(&args(
        json!({"action": "create", "name": "x", "category": "a/b", "content": SKILL}),
    ));
    assert!(
        bad_category["error"]
            .as_str()
            .unwrap()
            .starts_with("Invalid category 'a/b'.")
    );
    assert!(
        !store.root().join("x").exists(),
        "a refused create writes nothing"
    );
}

#[test]
fn paths_cannot_leave_the_skill() {
    let (_d, store) = store();
    store.manage(&args(
        json!({"action": "create", "name": "s", "content": SKILL}),
    ));
    let write = |path: &str| {
        store.manage(&args(
            json!({"action": "write_file", "name": "s", "file_path": path, "file_content": "x"}),
        ))["error"]
            .clone()
    };
    assert_eq!(write("../evil.md"), "Path traversal ('..') is not allowed.");
    assert_eq!(
        write("/etc/passwd"),
        "Path traversal ('..') is not allowed."
    );
    assert_eq!(
        write("notes/x.md"),
        "File must be under one of: assets, references, scripts, templates. Got: 'notes/x.md'"
    );
    assert_eq!(
        write("references"),
        "Provide a file path, not just a directory. Example: 'references/myfile.md'"
    );
    let outside = _d.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, store.root().join("s").join("assets")).unwrap();
    assert!(
        write("assets/x.md")
            .as_str()
            .unwrap()
            .starts_with("Path escapes the skill directory")
    );
    assert!(!outside.join("x.md").exists());
    assert_eq!(
        store.view("s", Some("../../etc/passwd"))["error"],
        "Path traversal ('..') is not allowed."
    );
    let big = store.manage(&args(json!({"action": "write_file", "name": "s", "file_path": "assets/big.bin", "file_content": "x".repeat(MAX_SKILL_FILE_BYTES + 1)})));
    assert_eq!(
        big["error"],
        "File content is 1,048,577 bytes (limit: 1,048,576 bytes / 1 MiB). Consider splitting into smaller files."
    );
}

#[test]
fn not_found_and_duplicates_and_platforms() {
    let (_d, store) = store();
    assert!(
        store.list(None)["message"]
            .as_str()
            .unwrap()
            .starts_with("No skills found. Skills directory created at")
    );
    let missing = store.manage(&args(json!({"action": "write_file", "name": "nope", "file_path": "references/a.md", "file_content": "x"})));
    assert_eq!(
        missing["error"],
        "Skill 'nope' not found. Use skills_list() to see available skills. Create it first with action='create'."
    );
    store.manage(&args(
        json!({"action": "create", "name": "s", "content": SKILL}),
    ));
    let again = store.manage(&args(
        json!({"action": "create", "name": "s", "content": SKILL}),
    ));
    assert!(
        again["error"]
            .as_str()
            .unwrap()
            .starts_with("A skill named 's' already exists at ")
    );
    let mac = "---\nname: mac-only\ndescription: m\nplatforms: [macos]\n---\nbody\n";
    store.manage(&args(
        json!({"action": "create", "name": "mac-only", "content": mac}),
    ));
    let names: Vec<Value> = store.list(None)["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert!(!names.contains(&json!("mac-only")), "{names:?}");
    assert_eq!(
        store.view("mac-only", None)["error"],
        "Skill 'mac-only' is not supported on this platform."
    );
    let unknown = store.manage(&args(json!({"action": "rename", "name": "s"})));
    assert_eq!(
        unknown["error"],
        "Unknown action 'rename'. Use: create, edit, patch, delete, write_file, remove_file"
    );
    let no_match = store.manage(&args(
        json!({"action": "patch", "name": "s", "old_string": "zzz", "new_string": "y"}),
    ));
    assert!(
        no_match["error"]
            .as_str()
            .unwrap()
            .starts_with("Could not find a match for old_string")
    );
    assert!(
        no_match["file_preview"]
            .as_str()
            .unwrap()
            .starts_with("---")
    );
}
