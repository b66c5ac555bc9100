//! The outside-world tools through a served coordinator and worker, as a
//! user drives them with `caduceus call`: `web_extract` against pages the
//! test serves on loopback (and the URL judge's refusals: loopback, cloud
//! metadata, a name resolving to a private address, redirects), `web_search`
//! against a SearXNG stand-in, `vision_analyze`/`browser_vision` against the
//! scripted model server, and `text_to_speech` with the real espeak-ng.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::net::ToSocketAddrs;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use caduceus_llm::testing::{ScriptedResponse, ScriptedServer};
use caduceus_tests::{Fleet, Proc};
use serde_json::{Value, json};

const PAGE: &str = r#"<!doctype html><html><head><title>Test Page</title>
<style>body { color: red }</style></head><body>
<h1>Welcome</h1>
<p>The quick brown fox jumps over the <b>lazy</b> dog.</p>
<script>console.log('never shown')</script>
<a href="/other">another page</a>
</body></html>"#;

/// A 2×3 red PNG (a real image: the vision request's bytes are compared).
fn png() -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode("iVBORw0KGgoAAAANSUhEUgAAAAIAAAADCAIAAAA2iEnWAAAAEUlEQVR4nGP4z8AARAwMDAwAJfgD/d4ba+UAAAAASUVORK5CYII=")
        .unwrap()
}

/// The test's web server: its base URL and the paths it was asked for.
struct Site {
    base: String,
    requests: Arc<Mutex<Vec<String>>>,
}

/// Serves the test pages on `bind` (0.0.0.0 lets a name resolving to any
/// local address reach it, so a request that got through would be seen).
fn serve(bind: &str) -> Site {
    let listener = std::net::TcpListener::bind(bind).unwrap();
    let port = listener.local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    let requests: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 8192];
                let n = stream.read(&mut buf).unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).into_owned();
                let path = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
                seen.lock().unwrap().push(path.clone());
                let redirect = |to: &str| {
                    (
                        "302 Found",
                        format!("location: {to}\r\n"),
                        "text/html",
                        Vec::new(),
                    )
                };
                let (status, extra, kind, body) = match path.as_str() {
                    "/to-metadata" => redirect("http://169.254.169.254/latest/meta-data/"),
                    "/to-metadata-name" => {
                        redirect("http://metadata.google.internal/computeMetadata/v1/")
                    }
                    "/to-page" => redirect("/"),
                    "/loop" => redirect("/loop"),
                    "/pixel.png" => ("200 OK", String::new(), "image/png", png()),
                    "/long" => {
                        let mut text = String::from("<html><head><title>Long</title></head><body>");
                        for i in 0..3000 {
                            text.push_str(&format!("<p>line {i} of a long page</p>\n"));
                        }
                        text.push_str("</body></html>");
                        ("200 OK", String::new(), "text/html", text.into_bytes())
                    }
                    _ => (
                        "200 OK",
                        String::new(),
                        "text/html; charset=utf-8",
                        PAGE.as_bytes().to_vec(),
                    ),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\n{extra}content-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            });
        }
    });
    Site { base, requests }
}

/// A coordinator (with `env`) and worker `w` over `config`; environments
/// start in `<home>/work`.
fn fleet(config: &str, env: &[(&str, &str)]) -> (Fleet, Proc, Proc) {
    let fleet = Fleet::new();
    let work = fleet.home.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    fleet.write_config(&format!("{config}terminal:\n  cwd: {}\n", work.display()));
    let coordinator = fleet.serve_with_env(&[], env);
    let worker = fleet.worker(&coordinator, "w", &fleet.token, &[]);
    fleet.wait_for_workers(&coordinator, &["w"], Duration::from_secs(30));
    (fleet, coordinator, worker)
}

/// The names of the tools a model of this fleet is offered.
fn tool_names(fleet: &Fleet, c: &Proc) -> Vec<String> {
    let out = fleet.client(c, &["tools", "--json"]);
    let defs: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    defs.iter()
        .map(|d| d["function"]["name"].as_str().unwrap().to_owned())
        .collect()
}

const ALLOW_PRIVATE: &str = "security:\n  allow_private_urls: true\n";

#[test]
fn web_extract_returns_a_loopback_page_as_markdown() {
    let site = serve("127.0.0.1:0");
    let (fleet, c, _w) = fleet(ALLOW_PRIVATE, &[]);
    let got = fleet.call(
        &c,
        "web_extract",
        &json!({"urls": [
            format!("{}/", site.base),
            {"url": format!("{}/to-page", site.base)},
            format!("{}/loop", site.base),
            "not a url",
            42,
            format!("{}/sixth", site.base),
        ]}),
        "extract",
    );
    let results = got["results"].as_array().unwrap();
    // hermes reads five URLs a call; the sixth is never fetched.
    assert_eq!(results.len(), 5, "{got}");
    assert!(
        !site.requests.lock().unwrap().iter().any(|p| p == "/sixth"),
        "the sixth URL was fetched"
    );
    assert_eq!(
        results[2]["error"], "Error extracting content: Too many redirects (more than 10)",
        "{got}"
    );
    assert_eq!(
        results[3]["error"], "Error extracting content: Invalid URL 'not a url'",
        "{got}"
    );
    assert_eq!(
        results[4]["error"],
        "Invalid URL item at index 4: expected a URL string or an object with a string 'url' or 'href' field"
    );
    let page = &results[0];
    assert_eq!(page["url"], format!("{}/", site.base));
    assert_eq!(page["title"], "Test Page");
    assert_eq!(page["error"], Value::Null);
    let content = page["content"].as_str().unwrap();
    assert!(content.contains("# Welcome"), "{content}");
    assert!(
        content.contains("The quick brown fox jumps over the **lazy** dog."),
        "{content}"
    );
    assert!(content.contains("[another page](/other)"), "{content}");
    assert!(!content.contains("never shown"), "{content}");
    assert!(!content.contains("color: red"), "{content}");
    // A redirect within what is allowed is followed.
    assert_eq!(results[1]["title"], "Test Page", "{got}");
}

#[test]
fn a_long_page_is_cut_with_a_footer_and_its_full_text_is_readable() {
    let site = serve("127.0.0.1:0");
    // The configured budget (hermes' `web.extract_char_limit`) when a call names none.
    let (fleet, c, _w) = fleet(
        &format!("{ALLOW_PRIVATE}web:\n  extract_char_limit: 5000\n"),
        &[],
    );
    let whole = fleet.call(
        &c,
        "web_extract",
        &json!({"urls": [format!("{}/long", site.base)], "char_limit": 400000}),
        "long",
    );
    let text = whole["results"][0]["content"].as_str().unwrap();
    assert!(
        !text.contains("[TRUNCATED]") && text.contains("line 1500 of"),
        "cut although asked for 400,000"
    );
    let got = fleet.call(
        &c,
        "web_extract",
        &json!({"urls": [format!("{}/long", site.base)]}),
        "long",
    );
    let content = got["results"][0]["content"].as_str().unwrap();
    assert!(content.starts_with("line 0 of a long page"), "{content}");
    assert!(content.contains("[... middle omitted — see footer ...]"));
    assert!(content.contains("line 2999 of a long page"), "{content}");
    assert!(!content.contains("line 1500 of"), "the middle was kept");
    let saved = content
        .lines()
        .find_map(|l| l.strip_prefix("Full text saved to: "))
        .unwrap_or_else(|| panic!("no saved path in:\n{content}"));
    // The saved copy is in the task's environment: read_file pages it.
    let middle = fleet.call(
        &c,
        "read_file",
        &json!({"path": saved, "offset": 3000, "limit": 2}),
        "long",
    );
    assert!(
        middle["content"]
            .as_str()
            .unwrap()
            .contains("line 1500 of a long page"),
        "{middle}"
    );
}

#[test]
fn private_and_metadata_addresses_are_refused_by_address_and_at_every_redirect() {
    let site = serve("0.0.0.0:0");
    let port = site.base.rsplit(':').next().unwrap().to_owned();
    let (fleet, c, _w) = fleet("", &[]);
    let extract = |url: String| {
        let got = fleet.call(&c, "web_extract", &json!({"urls": [url]}), "guard");
        got["results"][0]["error"]
            .as_str()
            .unwrap_or_else(|| panic!("not refused: {got}"))
            .to_owned()
    };
    assert_eq!(
        extract(format!("{}/", site.base)),
        "Blocked: URL targets a private or internal address"
    );
    assert_eq!(
        extract("http://169.254.169.254/latest/meta-data/".to_owned()),
        "Blocked: URL targets a cloud metadata endpoint"
    );
    assert_eq!(
        extract(format!("http://[::ffff:127.0.0.1]:{port}/")),
        "Blocked: URL targets a private or internal address"
    );
    // A name is judged by what it resolves to (here through the system
    // resolver, as any DNS name would be).
    let host = std::process::Command::new("hostname")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let private_name = (host.as_str(), 80)
        .to_socket_addrs()
        .is_ok_and(|mut a| a.all(|a| caduceus_worker::url_guard::is_private(&a.ip())));
    if caduceus_tests::require(
        "a host name resolving to a private address",
        "the machine's hostname in /etc/hosts",
        || !host.is_empty() && private_name,
    ) {
        assert_eq!(
            extract(format!("http://{host}:{port}/")),
            "Blocked: URL targets a private or internal address"
        );
    }
    assert!(
        site.requests.lock().unwrap().is_empty(),
        "a refused URL reached the server: {:?}",
        site.requests.lock().unwrap()
    );

    // Private URLs allowed: the loopback page may be read, but a redirect
    // from it to a metadata endpoint (by address or by name) is not followed.
    let (fleet, c, _w) = fleet_allowing();
    for path in ["/to-metadata", "/to-metadata-name"] {
        let got = fleet.call(
            &c,
            "web_extract",
            &json!({"urls": [format!("{}{path}", site.base)]}),
            "redirect",
        );
        assert_eq!(
            got["results"][0]["error"], "Blocked: redirect landed on a cloud metadata endpoint",
            "{got}"
        );
    }
}

fn fleet_allowing() -> (Fleet, Proc, Proc) {
    fleet(ALLOW_PRIVATE, &[])
}

#[test]
fn vision_analyze_of_a_redirected_private_url_is_refused_too() {
    let site = serve("127.0.0.1:0");
    let model = model(vec![]);
    let (fleet, c, _w) = fleet(&vision_config(&model, false), &[]);
    let got = fleet.call(
        &c,
        "vision_analyze",
        &json!({"image_url": format!("{}/pixel.png", site.base), "question": "what?"}),
        "vision-guard",
    );
    assert_eq!(got["success"], false, "{got}");
    assert_eq!(
        got["error"],
        "Error analyzing image: Blocked: URL targets a private or internal address"
    );
    assert_eq!(model.server.request_count(), 0, "the model was asked");
}

/// The SearXNG stand-in: answers `/search?q=…&format=json` in SearXNG's
/// published JSON format (results with url, title, content, engine, score).
fn searxng_stand_in() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut buf = vec![0u8; 8192];
            let n = stream.read(&mut buf).unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]).into_owned();
            let target = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
            log.lock().unwrap().push(target);
            let body = json!({
                "query": "rust async runtime",
                "number_of_results": 3,
                "results": [
                    {"url": "https://docs.rs/tokio", "title": "tokio - Rust", "content": "An event-driven, non-blocking I/O platform.", "engine": "duckduckgo", "engines": ["duckduckgo"], "positions": [2], "score": 1.5, "category": "general", "parsed_url": ["https", "docs.rs", "/tokio", "", "", ""]},
                    {"url": "https://tokio.rs/", "title": "Tokio", "content": "Build reliable network applications.", "engine": "google", "engines": ["google", "bing"], "positions": [1, 1], "score": 4.0, "category": "general"},
                    {"url": "https://async.rs/", "title": "async-std", "content": "Async version of the Rust standard library.", "engine": "bing", "engines": ["bing"], "positions": [3], "score": 0.5, "category": "general"}
                ],
                "answers": [], "corrections": [], "infoboxes": [], "suggestions": ["tokio tutorial"], "unresponsive_engines": []
            })
            .to_string();
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
        }
    });
    (base, seen)
}

#[test]
fn web_search_asks_searxng_and_answers_in_hermes_shape() {
    let (searxng, seen) = searxng_stand_in();
    let (fleet, c, _w) = fleet("", &[("SEARXNG_URL", &searxng)]);
    let tools = tool_names(&fleet, &c);
    assert!(
        tools.iter().any(|t| t == "web_search"),
        "web_search not offered: {tools:?}"
    );
    let got = fleet.call(
        &c,
        "web_search",
        &json!({"query": "rust async runtime", "limit": 2}),
        "search",
    );
    assert_eq!(
        got,
        json!({"success": true, "data": {"web": [
            {"title": "Tokio", "url": "https://tokio.rs/", "description": "Build reliable network applications.", "position": 1},
            {"title": "tokio - Rust", "url": "https://docs.rs/tokio", "description": "An event-driven, non-blocking I/O platform.", "position": 2},
        ]}})
    );
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        ["/search?q=rust+async+runtime&format=json&pageno=1"]
    );
}

#[test]
fn web_search_is_not_offered_without_a_backend() {
    let (fleet, c, _w) = fleet("", &[]);
    let tools = tool_names(&fleet, &c);
    assert!(tools.iter().any(|t| t == "web_extract"), "{tools:?}");
    assert!(
        !tools.iter().any(|t| t == "web_search"),
        "offered without SEARXNG_URL: {tools:?}"
    );
    assert!(
        !tools
            .iter()
            .any(|t| t == "vision_analyze" || t == "browser_vision"),
        "offered without a vision model: {tools:?}"
    );
}

/// A scripted model server on a runtime of its own, alive as long as this value.
struct Model {
    server: ScriptedServer,
    _runtime: tokio::runtime::Runtime,
}

fn model(script: Vec<ScriptedResponse>) -> Model {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(ScriptedServer::start(script)).unwrap();
    Model {
        server,
        _runtime: runtime,
    }
}

fn vision_config(model: &Model, allow_private: bool) -> String {
    format!(
        "auxiliary:\n  vision:\n    model: seeing-model\n    base_url: {}\n    api_key: sk-vision-test-key-0123456789abcdef\nsecurity:\n  allow_private_urls: {allow_private}\n",
        model.server.base_url()
    )
}

/// The image part of the vision model's `n`th request: its data URL decoded.
fn image_sent(model: &Model, n: usize) -> (String, Vec<u8>, Value) {
    let request = &model.server.requests()[n];
    let parts = request.body["messages"][0]["content"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(parts[0]["type"], "text", "{parts:?}");
    assert_eq!(parts[1]["type"], "image_url", "{parts:?}");
    let url = parts[1]["image_url"]["url"].as_str().unwrap();
    let (meta, data) = url.split_once(',').unwrap();
    let mime = meta
        .strip_prefix("data:")
        .and_then(|m| m.strip_suffix(";base64"))
        .unwrap()
        .to_owned();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    (mime, bytes, parts[0].clone())
}

/// Width and height from a PNG's IHDR.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    (w, h)
}

#[test]
fn vision_analyze_sends_the_image_from_a_url_and_from_the_environment() {
    let site = serve("127.0.0.1:0");
    let model = model(vec![
        ScriptedResponse::text("A tiny red rectangle."),
        ScriptedResponse::text("Still a red rectangle."),
    ]);
    let (fleet, c, _w) = fleet(&vision_config(&model, true), &[]);
    let tools = tool_names(&fleet, &c);
    assert!(tools.iter().any(|t| t == "vision_analyze"), "{tools:?}");

    let got = fleet.call(
        &c,
        "vision_analyze",
        &json!({"image_url": format!("{}/pixel.png", site.base), "question": "What colour is it?"}),
        "vision",
    );
    assert_eq!(
        got,
        json!({"success": true, "analysis": "A tiny red rectangle."})
    );
    let (mime, bytes, text) = image_sent(&model, 0);
    assert_eq!(mime, "image/png");
    assert_eq!(bytes, png());
    assert_eq!(png_size(&bytes), (2, 3));
    assert!(
        text["text"]
            .as_str()
            .unwrap()
            .ends_with("What colour is it?"),
        "{text}"
    );
    let request = &model.server.requests()[0];
    assert_eq!(request.body["model"], "seeing-model");
    assert_eq!(
        request.header("authorization"),
        Some("Bearer sk-vision-test-key-0123456789abcdef")
    );

    // A file in the task's environment, read on its worker.
    let b64 = base64::engine::general_purpose::STANDARD.encode(png());
    let made = fleet.call(
        &c,
        "terminal",
        &json!({"command": format!("echo {b64} | base64 -d > red.png && pwd")}),
        "vision",
    );
    assert_eq!(made["exit_code"], 0, "{made}");
    let got = fleet.call(
        &c,
        "vision_analyze",
        &json!({"image_url": "red.png", "question": "And now?"}),
        "vision",
    );
    assert_eq!(got["analysis"], "Still a red rectangle.", "{got}");
    let (mime, bytes, _) = image_sent(&model, 1);
    assert_eq!((mime.as_str(), bytes), ("image/png", png()));

    // Too large: refused on the worker without reading it all.
    fleet.call(
        &c,
        "terminal",
        &json!({"command": "head -c 16000000 /dev/zero > big.png"}),
        "vision",
    );
    let got = fleet.call(
        &c,
        "vision_analyze",
        &json!({"image_url": "big.png", "question": "?"}),
        "vision",
    );
    assert_eq!(
        got["error"], "Error analyzing image: the image is larger than 15 MB",
        "{got}"
    );

    // Not an image: refused on the worker, the model is not asked.
    let got = fleet.call(
        &c,
        "vision_analyze",
        &json!({"image_url": format!("{}/", site.base), "question": "?"}),
        "vision",
    );
    assert_eq!(got["success"], false, "{got}");
    assert!(
        got["error"].as_str().unwrap().contains("is not an image"),
        "{got}"
    );
    assert_eq!(model.server.request_count(), 2);
}

#[test]
fn browser_vision_sends_a_screenshot_of_the_page() {
    if !caduceus_tests::require("Chromium", "apt-get install chromium", || {
        caduceus_worker::browser::find_chromium().is_some()
    }) {
        return;
    }
    let site = serve("127.0.0.1:0");
    let model = model(vec![ScriptedResponse::text(
        "A page with a heading that says Welcome.",
    )]);
    let mut config = vision_config(&model, true);
    config.push_str("browser:\n  allow_private_urls: true\n");
    let (fleet, c, _w) = fleet(&config, &[]);
    let nav = fleet.call(
        &c,
        "browser_navigate",
        &json!({"url": format!("{}/", site.base)}),
        "shot",
    );
    assert_eq!(nav["success"], true, "{nav}");
    let got = fleet.call(
        &c,
        "browser_vision",
        &json!({"question": "What does the heading say?", "annotate": true}),
        "shot",
    );
    assert_eq!(got["success"], true, "{got}");
    assert_eq!(got["analysis"], "A page with a heading that says Welcome.");
    let (mime, bytes, text) = image_sent(&model, 0);
    assert_eq!(mime, "image/png");
    // The page's viewport, as the page itself measures it.
    let viewport = fleet.call(
        &c,
        "browser_console",
        &json!({"expression": "[window.innerWidth, window.innerHeight]"}),
        "shot",
    );
    let (w, h) = (
        viewport["result"][0].as_u64().unwrap() as u32,
        viewport["result"][1].as_u64().unwrap() as u32,
    );
    assert_eq!(png_size(&bytes), (w, h), "{viewport}");
    assert!(
        text["text"]
            .as_str()
            .unwrap()
            .contains("User's question: What does the heading say?"),
        "{text}"
    );
    // The screenshot the model saw is the file named in the answer.
    let path = got["screenshot_path"].as_str().unwrap();
    assert_eq!(std::fs::read(path).unwrap(), bytes);
}

#[test]
fn text_to_speech_writes_a_wav_in_the_environment() {
    if !caduceus_tests::require("espeak-ng", "apt-get install espeak-ng", || {
        caduceus_worker::tools::speech::find_espeak().is_some()
    }) {
        return;
    }
    let (fleet, c, _w) = fleet("", &[]);
    let tools = tool_names(&fleet, &c);
    assert!(tools.iter().any(|t| t == "text_to_speech"), "{tools:?}");
    let got = fleet.call(
        &c,
        "text_to_speech",
        &json!({"text": "Hello from the worker.", "output_path": "speech/hello.wav"}),
        "tts",
    );
    assert_eq!(got["success"], true, "{got}");
    let path = got["file_path"].as_str().unwrap();
    assert!(path.ends_with("/speech/hello.wav"), "{got}");
    assert_eq!(got["media_tag"], format!("MEDIA:{path}"));
    assert_eq!(got["provider"], "espeak-ng");
    // The environment's shell sees the file where the answer says.
    let listed = fleet.call(&c, "terminal", &json!({"command": "ls speech"}), "tts");
    assert_eq!(listed["output"], "hello.wav", "{listed}");
    // A real audio reader: Python's wave module.
    let read = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, wave; w = wave.open(sys.argv[1]); print(w.getnframes() / w.getframerate())",
            path,
        ])
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let seconds: f64 = String::from_utf8_lossy(&read.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(seconds > 0.3, "{seconds} s of speech");

    // Text that looks like an option is spoken, not obeyed (it goes in on stdin).
    let dashed = fleet.call(
        &c,
        "text_to_speech",
        &json!({"text": "--help", "output_path": "dash.wav"}),
        "tts",
    );
    assert_eq!(dashed["success"], true, "{dashed}");
    let head = std::fs::read(dashed["file_path"].as_str().unwrap()).unwrap();
    assert!(
        head.starts_with(b"RIFF") && &head[8..12] == b"WAVE",
        "not a WAV"
    );

    // output_path is a write the model chose: the file tools' guards hold
    // (a credential file is refused and left alone).
    let denied = fleet.call(
        &c,
        "text_to_speech",
        &json!({"text": "overwrite", "output_path": "~/.ssh/authorized_keys"}),
        "tts",
    );
    assert_eq!(denied["success"], false, "{denied}");
    let error = denied["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("Write denied") && error.contains("protected system/credential file"),
        "{denied}"
    );
    let keys = fleet.call(
        &c,
        "terminal",
        &json!({"command": "test -e ~/.ssh/authorized_keys && echo present || echo absent"}),
        "tts",
    );
    assert_eq!(keys["output"], "absent", "{keys}");

    let empty = fleet.call(&c, "text_to_speech", &json!({"text": "  "}), "tts");
    assert_eq!(
        empty,
        json!({"error": "Text is required", "success": false})
    );
}
