use super::*;

fn fold(text: &str) -> Cow<'_, str> {
    fold_home(text, &GuardContext::default())
}

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
    assert_eq!(fold("cat /root/.bashrc"), "cat ~/.bashrc");
    assert_eq!(fold("cp k /home/alice/.ssh/id_rsa"), "cp k ~/.ssh/id_rsa");
    assert_eq!(fold("echo x >/Users/bob/.zshrc"), "echo x >~/.zshrc");
    assert_eq!(fold("echo x > /Users/bob/.zshrc"), "echo x > ~/.zshrc");
    assert_eq!(
        fold("curl --netrc-file=/home/a/.netrc"),
        "curl --netrc-file=~/.netrc"
    );
    assert_eq!(fold("tee \"/home/a/.profile\""), "tee \"~/.profile\"");
    // A bare home (no path below it) and lookalike prefixes are left alone.
    assert_eq!(fold("rm -rf /home/user"), "rm -rf /home/user");
    assert_eq!(fold("ls /homework/x /rootfs/y"), "ls /homework/x /rootfs/y");
}

#[test]
fn size_limit_sits_far_above_real_commands() {
    // hermes' 4,096-character limit refused ordinary long commands.
    assert!(!size_limit_exceeded(&"a".repeat(4_097)));
    assert!(!size_limit_exceeded(&"a".repeat(1 << 20)));
    assert!(size_limit_exceeded(&"a".repeat((1 << 20) + 1)));
    assert!(!size_limit_exceeded(&"|".repeat(100_000)));
    assert!(size_limit_exceeded(&"|".repeat(100_001)));
}

#[test]
fn sensitive_files_fold_under_any_home() {
    assert_eq!(
        fold("cat key >> /srv/agent/.ssh/authorized_keys"),
        "cat key >> ~/.ssh/authorized_keys"
    );
    assert_eq!(fold("tee /srv/agent/.bashrc"), "tee ~/.bashrc");
    assert_eq!(fold("tee '/opt/x/.zshrc'"), "tee '~/.zshrc'");
    // Other files under an unknown directory are left alone.
    assert_eq!(fold("cat /srv/agent/notes.txt"), "cat /srv/agent/notes.txt");
    assert_eq!(fold("ls /srv/app/.github/"), "ls /srv/app/.github/");
}

#[test]
fn context_homes_fold() {
    let context = GuardContext {
        homes: vec!["/srv/agent".to_string()],
        agent_homes: vec!["/var/lib/caduceus/".to_string()],
    };
    assert_eq!(
        fold_home(
            "cp x /srv/agent/.config/y; sed -i s/a/b/ /var/lib/caduceus/config.yaml",
            &context
        ),
        "cp x ~/.config/y; sed -i s/a/b/ $CADUCEUS_HOME/config.yaml"
    );
    // Only where a path starts.
    assert_eq!(
        fold_home("ls /mnt/srv/agent/x", &context),
        "ls /mnt/srv/agent/x"
    );
}
