use std::time::{Duration, SystemTime};

use serde_json::json;

use super::*;
use crate::tools::test_support::{Env, args, parse_text};

async fn raw(env: &Env, arguments: Value) -> String {
    search_files(&env.ctx(), &args(arguments)).await.body
}

async fn search(env: &Env, arguments: Value) -> Value {
    parse_text(&raw(env, arguments).await)
}

fn project() -> Env {
    let env = Env::new();
    env.put(".git/HEAD", "ref: refs/heads/main\n");
    env.put(".gitignore", "build/\n");
    env.put(
        "src/a.rs",
        "fn a() {}\n// TODO first\nlet x = 1;\n// TODO second\n",
    );
    env.put("src/b.py", "# TODO python\n");
    env.put("build/out.rs", "// TODO generated\n");
    env.put(".cache/c.rs", "// TODO cached\n");
    env.put("blob.bin", b"TODO\x00\x00".as_slice());
    env
}

#[tokio::test]
async fn few_matches_are_listed() {
    let env = project();
    let result = search(&env, json!({"pattern": "TODO"})).await;
    assert_eq!(
        result,
        json!({
            "total_count": 3,
            "matches": [
                {"path": "./src/a.rs", "line": 2, "content": "// TODO first"},
                {"path": "./src/a.rs", "line": 4, "content": "// TODO second"},
                {"path": "./src/b.py", "line": 1, "content": "# TODO python"},
            ],
        })
    );
    let rooted = search(&env, json!({"pattern": "python", "path": "src/"})).await;
    assert_eq!(rooted["matches"][0]["path"], "src/b.py");
    let absolute = search(&env, json!({"pattern": "python", "path": env.abs("src")})).await;
    assert_eq!(absolute["matches"][0]["path"], env.abs("src/b.py"));
}

#[tokio::test]
async fn many_matches_are_grouped_by_file() {
    let env = Env::new();
    env.put("one.txt", "hit 1\nmiss\nhit 2\n");
    env.put("two.txt", "hit 3\nhit 4\nhit 5   \n");
    let result = search(&env, json!({"pattern": "hit"})).await;
    assert_eq!(
        result,
        json!({
            "total_count": 5,
            "matches_format": "path-grouped: each file path on its own line, followed by indented '<line>: <content>' rows for matches in that file",
            "matches_text": "./one.txt\n  1: hit 1\n  3: hit 2\n./two.txt\n  1: hit 3\n  2: hit 4\n  3: hit 5",
        })
    );
}

#[tokio::test]
async fn files_only_count_context_and_glob() {
    let env = project();
    let files = search(
        &env,
        json!({"pattern": "TODO", "output_mode": "files_only"}),
    )
    .await;
    assert_eq!(
        files,
        json!({"total_count": 2, "files": ["./src/a.rs", "./src/b.py"]})
    );
    let counts = search(&env, json!({"pattern": "TODO", "output_mode": "count"})).await;
    assert_eq!(
        counts,
        json!({"total_count": 3, "counts": {"./src/a.rs": 2, "./src/b.py": 1}})
    );
    let context = search(&env, json!({"pattern": "second", "context": 1})).await;
    assert_eq!(
        context["matches"],
        json!([
            {"path": "./src/a.rs", "line": 3, "content": "let x = 1;"},
            {"path": "./src/a.rs", "line": 4, "content": "// TODO second"},
        ])
    );
    let glob = search(&env, json!({"pattern": "TODO", "file_glob": "*.py"})).await;
    assert_eq!(glob["total_count"], 1);
    let grep_alias = search(
        &env,
        json!({"pattern": "TODO", "target": "grep", "file_glob": "*.rs"}),
    )
    .await;
    assert_eq!(grep_alias["total_count"], 2);
}

#[tokio::test]
async fn paging_adds_the_hint() {
    let env = Env::new();
    let text: String = (1..=30).map(|n| format!("match {n}\n")).collect();
    env.put("m.txt", text);
    let page = raw(&env, json!({"pattern": "match", "limit": 10, "offset": 5})).await;
    assert!(page.ends_with(
        "\n\n[Hint: Results truncated. Use offset=15 to see more, or narrow with a more specific pattern or file_glob.]"
    ));
    let result = parse_text(&page);
    assert_eq!(result["total_count"], 30);
    assert_eq!(result["truncated"], true);
    assert!(
        result["matches_text"]
            .as_str()
            .unwrap()
            .starts_with("./m.txt\n  6: match 6\n")
    );
    let last = raw(&env, json!({"pattern": "match", "limit": 10, "offset": 20})).await;
    assert!(!last.contains("[Hint:"));
    assert!(parse_text(&last).get("truncated").is_none());
}

#[tokio::test]
async fn file_names_newest_first() {
    let env = project();
    let base = SystemTime::now() - Duration::from_secs(600);
    for (rel, age) in [("src/a.rs", 30), ("src/b.py", 10), ("blob.bin", 5)] {
        let file = std::fs::File::options()
            .write(true)
            .open(env.path(rel))
            .unwrap();
        file.set_modified(base - Duration::from_secs(age)).unwrap();
    }
    env.put("src/c.rs", "new\n");
    let all = search(&env, json!({"pattern": "*", "target": "files"})).await;
    // Hidden and ignored files stay out even for `*` (rg's `-g '*'` lists them).
    assert_eq!(
        all,
        json!({"total_count": 4, "files": ["./src/c.rs", "./blob.bin", "./src/b.py", "./src/a.rs"]})
    );
    let rust = search(
        &env,
        json!({"pattern": "*.rs", "target": "find", "path": "src"}),
    )
    .await;
    assert_eq!(rust["files"], json!(["src/c.rs", "src/a.rs"]));
    let bare = search(&env, json!({"pattern": "b.py", "target": "files"})).await;
    assert_eq!(bare["files"], json!(["./src/b.py"]));
}

#[tokio::test]
async fn identical_searches_warn_then_block() {
    let env = project();
    let query = json!({"pattern": "TODO"});
    search(&env, query.clone()).await;
    assert!(search(&env, query.clone()).await.get("_warning").is_none());
    assert_eq!(
        search(&env, query.clone()).await["_warning"],
        "You have run this exact search 3 times consecutively. The results have not changed. Use the information you already have."
    );
    assert_eq!(
        search(&env, query.clone()).await,
        json!({
            "error": "BLOCKED: You have run this exact search 4 times in a row. The results have NOT changed. You already have this information. STOP re-searching and proceed with your task.",
            "pattern": "TODO",
            "already_searched": 4,
        })
    );
    // Another tool resets the count; so does a different page.
    env.tracker.note_other_tool();
    assert!(search(&env, query).await.get("error").is_none());
}

#[tokio::test]
async fn missing_paths_bad_patterns_and_newlines() {
    let env = project();
    let missing = search(&env, json!({"pattern": "x", "path": "sr"})).await;
    assert_eq!(
        missing,
        json!({"total_count": 0, "error": "Path not found: sr. Similar paths: ./src"})
    );
    let bad = search(&env, json!({"pattern": "foo("})).await;
    assert!(
        bad["error"]
            .as_str()
            .unwrap()
            .starts_with("Search failed: regex parse error"),
        "{bad}"
    );
    let newline = search(&env, json!({"pattern": "first\\nlet"})).await;
    assert_eq!(newline["total_count"], 0);
    assert!(
        newline["warning"]
            .as_str()
            .unwrap()
            .starts_with("0 results found. Note: search_files content search is line-oriented")
    );
    assert!(newline.get("error").is_none());
}

#[tokio::test]
async fn secret_files_are_left_out() {
    let env = Env::new();
    let home = format!("{}/.caduceus", env.home);
    std::fs::create_dir_all(format!("{home}/logs")).unwrap();
    std::fs::write(format!("{home}/auth.json"), "{\"token\": \"abc\"}\n").unwrap();
    std::fs::write(format!("{home}/logs/run.log"), "token refreshed\n").unwrap();
    let result = search(&env, json!({"pattern": "token", "path": "~/.caduceus"})).await;
    assert_eq!(result["total_count"], 1);
    assert_eq!(result["matches"][0]["path"], format!("{home}/logs/run.log"));
    assert_eq!(
        result["_omitted"],
        "1 result(s) omitted because they target credential, token, cache, or secret-bearing environment files."
    );
    env.put(".env", "SECRET=1\n");
    let direct = search(&env, json!({"pattern": "SECRET", "path": ".env"})).await;
    assert!(
        direct["error"]
            .as_str()
            .unwrap()
            .contains("secret-bearing environment file")
    );
}

#[test]
fn newline_detection() {
    assert!(has_regex_newline("a\\nb"));
    assert!(has_regex_newline("a\nb"));
    assert!(has_regex_newline("\\\\\\n"));
    assert!(!has_regex_newline("a\\\\nb"));
    assert!(!has_regex_newline("plain n"));
}
