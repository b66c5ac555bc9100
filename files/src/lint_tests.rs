use super::*;

#[test]
fn json() {
    assert!(check(".json", r#"{"a": [1, 2]}"#).is_ok());
    let error = check(".json", r#"{"a": }"#).unwrap_err();
    assert_eq!(error, "JSONDecodeError: expected value (line 1, column 7)");
}

#[test]
fn yaml_accepts_streams_and_tags() {
    assert!(check(".yaml", "a: 1\n---\nb: !Ref thing\n").is_ok());
    assert!(
        check(".yml", "key: [unclosed\n")
            .unwrap_err()
            .starts_with("YAMLError: ")
    );
    assert!(check(".yaml", "a: 'open\n").is_err());
}

#[test]
fn toml() {
    assert!(check(".toml", "[a]\nb = 1\n").is_ok());
    let error = check(".toml", "[a]\nb = \n").unwrap_err();
    assert!(error.starts_with("TOMLDecodeError: "), "{error}");
    assert!(error.contains("line 2"), "{error}");
}

#[test]
fn reports_in_hermes_shape() {
    assert_eq!(
        report("/x/a.json", "{}"),
        json!({"status": "ok", "output": ""})
    );
    assert_eq!(
        report("/x/main.rs", "fn main() {}"),
        json!({"status": "skipped", "message": "No linter for .rs files"})
    );
    assert_eq!(report("/x/a.toml", "= 1")["status"], "error");
}
