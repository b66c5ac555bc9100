use super::split;

#[test]
fn words_split_as_a_shell_would() {
    assert_eq!(
        split(r#"python3 "my hook.py" --x 'a b' c\ d "q\"x" "\z""#).unwrap(),
        vec!["python3", "my hook.py", "--x", "a b", "c d", "q\"x", "\\z"]
    );
    assert_eq!(split("  ").unwrap(), Vec::<String>::new());
    assert_eq!(split("''").unwrap(), vec![""]);
    for bad in ["echo 'open", "echo \"open", "trailing\\"] {
        assert!(split(bad).is_err(), "{bad}");
    }
}
