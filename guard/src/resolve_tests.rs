use super::*;
use crate::lexer::parse;

fn resolved(src: &str) -> Vec<(String, Vec<String>)> {
    invocations(&parse(src))
        .into_iter()
        .map(|i| (i.name, i.args))
        .collect()
}

fn one(src: &str) -> Invocation {
    let mut all = invocations(&parse(src));
    assert_eq!(all.len(), 1, "{src}: {all:?}");
    all.remove(0)
}

fn v(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn wrappers_are_unwrapped_to_the_program_they_run() {
    let cases = [
        (
            "sudo -u root env FOO=1 nohup timeout 5 rm -rf x",
            "rm",
            v(&["-rf", "x"]),
        ),
        ("doas -u root reboot", "reboot", v(&[])),
        ("exec -a name /bin/RM x", "rm", v(&["x"])),
        ("nice -n 19 ionice -c2 make", "make", v(&[])),
        ("nice -10 make", "make", v(&[])),
        ("time -p setsid stdbuf -oL grep x", "grep", v(&["x"])),
        ("timeout -s KILL 5s curl x", "curl", v(&["x"])),
        ("xargs -0 -I {} -n 1 rm {}", "rm", v(&["{}"])),
        ("command -p ls", "ls", v(&[])),
        ("env -i -u HOME PATH=/bin sh", "sh", v(&[])),
        ("A=1 B=2 make", "make", v(&[])),
        ("if ! true", "true", v(&[])),
        ("then { reboot", "reboot", v(&[])),
    ];
    for (src, name, args) in cases {
        let found = one(src);
        assert_eq!((found.name.as_str(), found.args), (name, args), "{src}");
    }
}

#[test]
fn lookups_and_bare_wrappers_run_nothing_else() {
    assert_eq!(one("command -v rm").name, "command");
    assert_eq!(one("sudo -v").name, "sudo");
    assert!(resolved("for f in a b").is_empty());
    assert!(resolved("[[ -f x ]]").is_empty());
    assert!(resolved("fi").is_empty());
}

#[test]
fn find_exec_commands_are_invocations_too() {
    assert_eq!(
        resolved("find . -name x -exec rm -f {} \\; -execdir sudo reboot +"),
        vec![
            (
                "find".to_string(),
                v(&[
                    ".", "-name", "x", "-exec", "rm", "-f", "{}", ";", "-execdir", "sudo",
                    "reboot", "+"
                ])
            ),
            ("rm".to_string(), v(&["-f", "{}"])),
            ("reboot".to_string(), v(&[])),
        ]
    );
}

#[test]
fn sudo_flags_are_parsed_with_their_arguments() {
    let flag = |src: &str| {
        let i = one(src);
        (i.sudo_flag, i.sudo_stdin)
    };
    use SudoPrivilegeFlag::{Combined, Standalone};
    assert_eq!(flag("sudo -S id"), (Some(Standalone), true));
    assert_eq!(flag("sudo -s"), (Some(Standalone), false));
    assert_eq!(flag("sudo -A id"), (Some(Standalone), false));
    assert_eq!(flag("sudo --st id"), (Some(Standalone), true));
    assert_eq!(flag("sudo --askpass id"), (Some(Standalone), false));
    assert_eq!(flag("sudo --shell"), (Some(Standalone), false));
    assert_eq!(flag("sudo -nS id"), (Some(Combined), true));
    assert_eq!(flag("sudo -uadmin id"), (None, false));
    assert_eq!(flag("sudo -u admin -i"), (None, false));
    assert_eq!(flag("sudo --set-home id"), (None, false));
    // The wrapped command's own options are not sudo's.
    assert_eq!(flag("sudo apt install -s foo"), (None, false));
}

#[test]
fn env_split_string_is_a_payload() {
    assert_eq!(one("env -S 'rm -rf /'").payloads, v(&["rm -rf /"]));
    assert_eq!(one("env --split-string='ls -l'").payloads, v(&["ls -l"]));
}

#[test]
fn position_words_cover_assignments_wrappers_and_program() {
    let found = one("X=1 sudo -u root rm -rf x");
    assert_eq!(found.position_words, vec![0, 1, 4]);
    assert_eq!(found.arg_words, vec![5, 6]);
}

#[test]
fn program_names_are_lowercased_basenames() {
    assert_eq!(program_name("/usr/bin/RM"), "rm");
    assert_eq!(program_name("python3.11"), "python3.11");
}
