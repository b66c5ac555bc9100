use super::*;

fn plugin(root: &Path, key: &str, manifest: &str) {
    let dir = root.join(key);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.yaml"), manifest).unwrap();
}

fn settings(yaml: &str) -> PluginsSettings {
    PluginsSettings::from_yaml(Some(&serde_yaml::from_str(yaml).unwrap())).unwrap()
}

const GREET: &str = "name: greet\nversion: 1.2\ndescription: Greets\ntools:\n  - name: greet\n    description: Says hello\n    command: ./greet.sh --loud\n    timeout: 5\n    parameters:\n      type: object\n      properties:\n        who: {type: string}\n      required: [who]\n";

#[test]
fn plugins_are_opt_in_and_disabled_wins() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join("plugins");
    plugin(&root, "greet", GREET);
    plugin(&root, "other", "name: other\n");
    plugin(&root, "broken", "tools: [{name: 'bad name!'}]\n");
    let dirs = plugin_dirs(home.path(), &PluginsSettings::default());
    let none = discover(&dirs, &PluginsSettings::default());
    assert!(none.iter().all(|p| p.state != State::Enabled), "{none:?}");

    let found = discover(
        &dirs,
        &settings("enabled: [greet, other, broken]\ndisabled: [other]\n"),
    );
    let state = |key: &str| found.iter().find(|p| p.key == key).unwrap().state.clone();
    assert_eq!(state("greet"), State::Enabled);
    assert_eq!(state("other"), State::Disabled);
    assert!(matches!(state("broken"), State::Invalid(_)));
}

#[test]
fn an_enabled_plugin_gives_a_registry_entry_of_its_own_toolset() {
    let home = tempfile::tempdir().unwrap();
    plugin(&home.path().join("plugins"), "greet", GREET);
    let s = settings("enabled: [greet]\nentries: {greet: {allow_tool_override: true}}\n");
    let found = discover(&plugin_dirs(home.path(), &s), &s);
    let loaded = load(&found, &s, Vec::new());
    assert_eq!(loaded.tools.len(), 1);
    let entry = &loaded.tools[0].entry;
    assert_eq!(entry.name, "greet");
    assert_eq!(entry.toolset, "plugin-greet");
    assert_eq!(entry.owner, Owner::Plugin("greet".into()));
    assert_eq!(entry.required(), vec!["who"]);
    assert_eq!(loaded.override_policy, vec![("greet".to_owned(), true)]);
    let row = describe(&found[0]);
    assert_eq!(row["version"], "1.2");
    assert_eq!(row["tools"], json!(["greet"]));
}

#[test]
fn a_worker_plugin_is_listed_but_not_loaded() {
    let home = tempfile::tempdir().unwrap();
    plugin(
        &home.path().join("plugins"),
        "gpu",
        "runs_on: {workers: {labels: {gpu: 'true'}}}\n",
    );
    let s = settings("enabled: [gpu]\n");
    let found = discover(&plugin_dirs(home.path(), &s), &s);
    assert!(matches!(found[0].state, State::Unsupported(_)));
}

#[test]
fn unknown_settings_are_refused() {
    assert!(
        PluginsSettings::from_yaml(Some(&serde_yaml::from_str("enable: [x]").unwrap())).is_err()
    );
}
