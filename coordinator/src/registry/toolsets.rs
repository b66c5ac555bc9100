//! Named groups of tools. A toolset is either defined here (with optional
//! `includes`), or implied by the `toolset` field of registered tools (plugins,
//! MCP servers), or an alias of another toolset.

use std::collections::{BTreeSet, HashMap, HashSet};

/// A statically defined toolset.
pub struct ToolsetDef {
    pub name: &'static str,
    pub description: &'static str,
    pub tools: &'static [&'static str],
    pub includes: &'static [&'static str],
}

/// The toolsets caduceus defines. Tools registered later under these names
/// join them; tools under other names form toolsets of their own.
pub const STATIC_TOOLSETS: &[ToolsetDef] = &[
    ToolsetDef {
        name: "terminal",
        description: "Terminal/command execution and process management tools",
        tools: &["terminal", "process"],
        includes: &[],
    },
    ToolsetDef {
        name: "file",
        description: "File manipulation tools: read, write, patch (with fuzzy matching), and search (content + files)",
        tools: &["read_file", "write_file", "patch", "search_files"],
        includes: &[],
    },
    ToolsetDef {
        name: "todo",
        description: "Task planning and tracking for multi-step work",
        tools: &["todo"],
        includes: &[],
    },
    ToolsetDef {
        name: "clarify",
        description: "Ask the user clarifying questions",
        tools: &["clarify"],
        includes: &[],
    },
    ToolsetDef {
        name: "delegation",
        description: "Spawn subagents for parallel subtasks",
        tools: &["delegate_task"],
        includes: &[],
    },
    ToolsetDef {
        name: "memory",
        description: "Persistent memory across sessions (personal notes + user profile)",
        tools: &["memory"],
        includes: &[],
    },
    ToolsetDef {
        name: "cronjob",
        description: "Cronjob management tools - create, list, update, pause, resume, remove, run scheduled tasks",
        tools: &["cronjob"],
        includes: &[],
    },
    ToolsetDef {
        name: "session_search",
        description: "Search and recall past conversations",
        tools: &["session_search"],
        includes: &[],
    },
    ToolsetDef {
        name: "skills",
        description: "Access, create, edit, and manage skill documents with specialized instructions and knowledge",
        tools: &["skills_list", "skill_view", "skill_manage"],
        includes: &[],
    },
    ToolsetDef {
        name: "web",
        description: "Web research and content extraction tools",
        tools: &["web_search", "web_extract"],
        includes: &[],
    },
    ToolsetDef {
        name: "vision",
        description: "Image analysis and vision tools",
        tools: &["vision_analyze"],
        includes: &[],
    },
    ToolsetDef {
        name: "tts",
        description: "Text-to-speech: convert text to audio files",
        tools: &["text_to_speech"],
        includes: &[],
    },
    ToolsetDef {
        name: "browser",
        description: "Browser automation on a headless Chromium next to the task's environment: navigate, snapshot, click, type, scroll, keys, images, vision, console",
        tools: caduceus_common::browser::TOOLS,
        includes: &[],
    },
    ToolsetDef {
        name: "coding",
        description: "Terminal and file tools",
        tools: &[],
        includes: &["terminal", "file"],
    },
];

/// hermes' pre-toolset names, still accepted (`model_tools._LEGACY_TOOLSET_MAP`).
pub const LEGACY_TOOLSETS: &[(&str, &[&str])] = &[
    ("web_tools", &["web_search", "web_extract"]),
    ("terminal_tools", &["terminal"]),
    ("vision_tools", &["vision_analyze"]),
    ("image_tools", &["image_generate"]),
    (
        "skills_tools",
        &["skills_list", "skill_view", "skill_manage"],
    ),
    ("cronjob_tools", &["cronjob"]),
    ("browser_tools", caduceus_common::browser::TOOLS),
    (
        "file_tools",
        &["read_file", "write_file", "patch", "search_files"],
    ),
    ("tts_tools", &["text_to_speech"]),
];

/// Resolves toolset names to tool names over the static definitions, the
/// registered tools' toolsets and the aliases.
pub struct ToolsetResolver<'a> {
    /// toolset -> tools registered under it
    pub registered: &'a HashMap<String, BTreeSet<String>>,
    pub aliases: &'a HashMap<String, String>,
}

impl ToolsetResolver<'_> {
    /// Every toolset name known (static, registered, legacy and aliases).
    pub fn names(&self) -> BTreeSet<String> {
        let mut names: BTreeSet<String> =
            STATIC_TOOLSETS.iter().map(|t| t.name.to_owned()).collect();
        names.extend(self.registered.keys().cloned());
        names.extend(self.aliases.keys().cloned());
        names
    }

    /// Tools of `name`, following includes; `None` when the name is unknown.
    /// `all` and `*` mean every toolset.
    pub fn resolve(&self, name: &str) -> Option<BTreeSet<String>> {
        if name == "all" || name == "*" {
            let mut all = BTreeSet::new();
            for ts in self.names() {
                if let Some(tools) = self.resolve_inner(&ts, &mut HashSet::new()) {
                    all.extend(tools);
                }
            }
            return Some(all);
        }
        if let Some((_, tools)) = LEGACY_TOOLSETS.iter().find(|(n, _)| *n == name) {
            return Some(tools.iter().map(|t| (*t).to_owned()).collect());
        }
        self.resolve_inner(name, &mut HashSet::new())
    }

    fn resolve_inner(&self, name: &str, visited: &mut HashSet<String>) -> Option<BTreeSet<String>> {
        let name = self.aliases.get(name).map(String::as_str).unwrap_or(name);
        if !visited.insert(name.to_owned()) {
            // A diamond or a cycle: the tools were (or will be) collected elsewhere.
            return Some(BTreeSet::new());
        }
        let def = STATIC_TOOLSETS.iter().find(|t| t.name == name);
        let registered = self.registered.get(name);
        if def.is_none() && registered.is_none() {
            return None;
        }
        let mut tools = BTreeSet::new();
        if let Some(def) = def {
            tools.extend(def.tools.iter().map(|t| (*t).to_owned()));
            for include in def.includes {
                if let Some(more) = self.resolve_inner(include, visited) {
                    tools.extend(more);
                }
            }
        }
        if let Some(registered) = registered {
            tools.extend(registered.iter().cloned());
        }
        Some(tools)
    }
}
