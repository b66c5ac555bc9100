//! Agent sessions: the loop that talks to a model, plans and runs tool-call
//! batches, and delegates subtasks to child sessions scheduled onto workers.
//! The contract (events, storage, limits) is in the coordinator README,
//! section "Agent sessions".
//!
//! - [`SessionHub`] starts sessions and finds live ones (cancel, clarify
//!   answers, notices, status).
//! - `session`: the Session actor, one per conversation; delegated children
//!   are child actors linked to their parent.
//! - `turn`: the agent loop (iteration budget, name repair, batches, the turn
//!   result budget, the summary request) and the agent-loop tools.
//! - [`planner`]: which calls of one turn may run in parallel.
//! - [`todo`], [`clarify`], [`delegate`]: the agent-loop tools' rules.
//! - [`events`]: the event stream; [`store`]: SQLite storage; `resume`:
//!   carrying a session on after a coordinator restart.

pub mod budget;
pub mod clarify;
pub mod delegate;
pub mod events;
mod hub;
pub mod messages;
pub mod notices;
pub mod output_schema;
pub mod planner;
mod resume;
pub mod search;
mod session;
pub mod store;
pub mod todo;
mod turn;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use caduceus_llm::LlmConfig;

pub use delegate::DelegationConfig;
pub(crate) use hub::new_session_id;
pub use hub::{SessionError, SessionHub, SessionStream, StartRequest};

/// hermes' default budget of a top-level session (`agent.max_turns`).
pub const DEFAULT_MAX_ITERATIONS: u32 = 90;

/// Settings of every session a coordinator runs.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// The model endpoint (`llm:` section plus `OPENAI_BASE_URL`,
    /// `OPENAI_API_KEY`, `CADUCEUS_MODEL`).
    pub llm: LlmConfig,
    /// Budget of a top-level session (90).
    pub max_iterations: u32,
    /// The `delegation:` section.
    pub delegation: Arc<DelegationConfig>,
    /// Where sessions and transcripts are recorded (`$CADUCEUS_HOME/state.db`);
    /// `None` records nothing.
    pub state_db: Option<PathBuf>,
    /// Sessions of this coordinator resume on their own after it restarts
    /// (a served coordinator; an embedded one's sessions resume only when a
    /// client asks with `run --resume`).
    pub durable: bool,
    /// How long a `clarify` question waits for its answer.
    pub clarify_timeout: Duration,
    /// After its final answer, how long a session waits for the background
    /// processes it asked to be notified about before it ends.
    pub notice_wait: Duration,
    /// The agent's memory: a top-level session's system prompt carries its
    /// snapshot, taken when the session starts.
    pub memory: Option<Arc<crate::memory::MemoryStore>>,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings {
            llm: LlmConfig::default(),
            max_iterations: DEFAULT_MAX_ITERATIONS,
            delegation: Arc::new(DelegationConfig::default()),
            state_db: None,
            durable: false,
            clarify_timeout: Duration::from_secs(600),
            notice_wait: Duration::from_secs(1800),
            memory: None,
        }
    }
}
