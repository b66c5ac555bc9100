#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn a_valid_traceparent_round_trips() {
    let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let parsed = TraceParent::parse(text).unwrap();
    assert_eq!(parsed.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(parsed.span_id_hex(), "00f067aa0ba902b7");
    assert_eq!(parsed.flags, 1);
    assert_eq!(parsed.to_string(), text);
}

#[test]
fn malformed_ones_are_refused() {
    for bad in [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ] {
        assert_eq!(TraceParent::parse(bad), None, "{bad}");
    }
}

#[test]
fn a_later_version_is_read_by_its_first_fields() {
    let parsed =
        TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what").unwrap();
    assert_eq!(parsed.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
}

#[test]
fn a_child_keeps_the_trace_and_gets_its_own_span() {
    let root = TraceParent::new_root();
    let child = root.child();
    assert_eq!(child.trace_id, root.trace_id);
    assert_ne!(child.parent_id, root.parent_id);
    assert_eq!(TraceParent::parse(&child.to_string()), Some(child));
}
