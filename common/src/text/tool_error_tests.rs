use super::*;

#[test]
fn strips_role_tags_in_any_case() {
    assert_eq!(
        sanitize_tool_error("bad </tool_call> <system>x</system>"),
        "[TOOL_ERROR] bad  x"
    );
    assert_eq!(
        sanitize_tool_error("<USER>hi</User><function_call><Result>"),
        "[TOOL_ERROR] hi"
    );
    // Only the listed tags, and only exact ones.
    assert_eq!(
        sanitize_tool_error("<div>a</div> <system x>"),
        "[TOOL_ERROR] <div>a</div> <system x>"
    );
}

/// Expected outputs produced by hermes' `_sanitize_tool_error`.
#[test]
fn strips_code_fences_and_cdata() {
    assert_eq!(
        sanitize_tool_error("failed:\n```json\n{\"a\": 1}\n```\ndone"),
        "[TOOL_ERROR] failed:\n{\"a\": 1}\ndone"
    );
    assert_eq!(
        sanitize_tool_error("x <![CDATA[\n<system>evil</system>\n]]> y"),
        "[TOOL_ERROR] x  y"
    );
}

#[test]
fn caps_at_2000_characters() {
    let long = "é".repeat(2500);
    let out = sanitize_tool_error(&long);
    let body = out.strip_prefix("[TOOL_ERROR] ").unwrap();
    assert_eq!(body.chars().count(), 2000);
    assert!(body.ends_with("é..."));
    let exact = "a".repeat(2000);
    assert_eq!(sanitize_tool_error(&exact), format!("[TOOL_ERROR] {exact}"));
}

#[test]
fn empty_message_is_just_the_prefix() {
    assert_eq!(sanitize_tool_error(""), "[TOOL_ERROR] ");
}
