//! The browser tools against a real Chromium and a page served on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use caduceus_worker::browser::{Browsers, find_chromium};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const FIRST: &str = r#"<!doctype html><html><head><title>First</title></head><body>
<h1 id="h">Hello</h1>
<input id="name" aria-label="Name">
<button onclick="document.getElementById('h').textContent='Hi '+document.getElementById('name').value">Greet</button>
<img src="/pixel.png" alt="a pixel">
<a href="/second">Second page</a>
<script>console.log('page says hello'); setTimeout(function(){ throw new Error('boom from page'); }, 0);</script>
</body></html>"#;

const SECOND: &str = r#"<!doctype html><html><head><title>Second</title></head><body>
<form action="/done"><input name="q" aria-label="Query"></form>
</body></html>"#;

const DONE: &str =
    "<!doctype html><html><head><title>Done</title></head><body><h1>Submitted</h1></body></html>";

/// A tiny HTTP server for the test pages; returns its base URL.
async fn serve() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]);
                let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let (kind, body) = if path.starts_with("/second") {
                    ("text/html", SECOND.as_bytes().to_vec())
                } else if path.starts_with("/done") {
                    ("text/html", DONE.as_bytes().to_vec())
                } else if path.starts_with("/pixel") {
                    ("image/png", Vec::new())
                } else {
                    ("text/html", FIRST.as_bytes().to_vec())
                };
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = stream.write_all(&body).await;
            });
        }
    });
    format!("http://{addr}")
}

fn args(value: &Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

async fn call(browsers: &Arc<Browsers>, tool: &str, a: Value) -> Value {
    let reply = browsers.run("task-1", tool, &args(&a)).await;
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{tool}: {e}: {}", reply.body))
}

fn ref_of(snapshot: &str, needle: &str) -> String {
    let line = snapshot
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle} in:\n{snapshot}"));
    let start = line
        .find("[ref=")
        .unwrap_or_else(|| panic!("no ref on {line}"))
        + 5;
    line[start..]
        .trim_end_matches(|c| c != ']')
        .trim_end_matches(']')
        .split(']')
        .next()
        .unwrap()
        .to_owned()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

fn have_chromium() -> bool {
    caduceus_tests::require("Chromium", "apt-get install chromium", || {
        find_chromium().is_some()
    })
}

#[tokio::test]
async fn full_scenario_on_a_local_page() {
    if !have_chromium() {
        return;
    }
    let base = serve().await;
    let profiles = tempfile::tempdir().unwrap();
    let browsers = Arc::new(Browsers::new(
        find_chromium(),
        profiles.path().to_owned(),
        "test",
        Duration::from_secs(120),
    ));
    let nav = call(
        &browsers,
        "browser_navigate",
        json!({"url": format!("{base}/")}),
    )
    .await;
    assert_eq!(nav["title"], "First", "{nav}");
    let snap = call(&browsers, "browser_snapshot", json!({})).await;
    let text = snap["snapshot"].as_str().unwrap().to_owned();
    assert!(text.contains("heading \"Hello\""), "{text}");
    let input = ref_of(&text, "textbox \"Name\"");
    let button = ref_of(&text, "button \"Greet\"");
    let typed = call(
        &browsers,
        "browser_type",
        json!({"ref": input, "text": "Ada"}),
    )
    .await;
    assert_eq!(typed["success"], true, "{typed}");
    let clicked = call(&browsers, "browser_click", json!({"ref": button})).await;
    assert_eq!(clicked["success"], true, "{clicked}");
    let after = call(&browsers, "browser_snapshot", json!({})).await;
    assert!(
        after["snapshot"]
            .as_str()
            .unwrap()
            .contains("heading \"Hi Ada\""),
        "{after}"
    );
    // the heading keeps its ref across snapshots
    assert_eq!(
        ref_of(after["snapshot"].as_str().unwrap(), "heading"),
        ref_of(&text, "heading \"Hello\"")
    );

    let images = call(&browsers, "browser_get_images", json!({})).await;
    assert_eq!(images["count"], 1, "{images}");
    assert!(
        images["images"][0]["src"]
            .as_str()
            .unwrap()
            .ends_with("/pixel.png")
    );
    assert_eq!(images["images"][0]["alt"], "a pixel");

    let console = call(&browsers, "browser_console", json!({"expression": "6 * 7"})).await;
    assert_eq!(console["result"], 42, "{console}");
    assert!(
        console["console_messages"]
            .to_string()
            .contains("page says hello"),
        "{console}"
    );
    assert!(
        console["js_errors"].to_string().contains("boom from page"),
        "{console}"
    );

    let bad = browsers
        .run("task-1", "browser_click", &args(&json!({"ref": "@e999"})))
        .await;
    assert!(bad.body.contains("Unknown ref"), "{}", bad.body);

    let link = ref_of(&text, "link \"Second page\"");
    call(&browsers, "browser_click", json!({"ref": link})).await;
    let second = call(&browsers, "browser_snapshot", json!({})).await;
    // the link led to the second page, whose form field is in its snapshot
    ref_of(second["snapshot"].as_str().unwrap(), "textbox \"Query\"");
    let back = call(&browsers, "browser_back", json!({})).await;
    assert_eq!(back["title"], "First", "{back}");
    call(
        &browsers,
        "browser_navigate",
        json!({"url": format!("{base}/second")}),
    )
    .await;
    let second = call(&browsers, "browser_snapshot", json!({})).await;
    let query = ref_of(second["snapshot"].as_str().unwrap(), "textbox \"Query\"");
    call(
        &browsers,
        "browser_type",
        json!({"ref": query, "text": "x"}),
    )
    .await;
    call(&browsers, "browser_press", json!({"key": "Enter"})).await;
    let done = call(
        &browsers,
        "browser_console",
        json!({"expression": "document.title"}),
    )
    .await;
    assert_eq!(done["result"], "Done", "{done}");

    let pid = browsers.session("task-1").await.unwrap().pid().unwrap();
    browsers.close_all().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!alive(pid), "chromium {pid} survived close_all");
}

#[tokio::test]
async fn idle_browser_is_closed_after_the_inactivity_timeout() {
    if !have_chromium() {
        return;
    }
    let profiles = tempfile::tempdir().unwrap();
    let browsers = Arc::new(Browsers::new(
        find_chromium(),
        profiles.path().to_owned(),
        "test",
        Duration::from_secs(3),
    ));
    call(&browsers, "browser_navigate", json!({"url": "about:blank"})).await;
    let pid = browsers.session("task-1").await.unwrap().pid().unwrap();
    assert!(alive(pid));
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !alive(pid),
        "chromium {pid} still running 5 s after the last call"
    );
    assert_eq!(
        std::fs::read_dir(profiles.path()).unwrap().count(),
        0,
        "profile left behind"
    );
}
