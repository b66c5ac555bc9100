use std::collections::BTreeSet;

use super::repair_tool_name;

fn valid() -> BTreeSet<String> {
    [
        "todo",
        "patch",
        "read_file",
        "write_file",
        "terminal",
        "browser_click",
        "search_files",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

#[test]
fn hermes_repairs() {
    let v = valid();
    for (given, expected) in [
        ("todo", "todo"),
        ("TODO", "todo"),
        ("Read-File", "read_file"),
        ("write file", "write_file"),
        ("TodoTool_tool", "todo"),
        ("Patch_tool", "patch"),
        ("BrowserClick_tool", "browser_click"),
        ("ReadFile", "read_file"),
        ("terminal\" parameter=\"command\" string=\"true", "terminal"),
        ("serch_files", "search_files"),
        ("read_fil", "read_file"),
    ] {
        assert_eq!(
            repair_tool_name(given, &v).as_deref(),
            Some(expected),
            "{given}"
        );
    }
}

#[test]
fn unrepairable_names() {
    let v = valid();
    for given in ["", "\"", "launch_rocket", "x"] {
        assert_eq!(repair_tool_name(given, &v), None, "{given}");
    }
}
