//! Timing harness for the file tools on the bench fixtures:
//! a 1,000-line file (`line NNNN: lorem ipsum dolor sit amet, consectetur
//! adipiscing`) and 500 files of 20 lines in 10 directories with 25 matches of
//! `TODO_FIXME`. Prints minimum, median and 90th percentile in microseconds
//! (on a busy machine the minimum is the best estimate of the cost itself);
//! asserts nothing about speed. `TIMING_DIR` puts the fixtures elsewhere
//! (e.g. `/dev/shm`) than the system temp directory.
//!
//! `cargo run --release -p caduceus-files --example timing`

#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;
use std::time::Instant;

use caduceus_files::search::{OutputMode, SearchQuery, SearchTarget};
use caduceus_files::{
    FileSystem, FileToolContext, FileToolsConfig, LineWindow, LocalFs, ReadTracker, patch,
    read_file, search_files, write_file,
};
use serde_json::{Map, Value, json};

const ROUNDS: usize = 300;

fn args(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

async fn measure<F, Fut>(label: &str, mut step: F)
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    for round in 0..20 {
        step(round).await;
    }
    let mut samples: Vec<f64> = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let start = Instant::now();
        step(round).await;
        samples.push(start.elapsed().as_secs_f64() * 1e6);
    }
    samples.sort_by(f64::total_cmp);
    let (min, median, p90) = (samples[0], samples[ROUNDS / 2], samples[ROUNDS * 9 / 10]);
    println!("{label:<58} min {min:>8.1}  median {median:>8.1}  p90 {p90:>8.1} µs");
}

fn fixtures(root: &std::path::Path) {
    let lines: String = (1..=1000)
        .map(|n| format!("line {n:04}: lorem ipsum dolor sit amet, consectetur adipiscing\n"))
        .collect();
    std::fs::write(root.join("thousand.txt"), lines).unwrap();
    let tree = root.join("tree");
    let mut planted = 0;
    for dir in 0..10 {
        let dir_path = tree.join(format!("dir{dir:02}"));
        std::fs::create_dir_all(&dir_path).unwrap();
        for file in 0..50 {
            let index = dir * 50 + file;
            let mut text = String::new();
            for line in 0..20 {
                // 25 matches: one in every 20th file.
                if index % 20 == 0 && line == 10 {
                    text.push_str("    // TODO_FIXME: handle the edge case\n");
                    planted += 1;
                } else {
                    text.push_str(&format!(
                        "    let value_{line} = compute({index}, {line});\n"
                    ));
                }
            }
            std::fs::write(dir_path.join(format!("file{file:02}.rs")), text).unwrap();
        }
    }
    assert_eq!(planted, 25);
}

#[tokio::main]
async fn main() {
    let dir = match std::env::var_os("TIMING_DIR") {
        Some(base) => tempfile::tempdir_in(base).unwrap(),
        None => tempfile::tempdir().unwrap(),
    };
    let root = dir.path().canonicalize().unwrap();
    fixtures(&root);
    let cwd = root.to_string_lossy().into_owned();
    let config = FileToolsConfig::default();
    let fs = LocalFs::new();
    let tracker = ReadTracker::new();
    let ctx = FileToolContext {
        fs: &fs,
        cwd: &cwd,
        home: Some("/nonexistent-home"),
        tracker: &tracker,
        config: &config,
    };
    println!("rounds: {ROUNDS} (after 20 warm-up rounds)\n");

    println!("-- tools (end to end, JSON in → JSON out) --");
    measure(
        "read_file 1,000-line file (500 lines returned)",
        |_| async {
            tracker.reset_dedup();
            tracker.note_other_tool();
            let out = read_file(&ctx, &args(json!({"path": "thousand.txt"}))).await;
            assert!(out.body.contains("500|line 0500"));
        },
    )
    .await;
    measure(
        "read_file 1,000-line file, offset 501 (to the end)",
        |_| async {
            tracker.reset_dedup();
            tracker.note_other_tool();
            let out = read_file(&ctx, &args(json!({"path": "thousand.txt", "offset": 501}))).await;
            assert!(out.body.contains("1000|line 1000"));
        },
    )
    .await;
    read_file(&ctx, &args(json!({"path": "thousand.txt", "limit": 7}))).await;
    measure("read_file unchanged region (dedup stub)", |_| async {
        tracker.note_other_tool();
        let out = read_file(&ctx, &args(json!({"path": "thousand.txt", "limit": 7}))).await;
        assert!(out.body.contains("unchanged"));
    })
    .await;
    let documents = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/documents");
    for name in ["notebook.ipynb", "report.docx", "book.xlsx"] {
        std::fs::copy(format!("{documents}/{name}"), root.join(name)).unwrap();
        let (ctx, tracker) = (&ctx, &tracker);
        measure(&format!("read_file {name} (extracted)"), |_| async move {
            tracker.reset_dedup();
            tracker.note_other_tool();
            let out = read_file(ctx, &args(json!({"path": name}))).await;
            assert!(
                out.body.contains("\"extracted_document\": true"),
                "{}",
                out.body
            );
        })
        .await;
    }
    let python = "def main():\n    print(\"hello\")\n".repeat(30);
    measure("write_file 1 KB .py (python3 syntax check)", |round| {
        let content = format!("# {round}\n{python}");
        let ctx = &ctx;
        async move {
            let out = write_file(
                ctx,
                &args(json!({"path": "out/small.py", "content": content})),
            )
            .await;
            assert!(out.body.contains("\"status\": \"ok\""), "{}", out.body);
        }
    })
    .await;
    let small = "fn main() {\n    println!(\"hello\");\n}\n".repeat(25);
    let big = std::fs::read_to_string(root.join("thousand.txt")).unwrap();
    for (label, path, body) in [
        (
            "write_file 1 KB (new content each round)",
            "out/small.rs",
            &small,
        ),
        ("write_file 62 KB (1,000 lines)", "out/big.txt", &big),
    ] {
        measure(label, |round| {
            let content = format!("// {round}\n{body}");
            let ctx = &ctx;
            async move {
                let out = write_file(ctx, &args(json!({"path": path, "content": content}))).await;
                assert!(out.body.contains("bytes_written"));
            }
        })
        .await;
    }
    // Each pair of rounds edits the file and changes it back.
    for (label, there, back) in [
        (
            "patch replace (exact) in the 1,000-line file",
            ("line 0500: lorem", "line 0500: LOREM"),
            ("line 0500: LOREM", "line 0500: lorem"),
        ),
        (
            "patch replace (line_trimmed) in the 1,000-line file",
            (
                "  line 0700: lorem ipsum dolor sit amet, consectetur adipiscing  ",
                "line 0700: X",
            ),
            (
                "  line 0700: X ",
                "line 0700: lorem ipsum dolor sit amet, consectetur adipiscing",
            ),
        ),
    ] {
        measure(label, |round| {
            let (old, new) = if round % 2 == 0 { there } else { back };
            let ctx = &ctx;
            async move {
                let out = patch(
                    ctx,
                    &args(json!({"path": "thousand.txt", "old_string": old, "new_string": new})),
                )
                .await;
                assert!(out.body.contains("\"success\": true"), "{}", out.body);
            }
        })
        .await;
    }
    let v4a = |from: &str, to: &str| {
        format!(
            "*** Begin Patch\n*** Update File: thousand.txt\n@@ line 0300 @@\n line 0299: lorem ipsum dolor sit amet, consectetur adipiscing\n-line 0300: {from} ipsum dolor sit amet, consectetur adipiscing\n+line 0300: {to} ipsum dolor sit amet, consectetur adipiscing\n line 0301: lorem ipsum dolor sit amet, consectetur adipiscing\n*** End Patch"
        )
    };
    let (forward, back) = (v4a("lorem", "LOREM"), v4a("LOREM", "lorem"));
    measure(
        "patch V4A update, 1 hunk with context, 1,000-line file",
        |round| {
            let body = if round % 2 == 0 {
                forward.clone()
            } else {
                back.clone()
            };
            let ctx = &ctx;
            async move {
                let out = patch(ctx, &args(json!({"mode": "patch", "patch": body}))).await;
                assert!(out.body.contains("\"success\": true"), "{}", out.body);
            }
        },
    )
    .await;
    measure(
        "search_files content TODO_FIXME, 500 files (25 hits)",
        |_| async {
            tracker.note_other_tool();
            let out = search_files(
                &ctx,
                &args(json!({"pattern": "TODO_FIXME", "path": "tree"})),
            )
            .await;
            assert!(out.body.contains("\"total_count\": 25"), "{}", out.body);
        },
    )
    .await;
    measure("search_files files_only TODO_FIXME, 500 files", |_| async {
        tracker.note_other_tool();
        let out = search_files(
            &ctx,
            &args(json!({"pattern": "TODO_FIXME", "path": "tree", "output_mode": "files_only"})),
        )
        .await;
        assert!(out.body.contains("\"total_count\": 25"), "{}", out.body);
    })
    .await;
    measure(
        "search_files target=files *.rs, 500 files (mtime sort)",
        |_| async {
            tracker.note_other_tool();
            let out = search_files(
                &ctx,
                &args(json!({"pattern": "*.rs", "target": "files", "path": "tree"})),
            )
            .await;
            assert!(out.body.contains("\"total_count\": 500"), "{}", out.body);
        },
    )
    .await;

    println!("\n-- LocalFs primitives --");
    let thousand = root.join("thousand.txt").to_string_lossy().into_owned();
    let window = LineWindow {
        offset: 1,
        limit: 500,
        max_line_bytes: 8004,
        detect_binary: true,
        unless_unchanged: None,
    };
    for (name, fs) in [
        ("inline", LocalFs::new()),
        ("spawn_blocking", LocalFs::with_inline_limit(0)),
    ] {
        measure(
            &format!("read_lines 500 of 1,000 lines [{name}]"),
            |_| async {
                fs.read_lines(&thousand, &window).await.unwrap();
            },
        )
        .await;
    }
    let target = root.join("prim.txt").to_string_lossy().into_owned();
    measure(
        "write_atomic 1 KB (always on the blocking pool)",
        |_| async {
            fs.write_atomic(&target, small.as_bytes()).await.unwrap();
        },
    )
    .await;
    let query = SearchQuery {
        root: root.join("tree").to_string_lossy().into_owned(),
        target: SearchTarget::Content {
            pattern: "TODO_FIXME".into(),
            file_glob: None,
            mode: OutputMode::Content,
            context: 0,
        },
        max_entries: 10_000,
    };
    measure("search (blocking pool) 500 files", |_| async {
        fs.search(&query).await.unwrap();
    })
    .await;
    measure(
        "search, called directly on this thread, 500 files",
        |_| async {
            caduceus_files::search::local::search(&query).unwrap();
        },
    )
    .await;
}
