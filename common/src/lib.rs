//! Helpers shared by the coordinator, the worker and the tool crates: the JSON
//! shapes of tool results, output truncation, ANSI stripping, secret redaction,
//! sandbox environment hygiene and the `<persisted-output>` preview of results
//! too large for the context.

pub mod browser;
pub mod env_hygiene;
pub mod execute_code;
pub mod persist;
pub mod process_env;
pub mod redact;
pub mod result;
pub mod shell_words;
pub mod text;
