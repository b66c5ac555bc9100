use super::*;

fn result(body: &str) -> ToolResult {
    ToolResult::new("terminal".to_owned(), ToolReply::ok(body))
}

#[test]
fn a_result_without_notices_is_the_tool_document() {
    let body = r#"{"output": "hi", "exit_code": 0, "error": null}"#;
    assert_eq!(result(body).render(), body);
}

#[test]
fn notices_are_fields_in_hermes_spelling() {
    let mut done = result(r#"{"output": "é", "exit_code": 0, "error": null}"#);
    done.approval = Some("Command required approval (x) and was approved by the user.".into());
    done.environment_reset = Some("fresh \"env\"".into());
    assert_eq!(
        done.render(),
        r#"{"output": "é", "exit_code": 0, "error": null, "approval": "Command required approval (x) and was approved by the user.", "environment_reset": "fresh \"env\""}"#
    );
    let mut empty = result("{}");
    empty.environment_reset = Some("gone".into());
    assert_eq!(empty.render(), r#"{"environment_reset": "gone"}"#);
}

#[test]
fn a_preview_gets_the_notice_as_a_leading_line() {
    let mut done = result("<persisted-output>\nsaved\n</persisted-output>");
    done.environment_reset = Some("gone".into());
    assert_eq!(
        done.render(),
        "[gone]\n<persisted-output>\nsaved\n</persisted-output>"
    );
}
