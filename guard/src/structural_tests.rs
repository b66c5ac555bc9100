use super::*;

fn v(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn interpreter_families_follow_hermes_names() {
    for (name, family) in [
        ("python", Interpreter::Python),
        ("python3.11", Interpreter::Python),
        ("py.exe", Interpreter::Python),
        ("nodejs", Interpreter::Node),
        ("perl5.36", Interpreter::Perl),
        ("ruby3.2", Interpreter::Ruby),
        ("php8.1", Interpreter::Php),
        ("pwsh.exe", Interpreter::PowerShell),
        ("powershell", Interpreter::PowerShell),
    ] {
        assert_eq!(interpreter(name), Some(family), "{name}");
    }
    for name in [
        "pythonista",
        "nodemon",
        "perldoc",
        "rubocop",
        "phpunit",
        "bash",
    ] {
        assert_eq!(interpreter(name), None, "{name}");
    }
}

#[test]
fn inline_code_flags_are_found_where_the_interpreter_reads_them() {
    let flag = |family, args: &[&str]| interpreter_exec_flag(family, &v(args));
    assert_eq!(flag(Interpreter::Python, &["-c", "x"]), Some("-c".into()));
    assert_eq!(flag(Interpreter::Python, &["-Bc", "x"]), Some("-c".into()));
    assert_eq!(
        flag(Interpreter::Python, &["-Wonce", "-c", "x"]),
        Some("-c".into())
    );
    assert_eq!(flag(Interpreter::Python, &["-W", "c", "script.py"]), None);
    assert_eq!(flag(Interpreter::Python, &["script.py", "-c"]), None);
    assert_eq!(
        flag(Interpreter::Ruby, &["-rjson", "-e", "x"]),
        Some("-e".into())
    );
    assert_eq!(
        flag(Interpreter::Perl, &["-Mstrict", "-E", "say 1"]),
        Some("-E".into())
    );
    assert_eq!(
        flag(Interpreter::Node, &["--eval=1"]),
        Some("--eval".into())
    );
    assert_eq!(
        flag(Interpreter::PowerShell, &["-NoProfile", "-COMMAND", "x"]),
        Some("-command".into())
    );
    assert_eq!(flag(Interpreter::PowerShell, &["-File", "x.ps1"]), None);
}

#[test]
fn shell_command_strings_are_found_past_option_values() {
    let payload = |args: &[&str]| shell_command_payload("bash", &v(args));
    assert_eq!(payload(&["-c", "ls"]), Some(Some("ls".into())));
    assert_eq!(payload(&["-lc", "ls"]), Some(Some("ls".into())));
    assert_eq!(
        payload(&["-O", "extglob", "-c", "ls"]),
        Some(Some("ls".into()))
    );
    assert_eq!(payload(&["-oc", "errexit", "ls"]), Some(Some("ls".into())));
    assert_eq!(payload(&["--rcfile", "-c", "script.sh"]), None);
    assert_eq!(payload(&["--norc", "script.sh"]), None);
    assert_eq!(payload(&["-Wc", "x"]), None);
    assert_eq!(payload(&["-c"]), Some(None));
    assert_eq!(
        shell_command_payload("fish", &v(&["--command=ls"])),
        Some(Some("ls".into()))
    );
}

#[test]
fn read_tools_report_the_program_they_would_run() {
    let found = |tool: &str, args: &[&str]| read_tool_exec_flag(tool, &v(args));
    assert_eq!(
        found("rg", &["--pre", "./x", "pat"]),
        Some(("--pre".into(), "./x".into()))
    );
    assert_eq!(
        found("rg", &["--pre=./x", "pat"]),
        Some(("--pre".into(), "./x".into()))
    );
    assert_eq!(found("rg", &["-e", "--pre", "file"]), None);
    assert_eq!(found("rg", &["--pre-glob", "*.gz", "pat"]), None);
    assert_eq!(
        found("sort", &["-o", "out", "--compress-program", "gzip"]),
        Some(("--compress-program".into(), "gzip".into()))
    );
    assert_eq!(
        found("man", &["-Pless", "ls"]),
        Some(("-P".into(), "less".into()))
    );
    assert_eq!(found("man", &["-p", "x", "ls"]), None);
    assert_eq!(
        found("ag", &["--pager", "less"]),
        Some(("--pager".into(), "less".into()))
    );
    assert_eq!(found("grep", &["--pre", "x"]), None);
}
