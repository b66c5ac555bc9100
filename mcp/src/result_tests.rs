use serde_json::json;

use super::*;

fn text(t: &str) -> Value {
    json!({"type": "text", "text": t})
}

fn body(out: &CallOutput) -> (CallStatus, String) {
    let reply = render(out);
    (reply.status, reply.body)
}

#[test]
fn text_blocks_join_with_newlines() {
    let out = CallOutput {
        content: vec![text("one"), text("two")],
        ..Default::default()
    };
    assert_eq!(
        body(&out),
        (CallStatus::Ok, r#"{"result": "one\ntwo"}"#.to_owned())
    );
}

#[test]
fn structured_content_beside_text_unless_it_is_the_text() {
    let both = CallOutput {
        content: vec![text("3 items")],
        structured: Some(json!({"count": 3})),
        is_error: false,
    };
    assert_eq!(
        body(&both).1,
        r#"{"result": "3 items", "structuredContent": {"count": 3}}"#
    );
    let dual = CallOutput {
        content: vec![text("{\n  \"count\": 3\n}")],
        structured: Some(json!({"count": 3})),
        is_error: false,
    };
    assert_eq!(body(&dual).1, r#"{"result": "{\n  \"count\": 3\n}"}"#);
    let only = CallOutput {
        content: vec![],
        structured: Some(json!({"count": 3})),
        is_error: false,
    };
    assert_eq!(body(&only).1, r#"{"result": {"count": 3}}"#);
}

#[test]
fn errors_carry_the_tool_text_or_hermes_default() {
    let failed = CallOutput {
        content: vec![text("no such repo: é")],
        is_error: true,
        ..Default::default()
    };
    assert_eq!(
        body(&failed),
        (
            CallStatus::Error,
            r#"{"error": "no such repo: é"}"#.to_owned()
        )
    );
    let silent = CallOutput {
        is_error: true,
        ..Default::default()
    };
    assert_eq!(
        body(&silent).1,
        r#"{"error": "MCP tool returned an error"}"#
    );
}

#[test]
fn other_blocks_are_named_not_dropped() {
    let out = CallOutput {
        content: vec![
            json!({"type": "image", "mimeType": "image/png", "data": "AAAA"}),
            json!({"type": "resource", "resource": {"uri": "file:///a", "text": "inline"}}),
            json!({"type": "resource_link", "uri": "file:///b"}),
            json!({"type": "hologram"}),
        ],
        ..Default::default()
    };
    assert_eq!(
        body(&out).1,
        r#"{"result": "[image/png image content, 4 bytes base64; not shown]\ninline\n[resource link: file:///b]\n[unsupported MCP content block of type 'hologram' dropped]"}"#
    );
}
