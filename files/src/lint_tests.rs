#![allow(clippy::unwrap_used, clippy::panic)]

use super::*;
use crate::tools::test_support::have_program;

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

#[tokio::test]
async fn reports_in_hermes_shape() {
    assert_eq!(
        lint("/x/a.json", None, "{}").await,
        json!({"status": "ok", "output": ""})
    );
    assert_eq!(lint("/x/a.toml", None, "= 1").await["status"], "error");
}

async fn lint(path: &str, before: Option<&str>, after: &str) -> Value {
    report(&crate::LocalFs::new(), path, before, after).await
}

#[tokio::test]
async fn python_is_checked_by_the_sandboxs_interpreter_with_hermes_texts() {
    if !have_program("python3") {
        return;
    }
    assert_eq!(
        lint("/x/ok.py", None, "def f():\n    return 1\n").await,
        json!({"status": "ok", "output": ""})
    );
    assert_eq!(
        lint("/x/bad.py", None, "def f(:\n    pass\n").await,
        json!({"status": "error", "output": "SyntaxError: invalid syntax (line 1, column 7)"})
    );
    let indent = lint("/x/i.py", None, "def f():\nreturn 1\n").await;
    assert_eq!(indent["status"], "error");
    assert!(
        indent["output"]
            .as_str()
            .unwrap()
            .starts_with("IndentationError: expected an indented block"),
        "{indent}"
    );
    let nul = lint("/x/n.py", None, "x = 1\0\n").await;
    assert_eq!(nul["status"], "error", "{nul}");
    // The same error before and after: said, but flagged as inherited.
    let kept = lint("/x/k.py", Some("x = (\n"), "x = (\n").await;
    assert_eq!(
        kept["message"],
        "Pre-existing lint errors — this edit didn't introduce new ones but the file is still broken."
    );
    // A different error: only the new lines.
    let new = lint("/x/k.py", Some("x = (\n"), "def f(:\n").await;
    assert_eq!(
        new["output"],
        "New lint errors introduced by this edit (pre-existing errors filtered out):\nSyntaxError: invalid syntax (line 1, column 7)"
    );
}

#[tokio::test]
async fn javascript_is_checked_by_node_as_a_module_or_script() {
    if !have_program("node") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.js").display().to_string();
    assert_eq!(
        lint(&path, None, "const a = 1;\nfunction f() { return a; }\n").await,
        json!({"status": "ok", "output": ""})
    );
    let bad = lint(&path, None, "let x = ;\n").await;
    assert_eq!(bad["status"], "error");
    let output = bad["output"].as_str().unwrap();
    assert!(output.starts_with(&format!("{path}:1")), "{output}");
    assert!(
        output.contains("SyntaxError: Unexpected token ';'"),
        "{output}"
    );
    // ES modules are judged as modules (by the extension, or package.json).
    let module = dir.path().join("m.mjs").display().to_string();
    assert_eq!(
        lint(&module, None, "import fs from 'fs';\nexport const a = 1;\n").await["status"],
        "ok"
    );
    std::fs::write(dir.path().join("package.json"), r#"{"type": "module"}"#).unwrap();
    assert_eq!(
        lint(&path, None, "import fs from 'fs';\nexport const a = 1;\n").await["status"],
        "ok"
    );
    // Nothing is left beside the file.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[tokio::test]
async fn a_sandbox_without_the_checker_says_so() {
    let fs = crate::LocalFs::new();
    // bash finds no python3/python on an empty PATH (it is `command -v` that looks).
    let run = SyntaxChecker::Python.outcome("unavailable\n", 0).unwrap();
    assert_eq!(run, CheckRun::Unavailable);
    assert!(SyntaxChecker::Node.outcome("bash: oops", 2).is_err());
    assert_eq!(
        report(&fs, "/x/main.rs", None, "fn main() {}").await,
        json!({"status": "skipped", "message": "No linter for .rs files"})
    );
}
