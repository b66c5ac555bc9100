//! The gate in front of every tool call: the command guard (hardline refusals,
//! `sudo -S`, `approvals.deny` rules, dangerous-command approvals). Edit
//! approvals (`approvals.edits: ask`) go through the same [`Approvals`], asked
//! by the call pipeline once the worker has previewed the edit's diff.
//!
//! - [`Gate`]: what the call pipeline asks before routing a call.
//! - [`CommandGate`]: the real gate (see `command_gate.rs` for the order of
//!   the checks and the coordinator README, section "Command guard and
//!   approvals", for the contract).
//! - [`Approvals`]: pending approvals, the answers to them, session grants and
//!   the permanent allowlist; the API the session side and the Control
//!   service use.
//! - [`OpenGate`]: admits everything (tests of other pipeline stages).

mod allowlist_file;
mod approvals;
mod command_gate;
mod settings;
pub mod texts;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::call::{CallContext, CallStatus};
use crate::registry::ToolEntry;

pub use allowlist_file::{AllowlistFile, AllowlistFileError};
pub use approvals::{
    AnswerError, Answered, ApprovalListener, ApprovalRequest, Approvals, AutoAnswer, Decision,
    ListenerGuard, PendingApproval, Scope,
};
pub use approvals::{EDIT_KEY, EditQuery};
pub use command_gate::CommandGate;
pub use settings::{
    ApprovalMode, ApprovalSettings, ContainerApprovals, EditApprovals, is_container_backend,
};

/// One call as the gate sees it.
#[derive(Debug, Clone, Copy)]
pub struct GateCall<'a> {
    pub ctx: &'a CallContext,
    pub entry: &'a ToolEntry,
    /// Arguments after coercion.
    pub args: &'a Map<String, Value>,
    /// The backend the call's environment runs on (the registry's
    /// `terminal_backend`), which decides whether container relaxations apply.
    pub backend: &'a str,
}

/// The call may run. `approval_note`, when set, goes with the result as
/// `"approval"` (hermes: "Command required approval (…) and was approved by
/// the user."; see `ToolResult::render`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admission {
    pub approval_note: Option<String>,
}

/// Why a call may not run: the result the model reads instead, and its status.
#[derive(Debug, Clone)]
pub struct GateRefusal {
    pub result: String,
    pub status: CallStatus,
}

#[async_trait]
pub trait Gate: Send + Sync {
    /// Admits the call, or refuses it with the result the model reads. May
    /// wait (up to `approvals.timeout`) for a person to answer an approval.
    async fn admit(&self, call: &GateCall<'_>) -> Result<Admission, GateRefusal>;

    /// The approval state behind this gate, for `ListApprovals`,
    /// `AnswerApproval` and session listeners. `None`: nothing to approve.
    fn approvals(&self) -> Option<Arc<Approvals>> {
        None
    }
}

/// Admits everything. For tests of other pipeline stages only.
pub struct OpenGate;

#[async_trait]
impl Gate for OpenGate {
    async fn admit(&self, _call: &GateCall<'_>) -> Result<Admission, GateRefusal> {
        Ok(Admission::default())
    }
}
