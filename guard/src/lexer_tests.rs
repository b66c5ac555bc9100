use super::*;

fn words_of(parsed: &Parsed) -> Vec<Vec<String>> {
    parsed
        .commands
        .iter()
        .map(|c| c.words.iter().map(|w| w.value.clone()).collect())
        .collect()
}

fn words(src: &str) -> Vec<Vec<String>> {
    words_of(&parse(src))
}

fn v(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn quotes_and_escapes_are_removed_like_the_shell_does() {
    assert_eq!(
        words(r#"echo "a b" 'c d' e\ f "x\"y" 'it'\''s'"#),
        vec![v(&["echo", "a b", "c d", "e f", "x\"y", "it's"])]
    );
}

#[test]
fn fully_quoted_words_are_data_and_splices_are_flagged() {
    let parsed = parse(r#"git commit -m "rm -rf /" r''m kick"start" \rm"#);
    let command = &parsed.commands[0];
    let flags: Vec<(bool, bool)> = command
        .words
        .iter()
        .map(|w| (w.fully_quoted, w.is_spliced()))
        .collect();
    assert_eq!(
        flags,
        vec![
            (false, false),
            (false, false),
            (false, false),
            (true, false),
            (false, true),
            (false, true),
            (false, true),
        ]
    );
}

#[test]
fn separators_split_simple_commands() {
    assert_eq!(
        words("a; b && c || d | e & f\ng |& h"),
        vec![
            v(&["a"]),
            v(&["b"]),
            v(&["c"]),
            v(&["d"]),
            v(&["e"]),
            v(&["f"]),
            v(&["g"]),
            v(&["h"])
        ]
    );
}

#[test]
fn pipes_mark_the_receiving_command() {
    let parsed = parse("echo a | sh; ls || pwd");
    let piped: Vec<bool> = parsed.commands.iter().map(|c| c.piped).collect();
    assert_eq!(piped, vec![false, true, false, false]);
}

#[test]
fn substitutions_are_parsed_as_commands() {
    assert_eq!(
        words("echo $(rm -rf /) `reboot` \"$(halt)\" <(ls a) >(cat)"),
        vec![
            v(&["rm", "-rf", "/"]),
            v(&["reboot"]),
            v(&["halt"]),
            v(&["ls", "a"]),
            v(&["cat"]),
            v(&[
                "echo",
                "$(rm -rf /)",
                "`reboot`",
                "$(halt)",
                "<(ls a)",
                ">(cat)"
            ]),
        ]
    );
}

#[test]
fn arithmetic_is_not_a_command() {
    assert_eq!(words("echo $((1+2))"), vec![v(&["echo", "$((1+2))"])]);
}

#[test]
fn literal_expansions_are_resolved() {
    assert_eq!(words("$(echo rm) -rf x")[1], v(&["rm", "-rf", "x"]));
    assert_eq!(words("`printf %s rm` x")[1], v(&["rm", "x"]));
    assert_eq!(words("${x:-rm} y"), vec![v(&["rm", "y"])]);
    assert_eq!(words("${x/a/rm} y"), vec![v(&["rm", "y"])]);
    assert_eq!(words("$'\\x72\\x6d' y"), vec![v(&["rm", "y"])]);
    assert_eq!(
        words("x=rm; $x y; ${x} z"),
        vec![v(&["x=rm"]), v(&["rm", "y"]), v(&["rm", "z"])]
    );
    assert_eq!(
        words("export D=/; ls $D"),
        vec![v(&["export", "D=/"]), v(&["ls", "/"])]
    );
    // Unknown variables and non-literal substitutions stay as written.
    assert_eq!(
        words("echo $HOME ${HOME} $(date)")[1],
        v(&["echo", "$HOME", "${HOME}", "$(date)"])
    );
    let parsed = parse("${x:-rm} y");
    assert!(parsed.commands[0].words[0].expanded);
}

#[test]
fn prefix_assignments_do_not_define_variables() {
    assert_eq!(words("x=rm ls; $x"), vec![v(&["x=rm", "ls"]), v(&["$x"])]);
}

#[test]
fn redirections_are_recorded_with_their_targets() {
    let parsed = parse("echo x > /dev/sda 2>&1 >>log <in &>all");
    let redirects: Vec<(&str, String)> = parsed.commands[0]
        .redirects
        .iter()
        .map(|r| {
            (
                r.op,
                r.target
                    .as_ref()
                    .map(|t| t.value.clone())
                    .unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        redirects,
        vec![
            (">", "/dev/sda".to_string()),
            (">&", "1".to_string()),
            (">>", "log".to_string()),
            ("<", "in".to_string()),
            ("&>", "all".to_string()),
        ]
    );
    assert_eq!(words_of(&parsed), vec![v(&["echo", "x"])]);
}

#[test]
fn heredoc_bodies_are_data_attached_to_their_command() {
    let parsed = parse("cat <<EOF > notes\nreboot\nEOF\nls");
    assert_eq!(words_of(&parsed), vec![v(&["cat"]), v(&["ls"])]);
    assert_eq!(parsed.commands[0].heredocs, vec!["reboot\n".to_string()]);
    assert!(!parsed.code_text.contains("reboot"));

    let tabbed = parse("cat <<-EOF\n\tbody\n\tEOF\nls");
    assert_eq!(tabbed.commands[0].heredocs, vec!["\tbody\n".to_string()]);
    assert_eq!(words_of(&tabbed)[1], v(&["ls"]));
}

#[test]
fn only_unquoted_heredoc_delimiters_run_substitutions() {
    assert_eq!(
        words("cat <<EOF\n$(reboot)\nEOF"),
        vec![v(&["cat"]), v(&["reboot"])]
    );
    assert_eq!(words("cat <<'EOF'\n$(reboot)\nEOF"), vec![v(&["cat"])]);
}

#[test]
fn case_patterns_are_not_commands() {
    assert_eq!(
        words("case $x in reboot) ls;; halt|stop) pwd;; (*) id;; esac; whoami"),
        vec![v(&["ls"]), v(&["pwd"]), v(&["id"]), v(&["whoami"])]
    );
}

#[test]
fn function_names_are_not_commands() {
    assert_eq!(
        words("reboot() { echo hi; }"),
        vec![v(&["{", "echo", "hi"]), v(&["}"])]
    );
}

#[test]
fn comments_are_skipped() {
    let parsed = parse("ls # reboot\npwd");
    assert_eq!(words_of(&parsed), vec![v(&["ls"]), v(&["pwd"])]);
    assert!(!parsed.code_text.contains("reboot"));
    assert_eq!(words("echo a#b"), vec![v(&["echo", "a#b"])]);
}

#[test]
fn code_text_blanks_quoted_text() {
    let parsed = parse("echo ':(){ :|:& };:' \"x\" y");
    assert!(!parsed.code_text.contains(":|:"));
    assert!(parsed.code_text.contains('y'));
    assert_eq!(parsed.code_text.len(), "echo ':(){ :|:& };:' \"x\" y".len());
}

#[test]
fn unterminated_quotes_are_tolerated_and_reported() {
    let parsed = parse("echo 'abc");
    assert!(parsed.unterminated);
    assert_eq!(words_of(&parsed), vec![v(&["echo", "abc"])]);
    assert!(parse("echo \"$(ls").unterminated);
    assert!(!parse("echo 'ok'").unterminated);
}

#[test]
fn non_ascii_text_is_handled_at_char_boundaries() {
    assert_eq!(
        words("echo 'héllo' wörld \"ü\""),
        vec![v(&["echo", "héllo", "wörld", "ü"])]
    );
    let parsed = parse("echo 'ü");
    assert!(parsed.unterminated);
}

#[test]
fn deep_nesting_stops_without_overflowing() {
    let deep = format!("{}reboot{}", "$(".repeat(200), ")".repeat(200));
    let parsed = parse(&deep);
    assert!(parsed.commands.len() < 200);
}

#[test]
fn ansi_c_escapes_decode_like_bash() {
    assert_eq!(decode_ansi_c(r"\x72\x6d"), "rm");
    assert_eq!(decode_ansi_c(r"\162\155"), "rm");
    assert_eq!(decode_ansi_c(r"\u0072m\n\t\\\'"), "rm\n\t\\'");
    assert_eq!(decode_ansi_c(r"\cA\q"), "\u{1}\\q");
    assert_eq!(decode_ansi_c(r"\x"), "\\x");
}

#[test]
fn assignments_are_recognised() {
    assert_eq!(split_assignment("X=1"), Some(("X", "1")));
    assert_eq!(split_assignment("PATH+=:/bin"), Some(("PATH", ":/bin")));
    assert_eq!(split_assignment("a[2]=x"), Some(("a", "x")));
    assert_eq!(split_assignment("--opt=1"), None);
    assert_eq!(split_assignment("1x=1"), None);
}
