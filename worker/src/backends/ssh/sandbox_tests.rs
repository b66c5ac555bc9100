use super::parse_pid_line;

#[test]
fn pid_line_is_parsed_once_complete() {
    assert_eq!(parse_pid_line(b"\x1ePID 42\x1e\nhello"), Some((42, 9)));
    assert_eq!(parse_pid_line(b"\x1ePID 42\x1e"), None);
    assert_eq!(parse_pid_line(b"\x1ePID 4"), None);
    assert_eq!(parse_pid_line(b"noise"), None);
}
