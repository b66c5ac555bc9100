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

    let possibilities: Vec<&str> = valid.iter().map(String::as_str).collect();
    similar::get_close_matches(lowered.as_str(), &possibilities, 1, 0.7)
        .first()
        .map(|m| (*m).to_owned())
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
