//! caduceus-llm: the model side of caduceus' agent loop.
//!
//! - [`ChatModel`]: the interface the agent loop uses — one request in, one
//!   [`AssistantTurn`] out, [`StreamEvent`]s reported on the way.
//! - [`OpenAiClient`]: any OpenAI-compatible `/chat/completions` endpoint, streamed
//!   (SSE) or not, with retries, backoff and timeouts.
//! - [`ReplayModel`]: `replay:FILE`, recorded turns played back offline.
//! - `testing::ScriptedServer` (feature `testing`): an in-process OpenAI-compatible
//!   server for tests.
//!
//! The wire formats are specified in the crate README.

mod config;
mod error;
mod message;
mod model;
mod openai;
mod replay;
mod request;
mod text;
mod turn;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use config::{DEFAULT_BASE_URL, ENV_API_KEY, ENV_BASE_URL, ENV_MODEL, LlmConfig};
pub use error::LlmError;
pub use message::{ChatMessage, MessageContent, Role, ToolCall};
pub use model::{ChatModel, EventSink, model_from_config};
pub use openai::OpenAiClient;
pub use replay::{ReplayModel, replay_line};
pub use request::ChatRequest;
pub use turn::{AssistantTurn, FinishReason, StreamEvent, Usage};
