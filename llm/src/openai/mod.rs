//! The OpenAI-compatible HTTP client.

mod assembler;
mod client;
pub(crate) mod retry;
mod sse;
pub(crate) mod wire;

pub use client::OpenAiClient;
