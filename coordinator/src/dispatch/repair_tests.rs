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

#[test]
fn a_missing_mcp_tool_is_not_repaired_into_a_sibling() {
    let v: BTreeSet<String> = [
        "terminal",
        "mcp__git__git_commit",
        "mcp__git__git_status",
        "mcp__fixture__whoami",
        "mcp__time__get_current_time",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    // Under plain difflib each of these scored over 0.7 against a sibling
    // through the shared prefix and ran it.
    for given in ["mcp__git__git_init", "mcp__fixture__doomed"] {
        assert_eq!(repair_tool_name(given, &v), None, "{given}");
    }
    // A typo within a server's own tool names is still repaired...
    assert_eq!(
        repair_tool_name("mcp__git__git_stats", &v).as_deref(),
        Some("mcp__git__git_status")
    );
    assert_eq!(
        repair_tool_name("MCP__time__get_current_time", &v).as_deref(),
        Some("mcp__time__get_current_time")
    );
    // ...but never into another server's tools, or from a bare name into one.
    assert_eq!(repair_tool_name("mcp__gti__git_status", &v), None);
    assert_eq!(repair_tool_name("git_status", &v), None);
    assert_eq!(repair_tool_name("terminl", &v).as_deref(), Some("terminal"));
}
