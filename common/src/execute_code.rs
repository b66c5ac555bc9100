//! What the coordinator and the worker agree on about `execute_code`.

/// The tools a script's `caduceus_tools` module may offer (hermes
/// `SANDBOX_ALLOWED_TOOLS`), in hermes' display order; a run offers those of
/// them its caller may use.
pub const SANDBOX_TOOLS: &[&str] = &[
    "web_search",
    "web_extract",
    "read_file",
    "write_file",
    "search_files",
    "patch",
    "terminal",
];

/// `terminal` arguments a script may not use (hermes
/// `_TERMINAL_BLOCKED_PARAMS`): its commands are foreground only.
pub const TERMINAL_BLOCKED_PARAMS: &[&str] = &[
    "background",
    "pty",
    "notify",
    "notify_on_complete",
    "watch_patterns",
    "heartbeat",
    "persist_on_release",
];

/// hermes `DEFAULT_TIMEOUT`, seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;
/// hermes `DEFAULT_MAX_TOOL_CALLS`.
pub const DEFAULT_MAX_TOOL_CALLS: u32 = 50;
