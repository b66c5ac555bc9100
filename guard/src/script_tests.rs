use super::*;

fn runs(code: &str) -> Vec<Vec<String>> {
    literal_runs(code)
}

#[test]
fn literals_and_argument_lists_are_found() {
    assert_eq!(
        runs("import os\nos.system('rm -rf build')  # 'not this'\n"),
        vec![vec!["rm -rf build".to_owned()]]
    );
    assert_eq!(
        runs("subprocess.run([\"chmod\", \"-R\", '777', \"/srv\"])"),
        vec![vec![
            "chmod".to_owned(),
            "-R".into(),
            "777".into(),
            "/srv".into()
        ]]
    );
    assert_eq!(
        runs("x = f\"a {b}\" + r'c\\d'\ny = '''multi\nline'''\n"),
        vec![
            vec!["a {b}".to_owned()],
            vec!["c\\d".to_owned()],
            vec!["multi\nline".to_owned()]
        ]
    );
    // A name ending in a prefix letter is not a prefix.
    assert_eq!(runs("bar'x'"), vec![vec!["x".to_owned()]]);
    assert_eq!(runs("print(a, b)"), Vec::<Vec<String>>::new());
}

#[test]
fn commands_in_a_script_get_the_command_verdicts() {
    let none = GuardContext::default();
    assert_eq!(
        check_script_in(
            "print(json.dumps(caduceus_tools._call('terminal', {}, token='x')))\nprint(terminal('ls a 2>&1; echo rc=$?')['output'])",
            &none
        ),
        Verdict::Allow
    );
    assert_eq!(
        check_script_in("import os\nos.system('rm -rf /')", &none).kind(),
        "hardline"
    );
    assert_eq!(
        check_script_in("subprocess.run(['rm', '-rf', '/'])", &none).kind(),
        "hardline"
    );
    let flagged = check_script_in(
        "import subprocess\nsubprocess.run('chmod -R 777 /srv', shell=True)",
        &none,
    );
    assert_eq!(flagged.kind(), "approve", "{flagged:?}");
    // The structural checks are not a script's: its payloads are literals
    // read on their own.
    assert_eq!(
        check_script_in("subprocess.Popen(['bash', '-c', 'sleep 5 & wait'])", &none),
        Verdict::Allow
    );
    assert_eq!(
        check_script_in(
            "subprocess.Popen(['bash', '-c', 'git push --force'])",
            &none
        )
        .kind(),
        "approve"
    );
    // Composed at run time: not in the text.
    assert_eq!(
        check_script_in(
            "import base64\nterminal(base64.b64decode('cm0gLXJmIC8=').decode())",
            &none
        ),
        Verdict::Allow
    );
}
