//! Unified diffs in the shape hermes returns (`difflib.unified_diff`, three
//! lines of context, `--- a/x` / `+++ b/x` headers), via `similar`.

use similar::TextDiff;

/// The unified diff from `old` to `new`; empty when they are equal. A last
/// line without newline is marked with `\ No newline at end of file`.
pub fn unified(old: &str, new: &str, from: &str, to: &str) -> String {
    TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(from, to)
        .to_string()
}

/// `a/<path>` for a diff header; an absolute path does not get a double slash.
pub fn label(side: &str, path: &str) -> String {
    format!("{side}/{}", path.trim_start_matches('/'))
}

#[cfg(test)]
#[path = "diff_tests.rs"]
mod tests;
