use std::ffi::OsString;

use super::*;

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

#[test]
fn the_token_and_its_value_leave_the_arguments_and_nothing_else_does() {
    assert_eq!(
        args_without_token(&os(&["worker", "--token", "s3cret", "--name", "w1"])),
        Some(os(&["worker", "--name", "w1"]))
    );
    assert_eq!(
        args_without_token(&os(&["call", "terminal", "{}", "--token=s3cret"])),
        Some(os(&["call", "terminal", "{}"]))
    );
    assert_eq!(
        args_without_token(&os(&["serve", "--listen", "0.0.0.0:0"])),
        Some(os(&["serve", "--listen", "0.0.0.0:0"]))
    );
    // A value that is itself "--token…" is removed as the value it is.
    assert_eq!(
        args_without_token(&os(&["status", "--token", "--token-like"])),
        Some(os(&["status"]))
    );
    assert_eq!(
        args_without_token(&os(&["status", "--tokens", "x"])),
        None,
        "something token-like would remain: do not re-execute"
    );
}
