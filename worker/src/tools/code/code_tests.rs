#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

#[test]
fn every_sandbox_tool_has_a_stub_and_only_offered_ones_are_generated() {
    for tool in caduceus_common::execute_code::SANDBOX_TOOLS {
        assert!(STUBS.iter().any(|s| s.name == *tool), "no stub for {tool}");
    }
    let source = module_source(&["read_file".to_owned(), "terminal".to_owned()]);
    assert!(source.contains("\ndef read_file(path: str, offset: int = 1, limit: int = 2000):"));
    assert!(source.contains("return _call(\"terminal\", {\"command\": command"));
    assert!(!source.contains("def write_file("), "{source}");
    assert!(source.contains("def json_parse(") && source.contains("def retry("));
}

fn finished(ending: Ending, exit_code: i32, captured: Captured) -> Value {
    result_document(&Finished {
        ending,
        exit_code,
        tool_calls_made: 3,
        duration: Duration::from_millis(1234),
        timeout: Duration::from_secs(300),
        captured,
    })
}

#[test]
fn a_successful_run_has_hermes_keys_in_order() {
    let doc = finished(
        Ending::Exited,
        0,
        Captured {
            stdout: "hi\n".to_owned(),
            stdout_total: 3,
            ..Captured::default()
        },
    );
    let keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "status",
            "output",
            "exit_code",
            "tool_calls_made",
            "duration_seconds",
            "stdout_truncated",
            "stdout_bytes_captured",
            "stdout_bytes_total",
            "stdout_bytes_omitted"
        ]
    );
    assert_eq!(doc["status"], "success");
    assert_eq!(doc["duration_seconds"], 1.23);
}

#[test]
fn failure_timeout_and_truncation_read_as_hermes_says() {
    let failed = finished(
        Ending::Exited,
        1,
        Captured {
            stderr: "Traceback ...\nValueError: x\n".to_owned(),
            ..Captured::default()
        },
    );
    assert_eq!(failed["status"], "error");
    assert_eq!(failed["error"], "Script exited with code 1");
    assert_eq!(
        failed["output"],
        "\n--- stderr ---\nTraceback ...\nValueError: x\n"
    );

    let timed_out = finished(Ending::Timeout, -1, Captured::default());
    assert_eq!(timed_out["status"], "timeout");
    assert_eq!(
        timed_out["error"],
        "Script timed out after 300s and was killed."
    );
    assert_eq!(
        timed_out["output"],
        "⏰ Script timed out after 300s and was killed."
    );

    let cut = finished(
        Ending::Exited,
        0,
        Captured {
            stdout: "head…tail".to_owned(),
            stdout_total: 80_000,
            spill_path: Some("/tmp/caduceus_exec_x/stdout".to_owned()),
            ..Captured::default()
        },
    );
    assert_eq!(cut["stdout_truncated"], true);
    assert_eq!(cut["stdout_bytes_captured"], 50_000);
    assert_eq!(cut["stdout_bytes_omitted"], 30_000);
    assert_eq!(cut["stdout_spill_path"], "/tmp/caduceus_exec_x/stdout");
    assert!(
        cut["warning"]
            .as_str()
            .unwrap()
            .contains("read_file(path=\"/tmp/caduceus_exec_x/stdout\", offset=...)")
    );
}

#[test]
fn the_script_environment_drops_secret_names_even_when_passed_through() {
    let base = [("PATH", "/bin"), ("NOTION_TOKEN", "x"), ("HOME", "/root")]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
    let env = script_env(&base);
    let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        [
            "PATH",
            "HOME",
            "PYTHONDONTWRITEBYTECODE",
            "PYTHONUNBUFFERED"
        ]
    );
}

#[test]
fn the_bootstraps_report_is_cut_like_the_workers_own_read() {
    let reported = Reported {
        stdout_total: 70_002,
        head: "A".repeat(20_000),
        tail: "B".repeat(30_000),
        stderr: String::new(),
    };
    let shown = reported.shown("/tmp/caduceus_exec_1");
    assert_eq!(
        shown.spill_path.as_deref(),
        Some("/tmp/caduceus_exec_1/stdout")
    );
    assert!(shown.stdout.contains(
        "A\n\n... [OUTPUT TRUNCATED - 20,002 bytes omitted out of 70,002 total] ...\n\nB"
    ));
}
