//! Helpers shared by the coordinator, the worker and the tool crates: the JSON
//! shapes of tool results, output truncation, ANSI stripping, secret redaction
//! and the `<persisted-output>` preview of results too large for the context.

pub mod persist;
pub mod redact;
pub mod result;
pub mod text;
