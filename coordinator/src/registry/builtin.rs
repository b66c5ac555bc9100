//! The built-in tools: their schemas (hermes-compatible, in `schemas/`), where
//! they run, and how the batch planner may schedule them.

use std::sync::Arc;

use serde_json::Value;

use super::{Availability, Handler, ParallelClass, RegistryError, ToolEntry, ToolRegistry};

struct Builtin {
    name: &'static str,
    toolset: &'static str,
    schema: &'static str,
    handler: fn() -> Handler,
    parallel: ParallelClass,
    emoji: &'static str,
    /// `None`: the default cap; `Some(u64::MAX)`: never persisted.
    max_result: Option<u64>,
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "terminal",
        toolset: "terminal",
        schema: include_str!("../../schemas/terminal.json"),
        handler: || Handler::Worker,
        parallel: ParallelClass::Sequential,
        emoji: "💻",
        max_result: Some(100_000),
    },
    Builtin {
        name: "process",
        toolset: "terminal",
        schema: include_str!("../../schemas/process.json"),
        handler: || Handler::Worker,
        parallel: ParallelClass::Sequential,
        emoji: "⚙️",
        max_result: None,
    },
    Builtin {
        name: "read_file",
        toolset: "file",
        schema: include_str!("../../schemas/read_file.json"),
        handler: || Handler::Worker,
        parallel: ParallelClass::PathScoped,
        emoji: "📖",
        // read_file pages on its own; persisting its output would loop (hermes pins it).
        max_result: Some(u64::MAX),
    },
    Builtin {
        name: "write_file",
        toolset: "file",
        schema: include_str!("../../schemas/write_file.json"),
        handler: || Handler::Worker,
        parallel: ParallelClass::PathScoped,
        emoji: "✍️",
        max_result: Some(100_000),
    },
    Builtin {
        name: "patch",
        toolset: "file",
        schema: include_str!("../../schemas/patch.json"),
        handler: || Handler::Worker,
        parallel: ParallelClass::PathScoped,
        emoji: "🔧",
        max_result: Some(100_000),
    },
    Builtin {
        name: "search_files",
        toolset: "file",
        schema: include_str!("../../schemas/search_files.json"),
        handler: || Handler::Worker,
        parallel: ParallelClass::Safe,
        emoji: "🔎",
        max_result: Some(100_000),
    },
    Builtin {
        name: "todo",
        toolset: "todo",
        schema: include_str!("../../schemas/todo.json"),
        handler: || Handler::AgentLoop,
        parallel: ParallelClass::Sequential,
        emoji: "📋",
        max_result: None,
    },
    Builtin {
        name: "clarify",
        toolset: "clarify",
        schema: include_str!("../../schemas/clarify.json"),
        handler: || Handler::AgentLoop,
        parallel: ParallelClass::Never,
        emoji: "❓",
        max_result: None,
    },
    Builtin {
        name: "delegate_task",
        toolset: "delegation",
        schema: include_str!("../../schemas/delegate_task.json"),
        handler: || Handler::AgentLoop,
        parallel: ParallelClass::Sequential,
        emoji: "🔀",
        max_result: None,
    },
    Builtin {
        name: "web_extract",
        toolset: "web",
        schema: include_str!("../../schemas/web_extract.json"),
        // Fetched on the task's worker: the URL judge runs where the request leaves.
        handler: || Handler::Worker,
        parallel: ParallelClass::Safe,
        emoji: "📄",
        max_result: Some(100_000),
    },
    Builtin {
        name: "text_to_speech",
        toolset: "tts",
        schema: include_str!("../../schemas/text_to_speech.json"),
        handler: || Handler::Worker,
        parallel: ParallelClass::Sequential,
        emoji: "🔊",
        max_result: None,
    },
    Builtin {
        name: "browser_navigate",
        toolset: "browser",
        schema: include_str!("../../schemas/browser_navigate.json"),
        handler: || Handler::Worker,
        // One page per task: its calls run in order.
        parallel: ParallelClass::Sequential,
        emoji: "🌐",
        max_result: None,
    },
    Builtin {
        name: "browser_snapshot",
        toolset: "browser",
        schema: include_str!("../../schemas/browser_snapshot.json"),
        handler: || Handler::Worker,
        // One page per task: its calls run in order.
        parallel: ParallelClass::Sequential,
        emoji: "📸",
        max_result: None,
    },
    Builtin {
        name: "browser_click",
        toolset: "browser",
        schema: include_str!("../../schemas/browser_click.json"),
        handler: || Handler::Worker,
        // One page per task: its calls run in order.
        parallel: ParallelClass::Sequential,
        emoji: "👆",
        max_result: None,
    },
    Builtin {
        name: "browser_type",
        toolset: "browser",
        schema: include_str!("../../schemas/browser_type.json"),
        handler: || Handler::Worker,
        // One page per task: its calls run in order.
        parallel: ParallelClass::Sequential,
        emoji: "⌨️",
        max_result: None,
    },
    Builtin {
        name: "browser_scroll",
        toolset: "browser",
        schema: include_str!("../../schemas/browser_scroll.json"),
        handler: || Handler::Worker,
        // One page per task: its calls run in order.
        parallel: ParallelClass::Sequential,
        emoji: "📜",
        max_result: None,
    },
    Builtin {
        name: "browser_back",
        toolset: "browser",
        schema: include_str!("../../schemas/browser_back.json"),
        handler: || Handler::Worker,
        // One page per task: its calls run in order.
        parallel: ParallelClass::Sequential,
        emoji: "◀️",
        max_result: None,
    },
    Builtin {
        name: "browser_press",
        toolset: "browser",
        schema: include_str!("../../schemas/browser_press.json"),
        handler: || Handler::Worker,
        // One page per task: its calls run in order.
        parallel: ParallelClass::Sequential,
        emoji: "⌨️",
        max_result: None,
    },
    Builtin {
        name: "browser_get_images",
        toolset: "browser",
        schema: include_str!("../../schemas/browser_get_images.json"),
        handler: || Handler::Worker,
        // One page per task: its calls run in order.
        parallel: ParallelClass::Sequential,
        emoji: "🖼️",
        max_result: None,
    },
    Builtin {
        name: "browser_console",
        toolset: "browser",
        schema: include_str!("../../schemas/browser_console.json"),
        handler: || Handler::Worker,
        // One page per task: its calls run in order.
        parallel: ParallelClass::Sequential,
        emoji: "🖥️",
        max_result: None,
    },
];

/// The tools that ask the auxiliary vision model, registered only when one
/// is configured (the worker gets the image, the coordinator asks).
const VISION_BUILTINS: &[Builtin] = &[
    Builtin {
        name: "vision_analyze",
        toolset: "vision",
        schema: include_str!("../../schemas/vision_analyze.json"),
        handler: || Handler::Worker,
        parallel: ParallelClass::Safe,
        emoji: "👁️",
        max_result: None,
    },
    Builtin {
        name: "browser_vision",
        toolset: "browser",
        schema: include_str!("../../schemas/browser_vision.json"),
        handler: || Handler::Worker,
        // One page per task: its calls run in order.
        parallel: ParallelClass::Sequential,
        emoji: "👁️",
        max_result: None,
    },
];

/// The entries of `vision_analyze` and `browser_vision`.
pub fn vision_entries() -> Result<Vec<ToolEntry>, RegistryError> {
    VISION_BUILTINS.iter().map(entry_of).collect()
}

/// Toolsets only some workers serve (they say so in `Hello.toolsets`).
const WORKER_TOOLSETS: &[&str] = &["browser", "tts"];

/// Builds the entry of one built-in tool.
fn entry_of(builtin: &Builtin) -> Result<ToolEntry, RegistryError> {
    let schema: Value =
        serde_json::from_str(builtin.schema).map_err(|err| RegistryError::InvalidSchema {
            name: builtin.name.to_owned(),
            reason: err.to_string(),
        })?;
    let handler = (builtin.handler)();
    let availability = if WORKER_TOOLSETS.contains(&builtin.toolset) {
        Availability::WorkerToolset
    } else if matches!(handler, Handler::Worker) {
        Availability::Fleet
    } else {
        Availability::Always
    };
    let mut entry = ToolEntry::new(builtin.name, builtin.toolset, schema, handler)
        .with_availability(availability)
        .with_parallel(builtin.parallel)
        .with_emoji(builtin.emoji);
    entry.max_result_size_chars = builtin.max_result;
    Ok(entry)
}

/// A registry holding every built-in tool.
pub fn builtin_registry(terminal_backend: &str) -> Result<ToolRegistry, RegistryError> {
    let mut registry = ToolRegistry::new(terminal_backend);
    for builtin in BUILTINS {
        let mut entry = entry_of(builtin)?;
        if entry.name == super::browser_navigate::NAME {
            let static_description = entry.description.clone();
            entry = entry.with_dynamic_schema(Arc::new(move |context| {
                super::browser_navigate::overrides(&static_description, context)
            }));
        }
        registry.register(entry, false)?;
    }
    // Its description depends on the caller's tools (its dynamic schema);
    // the static one offers them all.
    let every: Vec<String> = caduceus_common::execute_code::SANDBOX_TOOLS
        .iter()
        .map(|t| (*t).to_owned())
        .collect();
    let mut code = ToolEntry::new(
        super::execute_code::NAME,
        "code_execution",
        super::execute_code::schema(&every),
        Handler::Worker,
    )
    .with_availability(Availability::Fleet)
    .with_parallel(ParallelClass::Sequential)
    .with_emoji("🐍")
    .with_dynamic_schema(super::execute_code::dynamic_schema());
    code.max_result_size_chars = Some(100_000);
    registry.register(code, false)?;
    Ok(registry)
}
