#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;

use super::*;

#[test]
fn last_lines_keeps_the_newest_whole_lines_and_the_offset_after_them() {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    write!(file, "{{\"n\":1}}\n{{\"n\":2}}\n{{\"n\":3}}\n{{\"partial\"").unwrap();
    let (last, offset) = last_lines(File::open(file.path()).unwrap(), 2).unwrap();
    assert_eq!(last, ["{\"n\":2}", "{\"n\":3}"]);
    assert_eq!(offset, 24, "the unfinished line is read later");
    let (none, _) = last_lines(File::open(file.path()).unwrap(), 0).unwrap();
    assert!(none.is_empty());
}

#[test]
fn a_readable_line_names_the_call_and_its_answer() {
    let call = r#"{"time":"2026-12-02T03:27:48.123Z","event":"tool_call","token":"ops","session":null,"task":"t1","tool":"terminal","arguments":{"command":"ls"},"verdict":"approved","worker":"w1","status":"ok","duration_ms":12}"#;
    assert_eq!(
        readable(call),
        r#"2026-12-02T03:27:48.123Z tool_call tool=terminal status=ok verdict=approved token=ops task=t1 worker=w1 duration_ms=12 arguments={"command":"ls"}"#
    );
    let approval = r#"{"time":"T","event":"approval","approval_id":"ap_1","answered_by":"ops","decision":"approve","scope":"once","accepted":true,"task":"t1","tool":"terminal","command":"rm -rf build"}"#;
    assert_eq!(
        readable(approval),
        "T approval approval_id=ap_1 decision=approve scope=once answered_by=ops accepted=true task=t1 tool=terminal command=rm -rf build"
    );
    assert_eq!(readable("not json"), "not json");
}
