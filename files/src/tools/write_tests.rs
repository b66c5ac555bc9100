use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::*;
use crate::tools::read_file;
use crate::tools::test_support::{Env, args, parse};

async fn write(env: &Env, arguments: Value) -> Value {
    parse(&write_file(&env.ctx(), &args(arguments)).await)
}

#[tokio::test]
async fn creates_a_file_and_its_parents() {
    let env = Env::new();
    let result = write(&env, json!({"path": "new/dir/a.txt", "content": "hello\n"})).await;
    let abs = env.abs("new/dir/a.txt");
    assert_eq!(
        result,
        json!({
            "bytes_written": 6,
            "dirs_created": true,
            "lint": {"status": "skipped", "message": "No linter for .txt files"},
            "resolved_path": abs,
            "files_modified": [abs],
        })
    );
    assert_eq!(env.get("new/dir/a.txt"), "hello\n");
    let again = write(&env, json!({"path": "new/dir/a.txt", "content": "bye\n"})).await;
    assert_eq!(again["dirs_created"], false);
}

#[tokio::test]
async fn keeps_mode_bom_and_crlf() {
    let env = Env::new();
    env.put("win.txt", "\u{feff}a\r\nb\r\n");
    std::fs::set_permissions(env.path("win.txt"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let result = write(&env, json!({"path": "win.txt", "content": "x\ny\n"})).await;
    assert_eq!(result["bytes_written"], 9);
    assert_eq!(
        std::fs::read(env.path("win.txt")).unwrap(),
        "\u{feff}x\r\ny\r\n".as_bytes()
    );
    let mode = std::fs::metadata(env.path("win.txt"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o755);
}

#[tokio::test]
async fn refuses_sensitive_paths() {
    let env = Env::new();
    let etc = write(&env, json!({"path": "/etc/hosts", "content": "x"})).await;
    assert_eq!(
        etc,
        json!({"error": "Refusing to write to sensitive system path: /etc/hosts\nUse the terminal tool with sudo if you need to modify system files."})
    );
    let socket = write(
        &env,
        json!({"path": "/var/run/docker.sock", "content": "x"}),
    )
    .await;
    assert!(
        socket["error"]
            .as_str()
            .unwrap()
            .starts_with("Refusing to write to sensitive system path")
    );

    let key = write(&env, json!({"path": "~/.ssh/id_rsa", "content": "x"})).await;
    let abs = format!("{}/.ssh/id_rsa", env.home);
    assert_eq!(
        key,
        json!({
            "bytes_written": 0,
            "dirs_created": false,
            "error": format!("Write denied: '{abs}' is a protected system/credential file."),
            "resolved_path": abs,
        })
    );
    for path in [
        "~/.aws/credentials",
        "~/.netrc",
        "~/.config/gh/hosts.yml",
        "~/.caduceus/.env",
    ] {
        let result = write(&env, json!({"path": path, "content": "x"})).await;
        assert!(
            result["error"]
                .as_str()
                .unwrap()
                .contains("protected system/credential file"),
            "{path}"
        );
    }
    let config = write(
        &env,
        json!({"path": "~/.caduceus/config.yaml", "content": "a: 1\n"}),
    )
    .await;
    assert_eq!(
        config["error"],
        "Refusing to write to caduceus config file: ~/.caduceus/config.yaml\nAgent cannot modify security-sensitive configuration. Edit ~/.caduceus/config.yaml directly instead."
    );
    assert!(!std::path::Path::new(&format!("{}/.ssh", env.home)).exists());
}

#[tokio::test]
async fn a_symlink_to_a_credential_is_refused() {
    let env = Env::new();
    std::fs::create_dir_all(format!("{}/.ssh", env.home)).unwrap();
    std::fs::write(format!("{}/.ssh/authorized_keys", env.home), "key").unwrap();
    std::os::unix::fs::symlink(
        format!("{}/.ssh/authorized_keys", env.home),
        env.path("innocent.txt"),
    )
    .unwrap();
    let result = write(&env, json!({"path": "innocent.txt", "content": "evil"})).await;
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("protected system/credential file")
    );
    assert_eq!(
        std::fs::read_to_string(format!("{}/.ssh/authorized_keys", env.home)).unwrap(),
        "key"
    );
}

#[tokio::test]
async fn write_safe_root_confines_writes() {
    let mut env = Env::new();
    env.config.write_safe_root = Some(env.abs("allowed"));
    let inside = write(&env, json!({"path": "allowed/a.txt", "content": "ok"})).await;
    assert_eq!(inside["bytes_written"], 2);
    let outside = write(&env, json!({"path": "elsewhere.txt", "content": "no"})).await;
    assert_eq!(
        outside["error"],
        format!(
            "Write denied: '{}' is outside the write safe root ({}). Unset CADUCEUS_WRITE_SAFE_ROOT or add this path's directory prefix.",
            env.abs("elsewhere.txt"),
            env.abs("allowed")
        )
    );
    assert!(!env.exists("elsewhere.txt"));
}

#[tokio::test]
async fn refuses_structured_files_that_do_not_parse() {
    let env = Env::new();
    env.put("conf.json", "{\"ok\": true}\n");
    for (path, content, kind) in [
        ("conf.json", "{\"ok\": }", "JSONDecodeError"),
        ("conf.yaml", "key: [unclosed\n", "YAMLError"),
        ("conf.toml", "[a]\nb = \n", "TOMLDecodeError"),
    ] {
        let result = write(&env, json!({"path": path, "content": content})).await;
        let error = result["error"].as_str().unwrap();
        let extension = &path[path.rfind('.').unwrap()..];
        assert!(
            error.starts_with(&format!(
                "Refusing to write '{}': candidate content fails {extension} syntax validation ({kind}: ",
                env.abs(path)
            )),
            "{error}"
        );
        assert!(
            error.ends_with("). The file was NOT created or modified. Fix the content and retry.")
        );
        assert_eq!(result["bytes_written"], 0);
    }
    assert_eq!(env.get("conf.json"), "{\"ok\": true}\n");
    assert!(!env.exists("conf.yaml") && !env.exists("conf.toml"));
    let valid = write(
        &env,
        json!({"path": "conf.json", "content": "{\"ok\": false}"}),
    )
    .await;
    assert_eq!(valid["lint"], json!({"status": "ok", "output": ""}));
}

#[tokio::test]
async fn refuses_read_file_display_text() {
    let env = Env::new();
    let result = write(
        &env,
        json!({"path": "a.py", "content": "1|import os\n2|print(os)\n3|\n"}),
    )
    .await;
    assert_eq!(
        result["error"],
        "Refusing to write internal read_file display text as file content. Strip read_file line-number prefixes or reconstruct the intended file contents before writing."
    );
    let stub = write(&env, json!({"path": "a.txt", "content": UNCHANGED_MESSAGE})).await;
    assert!(stub.get("error").is_some());
    // A lone literal `1|x` line is ordinary content.
    assert_eq!(
        write(&env, json!({"path": "b.txt", "content": "1|x\n"})).await["bytes_written"],
        4
    );
}

#[tokio::test]
async fn argument_errors() {
    let env = Env::new();
    assert_eq!(
        write(&env, json!({"content": "x"})).await["error"],
        "write_file: missing required field 'path'. Re-emit the tool call with both 'path' and 'content' set."
    );
    assert!(
        write(&env, json!({"path": "a"})).await["error"]
            .as_str()
            .unwrap()
            .starts_with("write_file: missing required field 'content'.")
    );
    assert_eq!(
        write(&env, json!({"path": "a", "content": {"k": 1}})).await["error"],
        "write_file: 'content' must be a string, got dict."
    );
}

#[tokio::test]
async fn warns_when_the_file_changed_since_it_was_read() {
    let env = Env::new();
    env.put("s.txt", "one\n");
    read_file(&env.ctx(), &args(json!({"path": "s.txt"}))).await;
    env.put("s.txt", "changed by someone else\n");
    let result = write(&env, json!({"path": "s.txt", "content": "mine\n"})).await;
    assert_eq!(
        result["_warning"],
        "Warning: s.txt was modified since you last read it (external edit or concurrent agent). The content you read may be stale. Consider re-reading the file to verify before writing."
    );
    // Our own write is not "someone else".
    let again = write(&env, json!({"path": "s.txt", "content": "mine again\n"})).await;
    assert!(again.get("_warning").is_none());
    // And the next read returns the new content, not an "unchanged" stub.
    let read = parse(&read_file(&env.ctx(), &args(json!({"path": "s.txt"}))).await);
    assert_eq!(read["content"], "1|mine again");
}

#[tokio::test]
async fn warns_when_a_relative_path_leaves_the_cwd() {
    let env = Env::new();
    let result = write(&env, json!({"path": "../outside.txt", "content": "x"})).await;
    let warning = result["_warning"].as_str().unwrap();
    assert!(
        warning.starts_with("Relative path '../outside.txt' resolved to"),
        "{warning}"
    );
    assert!(warning.contains("OUTSIDE the active workspace"));
}

#[tokio::test]
async fn python_writes_report_syntax_errors_and_only_new_ones() {
    if !crate::tools::test_support::have_program("python3") {
        return;
    }
    let env = Env::new();
    let ok = write(
        &env,
        json!({"path": "m.py", "content": "def f():\n    return 1\n"}),
    )
    .await;
    assert_eq!(ok["lint"], json!({"status": "ok", "output": ""}), "{ok}");
    // Not refused (unlike JSON): the file is written and the error reported.
    let bad = write(
        &env,
        json!({"path": "m.py", "content": "def f(:\n    return 1\n"}),
    )
    .await;
    assert_eq!(
        bad["lint"],
        json!({"status": "error", "output": "SyntaxError: invalid syntax (line 1, column 7)"})
    );
    assert_eq!(env.get("m.py"), "def f(:\n    return 1\n");
    let same = write(
        &env,
        json!({"path": "m.py", "content": "def f(:\n    return 2\n"}),
    )
    .await;
    assert_eq!(
        same["lint"]["message"],
        "Pre-existing lint errors — this edit didn't introduce new ones but the file is still broken.",
        "{same}"
    );
}
