//! Repair of near-miss tool names (hermes `repair_tool_call`): models emit
//! `TodoTool_tool`, `Patch_tool`, `write file`, `READ_FILE`, or names with XML
//! debris (`terminal" parameter="command`). We normalize, then fall back to a
//! difflib-style fuzzy match with hermes' 0.7 cutoff.

use std::collections::BTreeSet;

/// The valid name `name` most likely meant, if any.
pub fn repair_tool_name(name: &str, valid: &BTreeSet<String>) -> Option<String> {
    let mut name = name;
    // Cut at the first quote or angle bracket (protocol-translation debris),
    // but never at whitespace: "write file" must still become "write_file".
    for sep in ['"', '\'', '<', '>'] {
        if let Some(idx) = name.find(sep)
            && idx > 0
        {
            name = &name[..idx];
        }
    }
    let name = name.trim();
    if name.is_empty() {
        return None;
    }
    if valid.contains(name) {
        return Some(name.to_owned());
    }
    let lowered = name.to_lowercase();
    if valid.contains(&lowered) {
        return Some(lowered);
    }
    let normalized = normalize(name);
    if valid.contains(&normalized) {
        return Some(normalized);
    }

    let mut candidates: BTreeSet<String> = [
        name.to_owned(),
        lowered.clone(),
        normalized,
        camel_to_snake(name),
    ]
    .into_iter()
    .collect();
    // Strip a trailing tool suffix up to twice (TodoTool_tool -> TodoTool -> Todo).
    for _ in 0..2 {
        let mut extra = BTreeSet::new();
        for candidate in &candidates {
            if let Some(stripped) = strip_tool_suffix(candidate) {
                extra.insert(normalize(&stripped));
                extra.insert(camel_to_snake(&stripped));
                extra.insert(stripped);
            }
        }
        candidates.extend(extra);
    }
    if let Some(hit) = candidates
        .iter()
        .find(|c| !c.is_empty() && valid.contains(*c))
    {
        return Some(hit.clone());
    }

    fuzzy_match(&lowered, valid)
}

/// Prefix of the tools an MCP server contributes (`mcp__<server>__<tool>`).
const MCP_PREFIX: &str = "mcp__";

/// `mcp__<server>__` of an MCP tool's name, `None` for any other name.
fn mcp_namespace(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(MCP_PREFIX)?;
    let end = rest.find("__")?;
    Some(&name[..MCP_PREFIX.len() + end + 2])
}

/// hermes' difflib match with its 0.7 cutoff, except that it never crosses
/// into another server's tools or out of one, and compares an MCP tool by
/// the part after its namespace. The shared `mcp__<server>__` prefix would
/// otherwise make a server's names match one another: a call to a removed
/// `mcp__git__git_init` ran `mcp__git__git_commit`. A repair that runs a
/// different tool than the model meant is worse than hermes' unknown-tool
/// error, which the model can read and act on.
fn fuzzy_match(lowered: &str, valid: &BTreeSet<String>) -> Option<String> {
    match mcp_namespace(lowered) {
        Some(namespace) => {
            let short = &lowered[namespace.len()..];
            let shorts: Vec<&str> = valid
                .iter()
                .filter_map(|v| v.strip_prefix(namespace))
                .collect();
            similar::get_close_matches(short, &shorts, 1, 0.7)
                .first()
                .map(|m| format!("{namespace}{m}"))
        }
        None => {
            let possibilities: Vec<&str> = valid
                .iter()
                .map(String::as_str)
                .filter(|v| mcp_namespace(v).is_none())
                .collect();
            similar::get_close_matches(lowered, &possibilities, 1, 0.7)
                .first()
                .map(|m| (*m).to_owned())
        }
    }
}

fn normalize(name: &str) -> String {
    name.to_lowercase().replace(['-', ' '], "_")
}

/// `TodoTool` -> `todo_tool` (an underscore before every inner capital).
fn camel_to_snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, ch) in name.chars().enumerate() {
        if ch.is_uppercase() && i > 0 {
            out.push('_');
        }
        out.extend(ch.to_lowercase());
    }
    out
}

fn strip_tool_suffix(name: &str) -> Option<String> {
    let lower = name.to_lowercase();
    for suffix in ["_tool", "-tool", "tool"] {
        if lower.ends_with(suffix) && name.len() >= suffix.len() {
            let cut = name.len() - suffix.len();
            return name
                .get(..cut)
                .map(|head| head.trim_end_matches(['_', '-']).to_owned());
        }
    }
    None
}

#[cfg(test)]
#[path = "repair_tests.rs"]
mod tests;
