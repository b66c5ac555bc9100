//! The browser toolset's latencies on a real headless Chromium, in-process
//! (the worker's `Browsers`, no gRPC hop): session start to first snapshot
//! (cold: a new task's Chromium starts, `browser_navigate` answers with the
//! page's snapshot), navigate→snapshot on a running browser (warm), and a
//! click→snapshot round trip (click a button whose script changes the page,
//! then `browser_snapshot`), cold (first click of a fresh browser) and warm.
//!
//! `cargo build --release -p caduceus-tests --bins && target/release/caduceus-browser-bench [runs]`
//! (default 10) prints a markdown table. The page is served on loopback by
//! this process.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::print_stdout,
    clippy::print_stderr
)]

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use caduceus_worker::browser::{BrowserSettings, Browsers, find_chromium};
use serde_json::{Map, Value, json};

const PAGE: &str = r#"<!doctype html><html><head><title>Bench</title></head><body>
<h1 id="h">Count 0</h1><button onclick="var h=document.getElementById('h');h.textContent='Count '+(parseInt(h.textContent.split(' ')[1])+1)">More</button>
<p>Some text on the page.</p></body></html>"#;

fn serve() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 4096];
                let _ = stream.read(&mut buf);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    PAGE.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(PAGE.as_bytes());
            });
        }
    });
    base
}

async fn call(browsers: &Arc<Browsers>, task: &str, tool: &str, args: Value) -> Value {
    let args: Map<String, Value> = args.as_object().cloned().unwrap_or_default();
    let reply = browsers.run(task, tool, &args).await;
    let value: Value = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(value["success"], true, "{tool}: {value}");
    value
}

fn button_ref(snapshot: &str) -> String {
    let line = snapshot.lines().find(|l| l.contains("button")).unwrap();
    let start = line.find("[ref=").unwrap() + 5;
    line[start..].split(']').next().unwrap().to_owned()
}

/// p50, min, max in milliseconds.
fn stats(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "{:.1} ms | {:.1} ms | {:.1} ms",
        ms(samples[samples.len() / 2]),
        ms(samples[0]),
        ms(samples[samples.len() - 1])
    )
}

fn main() {
    let runs: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10)
        .max(1);
    let Some(program) = find_chromium() else {
        eprintln!("no Chromium (apt-get install chromium, or CADUCEUS_CHROMIUM)");
        std::process::exit(2);
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = serve();
    let profiles = tempfile::tempdir().unwrap();
    let browsers = Arc::new(Browsers::new(
        BrowserSettings {
            program: Some(program),
            profile_root: profiles.path().to_owned(),
            owner: "bench".to_owned(),
            inactivity_timeout: Duration::from_secs(600),
            allow_private_urls: true,
        },
        None,
    ));
    let (mut cold_start, mut warm_nav, mut cold_click, mut warm_click) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    runtime.block_on(async {
        for run in 0..runs {
            let task = format!("bench-{run}");
            let started = Instant::now();
            let nav = call(&browsers, &task, "browser_navigate", json!({"url": url})).await;
            cold_start.push(started.elapsed());
            let button = button_ref(nav["snapshot"].as_str().unwrap());

            let started = Instant::now();
            call(&browsers, &task, "browser_click", json!({"ref": button})).await;
            let snap = call(&browsers, &task, "browser_snapshot", json!({})).await;
            cold_click.push(started.elapsed());
            assert!(
                snap["snapshot"].as_str().unwrap().contains("Count 1"),
                "{snap}"
            );

            for n in 2..7 {
                let started = Instant::now();
                call(&browsers, &task, "browser_click", json!({"ref": button})).await;
                let snap = call(&browsers, &task, "browser_snapshot", json!({})).await;
                warm_click.push(started.elapsed());
                assert!(
                    snap["snapshot"]
                        .as_str()
                        .unwrap()
                        .contains(&format!("Count {n}")),
                    "{snap}"
                );
            }
            let started = Instant::now();
            call(&browsers, &task, "browser_navigate", json!({"url": url})).await;
            warm_nav.push(started.elapsed());
            browsers.close_task(&task).await;
        }
    });
    println!("| operation | samples | p50 | min | max |");
    println!("|---|---|---|---|---|");
    println!(
        "| session start → first snapshot (cold: Chromium starts, `browser_navigate`) | {} | {} |",
        cold_start.len(),
        stats(cold_start)
    );
    println!(
        "| `browser_navigate` → snapshot, running browser (warm) | {} | {} |",
        warm_nav.len(),
        stats(warm_nav)
    );
    println!(
        "| click → snapshot, first click of a fresh browser (cold) | {} | {} |",
        cold_click.len(),
        stats(cold_click)
    );
    println!(
        "| click → snapshot (warm) | {} | {} |",
        warm_click.len(),
        stats(warm_click)
    );
}
