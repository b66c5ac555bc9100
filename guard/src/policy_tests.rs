use super::*;

fn list(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn deny_rules_match_case_insensitively_over_deobfuscated_variants() {
    let rules = list(&[
        "  ",
        "git push*",
        "rm -rf *",
        "git status",
        "docker compose down",
    ]);
    assert_eq!(
        deny_rule_match("git push --force", &rules),
        Some("git push*")
    );
    assert_eq!(
        deny_rule_match("GIT PUSH origin", &rules),
        Some("git push*")
    );
    assert_eq!(deny_rule_match("r\\m -rf build", &rules), Some("rm -rf *"));
    assert_eq!(deny_rule_match("'r'm -rf build", &rules), Some("rm -rf *"));
    assert_eq!(
        deny_rule_match("git st\"\"atus", &rules),
        Some("git status")
    );
    assert_eq!(
        deny_rule_match("bash -c 'git push'", &rules),
        Some("git push*")
    );
    assert_eq!(
        deny_rule_match("  docker compose down  ", &rules),
        Some("docker compose down")
    );
    assert_eq!(deny_rule_match("git pull", &rules), None);
}

#[test]
fn deny_rules_return_the_trimmed_rule_and_ignore_blanks() {
    assert_eq!(deny_rule_match("ls", &list(&[" ls "])), Some("ls"));
    assert_eq!(deny_rule_match("ls", &list(&["", "   "])), None);
    assert_eq!(deny_rule_match("ls", &[]), None);
}

#[test]
fn allowlist_matches_exact_commands_and_globs() {
    let allow = list(&["make test", "podman *", "npm run lint", "cargo [bt]*"]);
    assert!(allowlisted("make test", &allow));
    assert!(allowlisted("  make test  ", &allow));
    assert!(allowlisted("podman ps -a", &allow));
    assert!(allowlisted("cargo build", &allow));
    assert!(!allowlisted("cargo run", &allow));
    assert!(!allowlisted("Podman ps", &allow));
    assert!(!allowlisted("make test-all", &allow));
    assert!(!allowlisted("", &allow));
}

#[test]
fn allowlist_never_covers_compound_commands() {
    let allow = list(&["podman *"]);
    for compound in [
        "podman ps; rm -rf ~",
        "podman ps && rm x",
        "podman ps || rm x",
        "podman ps | sh",
        "podman ps & rm x",
        "podman ps > /etc/hosts",
        "podman ps < input",
        "podman `rm x`",
        "podman $(rm x)",
        "podman ps\nrm x",
    ] {
        assert!(!allowlisted(compound, &allow), "{compound:?}");
    }
}

#[test]
fn allowlist_entries_without_wildcards_are_not_globs() {
    assert!(!allowlisted("podman ps", &list(&["podman"])));
}

#[test]
fn sudo_stdin_guard_fires_only_on_stdin_passwords() {
    for guessing in [
        "echo pw | sudo -S id",
        "sudo -nS id",
        "sudo --stdin id",
        "bash -c 'sudo -S id'",
        "s\\udo -S id",
    ] {
        assert_eq!(
            sudo_stdin_guard(guessing),
            Some(SUDO_STDIN_DESCRIPTION),
            "{guessing}"
        );
    }
    for fine in ["sudo -s", "sudo id", "sudo -u S id", "echo sudo -S", "ls"] {
        assert_eq!(sudo_stdin_guard(fine), None, "{fine}");
    }
}
