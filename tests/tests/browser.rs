//! The browser toolset against a real Chromium (Debian's `chromium`) and
//! pages served on loopback by the test: through a served coordinator and
//! worker with `caduceus call`, as a user drives it, and the three cleanup
//! layers (idle timeout; environment end and graceful stop; the host
//! ledger's guardian and the next worker's sweep) each on its own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use caduceus_tests::{Fleet, Proc};
use caduceus_worker::browser::{BrowserSettings, Browsers, PROFILE_PREFIX, find_chromium};
use serde_json::{Map, Value, json};

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

/// The test's web server on loopback: its base URL and the paths it was asked for.
struct Site {
    base: String,
    requests: Arc<Mutex<Vec<String>>>,
}

fn serve() -> Site {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
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
                let (status, extra, kind, body) = if path.starts_with("/second") {
                    ("200 OK", String::new(), "text/html", SECOND)
                } else if path.starts_with("/done") {
                    ("200 OK", String::new(), "text/html", DONE)
                } else if path.starts_with("/pixel") {
                    ("200 OK", String::new(), "image/png", "")
                } else if path.starts_with("/to-metadata") {
                    (
                        "302 Found",
                        "location: http://169.254.169.254/latest/meta-data/\r\n".to_owned(),
                        "text/html",
                        "",
                    )
                } else {
                    ("200 OK", String::new(), "text/html", FIRST)
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\n{extra}content-type: {kind}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(body.as_bytes());
            });
        }
    });
    Site { base, requests }
}

fn have_chromium() -> bool {
    caduceus_tests::require("Chromium", "apt-get install chromium", || {
        find_chromium().is_some()
    })
}

/// The ref on the first snapshot line containing `needle` (`[ref=@e3]`).
fn ref_of(snapshot: &str, needle: &str) -> String {
    let line = snapshot
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle} in:\n{snapshot}"));
    let start = line
        .find("[ref=")
        .unwrap_or_else(|| panic!("no ref on {line}"))
        + 5;
    line[start..].split(']').next().unwrap().to_owned()
}

/// Processes whose command line contains every needle.
fn pids_with(needles: &[&str]) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let line = String::from_utf8_lossy(&raw).replace('\0', " ");
            let zombie = std::fs::read_to_string(e.path().join("stat"))
                .map(|s| s.contains(") Z "))
                .unwrap_or(true);
            (!zombie && needles.iter().all(|n| line.contains(n))).then_some(pid)
        })
        .collect()
}

/// Chromium processes (browser and helpers) with a profile under `tmp`.
fn chromium_under(tmp: &Path) -> Vec<u32> {
    let profile = format!("--user-data-dir={}/{PROFILE_PREFIX}", tmp.display());
    pids_with(&[&profile])
}

/// Profile directories left under `tmp`.
fn profiles_under(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(PROFILE_PREFIX))
                .collect()
        })
        .unwrap_or_default()
}

fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A coordinator and worker `w` whose temp dir is `<home>/tmp`, with `config`.
fn fleet(config: &str) -> (Fleet, Proc, Proc, PathBuf) {
    let fleet = Fleet::new();
    fleet.write_config(config);
    let tmp = fleet.home.path().join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let coordinator = fleet.serve(&[]);
    let worker = start_worker(&fleet, &coordinator, &tmp);
    fleet.wait_for_workers(&coordinator, &["w"], Duration::from_secs(30));
    (fleet, coordinator, worker, tmp)
}

fn start_worker(fleet: &Fleet, coordinator: &Proc, tmp: &Path) -> Proc {
    fleet.worker_with_env(coordinator, "w", &[], &[("TMPDIR", tmp.to_str().unwrap())])
}

const ALLOW_PRIVATE: &str = "browser:\n  allow_private_urls: true\n";

#[test]
fn the_browser_tools_drive_a_page_through_caduceus_call() {
    if !have_chromium() {
        return;
    }
    let site = serve();
    let (fleet, c, _w, _tmp) = fleet(ALLOW_PRIVATE);
    let call = |tool: &str, args: Value| fleet.call(&c, tool, &args, "page");

    let tools = fleet.client(&c, &["tools"]);
    let listed = String::from_utf8_lossy(&tools.stdout);
    for tool in ["browser_navigate", "browser_snapshot", "browser_console"] {
        assert!(listed.contains(tool), "{tool} not offered:\n{listed}");
    }

    // navigate answers with the page's compact snapshot
    let nav = call(
        "browser_navigate",
        json!({"url": format!("{}/", site.base)}),
    );
    assert_eq!(nav["success"], true, "{nav}");
    assert_eq!(nav["title"], "First", "{nav}");
    let text = nav["snapshot"].as_str().unwrap().to_owned();
    let input = ref_of(&text, "textbox \"Name\"");
    let button = ref_of(&text, "button \"Greet\"");
    assert!(nav["element_count"].as_u64().unwrap() >= 2, "{nav}");

    let typed = call("browser_type", json!({"ref": input, "text": "Ada"}));
    assert_eq!(
        typed,
        json!({"success": true, "typed": "Ada", "element": input})
    );
    let clicked = call("browser_click", json!({"ref": button}));
    assert_eq!(clicked, json!({"success": true, "clicked": button}));
    let after = call("browser_snapshot", json!({}));
    assert!(
        after["snapshot"]
            .as_str()
            .unwrap()
            .contains("heading \"Hi Ada\""),
        "{after}"
    );

    let images = call("browser_get_images", json!({}));
    assert_eq!(images["count"], 1, "{images}");
    assert!(
        images["images"][0]["src"]
            .as_str()
            .unwrap()
            .ends_with("/pixel.png"),
        "{images}"
    );
    assert_eq!(images["images"][0]["alt"], "a pixel");

    let console = call("browser_console", json!({}));
    assert!(
        console["console_messages"]
            .to_string()
            .contains("page says hello"),
        "{console}"
    );
    assert_eq!(console["console_messages"][0]["source"], "console");
    assert!(
        console["js_errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("boom from page"),
        "{console}"
    );
    assert_eq!(console["total_errors"], 1, "{console}");
    let evaluated = call("browser_console", json!({"expression": "6 * 7"}));
    assert_eq!(
        evaluated,
        json!({"success": true, "result": 42, "result_type": "int"})
    );

    // a form submitted with Enter, then back to the form
    call(
        "browser_navigate",
        json!({"url": format!("{}/second", site.base)}),
    );
    let second = call("browser_snapshot", json!({}));
    let query = ref_of(second["snapshot"].as_str().unwrap(), "textbox \"Query\"");
    call("browser_type", json!({"ref": query, "text": "x"}));
    let pressed = call("browser_press", json!({"key": "Enter"}));
    assert_eq!(pressed, json!({"success": true, "pressed": "Enter"}));
    let title = call("browser_console", json!({"expression": "document.title"}));
    assert_eq!(title["result"], "Done", "{title}");
    assert!(
        site.requests
            .lock()
            .unwrap()
            .iter()
            .any(|p| p == "/done?q=x"),
        "the form was not submitted"
    );
    let back = call("browser_back", json!({}));
    assert_eq!(back["success"], true, "{back}");
    assert!(back["url"].as_str().unwrap().ends_with("/second"), "{back}");

    let bad = call("browser_click", json!({"ref": "@e999"}));
    assert_eq!(bad["success"], false, "{bad}");
    assert!(bad["error"].as_str().unwrap().contains("@e999"), "{bad}");
}

#[test]
fn private_addresses_are_refused_unless_allowed() {
    if !have_chromium() {
        return;
    }
    let site = serve();
    let (fleet, c, _w, _tmp) = fleet("");
    let call = |url: &str| fleet.call(&c, "browser_navigate", &json!({"url": url}), "private");
    let loopback = call(&format!("{}/", site.base));
    assert_eq!(
        loopback,
        json!({"success": false, "error": "Blocked: URL targets a private or internal address"})
    );
    let by_name = call(&site.base.replace("127.0.0.1", "localhost"));
    assert_eq!(by_name["success"], false, "{by_name}");
    let metadata = call("http://169.254.169.254/latest/meta-data/");
    assert_eq!(
        metadata["error"], "Blocked: URL targets a cloud metadata endpoint",
        "{metadata}"
    );
    let file = call("file:///etc/passwd");
    assert_eq!(file["success"], false, "{file}");
    assert!(
        site.requests.lock().unwrap().is_empty(),
        "a refused URL reached the server"
    );
}

fn args(value: &Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

fn browsers(profiles: &Path, allow_private: bool) -> Arc<Browsers> {
    Arc::new(Browsers::new(
        BrowserSettings {
            program: find_chromium(),
            profile_root: profiles.to_owned(),
            owner: "test".to_owned(),
            inactivity_timeout: Duration::from_secs(120),
            allow_private_urls: allow_private,
        },
        None,
    ))
}

async fn run(browsers: &Arc<Browsers>, tool: &str, a: Value) -> Value {
    let reply = browsers.run("task-1", tool, &args(&a)).await;
    serde_json::from_str(&reply.body).unwrap_or_else(|e| panic!("{tool}: {e}: {}", reply.body))
}

#[tokio::test]
async fn a_page_cannot_reach_a_private_address_by_redirect_or_script() {
    if !have_chromium() {
        return;
    }
    let site = serve();
    let profiles = tempfile::tempdir().unwrap();
    // Metadata endpoints are refused even with private URLs allowed, so a
    // loopback page can redirect to one.
    let allowed = browsers(profiles.path(), true);
    let redirected = run(
        &allowed,
        "browser_navigate",
        json!({"url": format!("{}/to-metadata", site.base)}),
    )
    .await;
    assert_eq!(
        redirected,
        json!({"success": false, "error": "Blocked: redirect landed on a cloud metadata endpoint"})
    );
    allowed.close_all().await;

    // A page that may be opened asks for a loopback URL from its script:
    // the request never leaves the browser.
    let strict = browsers(profiles.path(), false);
    let page = format!(
        "data:text/html,<title>t</title><script>fetch('{}/secret').catch(function(e){{console.log('refused '+e)}})</script>",
        site.base
    );
    let nav = run(&strict, "browser_navigate", json!({"url": page})).await;
    assert_eq!(nav["success"], true, "{nav}");
    let mut console = Value::Null;
    for _ in 0..100 {
        console = run(&strict, "browser_console", json!({})).await;
        if console.to_string().contains("refused") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(console.to_string().contains("refused"), "{console}");
    let asked = site.requests.lock().unwrap().clone();
    assert!(
        !asked.iter().any(|p| p == "/secret"),
        "the page's request reached the loopback server: {asked:?}"
    );
    strict.close_all().await;
    assert!(profiles_under(profiles.path()).is_empty());
}

#[test]
fn an_idle_browser_is_closed_after_the_inactivity_timeout() {
    if !have_chromium() {
        return;
    }
    let (fleet, c, _w, tmp) = fleet("browser:\n  inactivity_timeout: 3\n");
    let nav = fleet.call(
        &c,
        "browser_navigate",
        &json!({"url": "about:blank"}),
        "idle",
    );
    assert_eq!(nav["success"], true, "{nav}");
    assert!(!chromium_under(&tmp).is_empty(), "no browser was started");
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        chromium_under(&tmp),
        Vec::<u32>::new(),
        "Chromium still running 5 s after the last call"
    );
    assert_eq!(profiles_under(&tmp), Vec::<String>::new());
}

#[test]
fn a_released_environment_takes_its_browser_with_it() {
    if !have_chromium() {
        return;
    }
    let (fleet, c, _w, tmp) = fleet("");
    let nav = fleet.call(
        &c,
        "browser_navigate",
        &json!({"url": "about:blank"}),
        "rel",
    );
    assert_eq!(nav["success"], true, "{nav}");
    assert!(!chromium_under(&tmp).is_empty());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let released = runtime.block_on(async {
        let mut control =
            caduceus_tests::conformance::Control::connect(&c.url(), &fleet.token).await;
        control.release("rel").await
    });
    assert!(released, "the task had no environment");
    wait_until(
        "Chromium outlived its released environment",
        Duration::from_secs(10),
        || chromium_under(&tmp).is_empty() && profiles_under(&tmp).is_empty(),
    );
}

#[test]
fn a_gracefully_stopped_worker_leaves_no_chromium() {
    if !have_chromium() {
        return;
    }
    let (fleet, c, mut w, tmp) = fleet("");
    for task in ["a", "b"] {
        let nav = fleet.call(&c, "browser_navigate", &json!({"url": "about:blank"}), task);
        assert_eq!(nav["success"], true, "{nav}");
    }
    assert!(chromium_under(&tmp).len() >= 2);
    caduceus_tests::signal(w.pid(), "TERM");
    let status = w
        .wait_exit(Duration::from_secs(30))
        .expect("worker did not stop");
    assert!(status.success(), "{status}");
    assert_eq!(
        chromium_under(&tmp),
        Vec::<u32>::new(),
        "Chromium survived SIGTERM"
    );
    assert_eq!(profiles_under(&tmp), Vec::<String>::new());
}

#[test]
fn the_browser_of_a_killed_worker_dies_with_it() {
    if !have_chromium() {
        return;
    }
    let (fleet, c, mut w, tmp) = fleet("");
    fleet.call(&c, "browser_navigate", &json!({"url": "about:blank"}), "k9");
    assert!(!chromium_under(&tmp).is_empty());
    w.kill();
    wait_until(
        "Chromium or its profile outlived its killed worker",
        Duration::from_secs(15),
        || chromium_under(&tmp).is_empty() && profiles_under(&tmp).is_empty(),
    );
}

#[test]
fn the_next_worker_sweeps_the_browser_of_a_dead_one() {
    if !have_chromium() {
        return;
    }
    let (fleet, c, mut w, tmp) = fleet("");
    fleet.call(
        &c,
        "browser_navigate",
        &json!({"url": "about:blank"}),
        "sweep",
    );
    assert!(!chromium_under(&tmp).is_empty());
    // The guardian goes first (a kill of the whole process group, an OOM
    // kill): only the next worker is left to clean up.
    let tmp_text = tmp.display().to_string();
    let guardians = pids_with(&["caduceus-guardian", &tmp_text]);
    assert_eq!(guardians.len(), 1, "one guardian per worker: {guardians:?}");
    caduceus_tests::signal(guardians[0], "KILL");
    w.kill();
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !profiles_under(&tmp).is_empty(),
        "nothing should have swept the profile yet"
    );
    let _next = start_worker(&fleet, &c, &tmp);
    wait_until(
        "the next worker did not sweep the dead worker's browser",
        Duration::from_secs(20),
        || chromium_under(&tmp).is_empty() && profiles_under(&tmp).is_empty(),
    );
}

/// This machine's name, when it resolves to loopback (it does through
/// /etc/hosts on most hosts and containers): a name Chromium would have to
/// resolve itself without the worker's proxy.
fn loopback_host_name() -> Option<String> {
    use std::net::ToSocketAddrs;
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim().to_owned();
    let loopback = (name.as_str(), 80)
        .to_socket_addrs()
        .ok()?
        .all(|a| a.ip().is_loopback());
    loopback.then_some(name)
}

/// Chromium is started with a resolver that answers nothing and with proxy
/// variables pointing at a dead port (a wrapper adds both), and still loads
/// a page by name with its image: every connection went through the
/// worker's proxy, which resolved and judged the name and connected to the
/// address it judged. Without the proxy Chromium resolves the host again
/// itself after the check (DNS rebinding) and this navigation fails.
#[tokio::test]
async fn chromium_connects_only_where_the_worker_judged_and_ignores_proxy_variables() {
    if !have_chromium() {
        return;
    }
    let mut name = None;
    if !caduceus_tests::require(
        "a host name resolving to loopback",
        "an /etc/hosts entry for this machine's name",
        || {
            name = loopback_host_name();
            name.is_some()
        },
    ) {
        return;
    }
    let name = name.unwrap();
    let site = serve();
    let profiles = tempfile::tempdir().unwrap();
    let wrapper = profiles.path().join("chromium-wrapper");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexport http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 all_proxy=http://127.0.0.1:9\nexec {} \"$@\" '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1'\n",
            find_chromium().unwrap()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let browsers = Arc::new(Browsers::new(
        BrowserSettings {
            program: Some(wrapper.display().to_string()),
            profile_root: profiles.path().to_owned(),
            owner: "test".to_owned(),
            inactivity_timeout: Duration::from_secs(120),
            allow_private_urls: true,
        },
        None,
    ));
    let url = site.base.replace("127.0.0.1", &name);
    let nav = run(&browsers, "browser_navigate", json!({"url": url})).await;
    assert_eq!(nav["success"], true, "{nav}");
    assert_eq!(nav["title"], "First", "{nav}");
    let asked = site.requests.lock().unwrap().clone();
    assert!(asked.iter().any(|p| p == "/pixel.png"), "{asked:?}");

    // The same name is refused when private addresses are not allowed,
    // whatever Chromium's resolver would have said.
    browsers.close_all().await;
    let strict = Arc::new(Browsers::new(
        BrowserSettings {
            program: Some(wrapper.display().to_string()),
            profile_root: profiles.path().to_owned(),
            owner: "test".to_owned(),
            inactivity_timeout: Duration::from_secs(120),
            allow_private_urls: false,
        },
        None,
    ));
    let refused = run(&strict, "browser_navigate", json!({"url": url})).await;
    assert_eq!(
        refused,
        json!({"success": false, "error": "Blocked: URL targets a private or internal address"})
    );
    strict.close_all().await;
    assert!(profiles_under(profiles.path()).is_empty());
}

/// A navigation whose URL carries a credential's shape is refused before
/// the browser is asked (hermes' exfiltration check, as web_extract's).
#[tokio::test]
async fn a_navigation_carrying_a_credential_is_refused() {
    if !have_chromium() {
        return;
    }
    let site = serve();
    let profiles = tempfile::tempdir().unwrap();
    let browsers = browsers(profiles.path(), true);
    let nav = run(
        &browsers,
        "browser_navigate",
        json!({"url": format!("{}/?k=%73k-proj-abcdefghijklmnopqrstuvwxyz0123456789", site.base)}),
    )
    .await;
    assert_eq!(
        nav,
        json!({"success": false, "error": "Blocked: URL contains what appears to be an API key or token. Secrets must not be sent in URLs."})
    );
    assert!(site.requests.lock().unwrap().is_empty());
    browsers.close_all().await;
}
