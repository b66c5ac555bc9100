use super::*;

#[test]
fn env_dump_commands_are_recognised_in_any_segment() {
    for command in [
        "env",
        "printenv",
        "set",
        "export -p",
        "declare -x",
        "env | grep KEY",
        "cd /x && printenv HOME",
        "ls; env",
        "true || set",
        "  env  ",
        "'env'",
        "\"printenv\"",
        "/usr/bin/env",
    ] {
        assert!(is_env_dump_command(command), "{command:?}");
    }
}

#[test]
fn other_commands_are_not_env_dumps() {
    for command in [
        "",
        "cat .env",
        "echo env",
        "FOO=1 env",
        "environment",
        "sudo env",
        "grep -r set .",
        "python -c 'import os; print(os.environ)'",
    ] {
        assert!(!is_env_dump_command(command), "{command:?}");
    }
}

#[test]
fn broken_quoting_falls_back_to_whitespace_words() {
    // shlex rejects the segment, so the raw first word `'env'` is compared.
    assert!(!is_env_dump_command("'env' 'unclosed"));
    assert!(is_env_dump_command("env 'unclosed"));
    assert!(is_env_dump_command("env \\"));
}

#[test]
fn shell_words_follow_posix_quoting() {
    assert_eq!(
        shell_words(r#"a "b c" 'd e' f\ g "h\"i" "j\k" ''"#),
        Some(vec![
            "a".to_owned(),
            "b c".to_owned(),
            "d e".to_owned(),
            "f g".to_owned(),
            "h\"i".to_owned(),
            "j\\k".to_owned(),
            String::new(),
        ])
    );
    assert_eq!(shell_words("'open"), None);
    assert_eq!(shell_words("trailing\\"), None);
}
