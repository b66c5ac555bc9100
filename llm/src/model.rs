//! The interface the agent loop programs against, and the factory that turns an
//! `llm:` configuration into a model.

use std::sync::Arc;

use async_trait::async_trait;

use crate::config::LlmConfig;
use crate::error::LlmError;
use crate::openai::OpenAiClient;
use crate::replay::ReplayModel;
use crate::request::ChatRequest;
use crate::turn::{AssistantTurn, StreamEvent};

/// Where progress events go. `Send` because agent loops run on spawned tasks.
pub type EventSink<'a> = &'a mut (dyn FnMut(StreamEvent) + Send);

/// Reports a turn that arrived whole (a non-streamed answer, a replayed line)
/// with the events a stream would have sent: reasoning, text, then the start
/// of each tool call.
pub(crate) fn report_whole_turn(turn: &AssistantTurn, events: EventSink<'_>) {
    if let Some(reasoning) = &turn.reasoning {
        events(StreamEvent::ReasoningDelta(reasoning.clone()));
    }
    if let Some(content) = &turn.content {
        events(StreamEvent::TextDelta(content.clone()));
    }
    for (index, call) in turn.tool_calls.iter().enumerate() {
        events(StreamEvent::ToolCallStarted {
            index,
            id: call.id.clone(),
            name: call.name.clone(),
        });
    }
}

/// A chat model: given the conversation so far, produce the next assistant turn.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// Produces the next assistant turn. `events` receives progress as it happens
    /// (see [`StreamEvent`] for the contract); implementations that cannot stream
    /// report the whole answer once at the end.
    async fn complete(
        &self,
        request: &ChatRequest,
        events: EventSink<'_>,
    ) -> Result<AssistantTurn, LlmError>;

    /// One line for logs and status output, e.g. `gpt-4o via https://api.openai.com/v1
    /// (streaming)`. Never contains credentials.
    fn describe(&self) -> String;

    /// [`ChatModel::complete`] without progress events.
    async fn complete_quietly(&self, request: &ChatRequest) -> Result<AssistantTurn, LlmError> {
        self.complete(request, &mut |_event| {}).await
    }
}

/// Builds the model a configuration names: `replay:FILE` gives a [`ReplayModel`],
/// anything else an [`OpenAiClient`].
pub fn model_from_config(config: &LlmConfig) -> Result<Arc<dyn ChatModel>, LlmError> {
    match config.replay_file() {
        Some(file) => Ok(Arc::new(ReplayModel::open(file)?)),
        None => Ok(Arc::new(OpenAiClient::new(config.clone())?)),
    }
}
