use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::*;

fn schema(description: &str) -> Value {
    json!({"description": description, "parameters": {"type": "object", "properties": {}}})
}

fn local(name: &str, toolset: &str) -> ToolEntry {
    ToolEntry::new(name, toolset, schema(name), Handler::AgentLoop)
}

fn names(defs: &[Value]) -> Vec<String> {
    defs.iter()
        .map(|d| {
            d["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[test]
fn register_and_define_in_openai_format_sorted() {
    let mut reg = ToolRegistry::new("local");
    reg.register(local("zeta", "misc"), false).unwrap();
    reg.register(local("alpha", "misc"), false).unwrap();
    let defs = reg.definitions(&ToolFilter::default()).unwrap();
    assert_eq!(names(&defs), ["alpha", "zeta"]);
    assert_eq!(defs[0]["type"], "function");
    assert_eq!(defs[0]["function"]["description"], "alpha");
    assert_eq!(defs[0]["function"]["name"], "alpha");
}

#[test]
fn collision_with_other_toolset_keeps_the_old_tool() {
    let mut reg = ToolRegistry::new("local");
    reg.register(local("search", "web"), false).unwrap();
    let generation = reg.generation();
    let err = reg
        .register(local("search", "plugin-x"), false)
        .unwrap_err();
    assert!(matches!(err, RegistryError::WouldShadow { .. }), "{err}");
    assert_eq!(reg.get("search").unwrap().toolset, "web");
    assert_eq!(
        reg.generation(),
        generation,
        "a rejected write does not bump the generation"
    );
}

#[test]
fn same_toolset_reregistration_replaces() {
    let mut reg = ToolRegistry::new("local");
    reg.register(local("search", "web"), false).unwrap();
    let mut replacement = local("search", "web");
    replacement.description = "v2".into();
    reg.register(replacement, false).unwrap();
    assert_eq!(reg.get("search").unwrap().description, "v2");
}

#[test]
fn mcp_toolsets_may_overwrite_each_other() {
    let mut reg = ToolRegistry::new("local");
    reg.register(local("mcp__a__x", "mcp-a"), false).unwrap();
    reg.register(local("mcp__a__x", "mcp-b"), false).unwrap();
    assert_eq!(reg.get("mcp__a__x").unwrap().toolset, "mcp-b");
    // The emptied toolset is gone.
    assert!(reg.resolver().resolve("mcp-a").is_none());
}

#[test]
fn override_needs_opt_in_for_plugins() {
    let mut reg = ToolRegistry::new("local");
    reg.register(local("browser", "browser"), false).unwrap();
    let plugin_tool = || local("browser", "cdp").with_owner(Owner::Plugin("cdp".into()));
    assert!(matches!(
        reg.register(plugin_tool(), true),
        Err(RegistryError::OverrideNotAllowed { .. })
    ));
    reg.set_plugin_override_policy("cdp", true);
    reg.register(plugin_tool(), true).unwrap();
    assert_eq!(reg.get("browser").unwrap().toolset, "cdp");
    // A core override needs no opt-in.
    reg.register(local("browser", "core2"), true).unwrap();
    assert_eq!(reg.get("browser").unwrap().toolset, "core2");
}

#[test]
fn deregister_rules() {
    let mut reg = ToolRegistry::new("local");
    reg.register(
        local("own", "p").with_owner(Owner::Plugin("p".into())),
        false,
    )
    .unwrap();
    reg.register(local("core", "core"), false).unwrap();
    reg.register_alias("pp", "p");
    assert!(!reg.deregister("missing", &Caller::Core).unwrap());
    assert!(matches!(
        reg.deregister("core", &Caller::Plugin("p".into())),
        Err(RegistryError::DeregisterNotAllowed { .. })
    ));
    assert!(reg.deregister("own", &Caller::Plugin("p".into())).unwrap());
    // Emptying a toolset drops its aliases.
    assert!(!reg.toolset_names().contains("pp"));
    assert!(reg.deregister("core", &Caller::Core).unwrap());
}

#[test]
fn toolsets_aliases_and_filters() {
    let mut reg = builtin::builtin_registry("local").unwrap();
    reg.set_fleet_backends(BTreeSet::from(["local".to_owned()]));
    let filter = |enabled: &[&str], disabled: &[&str]| ToolFilter {
        enabled_toolsets: enabled.iter().map(|s| (*s).to_owned()).collect(),
        disabled_toolsets: disabled.iter().map(|s| (*s).to_owned()).collect(),
        blocked_tools: Vec::new(),
    };
    assert_eq!(
        names(&reg.definitions(&filter(&["terminal"], &[])).unwrap()),
        ["process", "terminal"]
    );
    assert_eq!(
        names(
            &reg.definitions(&filter(&["coding"], &["terminal"]))
                .unwrap()
        ),
        ["patch", "read_file", "search_files", "write_file"]
    );
    assert_eq!(
        names(&reg.definitions(&filter(&["file_tools"], &[])).unwrap()).len(),
        4,
        "legacy names resolve"
    );
    reg.register_alias("shell", "terminal");
    assert_eq!(
        names(&reg.definitions(&filter(&["shell"], &[])).unwrap()),
        ["process", "terminal"]
    );
    let err = reg.definitions(&filter(&["nope"], &[])).unwrap_err();
    assert!(
        err.to_string().starts_with("Unknown toolset: nope"),
        "{err}"
    );
    let all = names(&reg.definitions(&filter(&["all"], &[])).unwrap());
    assert!(all.contains(&"delegate_task".to_owned()) && all.contains(&"terminal".to_owned()));
}

#[test]
fn worker_tools_follow_the_fleet() {
    let mut reg = builtin::builtin_registry("local").unwrap();
    let defs = names(&reg.definitions(&ToolFilter::default()).unwrap());
    assert!(
        !defs.contains(&"terminal".to_owned()),
        "no worker attached: no terminal"
    );
    assert!(defs.contains(&"todo".to_owned()));
    reg.set_fleet_backends(BTreeSet::from(["docker".to_owned()]));
    assert!(
        !names(&reg.definitions(&ToolFilter::default()).unwrap()).contains(&"terminal".to_owned()),
        "wrong backend"
    );
    let generation = reg.generation();
    assert!(reg.set_fleet_backends(BTreeSet::from(["docker".to_owned(), "local".to_owned()])));
    assert!(reg.generation() > generation);
    assert!(
        names(&reg.definitions(&ToolFilter::default()).unwrap()).contains(&"terminal".to_owned())
    );
    assert!(
        !reg.set_fleet_backends(BTreeSet::from(["docker".to_owned(), "local".to_owned()])),
        "unchanged"
    );
}

#[test]
fn required_env_hides_tools() {
    let mut reg = ToolRegistry::new("local");
    reg.register(
        local("needs_env", "x").with_requires_env(&["CADUCEUS_TEST_SURELY_UNSET_VAR"]),
        false,
    )
    .unwrap();
    reg.register(local("free", "x"), false).unwrap();
    assert_eq!(
        names(&reg.definitions(&ToolFilter::default()).unwrap()),
        ["free"]
    );
}

#[test]
fn dynamic_overrides_merge_and_survive_panics() {
    let mut reg = ToolRegistry::new("local");
    let live: SchemaOverrideFn = Arc::new(|_| {
        let mut m = Map::new();
        m.insert("description".into(), json!("limit is 3"));
        Some(m)
    });
    reg.register(local("d", "x").with_dynamic_schema(live), false)
        .unwrap();
    let broken: SchemaOverrideFn = Arc::new(|_| panic!("boom"));
    reg.register(local("e", "x").with_dynamic_schema(broken), false)
        .unwrap();
    let defs = reg.definitions(&ToolFilter::default()).unwrap();
    assert_eq!(defs[0]["function"]["description"], "limit is 3");
    assert_eq!(
        defs[1]["function"]["description"], "e",
        "static schema when the override fails"
    );
}

#[test]
fn generation_counts_changes() {
    let mut reg = ToolRegistry::new("local");
    let g0 = reg.generation();
    reg.register(local("a", "x"), false).unwrap();
    reg.register_alias("y", "x");
    reg.deregister("a", &Caller::Core).unwrap();
    assert_eq!(reg.generation(), g0 + 3);
}

#[test]
fn snapshots_are_isolated_from_later_writes() {
    let mut reg = ToolRegistry::new("local");
    reg.register(local("a", "x"), false).unwrap();
    let snapshot = reg.clone();
    reg.register(local("b", "x"), false).unwrap();
    assert!(snapshot.get("b").is_none());
    assert!(reg.get("b").is_some());
}

#[test]
fn builtin_schemas_are_hermes_shaped() {
    let reg = builtin::builtin_registry("local").unwrap();
    let terminal = reg.get("terminal").unwrap();
    assert_eq!(terminal.required(), ["command"]);
    let props = terminal.properties().unwrap();
    for key in [
        "command",
        "background",
        "timeout",
        "workdir",
        "pty",
        "notify_on_complete",
        "watch_patterns",
    ] {
        assert!(props.contains_key(key), "terminal.{key}");
    }
    assert_eq!(
        reg.get("read_file").unwrap().parallel,
        ParallelClass::PathScoped
    );
    assert_eq!(reg.get("clarify").unwrap().parallel, ParallelClass::Never);
    assert_eq!(
        reg.get("search_files").unwrap().parallel,
        ParallelClass::Safe
    );
    assert!(
        reg.get("patch")
            .unwrap()
            .properties()
            .unwrap()
            .get("cross_profile")
            .is_none()
    );
}

#[test]
fn browser_tools_need_a_worker_with_the_browser_toolset() {
    let mut reg = builtin::builtin_registry("local").unwrap();
    reg.set_fleet_backends(BTreeSet::from(["local".to_owned()]));
    let browser = ToolFilter {
        enabled_toolsets: vec!["browser".to_owned()],
        ..ToolFilter::default()
    };
    assert!(
        reg.definitions(&browser).unwrap().is_empty(),
        "no worker has Chromium: no browser tools"
    );
    assert!(reg.set_fleet_toolsets(BTreeSet::from(["browser".to_owned()])));
    let offered = names(&reg.definitions(&browser).unwrap());
    assert_eq!(offered.len(), 9, "{offered:?}");
    assert!(offered.contains(&"browser_navigate".to_owned()));
    assert_eq!(
        reg.get("browser_navigate").unwrap().required(),
        ["url"],
        "hermes' schema"
    );
    reg.set_fleet_backends(BTreeSet::new());
    assert!(
        reg.definitions(&browser).unwrap().is_empty(),
        "the browser runs next to an environment: no backend, no browser"
    );
}

/// The description of `tool` in the definitions for `filter`.
fn description_of(reg: &ToolRegistry, filter: &ToolFilter, tool: &str) -> String {
    reg.definitions(filter)
        .unwrap()
        .iter()
        .find(|d| d["function"]["name"] == tool)
        .unwrap_or_else(|| panic!("{tool} not offered"))["function"]["description"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn dynamic_descriptions_name_only_the_tools_each_request_offers() {
    let mut reg = builtin::builtin_registry("local").unwrap();
    reg.set_fleet_backends(BTreeSet::from(["local".to_owned()]));
    reg.set_fleet_toolsets(BTreeSet::from(["browser".to_owned()]));
    let filter = |toolsets: &[&str], blocked: &[&str]| ToolFilter {
        enabled_toolsets: toolsets.iter().map(|t| (*t).to_owned()).collect(),
        blocked_tools: blocked.iter().map(|t| (*t).to_owned()).collect(),
        ..ToolFilter::default()
    };

    // No terminal, no web tools: neither description mentions them.
    let files_only = filter(&["code_execution", "browser", "file"], &[]);
    let code = description_of(&reg, &files_only, "execute_code");
    assert!(code.contains("  read_file(path: str"), "{code}");
    assert!(!code.contains("terminal("), "{code}");
    assert!(!code.contains("web_search"), "{code}");
    let navigate = description_of(&reg, &files_only, "browser_navigate");
    for absent in ["web_search", "web_extract", "terminal", "curl"] {
        assert!(!navigate.contains(absent), "{absent}: {navigate}");
    }
    assert!(
        navigate.contains("Use browser tools when you need to interact with a page"),
        "{navigate}"
    );
    assert!(navigate.contains("browser_snapshot"), "{navigate}");

    // The same registry, another request: terminal offered.
    let with_terminal = filter(&["code_execution", "browser", "file", "terminal"], &[]);
    let code = description_of(&reg, &with_terminal, "execute_code");
    assert!(code.contains("  terminal(command: str"), "{code}");
    let code_argument = reg
        .definitions(&with_terminal)
        .unwrap()
        .into_iter()
        .find(|d| d["function"]["name"] == "execute_code")
        .unwrap()["function"]["parameters"]["properties"]["code"]["description"]
        .clone();
    assert!(
        code_argument
            .as_str()
            .unwrap()
            .contains("from hermes_tools import terminal, ..."),
        "{code_argument}"
    );
    let navigate = description_of(&reg, &with_terminal, "browser_navigate");
    assert!(
        navigate.contains("prefer curl via the terminal tool; the browser stack"),
        "{navigate}"
    );
    assert!(!navigate.contains("web_"), "{navigate}");

    // One web tool offered: named, the absent one still not. (`web_search`
    // is registered at start when a search backend is configured.)
    reg.register(
        ToolEntry::new(
            "web_search",
            "web",
            schema("search the web"),
            Handler::AgentLoop,
        ),
        false,
    )
    .unwrap();
    let with_web = filter(
        &["code_execution", "browser", "terminal", "web"],
        &["web_extract"],
    );
    let navigate = description_of(&reg, &with_web, "browser_navigate");
    assert!(
        navigate.contains("For simple information retrieval, prefer web_search (faster, cheaper)."),
        "{navigate}"
    );
    assert!(!navigate.contains("web_extract"), "{navigate}");
    let code = description_of(&reg, &with_web, "execute_code");
    assert!(code.contains("  web_search(query: str"), "{code}");
    assert!(!code.contains("read_file("), "{code}");

    // A blocked browser_snapshot is not recommended either.
    let no_snapshot = filter(&["browser"], &["browser_snapshot"]);
    let navigate = description_of(&reg, &no_snapshot, "browser_navigate");
    assert!(!navigate.contains("browser_snapshot"), "{navigate}");
    assert!(
        navigate
            .ends_with("Returns a compact page snapshot with interactive elements and ref IDs."),
        "{navigate}"
    );

    // Everything offered: hermes' static text, unchanged.
    let everything = ToolFilter::default();
    let navigate = description_of(&reg, &everything, "browser_navigate");
    assert_eq!(
        navigate,
        reg.get("browser_navigate").unwrap().description,
        "the static description when every tool it names is offered"
    );
}
