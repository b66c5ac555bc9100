use serde_json::Value;

use super::*;

#[test]
fn blocked_result_has_the_terminal_refusal_shape() {
    assert_eq!(
        blocked_result("BLOCKED: no"),
        r#"{"output": "", "exit_code": -1, "error": "BLOCKED: no", "status": "blocked"}"#
    );
}

#[test]
fn hermes_texts_are_exact() {
    assert_eq!(
        hardline("system shutdown/reboot"),
        "BLOCKED (hardline): system shutdown/reboot. This command is on the unconditional blocklist and cannot be executed via the agent — not even with --yolo, /yolo, approvals.mode=off, or cron approve mode. If you genuinely need to run it, run it yourself in a terminal outside the agent."
    );
    assert_eq!(
        deny_rule("git push*"),
        "BLOCKED: this command matches the user-defined deny rule 'git push*' (approvals.deny in config.yaml). It cannot be executed via the agent — not even with --yolo, /yolo, or approvals.mode=off. Do NOT retry or rephrase this command; the user has explicitly forbidden it."
    );
    assert_eq!(
        denied_by_user(None),
        "BLOCKED: Command denied by user. The user has NOT consented to this action. Do NOT retry this command, do NOT rephrase it, and do NOT attempt the same outcome via a different command. Stop the current workflow and wait for the user to respond before taking any further destructive or irreversible action."
    );
    assert_eq!(
        timed_out(),
        "BLOCKED: Command timed out without user response. The user has NOT consented to this action. Do NOT retry this command, do NOT rephrase it, and do NOT attempt the same outcome via a different command. Stop the current workflow and wait for the user to respond before taking any further destructive or irreversible action. Silence is not consent."
    );
}

#[test]
fn a_deny_reason_is_relayed_and_a_blank_one_is_not() {
    assert!(
        denied_by_user(Some("use the staging box"))
            .starts_with("BLOCKED: Command denied by user. Reason given by the user: \"use the staging box\". The user has NOT consented")
    );
    assert_eq!(denied_by_user(Some("  ")), denied_by_user(None));
}

#[test]
fn pending_result_carries_the_id_and_hermes_fields() {
    let result = pending_result(
        "appr_0123456789ab",
        "rm -rf build",
        "recursive delete",
        "recursive delete",
        true,
        60,
    );
    let value: Value = serde_json::from_str(&result).unwrap();
    assert_eq!(value["output"], "");
    assert_eq!(value["exit_code"], -1);
    assert_eq!(value["status"], "pending_approval");
    assert_eq!(value["approval_pending"], true);
    assert_eq!(value["approval_id"], "appr_0123456789ab");
    assert_eq!(value["command"], "rm -rf build");
    assert_eq!(value["description"], "recursive delete");
    assert_eq!(value["pattern_key"], "recursive delete");
    assert_eq!(value["smart_denied"], false);
    assert_eq!(value["allow_permanent"], true);
    assert_eq!(value["expires_in_s"], 60);
    let error = value["error"].as_str().unwrap();
    assert!(error.contains("did NOT run"), "{error}");
    assert!(
        error.contains("caduceus approvals approve appr_0123456789ab"),
        "{error}"
    );
}
