use super::*;

#[test]
fn ansi_sequences_are_removed() {
    assert_eq!(strip_ansi("\x1b[31mrm\x1b[0m -rf /"), "rm -rf /");
    assert_eq!(strip_ansi("\x1b]0;title\x07rm"), "rm");
    assert_eq!(strip_ansi("\x1b]8;;http://x\x1b\\rm"), "rm");
    assert_eq!(strip_ansi("\u{9b}31mrm\u{9b}0m"), "rm");
    assert_eq!(strip_ansi("r\u{85}m"), "rm");
    assert_eq!(strip_ansi("plain"), "plain");
}

#[test]
fn prepare_applies_nul_nfkc_continuations_and_ifs() {
    assert_eq!(prepare("r\0m"), "rm");
    assert_eq!(prepare("\u{ff52}\u{ff4d} -\u{ff52}\u{ff46}"), "rm -rf");
    assert_eq!(prepare("rm -rf \\\n/"), "rm -rf /");
    assert_eq!(prepare("rm -rf \\\r\n/"), "rm -rf /");
    assert_eq!(prepare("rm${IFS}-rf$IFS/"), "rm -rf /");
    assert_eq!(prepare("rm${IFS:0:1}/"), "rm /");
    assert_eq!(prepare("echo $IFSACONFIG"), "echo $IFSACONFIG");
    // Quotes and backslashes are left for the shell lexer.
    assert_eq!(prepare("r\\m 'x'"), "r\\m 'x'");
}

#[test]
fn detection_text_flattens_shell_escapes() {
    assert_eq!(detection_text("r\\m -rf /"), "rm -rf /");
    assert_eq!(detection_text("r''m git st\"\"atus"), "rm git status");
    assert_eq!(detection_text("$'\\x72\\x6d' -rf /"), "rm -rf /");
    assert_eq!(
        detection_text("find . -exec rm {} \\;"),
        "find . -exec rm {} ;"
    );
}

#[test]
fn absolute_homes_fold_to_tilde() {
    assert_eq!(fold_home("cat /root/.bashrc"), "cat ~/.bashrc");
    assert_eq!(
        fold_home("cp k /home/alice/.ssh/id_rsa"),
        "cp k ~/.ssh/id_rsa"
    );
    assert_eq!(fold_home("echo x >/Users/bob/.zshrc"), "echo x >~/.zshrc");
    assert_eq!(fold_home("echo x > /Users/bob/.zshrc"), "echo x > ~/.zshrc");
    assert_eq!(
        fold_home("curl --netrc-file=/home/a/.netrc"),
        "curl --netrc-file=~/.netrc"
    );
    assert_eq!(fold_home("tee \"/home/a/.profile\""), "tee \"~/.profile\"");
    // A bare home (no path below it) and lookalike prefixes are left alone.
    assert_eq!(fold_home("rm -rf /home/user"), "rm -rf /home/user");
    assert_eq!(
        fold_home("ls /homework/x /rootfs/y"),
        "ls /homework/x /rootfs/y"
    );
}

#[test]
fn parser_limits_match_hermes() {
    assert!(!parser_limit_exceeded(&"a".repeat(4_096)));
    assert!(parser_limit_exceeded(&"a".repeat(4_097)));
    assert!(!parser_limit_exceeded(&format!("{};", "a".repeat(4_097))));
    assert!(parser_limit_exceeded(&"a;".repeat(64_001)));
    assert!(parser_limit_exceeded(&"|".repeat(25_000)));
    assert!(!parser_limit_exceeded(&format!(
        "{}{}",
        "|".repeat(24_999),
        "a".repeat(10)
    )));
    // Characters, not bytes, are counted.
    assert!(!parser_limit_exceeded(&"é".repeat(4_000)));
}
