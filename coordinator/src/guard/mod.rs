//! The gate in front of every tool call: the command guard (hardline refusals,
//! dangerous-command approvals) and, later, write approvals.

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::dispatch::{CallContext, CallStatus};
use crate::registry::ToolEntry;

/// Why a call may not run: the result the model reads instead, and its status.
#[derive(Debug, Clone)]
pub struct GateRefusal {
    pub result: String,
    pub status: CallStatus,
}

#[async_trait]
pub trait Gate: Send + Sync {
    /// Admits the call, or refuses it with the result the model reads.
    async fn admit(
        &self,
        ctx: &CallContext,
        entry: &ToolEntry,
        args: &Map<String, Value>,
    ) -> Result<(), GateRefusal>;
}

/// Admits everything. For tests of other pipeline stages only.
pub struct OpenGate;

#[async_trait]
impl Gate for OpenGate {
    async fn admit(
        &self,
        _ctx: &CallContext,
        _entry: &ToolEntry,
        _args: &Map<String, Value>,
    ) -> Result<(), GateRefusal> {
        Ok(())
    }
}
