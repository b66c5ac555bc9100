//! The names of the browser toolset, in one place: the coordinator's
//! toolset table and the worker's router both read this list, so a tool
//! added to one is never missing from the other.

/// The browser tools (hermes' `browser` toolset, minus `browser_cdp` and
/// `browser_dialog`, which caduceus does not offer).
pub const TOOLS: &[&str] = &[
    "browser_navigate",
    "browser_snapshot",
    "browser_click",
    "browser_type",
    "browser_scroll",
    "browser_back",
    "browser_press",
    "browser_get_images",
    "browser_vision",
    "browser_console",
];

/// Whether `tool` is one of the browser tools.
pub fn is_browser_tool(tool: &str) -> bool {
    TOOLS.contains(&tool)
}
