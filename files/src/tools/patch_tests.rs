use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::*;
use crate::tools::test_support::{Env, args, parse};

async fn run(env: &Env, arguments: Value) -> Value {
    parse(&patch(&env.ctx(), &args(arguments)).await)
}

async fn replace(env: &Env, path: &str, old: &str, new: &str) -> Value {
    run(
        env,
        json!({"mode": "replace", "path": path, "old_string": old, "new_string": new}),
    )
    .await
}

async fn v4a(env: &Env, body: &str) -> Value {
    run(
        env,
        json!({"mode": "patch", "patch": format!("*** Begin Patch\n{body}*** End Patch")}),
    )
    .await
}

// --- replace mode ------------------------------------------------------------

#[tokio::test]
async fn replace_returns_a_unified_diff() {
    let env = Env::new();
    env.put("m.py", "def a():\n    return 1\n");
    let result = replace(&env, "m.py", "return 1", "return 2").await;
    let abs = env.abs("m.py");
    assert_eq!(
        result,
        json!({
            "success": true,
            "diff": "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n def a():\n-    return 1\n+    return 2\n",
            "files_modified": [abs],
            "lint": {"status": "ok", "output": ""},
            "resolved_path": abs,
        })
    );
    assert_eq!(env.get("m.py"), "def a():\n    return 2\n");
}

#[tokio::test]
async fn replace_errors_in_hermes_words() {
    let env = Env::new();
    env.put("e.txt", "aaa bbb aaa\n");
    let empty = replace(&env, "e.txt", "", "x").await;
    assert_eq!(
        empty,
        json!({"success": false, "error": "old_string cannot be empty"})
    );
    let same = replace(&env, "e.txt", "aaa", "aaa").await;
    assert_eq!(same["error"], "old_string and new_string are identical");
    let ambiguous = replace(&env, "e.txt", "aaa", "ccc").await;
    assert_eq!(
        ambiguous["error"],
        "Found 2 matches for old_string. Provide more context to make it unique, or use replace_all=True."
    );
    assert!(ambiguous.get("_hint").is_none());
    let all = run(
        &env,
        json!({"path": "e.txt", "old_string": "aaa", "new_string": "ccc", "replace_all": true}),
    )
    .await;
    assert_eq!(all["success"], true);
    assert_eq!(env.get("e.txt"), "ccc bbb ccc\n");

    let missing_file = replace(&env, "nope.txt", "a", "b").await;
    assert_eq!(
        missing_file["error"],
        format!("Failed to read file: {}", env.abs("nope.txt"))
    );
    assert_eq!(
        run(&env, json!({"old_string": "a", "new_string": "b"})).await,
        json!({"error": "path required"})
    );
    assert_eq!(
        run(&env, json!({"path": "e.txt", "old_string": "a"})).await,
        json!({"error": "old_string and new_string required"})
    );
    assert_eq!(
        run(&env, json!({"mode": "diff"})).await,
        json!({"error": "Unknown mode: diff"})
    );
}

#[tokio::test]
async fn not_found_hints_and_escalation() {
    let env = Env::new();
    env.put("h.py", "def foo():\n    pass\n");
    let similar = replace(&env, "h.py", "def fooo(x, y, z):\n    return None", "y").await;
    let error = similar["error"].as_str().unwrap();
    assert!(error.starts_with("Could not find a match for old_string in the file\n\nDid you mean one of these sections?\n"), "{error}");
    assert!(similar.get("_hint").is_none());

    let unrelated = replace(&env, "h.py", "zzzz qqqq", "y").await;
    assert_eq!(
        unrelated["error"],
        "Could not find a match for old_string in the file"
    );
    assert_eq!(
        unrelated["_hint"],
        "old_string not found. Use read_file to verify the current content, or search_files to locate the text."
    );
    let third = replace(&env, "h.py", "zzzz qqqq", "y").await;
    assert!(
        third["_hint"]
            .as_str()
            .unwrap()
            .starts_with("This is failure #3 patching 'h.py'. Stop retrying")
    );
    // Success resets the count.
    replace(&env, "h.py", "pass", "return 1").await;
    let fresh = replace(&env, "h.py", "zzzz qqqq", "y").await;
    assert!(
        fresh["_hint"]
            .as_str()
            .unwrap()
            .starts_with("old_string not found.")
    );
}

#[tokio::test]
async fn replace_keeps_crlf_bom_and_unicode() {
    let env = Env::new();
    env.put("w.txt", "\u{feff}first\r\nsecond\r\n");
    let result = replace(&env, "w.txt", "second", "2nd\nthird").await;
    assert_eq!(result["success"], true);
    assert_eq!(
        std::fs::read(env.path("w.txt")).unwrap(),
        "\u{feff}first\r\n2nd\r\nthird\r\n".as_bytes()
    );

    env.put("u.md", "Wait \u{2014} for it\u{2026}\n");
    replace(&env, "u.md", "Wait -- for it...", "Wait -- for them...").await;
    assert_eq!(env.get("u.md"), "Wait \u{2014} for them\u{2026}\n");
}

#[tokio::test]
async fn replace_refuses_breaking_json_and_sensitive_paths() {
    let env = Env::new();
    env.put("c.json", "{\"a\": 1}\n");
    let result = replace(&env, "c.json", "1}", "1").await;
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .starts_with("Failed to write changes: Refusing to write")
    );
    assert_eq!(env.get("c.json"), "{\"a\": 1}\n");
    let etc = replace(&env, "/etc/passwd", "root", "toor").await;
    assert!(
        etc["error"]
            .as_str()
            .unwrap()
            .starts_with("Refusing to write to sensitive system path: /etc/passwd")
    );
}

// --- V4A mode ----------------------------------------------------------------

#[tokio::test]
async fn v4a_add_update_delete_move() {
    let env = Env::new();
    env.put("src/app.py", "def greet():\n    print(\"hello\")\n");
    env.put("old.txt", "bye\n");
    env.put("a.sh", "echo a\n");
    std::fs::set_permissions(env.path("a.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let result = v4a(
        &env,
        "*** Add File: docs/new.md\n+# Title\n+text\n\
         *** Update File: src/app.py\n@@ def greet @@\n def greet():\n-    print(\"hello\")\n+    print(\"hi\")\n\
         *** Delete File: old.txt\n\
         *** Move File: a.sh -> bin/a.sh\n",
    )
    .await;
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(env.get("docs/new.md"), "# Title\ntext");
    assert_eq!(env.get("src/app.py"), "def greet():\n    print(\"hi\")\n");
    assert!(!env.exists("old.txt") && !env.exists("a.sh"));
    assert_eq!(env.get("bin/a.sh"), "echo a\n");
    let mode = std::fs::metadata(env.path("bin/a.sh"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o755, "a move is a rename");

    assert_eq!(result["files_created"], json!(["docs/new.md"]));
    assert_eq!(result["files_deleted"], json!(["old.txt"]));
    let modified: Vec<&str> = result["files_modified"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for rel in ["docs/new.md", "src/app.py", "old.txt", "a.sh", "bin/a.sh"] {
        assert!(
            modified.contains(&env.abs(rel).as_str()),
            "{rel} in {modified:?}"
        );
    }
    let diff = result["diff"].as_str().unwrap();
    assert!(
        diff.starts_with("--- /dev/null\n+++ b/docs/new.md\n@@ -0,0 +1,2 @@\n+# Title\n+text"),
        "{diff}"
    );
    assert!(diff.contains("--- a/src/app.py\n+++ b/src/app.py\n"));
    assert!(diff.contains("--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"));
    assert!(diff.ends_with("# Moved: a.sh -> bin/a.sh"));
    assert_eq!(result["lint"]["src/app.py"]["status"], "ok");
    assert_eq!(result["lint"]["docs/new.md"]["status"], "skipped");
    assert!(result.get("resolved_path").is_none());
}

#[tokio::test]
async fn v4a_second_hunk_failure_changes_nothing() {
    let env = Env::new();
    env.put("a.py", "def good():\n    return 1\n");
    env.put("b.py", "completely different content\n");
    let result = v4a(
        &env,
        "*** Update File: a.py\n def good():\n-    return 1\n+    return 2\n\
         *** Update File: b.py\n THIS LINE DOES NOT EXIST\n-    old\n+    new\n",
    )
    .await;
    assert_eq!(result["success"], false);
    let error = result["error"].as_str().unwrap();
    assert!(
        error.starts_with("Patch validation failed (no files were modified):\n  • b.py: hunk 1 (no hint) not found — Could not find a match for old_string in the file"),
        "{error}"
    );
    assert_eq!(env.get("a.py"), "def good():\n    return 1\n");
    assert_eq!(env.get("b.py"), "completely different content\n");
}

#[tokio::test]
async fn v4a_numbers_the_failing_hunk() {
    let env = Env::new();
    env.put("a.py", "first = 1\n");
    let result = v4a(
        &env,
        "*** Update File: a.py\n@@ first @@\n-first = 1\n+first = 2\n@@ missing @@\n-does_not_exist = 1\n+does_not_exist = 2\n",
    )
    .await;
    let error = result["error"].as_str().unwrap();
    assert!(
        error.contains("a.py: hunk 2 'missing' not found"),
        "{error}"
    );
    assert_eq!(env.get("a.py"), "first = 1\n");
}

#[tokio::test]
async fn v4a_write_failure_rolls_back_what_was_written() {
    let env = Env::new();
    env.put("x.txt", "before\n");
    // `blocker` is a file, so nothing can be created below it.
    env.put("blocker", "i am a file\n");
    let result = v4a(
        &env,
        "*** Update File: x.txt\n-before\n+after\n*** Add File: blocker/new.txt\n+content\n",
    )
    .await;
    let error = result["error"].as_str().unwrap();
    assert!(
        error.starts_with("Apply phase failed; every change was rolled back (no files were modified):\n  • blocker/new.txt: "),
        "{error}"
    );
    assert_eq!(env.get("x.txt"), "before\n");
}

#[tokio::test]
async fn v4a_rejects_traversal_and_outside_paths() {
    let env = Env::new();
    let dotdot = v4a(&env, "*** Add File: ../escape.txt\n+x\n").await;
    assert_eq!(
        dotdot["error"],
        "V4A patch header contains '..' traversal: '../escape.txt'. Use the agent's cwd-relative path (no '..') or an absolute path under the working directory in '*** Update File:' / '*** Add File:' / '*** Delete File:' / '*** Move File:' headers."
    );
    let absolute = v4a(&env, "*** Add File: /tmp/caduceus-v4a-escape.txt\n+x\n").await;
    assert!(
        absolute["error"]
            .as_str()
            .unwrap()
            .starts_with("V4A patch header names an absolute path outside the working directory")
    );
    assert!(!std::path::Path::new("/tmp/caduceus-v4a-escape.txt").exists());
    let moved = v4a(&env, "*** Move File: a.txt -> ../../b.txt\n").await;
    assert!(
        moved["error"]
            .as_str()
            .unwrap()
            .contains("'..' traversal: '../../b.txt'")
    );
    // An absolute path inside the cwd is fine.
    let inside = v4a(&env, &format!("*** Add File: {}\n+ok\n", env.abs("in.txt"))).await;
    assert_eq!(inside["success"], true, "{inside}");
    assert_eq!(inside["resolved_path"], env.abs("in.txt"));
}

#[tokio::test]
async fn v4a_add_onto_an_existing_file_fails_but_delete_then_add_works() {
    let env = Env::new();
    env.put("exists.py", "keep\n");
    let result = v4a(&env, "*** Add File: exists.py\n+brand new\n").await;
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("exists.py: file already exists")
    );
    assert_eq!(env.get("exists.py"), "keep\n");
    let rewrite = v4a(
        &env,
        "*** Delete File: exists.py\n*** Add File: exists.py\n+fresh = True\n",
    )
    .await;
    assert_eq!(rewrite["success"], true, "{rewrite}");
    assert_eq!(env.get("exists.py"), "fresh = True");
}

#[tokio::test]
async fn v4a_move_then_update_and_move_to() {
    let env = Env::new();
    env.put("a.py", "x = 1\nkeep = 2\n");
    let result = v4a(
        &env,
        "*** Move File: a.py -> b.py\n*** Update File: b.py\n@@\n-x = 1\n+x = 42\n",
    )
    .await;
    assert_eq!(result["success"], true, "{result}");
    assert!(!env.exists("a.py"));
    assert_eq!(env.get("b.py"), "x = 42\nkeep = 2\n");

    let renamed = v4a(
        &env,
        "*** Update File: b.py\n*** Move to: c.py\n@@\n-keep = 2\n+keep = 3\n",
    )
    .await;
    assert_eq!(renamed["success"], true, "{renamed}");
    assert!(!env.exists("b.py"));
    assert_eq!(env.get("c.py"), "x = 42\nkeep = 3\n");
    assert!(
        renamed["diff"]
            .as_str()
            .unwrap()
            .starts_with("--- a/b.py\n+++ b/c.py\n")
    );

    env.put("d.py", "d\n");
    let clash = v4a(&env, "*** Move File: c.py -> d.py\n").await;
    assert!(
        clash["error"]
            .as_str()
            .unwrap()
            .contains("d.py: destination already exists — move would overwrite")
    );
}

#[tokio::test]
async fn v4a_addition_only_hunks_and_inert_hunks() {
    let env = Env::new();
    env.put("app.py", "def main():\n    pass\n\nrest = 1\n");
    let result = v4a(
        &env,
        "*** Update File: app.py\n@@ def main @@\n+# after main line\n",
    )
    .await;
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(
        env.get("app.py"),
        "def main():\n# after main line\n    pass\n\nrest = 1\n"
    );
    let appended = v4a(&env, "*** Update File: app.py\n+tail = True\n").await;
    assert_eq!(appended["success"], true);
    assert!(env.get("app.py").ends_with("rest = 1\ntail = True\n"));
    let inert = v4a(&env, "*** Update File: app.py\n@@ anchor @@\n rest = 1\n").await;
    assert_eq!(
        inert["error"],
        "Patch validation failed (no files were modified):\n  • Patch contains no changes (only context lines were provided)"
    );
    let missing_hint = v4a(&env, "*** Update File: app.py\n@@ nowhere @@\n+x\n").await;
    assert!(
        missing_hint["error"]
            .as_str()
            .unwrap()
            .contains("addition-only hunk context hint 'nowhere' not found")
    );
}

#[tokio::test]
async fn v4a_hint_disambiguates_repeated_text() {
    let env = Env::new();
    let mut text = String::from("def one():\n    value = 1\n");
    text.push_str(&"# filler line to push the second function away\n".repeat(60));
    text.push_str("def two():\n    value = 1\n");
    env.put("r.py", &text);
    let result = v4a(
        &env,
        "*** Update File: r.py\n@@ def two @@\n-    value = 1\n+    value = 2\n",
    )
    .await;
    assert_eq!(result["success"], true, "{result}");
    let updated = env.get("r.py");
    assert!(updated.starts_with("def one():\n    value = 1\n"));
    assert!(updated.ends_with("def two():\n    value = 2\n"));
}

#[tokio::test]
async fn v4a_keeps_crlf_and_bom_and_parses_errors() {
    let env = Env::new();
    env.put("w.txt", "\u{feff}a\r\nb\r\n");
    let result = v4a(&env, "*** Update File: w.txt\n a\n-b\n+c\n").await;
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(
        std::fs::read(env.path("w.txt")).unwrap(),
        "\u{feff}a\r\nc\r\n".as_bytes()
    );
    let broken = v4a(&env, "*** Update File: w.txt\n").await;
    assert_eq!(
        broken,
        json!({"success": false, "error": "Failed to parse patch: Parse error: UPDATE 'w.txt': no hunks found"})
    );
    assert_eq!(
        run(&env, json!({"mode": "patch"})).await,
        json!({"error": "patch content required"})
    );
}

#[tokio::test]
async fn v4a_refuses_credentials_and_bad_json_before_writing() {
    let env = Env::new();
    env.put("ok.txt", "one\n");
    env.put("c.json", "{\"a\": 1}\n");
    let result = v4a(
        &env,
        "*** Update File: ok.txt\n-one\n+two\n*** Update File: c.json\n-{\"a\": 1}\n+{\"a\": }\n",
    )
    .await;
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("candidate content fails .json syntax validation")
    );
    assert_eq!(env.get("ok.txt"), "one\n");
    let sensitive = v4a(&env, "*** Add File: /etc/caduceus-test.conf\n+x\n").await;
    assert!(
        sensitive["error"]
            .as_str()
            .unwrap()
            .starts_with("V4A patch header names an absolute path outside")
    );
}

#[tokio::test]
async fn a_patch_that_breaks_python_says_so() {
    if !crate::tools::test_support::have_program("python3") {
        return;
    }
    let env = Env::new();
    env.put("m.py", "def a():\n    return 1\n");
    let result = replace(&env, "m.py", "def a():", "def a(:").await;
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(
        result["lint"],
        json!({"status": "error", "output": "SyntaxError: invalid syntax (line 1, column 7)"})
    );
    let v4a_result = v4a(
        &env,
        "*** Add File: n.py\n+x = (\n*** Update File: m.py\n-def a(:\n+def a():\n",
    )
    .await;
    assert_eq!(
        v4a_result["lint"]["m.py"],
        json!({"status": "ok", "output": ""}),
        "{v4a_result}"
    );
    assert_eq!(
        v4a_result["lint"]["n.py"]["status"], "error",
        "{v4a_result}"
    );
}
