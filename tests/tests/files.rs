//! The file tools through a coordinator and a worker process, with hermes'
//! cases: numbering and hints, unchanged stub, not found with similar files,
//! denials, fuzzy patching, V4A all-or-nothing, search, and relative paths that
//! follow the terminal's `cd`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use caduceus_tests::{Fleet, Proc, parse_result};
use serde_json::{Value, json};

struct Bench {
    fleet: Fleet,
    coordinator: Proc,
    _worker: Proc,
    dir: tempfile::TempDir,
}

impl Bench {
    fn new() -> Bench {
        let fleet = Fleet::new();
        let coordinator = fleet.serve(&[]);
        let worker = fleet.worker(&coordinator, "w1", &fleet.token, &[]);
        fleet.wait_for_workers(&coordinator, &["w1"], Duration::from_secs(30));
        Bench {
            fleet,
            coordinator,
            _worker: worker,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn call(&self, tool: &str, args: &Value) -> Value {
        let out = self.fleet.client(
            &self.coordinator,
            &["call", tool, &args.to_string(), "--task", "files"],
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        parse_result(&out.stdout)
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

#[test]
fn read_write_patch_search_through_a_worker() {
    let b = Bench::new();
    let file = b.path("notes.txt");
    let content: String = (1..=1000)
        .map(|i| format!("line {i:04}: lorem ipsum\n"))
        .collect();

    let written = b.call("write_file", &json!({"path": file, "content": content}));
    assert_eq!(written["bytes_written"], content.len());
    assert_eq!(written["files_modified"], json!([file]));

    // Numbering, pagination hint, no trailing empty line.
    let read = b.call(
        "read_file",
        &json!({"path": file, "offset": 10, "limit": 3}),
    );
    assert_eq!(
        read["content"],
        "10|line 0010: lorem ipsum\n11|line 0011: lorem ipsum\n12|line 0012: lorem ipsum"
    );
    assert_eq!(read["total_lines"], 1000);
    assert_eq!(
        read["hint"],
        "Use offset=13 to continue reading (showing 10-12 of 1000 lines)"
    );
    let tail = b.call("read_file", &json!({"path": file, "offset": 999}));
    assert_eq!(
        tail["content"],
        "999|line 0999: lorem ipsum\n1000|line 1000: lorem ipsum"
    );

    // Re-reading an unchanged region: the stub, then refusal.
    let again = b.call("read_file", &json!({"path": file, "offset": 999}));
    assert_eq!(again["status"], "unchanged", "{again}");
    assert_eq!(again["dedup"], true);
    let third = b.call("read_file", &json!({"path": file, "offset": 999}));
    assert!(
        third["error"].as_str().unwrap().starts_with("BLOCKED"),
        "{third}"
    );

    // Not found, with similar names.
    let missing = b.call("read_file", &json!({"path": b.path("note.txt")}));
    assert!(
        missing["error"]
            .as_str()
            .unwrap()
            .starts_with("File not found"),
        "{missing}"
    );
    assert!(
        missing["similar_files"].to_string().contains("notes.txt"),
        "{missing}"
    );

    // Device and secret denials; sensitive writes; invalid JSON refused before writing.
    assert!(b.call("read_file", &json!({"path": "/dev/zero"}))["error"].is_string());
    std::fs::write(b.path(".env"), "API_KEY=abc\n").unwrap();
    assert!(b.call("read_file", &json!({"path": b.path(".env")}))["error"].is_string());
    assert!(
        b.call(
            "write_file",
            &json!({"path": "/etc/caduceus-test", "content": "x"})
        )["error"]
            .is_string()
    );
    let bad_json = b.call(
        "write_file",
        &json!({"path": b.path("conf.json"), "content": "{\"a\": }"}),
    );
    assert!(bad_json["error"].is_string(), "{bad_json}");
    assert!(!b.dir.path().join("conf.json").exists());

    // Patch: an ambiguous match is refused; a match with the wrong indentation
    // is found (line-trimmed strategy) and the replacement re-indented.
    let code = b.path("code.py");
    std::fs::write(
        &code,
        "class A:\n    def f(self):\n        return 1\n\n    def g(self):\n        return 1\n",
    )
    .unwrap();
    let ambiguous = b.call(
        "patch",
        &json!({"path": code, "old_string": "return 1", "new_string": "return 2"}),
    );
    assert!(
        ambiguous["error"]
            .as_str()
            .unwrap()
            .starts_with("Found 2 matches for old_string"),
        "{ambiguous}"
    );
    let patched = b.call("patch", &json!({"path": code, "old_string": "  def g(self):\n      return 1", "new_string": "  def g(self):\n      return 3"}));
    assert_eq!(patched["success"], true, "{patched}");
    assert!(
        patched["diff"]
            .as_str()
            .unwrap()
            .contains("+        return 3"),
        "{patched}"
    );
    assert_eq!(
        std::fs::read_to_string(&code).unwrap(),
        "class A:\n    def f(self):\n        return 1\n\n    def g(self):\n        return 3\n"
    );

    // Search: 5 or more matches come grouped.
    for i in 0..6 {
        std::fs::write(
            b.path(&format!("s{i}.rs")),
            format!("fn a() {{}}\n// NEEDLE {i}\n"),
        )
        .unwrap();
    }
    let found = b.call(
        "search_files",
        &json!({"pattern": "NEEDLE", "path": b.dir.path()}),
    );
    assert_eq!(found["total_count"], 6, "{found}");
    assert!(
        found["matches_text"]
            .as_str()
            .unwrap()
            .contains("  2: // NEEDLE 0"),
        "{found}"
    );
}

#[test]
fn a_failing_v4a_hunk_changes_no_file() {
    let b = Bench::new();
    std::fs::write(b.path("a.txt"), "one\ntwo\n").unwrap();
    std::fs::write(b.path("b.txt"), "three\nfour\n").unwrap();
    // V4A headers are relative to the task's cwd.
    let cd = b.call(
        "terminal",
        &json!({"command": format!("cd {}", b.dir.path().display())}),
    );
    assert_eq!(cd["exit_code"], 0);
    let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n one\n-two\n+TWO\n*** Update File: b.txt\n@@\n three\n-not there\n+x\n*** End Patch\n";
    let result = b.call("patch", &json!({"mode": "patch", "patch": patch}));
    assert!(result["error"].is_string(), "{result}");
    assert_eq!(
        std::fs::read_to_string(b.path("a.txt")).unwrap(),
        "one\ntwo\n",
        "the first hunk was not applied"
    );
    assert_eq!(
        std::fs::read_to_string(b.path("b.txt")).unwrap(),
        "three\nfour\n"
    );

    let good = "*** Begin Patch\n*** Update File: a.txt\n@@\n one\n-two\n+TWO\n*** Add File: c.txt\n+new file\n*** Delete File: b.txt\n*** End Patch\n";
    let result = b.call("patch", &json!({"mode": "patch", "patch": good}));
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(
        std::fs::read_to_string(b.path("a.txt")).unwrap(),
        "one\nTWO\n"
    );
    assert_eq!(
        std::fs::read_to_string(b.path("c.txt")).unwrap(),
        "new file",
        "hermes joins added lines without a final newline"
    );
    assert!(!b.dir.path().join("b.txt").exists());

    // Traversal in headers is rejected.
    let sneaky = "*** Begin Patch\n*** Add File: ../../escape.txt\n+x\n*** End Patch\n";
    assert!(b.call("patch", &json!({"mode": "patch", "patch": sneaky}))["error"].is_string());
    let absolute = "*** Begin Patch\n*** Add File: /etc/caduceus-escape\n+x\n*** End Patch\n";
    assert!(b.call("patch", &json!({"mode": "patch", "patch": absolute}))["error"].is_string());
}

#[test]
fn relative_paths_follow_the_terminal_cd() {
    let b = Bench::new();
    std::fs::create_dir(b.dir.path().join("sub")).unwrap();
    std::fs::write(b.dir.path().join("sub/here.txt"), "found me\n").unwrap();
    let cd = b.call(
        "terminal",
        &json!({"command": format!("cd {}/sub", b.dir.path().display())}),
    );
    assert_eq!(cd["exit_code"], 0, "{cd}");
    let read = b.call("read_file", &json!({"path": "here.txt"}));
    assert_eq!(read["content"], "1|found me", "{read}");
    let written = b.call(
        "write_file",
        &json!({"path": "made.txt", "content": "hi\n"}),
    );
    assert_eq!(
        written["resolved_path"],
        b.dir.path().join("sub/made.txt").display().to_string(),
        "{written}"
    );
    assert!(b.dir.path().join("sub/made.txt").exists());
}
