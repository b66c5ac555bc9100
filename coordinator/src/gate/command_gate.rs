//! The command guard in the call pipeline. For a call that runs a shell
//! command (`terminal`, foreground or background), in this order:
//!
//! 1. **hardline** (`caduceus_guard`): refused in every mode and on every
//!    backend — hermes' "BLOCKED (hardline): …" text;
//! 2. **`sudo -S`** without a configured sudo password: refused;
//! 3. **`approvals.deny`** globs: refused;
//! 4. a command the guard does not flag runs;
//! 5. `approvals.mode: off`, or a container backend with
//!    `approvals.containers: off`: runs;
//! 6. [`Approvals`] decides: an earlier answer to this very command (it
//!    runs, or reads the deny/timeout text), a session grant, then
//!    **`command_allowlist`** (the command, a glob, or its approval key);
//!    `approvals.mode: deny` refuses; otherwise a person decides — a
//!    listening session's client, or, with nobody attached,
//!    `pending_approval`.
//!
//! Refusals have the terminal tool's shape
//! `{"output": "", "exit_code": -1, "error": …, "status": "blocked"}`.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use caduceus_guard::policy::{deny_rule_match, sudo_stdin_guard};
use caduceus_guard::{GuardContext, Verdict};

use super::approvals::{Approvals, Query, Ruling};
use super::settings::{ApprovalMode, ApprovalSettings, ContainerApprovals, is_container_backend};
use super::{Admission, Gate, GateCall, GateRefusal, texts};
use crate::call::CallStatus;

/// What the guard reads from a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subject<'a> {
    /// A shell command (`terminal`'s `command`).
    Command(&'a str),
    // `execute_code` joins here with its script, checked by its own rules
    // (hermes `check_execute_code_guard`) but answered through the same
    // approvals.
}

/// The part of a call the guard checks, if any. A `command` that is not a
/// string is left to the tool, which refuses it.
fn subject<'a>(call: &GateCall<'a>) -> Option<Subject<'a>> {
    match call.entry.name.as_str() {
        "terminal" => match call.args.get("command") {
            Some(Value::String(command)) => Some(Subject::Command(command)),
            _ => None,
        },
        _ => None,
    }
}

/// The real gate: the command guard plus approvals.
pub struct CommandGate {
    approvals: Arc<Approvals>,
    /// The homes the guard reads as `~` and `$CADUCEUS_HOME`.
    homes: GuardContext,
}

/// This process's `$HOME` and `$CADUCEUS_HOME`: a local sandbox runs as this user,
/// so its `/srv/agent/.bashrc` is `~/.bashrc` and `$CADUCEUS_HOME/config.yaml` is the
/// live configuration, however the command spells them.
fn guard_context() -> GuardContext {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .filter(|v| v.starts_with('/') && v.len() > 1)
    };
    GuardContext {
        homes: var("HOME").into_iter().collect(),
        agent_homes: var("CADUCEUS_HOME").into_iter().collect(),
    }
}

impl CommandGate {
    pub fn new(settings: ApprovalSettings) -> Self {
        CommandGate {
            approvals: Approvals::new(settings),
            homes: guard_context(),
        }
    }

    async fn check_command(
        &self,
        call: &GateCall<'_>,
        command: &str,
    ) -> Result<Admission, GateRefusal> {
        let settings = self.approvals.settings();
        let verdict = caduceus_guard::check_command_in(command, &self.homes);
        if let Verdict::Hardline { description } = &verdict {
            tracing::warn!(description, command = %preview(command), "hardline block");
            return Err(blocked(&texts::hardline(description)));
        }
        if !settings.sudo_password_configured
            && let Some(description) = sudo_stdin_guard(command)
        {
            tracing::warn!(command = %preview(command), "sudo stdin guard block");
            return Err(blocked(&texts::sudo_stdin(description)));
        }
        if let Some(rule) = deny_rule_match(command, &settings.deny) {
            tracing::warn!(rule, command = %preview(command), "approvals.deny block");
            return Err(blocked(&texts::deny_rule(rule)));
        }
        let Verdict::Approve {
            description,
            pattern_key,
        } = verdict
        else {
            return Ok(Admission::default());
        };
        if settings.mode == ApprovalMode::Off {
            return Ok(Admission::default());
        }
        if is_container_backend(call.backend) && settings.containers == ContainerApprovals::Off {
            return Ok(Admission::default());
        }
        let ruling = self
            .approvals
            .request(Query {
                tool: &call.entry.name,
                command,
                description: &description,
                pattern_key: &pattern_key,
                task_id: &call.ctx.task_id,
                session_id: call.ctx.session_id.as_deref().filter(|s| !s.is_empty()),
            })
            .await;
        match ruling {
            Ruling::Admit { note } => Ok(Admission {
                approval_note: note,
            }),
            Ruling::Refuse(message) => Err(blocked(&message)),
            Ruling::Pending {
                id,
                command,
                expires_in,
                allow_permanent,
            } => Err(GateRefusal {
                result: texts::pending_result(
                    &id,
                    &command,
                    &description,
                    &pattern_key,
                    allow_permanent,
                    expires_in.as_secs_f64().ceil() as u64,
                ),
                status: CallStatus::PendingApproval,
            }),
        }
    }
}

#[async_trait]
impl Gate for CommandGate {
    async fn admit(&self, call: &GateCall<'_>) -> Result<Admission, GateRefusal> {
        match subject(call) {
            Some(Subject::Command(command)) => self.check_command(call, command).await,
            None => Ok(Admission::default()),
        }
    }

    fn approvals(&self) -> Option<Arc<Approvals>> {
        Some(self.approvals.clone())
    }
}

fn blocked(message: &str) -> GateRefusal {
    GateRefusal {
        result: texts::blocked_result(message),
        status: CallStatus::Blocked,
    }
}

/// The start of a command, for logs.
fn preview(command: &str) -> String {
    let start: String = command.chars().take(200).collect();
    caduceus_common::redact::redact(&start, caduceus_common::redact::RedactMode::General)
        .into_owned()
}

#[cfg(test)]
#[path = "command_gate_tests.rs"]
mod tests;
