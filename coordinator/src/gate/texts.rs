//! What the model reads when the gate refuses or holds a call: hermes' texts
//! (`tools/approval.py`) and the terminal tool's result shapes.

use serde::Serialize;

use caduceus_common::result::to_json;

/// hermes' hardline refusal.
pub fn hardline(description: &str) -> String {
    format!(
        "BLOCKED (hardline): {description}. This command is on the unconditional blocklist and cannot be executed via the agent — not even with --yolo, /yolo, approvals.mode=off, or cron approve mode. If you genuinely need to run it, run it yourself in a terminal outside the agent."
    )
}

/// hermes' `sudo -S` refusal; hermes says "Set SUDO_PASSWORD in your .env
/// file", caduceus has no such file.
pub fn sudo_stdin(description: &str) -> String {
    format!(
        "BLOCKED: {description}. Do not pipe passwords to 'sudo -S' — this is a brute-force attack vector. Set SUDO_PASSWORD in the coordinator's and workers' environment if the agent needs passwordless sudo, or run the sudo command manually in your own terminal."
    )
}

/// hermes' refusal for an `approvals.deny` rule.
pub fn deny_rule(pattern: &str) -> String {
    format!(
        "BLOCKED: this command matches the user-defined deny rule '{pattern}' (approvals.deny in config.yaml). It cannot be executed via the agent — not even with --yolo, /yolo, or approvals.mode=off. Do NOT retry or rephrase this command; the user has explicitly forbidden it."
    )
}

const NOT_CONSENTED: &str = "The user has NOT consented to this action. Do NOT retry this command, do NOT rephrase it, and do NOT attempt the same outcome via a different command. Stop the current workflow and wait for the user to respond before taking any further destructive or irreversible action.";

/// hermes' text for an explicit deny, with the user's reason when given.
pub fn denied_by_user(reason: Option<&str>) -> String {
    match reason.map(str::trim).filter(|r| !r.is_empty()) {
        Some(reason) => format!(
            "BLOCKED: Command denied by user. Reason given by the user: \"{reason}\". {NOT_CONSENTED}"
        ),
        None => format!("BLOCKED: Command denied by user. {NOT_CONSENTED}"),
    }
}

/// hermes' text when nobody answered within `approvals.timeout`.
pub fn timed_out() -> String {
    format!(
        "BLOCKED: Command timed out without user response. {NOT_CONSENTED} Silence is not consent."
    )
}

/// The request was withdrawn before anyone answered: the session that was
/// asked stopped listening (it ended or its client went away).
pub fn withdrawn() -> String {
    format!(
        "BLOCKED: Command not approved: the approval request was withdrawn before the user answered (the session stopped listening). {NOT_CONSENTED}"
    )
}

/// `approvals.mode: deny` (modelled on hermes' cron-deny text).
pub fn mode_deny(description: &str) -> String {
    format!(
        "BLOCKED: Command flagged as dangerous ({description}) but approvals.mode is deny, so dangerous commands are never run. Find an alternative approach that avoids this command."
    )
}

/// The tool whose calls are scripts, approved whole (hermes
/// `check_execute_code_guard`), with texts of their own.
const SCRIPT_TOOL: &str = "execute_code";

/// hermes' description of a script put to approval.
pub const SCRIPT_DESCRIPTION: &str = "execute_code script execution. The script can spawn subprocesses or mutate files without passing through terminal command approval; approval is one-shot for this run.";

const SCRIPT_NOT_CONSENTED: &str = "The user has NOT consented to running this code. Do NOT retry, do NOT rephrase the script, and do NOT attempt the same outcome via a different tool.";

/// An explicit deny of `tool`'s call (hermes' execute_code text for scripts).
pub fn denied_for(tool: &str, reason: Option<&str>) -> String {
    if tool != SCRIPT_TOOL {
        return denied_by_user(reason);
    }
    match reason.map(str::trim).filter(|r| !r.is_empty()) {
        Some(reason) => format!(
            "BLOCKED: execute_code script denied by user. Reason given by the user: \"{reason}\". {SCRIPT_NOT_CONSENTED}"
        ),
        None => format!("BLOCKED: execute_code script denied by user. {SCRIPT_NOT_CONSENTED}"),
    }
}

/// Nobody answered `tool`'s approval in time.
pub fn timed_out_for(tool: &str) -> String {
    if tool != SCRIPT_TOOL {
        return timed_out();
    }
    format!(
        "BLOCKED: execute_code script timed out without user response. {SCRIPT_NOT_CONSENTED} Silence is not consent."
    )
}

/// `tool`'s approval request was withdrawn before anyone answered.
pub fn withdrawn_for(tool: &str) -> String {
    if tool != SCRIPT_TOOL {
        return withdrawn();
    }
    format!(
        "BLOCKED: execute_code script not approved: the approval request was withdrawn before the user answered (the session stopped listening). {SCRIPT_NOT_CONSENTED}"
    )
}

/// `approvals.mode: deny` for `tool`'s call.
pub fn mode_deny_for(tool: &str, description: &str) -> String {
    if tool != SCRIPT_TOOL {
        return mode_deny(description);
    }
    format!(
        "BLOCKED: execute_code script flagged for approval ({description}) but approvals.mode is deny, so it does not run. Use normal tools instead."
    )
}

/// A session whose standing answer is deny, for `tool`'s call.
pub fn auto_denied_for(tool: &str, description: &str) -> String {
    if tool != SCRIPT_TOOL {
        return auto_denied(description);
    }
    format!(
        "BLOCKED: execute_code script flagged for approval ({description}) and this subagent may not run it (delegation.subagent_auto_approve is off). {SCRIPT_NOT_CONSENTED}"
    )
}

/// The refusal of a script whose text holds a hardline command.
pub fn script_hardline(description: &str) -> String {
    format!(
        "BLOCKED (hardline): the script contains {description}. That command is on the unconditional blocklist and cannot be executed via the agent, from a script or otherwise — not even with approvals.mode=off. If you genuinely need to run it, run it yourself in a terminal outside the agent."
    )
}

/// execute_code's refusal shape (hermes: `{"status": "error", "error": …,
/// "tool_calls_made": 0, "duration_seconds": 0}`).
pub fn script_blocked_result(message: &str) -> String {
    to_json(&serde_json::json!({
        "status": "error",
        "error": message,
        "tool_calls_made": 0,
        "duration_seconds": 0,
    }))
}

/// A script held for approval: execute_code's shape with hermes' pending
/// fields, the approval id and its expiry.
pub fn script_pending_result(
    id: &str,
    description: &str,
    allow_permanent: bool,
    expires_in_secs: u64,
) -> String {
    let error = format!(
        "Approval required: this execute_code script was flagged ({description}) and did NOT run. Approval request {id} is waiting for the user (it expires in {expires_in_secs}s). Tell the user what the script does and why. Once they approve it (caduceus approvals approve {id}), run exactly the same script again and it will run. Until then do NOT retry it, do NOT rephrase it, and do NOT attempt the same outcome via a different tool."
    );
    to_json(&serde_json::json!({
        "status": "error",
        "error": error,
        "tool_calls_made": 0,
        "duration_seconds": 0,
        "approval_pending": true,
        "approval_id": id,
        "description": description,
        "pattern_key": SCRIPT_TOOL,
        "allow_permanent": allow_permanent,
        "expires_in_s": expires_in_secs,
    }))
}

/// The `approval` field of a result approved by a session's standing answer.
pub fn auto_approval_note(description: &str) -> String {
    format!(
        "Command required approval ({description}) and was approved automatically for this subagent (delegation.subagent_auto_approve)."
    )
}

/// A session whose standing answer is deny (a delegated child by default in
/// hermes).
pub fn auto_denied(description: &str) -> String {
    format!(
        "BLOCKED: Command flagged as dangerous ({description}) and this subagent may not run dangerous commands (delegation.subagent_auto_approve is off). {NOT_CONSENTED}"
    )
}

/// The `approval` field of a result that ran after a person approved it.
pub fn approval_note(description: &str) -> String {
    format!("Command required approval ({description}) and was approved by the user.")
}

/// The `error` of a `pending_approval` result: what happened, and how the
/// approval turns into a run.
fn pending(description: &str, id: &str, expires_in_secs: u64) -> String {
    format!(
        "Approval required: this command was flagged as dangerous ({description}) and did NOT run. Approval request {id} is waiting for the user (it expires in {expires_in_secs}s). Tell the user what you want to run and why. Once they approve it (caduceus approvals approve {id}), run exactly the same command again and it will run. Until then do NOT retry it, do NOT rephrase it, and do NOT attempt the same outcome via a different command."
    )
}

#[derive(Serialize)]
struct Blocked<'a> {
    output: &'a str,
    exit_code: i32,
    error: &'a str,
    status: &'a str,
}

/// The terminal tool's refusal: `{"output": "", "exit_code": -1, "error": …,
/// "status": "blocked"}`.
pub fn blocked_result(message: &str) -> String {
    to_json(&Blocked {
        output: "",
        exit_code: -1,
        error: message,
        status: "blocked",
    })
}

/// A call held for approval, as the model reads it.
#[derive(Serialize)]
struct PendingResult<'a> {
    output: &'a str,
    exit_code: i32,
    error: &'a str,
    status: &'a str,
    approval_pending: bool,
    approval_id: &'a str,
    command: &'a str,
    description: &'a str,
    pattern_key: &'a str,
    smart_denied: bool,
    allow_permanent: bool,
    expires_in_s: u64,
}

/// hermes' pending shape plus the approval id and its expiry.
pub fn pending_result(
    id: &str,
    command: &str,
    description: &str,
    pattern_key: &str,
    allow_permanent: bool,
    expires_in_secs: u64,
) -> String {
    let error = pending(description, id, expires_in_secs);
    to_json(&PendingResult {
        output: "",
        exit_code: -1,
        error: &error,
        status: "pending_approval",
        approval_pending: true,
        approval_id: id,
        command,
        description,
        pattern_key,
        smart_denied: false,
        allow_permanent,
        expires_in_s: expires_in_secs,
    })
}

#[cfg(test)]
#[path = "texts_tests.rs"]
mod tests;

/// An edit a person denied (hermes' ACP text, with the reason when given).
pub fn edit_denied(reason: Option<&str>) -> String {
    match reason.map(str::trim).filter(|r| !r.is_empty()) {
        Some(reason) => format!(
            "Edit approval denied by the user; the file was not modified. Reason given by the user: \"{reason}\"."
        ),
        None => "Edit approval denied by the user; the file was not modified.".to_owned(),
    }
}

/// An edit nobody answered within `approvals.timeout`.
pub fn edit_timed_out() -> String {
    "Edit approval timed out without a user response; the file was not modified.".to_owned()
}

/// An edit whose request was withdrawn (the session stopped listening).
pub fn edit_withdrawn() -> String {
    "Edit approval was withdrawn before the user answered (the session stopped listening); the file was not modified.".to_owned()
}

/// An edit a standing answer refused (a delegated child nobody watches).
pub fn edit_auto_denied() -> String {
    "Edit approval denied: nobody is watching this session to approve edits (approvals.edits is ask); the file was not modified.".to_owned()
}

/// The note on an approved edit's result.
pub fn edit_approved(files: &str) -> String {
    format!("Edit of {files} required approval and was approved by the user.")
}
