use serde_json::json;

use super::*;
use crate::tools::test_support::{Env, args, parse};

async fn read(env: &Env, arguments: serde_json::Value) -> serde_json::Value {
    parse(&read_file(&env.ctx(), &args(arguments)).await)
}

fn numbered_file(lines: usize) -> String {
    (1..=lines)
        .map(|n| format!("line {n:04}: lorem ipsum dolor sit amet, consectetur adipiscing\n"))
        .collect()
}

#[tokio::test]
async fn numbers_lines_without_padding_or_trailing_artefact() {
    let env = Env::new();
    env.put("a.txt", "alpha\nbeta\ngamma\n");
    let result = read(&env, json!({"path": "a.txt"})).await;
    assert_eq!(
        result,
        json!({
            "content": "1|alpha\n2|beta\n3|gamma",
            "total_lines": 3,
            "file_size": 17,
            "truncated": false,
            "is_binary": false,
            "is_image": false,
        })
    );
}

#[tokio::test]
async fn pages_a_thousand_line_file() {
    let env = Env::new();
    env.put("big.txt", numbered_file(1000));
    let first = read(&env, json!({"path": "big.txt"})).await;
    assert_eq!(first["total_lines"], 1000);
    assert_eq!(first["truncated"], true);
    assert_eq!(
        first["hint"],
        "Use offset=501 to continue reading (showing 1-500 of 1000 lines)"
    );
    let content = first["content"].as_str().unwrap();
    assert!(content.starts_with("1|line 0001: lorem"));
    assert!(content.ends_with("500|line 0500: lorem ipsum dolor sit amet, consectetur adipiscing"));

    let second = read(&env, json!({"path": "big.txt", "offset": 501})).await;
    assert_eq!(second["truncated"], false);
    assert!(second.get("hint").is_none());
    let content = second["content"].as_str().unwrap();
    assert!(content.starts_with("501|line 0501"));
    assert!(
        content.ends_with("1000|line 1000: lorem ipsum dolor sit amet, consectetur adipiscing")
    );
    assert!(!content.contains("1001|"));
}

#[tokio::test]
async fn offset_and_limit_are_normalized() {
    let env = Env::new();
    env.put("n.txt", numbered_file(3000));
    let window = read(&env, json!({"path": "n.txt", "offset": 10, "limit": 3})).await;
    let content = window["content"].as_str().unwrap();
    assert_eq!(content.lines().count(), 3);
    assert!(content.starts_with("10|line 0010") && content.contains("\n12|line 0012"));
    assert_eq!(
        window["hint"],
        "Use offset=13 to continue reading (showing 10-12 of 3000 lines)"
    );

    env.put("short.txt", "x\n".repeat(3000));
    let clamped = read(
        &env,
        json!({"path": "short.txt", "offset": 0, "limit": 5000}),
    )
    .await;
    assert_eq!(clamped["content"].as_str().unwrap().lines().count(), 2000);
    assert_eq!(
        clamped["hint"],
        "Use offset=2001 to continue reading (showing 1-2000 of 3000 lines)"
    );

    // 2000 lines of 66 characters exceed the 100,000-character budget.
    let budget = read(&env, json!({"path": "n.txt", "limit": 2000})).await;
    assert_eq!(budget["truncated_by"], "bytes");
    assert_eq!(budget["next_offset"], 1510);
    assert_eq!(
        budget["hint"],
        "Output truncated at the 100,000-char read budget after 1509 line(s) (showing lines 1-1509 of 3000). Use offset=1510 to continue."
    );

    let strings = read(
        &env,
        json!({"path": "n.txt", "offset": "2999", "limit": "0"}),
    )
    .await;
    assert_eq!(
        strings["content"],
        "2999|line 2999: lorem ipsum dolor sit amet, consectetur adipiscing"
    );

    let past = read(&env, json!({"path": "n.txt", "offset": 4000})).await;
    assert_eq!(past["content"], "");
    assert_eq!(
        past["hint"],
        "Offset 4000 is past the end of the file (3000 lines)."
    );
}

#[tokio::test]
async fn long_lines_are_cut_and_bom_is_stripped() {
    let env = Env::new();
    env.put("wide.txt", format!("\u{feff}short\n{}\n", "x".repeat(2500)));
    let result = read(&env, json!({"path": "wide.txt"})).await;
    let expected = format!("1|short\n2|{}... [truncated]", "x".repeat(2000));
    assert_eq!(result["content"], expected);
}

#[tokio::test]
async fn last_line_without_newline_and_crlf() {
    let env = Env::new();
    env.put("w.txt", "one\r\ntwo\r\nthree");
    let result = read(&env, json!({"path": "w.txt"})).await;
    assert_eq!(result["content"], "1|one\n2|two\n3|three");
    assert_eq!(result["total_lines"], 3);
}

#[tokio::test]
async fn unchanged_rereads_get_a_stub_then_a_block() {
    let env = Env::new();
    env.put("s.txt", "same\n");
    let first = read(&env, json!({"path": "s.txt"})).await;
    assert_eq!(first["content"], "1|same");
    let second = read(&env, json!({"path": "s.txt"})).await;
    assert_eq!(
        second,
        json!({
            "status": "unchanged",
            "message": UNCHANGED_MESSAGE,
            "path": "s.txt",
            "dedup": true,
            "content_returned": false,
        })
    );
    let third = read(&env, json!({"path": "s.txt"})).await;
    assert_eq!(third["already_read"], 3);
    assert_eq!(
        third["error"],
        "BLOCKED: You have called read_file on this exact region 3 times and the file has NOT changed. STOP calling read_file for this path — the content from your earlier read_file result in this conversation is still current. Proceed with your task using the information you already have."
    );
    // Another tool in between breaks the loop: a stub again, not a block.
    env.tracker.note_other_tool();
    assert_eq!(
        read(&env, json!({"path": "s.txt"})).await["status"],
        "unchanged"
    );
    // A different region is a fresh read.
    assert_eq!(
        read(&env, json!({"path": "s.txt", "limit": 10})).await["content"],
        "1|same"
    );
    // After context compression the content is needed again.
    env.tracker.reset_dedup();
    assert_eq!(
        read(&env, json!({"path": "s.txt"})).await["content"],
        "1|same"
    );
}

#[tokio::test]
async fn a_changed_file_is_read_again_and_counted() {
    let env = Env::new();
    for round in 1..=4 {
        // Size changes every round, so the stamp does too even on coarse clocks.
        env.put("c.txt", "v".repeat(round));
        let result = read(&env, json!({"path": "c.txt"})).await;
        match round {
            1 | 2 => {
                assert!(result.get("content").is_some(), "round {round}: {result}");
                assert!(result.get("_warning").is_none());
            }
            3 => assert_eq!(
                result["_warning"],
                "You have read this exact file region 3 times consecutively. The content has not changed since your last read. Use the information you already have. If you are stuck in a loop, stop reading and proceed with writing or responding."
            ),
            _ => {
                assert_eq!(
                    result["error"],
                    "BLOCKED: You have read this exact file region 4 times in a row. The content has NOT changed. You already have this information. STOP re-reading and proceed with your task."
                );
                assert_eq!(result["already_read"], 4);
            }
        }
    }
    env.tracker.note_other_tool();
    env.put("c.txt", "fresh");
    assert_eq!(
        read(&env, json!({"path": "c.txt"})).await["content"],
        "1|fresh"
    );
}

#[tokio::test]
async fn missing_file_suggests_similar_names() {
    let env = Env::new();
    env.put("config.yaml", "a: 1\n");
    env.put("settings.py", "");
    env.put(".config.yml.swp", "");
    let result = read(&env, json!({"path": "config.yml"})).await;
    assert_eq!(
        result,
        json!({"error": "File not found: config.yml", "similar_files": ["./config.yaml"]})
    );
    let nested = read(&env, json!({"path": "sub/x.py"})).await;
    assert_eq!(nested, json!({"error": "File not found: sub/x.py"}));
}

#[tokio::test]
async fn devices_are_refused_even_through_symlinks() {
    let env = Env::new();
    let result = read(&env, json!({"path": "/dev/zero"})).await;
    assert_eq!(
        result["error"],
        "Cannot read '/dev/zero': this is a device file that would block or produce infinite output."
    );
    std::os::unix::fs::symlink("/dev/urandom", env.path("rand")).unwrap();
    let linked = read(&env, json!({"path": "rand"})).await;
    assert_eq!(
        linked["error"],
        "Cannot read 'rand': this is a device file that would block or produce infinite output."
    );
    // Any non-regular file is refused before it is opened (a FIFO would block).
    let fifo = env.path("pipe");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(status.success());
    let piped = read(&env, json!({"path": "pipe"})).await;
    assert!(piped["error"].as_str().unwrap().contains("device file"));
}

#[tokio::test]
async fn secrets_are_refused() {
    let env = Env::new();
    env.put(".env", "TOKEN=x\n");
    let result = read(&env, json!({"path": ".env"})).await;
    let message = result["error"].as_str().unwrap();
    assert!(message.starts_with(&format!(
        "Access denied: {} is a secret-bearing environment file",
        env.abs(".env")
    )));
    let auth = format!("{}/.caduceus/auth.json", env.home);
    std::fs::create_dir_all(format!("{}/.caduceus", env.home)).unwrap();
    std::fs::write(&auth, "{}").unwrap();
    let result = read(&env, json!({"path": "~/.caduceus/auth.json"})).await;
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .contains("is a caduceus credential store")
    );
}

#[tokio::test]
async fn binary_files_are_refused() {
    let env = Env::new();
    env.put("logo.png", "not really a png");
    let by_name = read(&env, json!({"path": "logo.png"})).await;
    assert_eq!(
        by_name,
        json!({"error": "Cannot read binary file 'logo.png' (.png). Use terminal to inspect binary files."})
    );
    env.put("blob.raw", b"\x00\x01\x02\x03binary\x00".as_slice());
    let by_content = read(&env, json!({"path": "blob.raw"})).await;
    assert_eq!(
        by_content,
        json!({
            "error": "Binary file - cannot display as text. Use appropriate tools to handle this file type.",
            "is_binary": true,
            "file_size": 11,
        })
    );
}

#[tokio::test]
async fn character_budget_trims_at_whole_lines() {
    let mut env = Env::new();
    env.config.max_read_chars = 40;
    env.put("b.txt", "0123456789\n0123456789\n0123456789\n0123456789\n");
    let result = read(&env, json!({"path": "b.txt"})).await;
    assert_eq!(
        result["content"],
        "1|0123456789\n2|0123456789\n3|0123456789"
    );
    assert_eq!(result["truncated"], true);
    assert_eq!(result["truncated_by"], "bytes");
    assert_eq!(result["next_offset"], 4);
    assert_eq!(
        result["hint"],
        "Output truncated at the 40-char read budget after 3 line(s) (showing lines 1-3 of 4). Use offset=4 to continue."
    );
}

#[tokio::test]
async fn large_file_gets_a_nudge() {
    let env = Env::new();
    env.put("huge.log", numbered_file(10_000));
    let result = read(&env, json!({"path": "huge.log"})).await;
    assert_eq!(
        result["_hint"],
        "This file is large (620,001 bytes). Consider reading only the section you need with offset and limit to keep context usage efficient."
    );
}

#[tokio::test]
async fn directories_and_missing_arguments() {
    let env = Env::new();
    std::fs::create_dir_all(env.path("src")).unwrap();
    let result = read(&env, json!({"path": "src"})).await;
    assert_eq!(
        result["error"],
        "Cannot read 'src': it is a directory. Use search_files with target='files' to list its contents."
    );
    assert_eq!(
        read(&env, json!({})).await["error"],
        "read_file: missing required field 'path'."
    );
}

#[tokio::test]
async fn tilde_and_absolute_paths() {
    let env = Env::new();
    std::fs::write(format!("{}/notes.md", env.home), "hi\n").unwrap();
    assert_eq!(
        read(&env, json!({"path": "~/notes.md"})).await["content"],
        "1|hi"
    );
    let absolute = format!("{}/notes.md", env.home);
    assert_eq!(
        read(&env, json!({"path": absolute, "limit": 1})).await["content"],
        "1|hi"
    );
}

const DOCUMENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/documents");

fn put_fixture(env: &Env, name: &str, as_name: &str) -> String {
    let data = std::fs::read(format!("{DOCUMENTS}/{name}")).unwrap();
    env.put(as_name, &data);
    std::fs::read_to_string(format!("{DOCUMENTS}/{name}.expected")).unwrap()
}

fn keys(value: &serde_json::Value) -> Vec<&str> {
    value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

/// hermes' `_add_line_numbers` over Python's `splitlines()` of the text.
fn numbered(text: &str, from: usize, count: usize) -> String {
    crate::extract::py_splitlines(text)
        .iter()
        .enumerate()
        .skip(from - 1)
        .take(count)
        .map(|(index, line)| format!("{}|{line}", index + 1))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn notebooks_documents_and_workbooks_are_read_as_their_text() {
    let env = Env::new();
    for (fixture, name) in [
        ("notebook.ipynb", "nb/Analysis.ipynb"),
        ("report.docx", "report.DOCX"),
        ("book.xlsx", "book.xlsx"),
    ] {
        let expected = put_fixture(&env, fixture, name);
        let total = crate::extract::py_splitlines(&expected).len();
        let result = read(&env, json!({"path": name})).await;
        assert_eq!(
            keys(&result),
            [
                "content",
                "total_lines",
                "file_size",
                "truncated",
                "extracted_document"
            ],
            "{name}: {result}"
        );
        assert_eq!(result["content"], numbered(&expected, 1, total), "{name}");
        assert_eq!(result["total_lines"], total);
        assert_eq!(
            result["file_size"],
            std::fs::metadata(env.path(name)).unwrap().len()
        );
        assert_eq!(result["truncated"], false);
        assert_eq!(result["extracted_document"], true);
    }
}

#[tokio::test]
async fn documents_page_like_text_files_with_hermes_key_order() {
    let mut env = Env::new();
    let expected = put_fixture(&env, "notebook.ipynb", "n.ipynb");
    let total = crate::extract::py_splitlines(&expected).len();
    let page = read(&env, json!({"path": "n.ipynb", "offset": 2, "limit": 3})).await;
    assert_eq!(
        keys(&page),
        [
            "content",
            "total_lines",
            "file_size",
            "truncated",
            "extracted_document",
            "hint"
        ]
    );
    assert_eq!(page["content"], numbered(&expected, 2, 3));
    assert_eq!(
        page["hint"],
        format!("Use offset=5 to continue reading (showing 2-4 of {total} lines)")
    );

    // Cut by the character budget only: the hint comes after the budget fields.
    env.config.max_read_chars = 60;
    let cut = read(&env, json!({"path": "n.ipynb"})).await;
    assert_eq!(
        keys(&cut),
        [
            "content",
            "total_lines",
            "file_size",
            "truncated",
            "extracted_document",
            "truncated_by",
            "next_offset",
            "hint"
        ],
        "{cut}"
    );
    assert_eq!(cut["truncated"], true);
    // 24 + 21 + 3 characters fit in 60; the fourth line does not.
    assert_eq!(cut["content"], numbered(&expected, 1, 3));
    assert_eq!(cut["next_offset"], 4);
}

#[tokio::test]
async fn a_second_read_of_an_unchanged_document_gets_the_stub() {
    let env = Env::new();
    put_fixture(&env, "report.docx", "r.docx");
    let first = read(&env, json!({"path": "r.docx"})).await;
    assert_eq!(first["extracted_document"], true);
    let second = read(&env, json!({"path": "r.docx"})).await;
    assert_eq!(second["status"], "unchanged", "{second}");
}

#[tokio::test]
async fn documents_that_cannot_be_extracted_are_read_as_files() {
    let env = Env::new();
    put_fixture(&env, "no_document_xml.docx", "bad.docx");
    let refused = read(&env, json!({"path": "bad.docx"})).await;
    assert_eq!(
        refused,
        json!({"error": "Cannot read binary file 'bad.docx' (.docx). Use terminal to inspect binary files."})
    );
    put_fixture(&env, "empty.ipynb", "empty.ipynb");
    let raw = read(&env, json!({"path": "empty.ipynb"})).await;
    assert_eq!(
        raw["content"],
        "1|{\"cells\": [], \"metadata\": {}, \"nbformat\": 4, \"nbformat_minor\": 5}"
    );
    assert_eq!(raw["is_binary"], false);
    let missing = read(&env, json!({"path": "gone.xlsx"})).await;
    assert!(
        missing["error"]
            .as_str()
            .unwrap()
            .starts_with("File not found: "),
        "{missing}"
    );
}

#[tokio::test]
async fn a_secret_location_is_refused_before_extraction() {
    let env = Env::new();
    let home = format!("{}/.caduceus/mcp-tokens", env.home);
    std::fs::create_dir_all(&home).unwrap();
    std::fs::copy(format!("{DOCUMENTS}/report.docx"), format!("{home}/t.docx")).unwrap();
    let result = read(&env, json!({"path": format!("{home}/t.docx")})).await;
    assert!(
        result["error"]
            .as_str()
            .unwrap()
            .starts_with("Access denied: "),
        "{result}"
    );
}

#[tokio::test]
async fn a_document_over_the_extraction_limit_is_refused_plainly() {
    let env = Env::new();
    let file = std::fs::File::create(env.path("huge.xlsx")).unwrap();
    file.set_len(crate::extract::MAX_DOCUMENT_BYTES + 10)
        .unwrap();
    let result = read(&env, json!({"path": "huge.xlsx"})).await;
    assert_eq!(
        result,
        json!({"error": "Cannot extract 'huge.xlsx': the document is larger than 52,428,800 bytes. Use terminal to inspect it."})
    );
}
