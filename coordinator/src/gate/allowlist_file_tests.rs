use std::os::unix::fs::PermissionsExt;

use super::*;

fn file_with(text: Option<&str>) -> (tempfile::TempDir, AllowlistFile) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    if let Some(text) = text {
        std::fs::write(&path, text).unwrap();
    }
    (dir, AllowlistFile::new(path))
}

fn read(file: &AllowlistFile) -> String {
    std::fs::read_to_string(file.path()).unwrap()
}

#[test]
fn a_missing_file_is_created_with_the_list() {
    let (_dir, file) = file_with(None);
    assert!(file.append("recursive delete").unwrap());
    assert_eq!(
        read(&file),
        "command_allowlist:\n  - \"recursive delete\"\n"
    );
    assert_eq!(file.read_entries().unwrap(), vec!["recursive delete"]);
}

#[test]
fn other_sections_and_comments_survive() {
    let text = "# my coordinator\nterminal:\n  backend: local  # on this host\n  timeout: 30\napprovals:\n  mode: ask\n";
    let (_dir, file) = file_with(Some(text));
    assert!(
        file.append("git force push (rewrites remote history)")
            .unwrap()
    );
    assert_eq!(
        read(&file),
        format!("{text}command_allowlist:\n  - \"git force push (rewrites remote history)\"\n")
    );
}

#[test]
fn an_existing_block_list_is_extended_in_place_of_the_old_one() {
    let text = "command_allowlist:\n- podman *\n\n  # indented comment\n- \"recursive delete\"\n\nterminal:\n  timeout: 30 # keep\n";
    let (_dir, file) = file_with(Some(text));
    assert!(file.append("SQL DROP").unwrap());
    let new = read(&file);
    assert_eq!(
        new,
        "\nterminal:\n  timeout: 30 # keep\ncommand_allowlist:\n  - \"podman *\"\n  - \"recursive delete\"\n  - \"SQL DROP\"\n"
    );
    assert_eq!(
        file.read_entries().unwrap(),
        vec!["podman *", "recursive delete", "SQL DROP"]
    );
}

#[test]
fn a_flow_list_and_an_indented_list_are_read() {
    let (_dir, file) = file_with(Some("command_allowlist: [\"ls *\"]\nllm:\n  model: x\n"));
    assert!(file.append("SQL DROP").unwrap());
    assert_eq!(file.read_entries().unwrap(), vec!["ls *", "SQL DROP"]);
    assert!(read(&file).starts_with("llm:\n  model: x\n"));

    let (_dir, file) = file_with(Some("command_allowlist:\n    - a\n    - b\nllm: {}\n"));
    assert!(file.append("c").unwrap());
    assert_eq!(file.read_entries().unwrap(), vec!["a", "b", "c"]);
}

#[test]
fn a_listed_entry_is_not_added_twice() {
    let text = "command_allowlist:\n  - \"recursive delete\"\n";
    let (_dir, file) = file_with(Some(text));
    assert!(!file.append("recursive delete").unwrap());
    assert_eq!(read(&file), text);
}

#[test]
fn an_awkward_layout_is_rewritten_whole_without_losing_values() {
    // A quoted key defeats the textual edit; the file is re-serialized.
    let (_dir, file) = file_with(Some(
        "\"command_allowlist\": [a]\nterminal: {timeout: 30}\n",
    ));
    assert!(file.append("b").unwrap());
    assert_eq!(file.read_entries().unwrap(), vec!["a", "b"]);
    let value: serde_yaml::Value = serde_yaml::from_str(&read(&file)).unwrap();
    assert_eq!(value["terminal"]["timeout"], serde_yaml::Value::from(30));
}

#[test]
fn a_list_of_something_else_is_an_error_and_the_file_is_untouched() {
    let text = "command_allowlist: yes please\n";
    let (_dir, file) = file_with(Some(text));
    let err = file.append("x").unwrap_err();
    assert!(
        err.to_string().contains("must be a list of strings"),
        "{err}"
    );
    assert_eq!(read(&file), text);

    let (_dir, file) = file_with(Some("a: [unclosed\n"));
    assert!(matches!(
        file.append("x"),
        Err(AllowlistFileError::Parse { .. })
    ));
}

#[test]
fn the_file_mode_is_kept() {
    let (_dir, file) = file_with(Some("token: secret\n"));
    std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
    file.append("x").unwrap();
    let mode = std::fs::metadata(file.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(read(&file).starts_with("token: secret\n"));
}
