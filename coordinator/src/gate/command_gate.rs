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
//! An `execute_code` script is read by the guard as a whole before it runs
//! (see [`CommandGate::check_script`]).
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
    /// An `execute_code` script, approved as a whole (hermes
    /// `check_execute_code_guard`) through the same approvals.
    Script(&'a str),
}

/// The part of a call the guard checks, if any. A `command` that is not a
/// string is left to the tool, which refuses it.
fn subject<'a>(call: &GateCall<'a>) -> Option<Subject<'a>> {
    match call.entry.name.as_str() {
        "terminal" => match call.args.get("command") {
            Some(Value::String(command)) => Some(Subject::Command(command)),
            _ => None,
        },
        crate::registry::execute_code::NAME => match call.args.get("code") {
            Some(Value::String(code)) => Some(Subject::Script(code)),
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

impl CommandGate {
    /// An `execute_code` script. Its own calls of `terminal` and the file
    /// tools meet the gate one by one; what it does directly (`subprocess`,
    /// `os.system`) does not, so the commands its text spells out (its
    /// string literals, `caduceus_guard::check_script_in`) are read by the
    /// guard first: a hardline command in it refuses the script, a dangerous one
    /// puts the whole script to approval before it runs (key
    /// `execute_code`, hermes' description: a session or permanent grant
    /// covers every script, as in hermes). hermes asks for every script in
    /// its gateway/ask contexts; caduceus asks when the guard flags the text,
    /// since every caduceus session can be asked and a prompt per script
    /// would ask for every harmless one. The container relaxation and
    /// `approvals.mode: off` apply as to commands.
    async fn check_script(
        &self,
        call: &GateCall<'_>,
        code: &str,
    ) -> Result<Admission, GateRefusal> {
        let settings = self.approvals.settings();
        let flagged = match caduceus_guard::check_script_in(code, &self.homes) {
            Verdict::Hardline { description } => {
                tracing::warn!(description, "hardline command in an execute_code script");
                return Err(script_blocked(&texts::script_hardline(&description)));
            }
            Verdict::Approve { description, .. } => description,
            _ => return Ok(Admission::default()),
        };
        if settings.mode == ApprovalMode::Off {
            return Ok(Admission::default());
        }
        if is_container_backend(call.backend) && settings.containers == ContainerApprovals::Off {
            return Ok(Admission::default());
        }
        let description = format!("script contains: {flagged}");
        // hermes' spelling of a script as one command.
        let command = format!("execute_code <<'PY'\n{code}\nPY");
        let ruling = self
            .approvals
            .request(Query {
                tool: &call.entry.name,
                command: &command,
                description: &format!("{description}. {}", texts::SCRIPT_DESCRIPTION),
                pattern_key: crate::registry::execute_code::NAME,
                task_id: &call.ctx.task_id,
                session_id: call.ctx.session_id.as_deref().filter(|s| !s.is_empty()),
            })
            .await;
        match ruling {
            Ruling::Admit { note } => Ok(Admission {
                approval_note: note,
            }),
            Ruling::Refuse(message) => Err(script_blocked(&message)),
            Ruling::Pending {
                id,
                expires_in,
                allow_permanent,
                ..
            } => Err(GateRefusal {
                result: texts::script_pending_result(
                    &id,
                    &description,
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
            Some(Subject::Script(code)) => self.check_script(call, code).await,
            None => Ok(Admission::default()),
        }
    }

    fn approvals(&self) -> Option<Arc<Approvals>> {
        Some(self.approvals.clone())
    }
}

fn script_blocked(message: &str) -> GateRefusal {
    GateRefusal {
        result: texts::script_blocked_result(message),
        status: CallStatus::Blocked,
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
