use super::*;

const SKILL: &str =
    "---\nname: greet\ndescription: Write a greeting\n---\n# Greet\nRun scripts/greet.sh\n";

fn manage(store: &SkillStore, value: Value) -> Value {
    let Value::Object(args) = value else {
        panic!("not an object")
    };
    let result = store.manage(&args);
    assert_eq!(result["success"], true, "{result}");
    result
}

/// A store with the skill `basics/greet` (SKILL.md and one script).
fn setup() -> (tempfile::TempDir, Arc<SkillStore>, SkillSync) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SkillStore::new(dir.path().join("skills")));
    manage(
        &store,
        json!({"action": "create", "name": "greet", "category": "basics", "content": SKILL}),
    );
    manage(
        &store,
        json!({"action": "write_file", "name": "greet", "file_path": "scripts/greet.sh", "file_content": "echo hello\n"}),
    );
    let sync = SkillSync::new(store.clone());
    (dir, store, sync)
}

/// The paths a plan writes and removes, in order.
fn sent(plan: &SyncPlan) -> (Vec<String>, Vec<String>) {
    let mut writes = Vec::new();
    let mut removes = Vec::new();
    for batch in &plan.batches {
        for w in batch["write"].as_array().unwrap() {
            writes.push(w["path"].as_str().unwrap().to_owned());
        }
        for r in batch["remove"].as_array().unwrap() {
            removes.push(r.as_str().unwrap().to_owned());
        }
    }
    (writes, removes)
}

fn place(worker: &str, epoch: u64) -> Option<Place> {
    Some((worker.to_owned(), epoch))
}

#[test]
fn a_used_skill_is_copied_whole_once_then_only_what_changed() {
    let (_d, store, sync) = setup();
    assert!(!sync.tracking());
    assert!(sync.plan("t1", place("w1", 1).as_ref()).is_none());
    sync.use_skill("t1", "basics/greet");
    let first = sync.plan("t1", None).unwrap();
    assert_eq!(
        sent(&first),
        (
            vec![
                "basics/greet/SKILL.md".to_owned(),
                "basics/greet/scripts/greet.sh".to_owned()
            ],
            vec![]
        )
    );
    let content = &first.batches[0]["write"][1]["content_base64"];
    assert_eq!(content, "ZWNobyBoZWxsbwo=");
    sync.commit(
        "t1",
        first,
        place("w1", 1),
        Some("/tmp/caduceus-skills".into()),
    );
    assert_eq!(sync.root("t1").as_deref(), Some("/tmp/caduceus-skills"));
    assert!(!sync.stale("t1", place("w1", 1).as_ref()));
    assert!(sync.plan("t1", place("w1", 1).as_ref()).unwrap().is_empty());

    // A patch of SKILL.md: stale, and only SKILL.md goes again.
    manage(
        &store,
        json!({"action": "patch", "name": "greet", "old_string": "Run scripts", "new_string": "Then run scripts"}),
    );
    assert!(sync.stale("t1", place("w1", 1).as_ref()));
    let patched = sync.plan("t1", place("w1", 1).as_ref()).unwrap();
    assert_eq!(
        sent(&patched),
        (vec!["basics/greet/SKILL.md".to_owned()], vec![])
    );
    sync.commit("t1", patched, place("w1", 1), None);
    assert!(!sync.stale("t1", place("w1", 1).as_ref()));

    // A removed file is removed in the environment.
    manage(
        &store,
        json!({"action": "remove_file", "name": "greet", "file_path": "scripts/greet.sh"}),
    );
    let removed = sync.plan("t1", place("w1", 1).as_ref()).unwrap();
    assert_eq!(
        sent(&removed),
        (vec![], vec!["basics/greet/scripts/greet.sh".to_owned()])
    );
}

#[test]
fn another_placement_or_a_reset_environment_gets_everything_again() {
    let (_d, _store, sync) = setup();
    sync.use_skill("t1", "basics/greet");
    let plan = sync.plan("t1", place("w1", 1).as_ref()).unwrap();
    sync.commit(
        "t1",
        plan,
        place("w1", 1),
        Some("/tmp/caduceus-skills".into()),
    );
    // Moved to w2: stale, and both files are sent.
    assert!(sync.stale("t1", place("w2", 2).as_ref()));
    assert_eq!(
        sent(&sync.plan("t1", place("w2", 2).as_ref()).unwrap())
            .0
            .len(),
        2
    );
    // Recreated in place: the same.
    sync.invalidate("t1");
    assert!(sync.stale("t1", place("w1", 1).as_ref()));
    assert_eq!(
        sent(&sync.plan("t1", place("w1", 1).as_ref()).unwrap())
            .0
            .len(),
        2
    );
}

#[test]
fn a_deleted_skill_is_removed_and_no_longer_used() {
    let (_d, store, sync) = setup();
    sync.use_skill("t1", "basics/greet");
    let plan = sync.plan("t1", None).unwrap();
    sync.commit("t1", plan, None, None);
    manage(&store, json!({"action": "delete", "name": "greet"}));
    let plan = sync.plan("t1", None).unwrap();
    assert_eq!(sent(&plan).1.len(), 2);
    sync.commit("t1", plan, None, None);
    // Nothing is left to send, even after other changes.
    manage(
        &store,
        json!({"action": "create", "name": "other", "content": SKILL.replace("greet", "other")}),
    );
    assert!(sync.plan("t1", None).unwrap().is_empty());
}

#[test]
fn an_ended_task_is_forgotten_with_its_other_backends() {
    let (_d, _store, sync) = setup();
    sync.use_skill("t1", "basics/greet");
    sync.use_skill("t1@docker", "basics/greet");
    sync.use_skill("t10", "basics/greet");
    sync.forget("t1");
    assert!(sync.plan("t1", None).is_none());
    assert!(sync.plan("t1@docker", None).is_none());
    assert!(sync.plan("t10", None).is_some());
    sync.forget("t10");
    assert!(!sync.tracking());
}

#[test]
fn large_skills_go_in_several_commands() {
    let writes = vec![
        ("a".to_owned(), vec![b'a'; BATCH_BYTES - 10]),
        ("b".to_owned(), vec![b'b'; 20]),
        ("c".to_owned(), vec![b'c'; 5]),
    ];
    let batches = batches(writes, &["gone".to_owned()]);
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[0]["write"].as_array().unwrap().len(), 1);
    assert_eq!(batches[1]["write"].as_array().unwrap().len(), 2);
    assert_eq!(batches[1]["remove"], json!(["gone"]));
}
