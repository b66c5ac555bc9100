//! `fake-daytona`: a stand-in for Daytona's REST API (`/api/...`) and its
//! toolbox API (`/toolbox/{id}/...`), written from the SDK 0.226.1 models and
//! `reference/cloud-backends.md` Part B/C. Commands run for real, as local
//! processes, one directory per sandbox. The official `daytona` SDK is
//! checked against it first (`tests/fake-daytona/sdk_check.py`), our own
//! client after. See `tests/fake-daytona/README.md`.
//!
//! ```text
//! fake-daytona --port P [--minute-seconds S] [--dir D]   →  listening on 127.0.0.1:P
//! ```

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path as FsPath, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::{ChildStdin, Command};

/// The test credentials (README): an API key, or a JWT with its organization.
const API_KEY: &str = "dtn_fake_test_key_0123456789";
const JWT: &str = "fake-daytona-test-jwt";
const ORGANIZATION: &str = "fake-org";
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

struct Options {
    port: u16,
    /// How long one of Daytona's "minutes" (auto-stop/archive/delete) lasts here.
    minute: Duration,
    /// How long each state transition takes (creating → started, …).
    step: Duration,
    dir: PathBuf,
}

fn parse_options() -> anyhow::Result<Options> {
    let mut port = 0u16;
    let mut minute = 60.0f64;
    let mut step_ms = 100u64;
    let mut dir = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--port" => port = value()?.parse()?,
            "--minute-seconds" => minute = value()?.parse()?,
            "--step-ms" => step_ms = value()?.parse()?,
            "--dir" => dir = Some(PathBuf::from(value()?)),
            other => anyhow::bail!(
                "unknown argument {other}; usage: fake-daytona --port P [--minute-seconds S] [--step-ms N] [--dir D]"
            ),
        }
    }
    let dir = match dir {
        Some(dir) => dir,
        None => std::env::temp_dir().join(format!("fake-daytona-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir)?;
    Ok(Options {
        port,
        minute: Duration::from_secs_f64(minute),
        step: Duration::from_millis(step_ms),
        dir,
    })
}

#[derive(Clone)]
struct Fake {
    inner: Arc<Mutex<Sandboxes>>,
    minute: Duration,
    step: Duration,
    dir: PathBuf,
    toolbox_url: String,
}

#[derive(Default)]
struct Sandboxes {
    by_id: BTreeMap<String, Sandbox>,
}

struct Sandbox {
    id: String,
    name: String,
    labels: Map<String, Value>,
    env: Map<String, Value>,
    snapshot: Option<String>,
    build_info: Option<Value>,
    target: String,
    cpu: i64,
    memory: i64,
    disk: i64,
    state: &'static str,
    desired: &'static str,
    auto_stop: i64,
    auto_archive: i64,
    auto_delete: i64,
    created_at: String,
    updated_at: String,
    /// Last toolbox call or lifecycle change (auto-stop counts from it).
    activity: Instant,
    /// When it stopped (auto-archive and auto-delete count from it).
    stopped_at: Option<Instant>,
    sessions: HashMap<String, Session>,
}

struct Session {
    /// The session's persistent bash (its stdin takes commands and input).
    stdin: Arc<tokio::sync::Mutex<ChildStdin>>,
    pgid: u32,
    dir: PathBuf,
    commands: Vec<(String, String)>,
}

impl Sandbox {
    fn root(&self, base: &FsPath) -> PathBuf {
        base.join(&self.id)
    }

    fn home(&self, base: &FsPath) -> PathBuf {
        self.root(base).join("home")
    }

    fn json(&self, toolbox_url: &str) -> Value {
        let mut value = json!({
            "id": self.id,
            "organizationId": ORGANIZATION,
            "name": self.name,
            "user": sandbox_user(),
            "env": self.env,
            "labels": self.labels,
            "public": false,
            "networkBlockAll": false,
            "kvm": false,
            "target": self.target,
            "cpu": self.cpu,
            "gpu": 0,
            "memory": self.memory,
            "disk": self.disk,
            "state": self.state,
            "desiredState": self.desired,
            "autoStopInterval": self.auto_stop,
            "autoArchiveInterval": self.auto_archive,
            "autoDeleteInterval": self.auto_delete,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
            "toolboxProxyUrl": toolbox_url,
            "daemonVersion": "fake-daytona",
        });
        if let Some(snapshot) = &self.snapshot {
            value["snapshot"] = json!(snapshot);
        }
        if let Some(build) = &self.build_info {
            value["buildInfo"] = build.clone();
        }
        value
    }
}

fn sandbox_user() -> String {
    std::env::var("USER").unwrap_or_else(|_| "root".to_owned())
}

fn now_iso() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Days since the epoch to a civil date (Howard Hinnant's algorithm).
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.000Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

// ---------------------------------------------------------------- errors

/// An error in the API's shape (NestJS) or the toolbox's (`ErrorResponse`).
struct Failure {
    status: StatusCode,
    message: String,
    code: Option<&'static str>,
    toolbox: bool,
}

impl Failure {
    fn api(status: StatusCode, message: impl Into<String>) -> Self {
        Failure {
            status,
            message: message.into(),
            code: None,
            toolbox: false,
        }
    }

    fn toolbox(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Failure {
            status,
            message: message.into(),
            code: Some(code),
            toolbox: true,
        }
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let body = if self.toolbox {
            json!({
                "statusCode": self.status.as_u16(),
                "message": self.message,
                "code": self.code,
                "timestamp": now_iso(),
                "source": "DAYTONA_DAEMON",
            })
        } else {
            json!({
                "statusCode": self.status.as_u16(),
                "error": self.status.canonical_reason().unwrap_or(""),
                "message": self.message,
                "timestamp": now_iso(),
            })
        };
        (self.status, axum::Json(body)).into_response()
    }
}

type Answer = Result<Response, Failure>;

fn ok_json(value: Value) -> Answer {
    Ok(axum::Json(value).into_response())
}

// ---------------------------------------------------------------- auth

async fn authenticate(request: Request, next: Next) -> Response {
    let path = request.uri().path().to_owned();
    if path == "/api/config" {
        return next.run(request).await;
    }
    let headers = request.headers();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let organization = headers
        .get("x-daytona-organization-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let ok = bearer == API_KEY || (bearer == JWT && organization == ORGANIZATION);
    if ok {
        return next.run(request).await;
    }
    let message = if bearer == JWT {
        "X-Daytona-Organization-ID is required with a JWT"
    } else {
        "Invalid credentials"
    };
    let mut failure = Failure::api(StatusCode::UNAUTHORIZED, message);
    failure.toolbox = path.starts_with("/toolbox/");
    failure.code = failure.toolbox.then_some("UNAUTHORIZED");
    failure.into_response()
}

/// `X-Daytona-SDK-Version` ≥ 0.167.0 asks for split output and JSON logs.
fn split_output(headers: &HeaderMap) -> bool {
    if headers
        .get("x-daytona-split-output")
        .is_some_and(|v| v == "true")
    {
        return true;
    }
    let Some(version) = headers
        .get("x-daytona-sdk-version")
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let parts: Vec<u64> = version
        .split(['.', '-'])
        .take(3)
        .map(|p| p.parse().unwrap_or(0))
        .collect();
    matches!(parts.as_slice(), [major, minor, ..] if (*major, *minor) >= (0, 167))
}

// ---------------------------------------------------------------- control plane

impl Fake {
    fn lock(&self) -> MutexGuard<'_, Sandboxes> {
        match self.inner.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// The sandbox's id, looked up by id or name.
    fn resolve(&self, key: &str) -> Result<String, Failure> {
        let sandboxes = self.lock();
        if sandboxes.by_id.contains_key(key) {
            return Ok(key.to_owned());
        }
        sandboxes
            .by_id
            .values()
            .find(|s| s.name == key)
            .map(|s| s.id.clone())
            .ok_or_else(|| {
                Failure::api(
                    StatusCode::NOT_FOUND,
                    format!("Sandbox with ID or name {key} not found"),
                )
            })
    }

    fn sandbox_json(&self, id: &str) -> Answer {
        let sandboxes = self.lock();
        match sandboxes.by_id.get(id) {
            Some(sandbox) => ok_json(sandbox.json(&self.toolbox_url)),
            None => Err(Failure::api(StatusCode::NOT_FOUND, "Sandbox not found")),
        }
    }

    /// Moves `id` through `states` one step apart (the last one is final).
    fn transition(&self, id: &str, desired: &'static str, states: &'static [&'static str]) {
        {
            let mut sandboxes = self.lock();
            if let Some(sandbox) = sandboxes.by_id.get_mut(id) {
                sandbox.desired = desired;
                sandbox.state = states[0];
                sandbox.updated_at = now_iso();
            }
        }
        let fake = self.clone();
        let id = id.to_owned();
        tokio::spawn(async move {
            for state in &states[1..] {
                tokio::time::sleep(fake.step).await;
                fake.arrive(&id, state);
            }
        });
    }

    /// A sandbox reached `state`: what that means for its processes and files.
    fn arrive(&self, id: &str, state: &'static str) {
        let mut sandboxes = self.lock();
        let Some(sandbox) = sandboxes.by_id.get_mut(id) else {
            return;
        };
        sandbox.state = state;
        sandbox.updated_at = now_iso();
        sandbox.activity = Instant::now();
        match state {
            "stopped" | "destroyed" | "archived" => {
                let sessions: Vec<Session> = sandbox.sessions.drain().map(|(_, s)| s).collect();
                for session in &sessions {
                    kill_group(session.pgid);
                }
                kill_sandbox_processes(id);
                if state == "stopped" {
                    sandbox.stopped_at = Some(Instant::now());
                    if sandbox.auto_delete == 0 {
                        sandbox.state = "destroyed";
                    }
                }
                if sandbox.state == "destroyed" {
                    let root = sandbox.root(&self.dir);
                    sandboxes.by_id.remove(id);
                    let _ = std::fs::remove_dir_all(root);
                }
            }
            _ => {}
        }
    }

    /// Auto-stop, auto-archive and auto-delete, checked every tenth of a minute.
    async fn lifecycle_loop(self) {
        let tick = (self.minute / 10).max(Duration::from_millis(50));
        loop {
            tokio::time::sleep(tick).await;
            let mut due = Vec::new();
            {
                let sandboxes = self.lock();
                for sandbox in sandboxes.by_id.values() {
                    let minutes = |n: i64| self.minute.mul_f64(n as f64);
                    match sandbox.state {
                        "started"
                            if sandbox.auto_stop > 0
                                && sandbox.activity.elapsed() >= minutes(sandbox.auto_stop) =>
                        {
                            eprintln!("fake-daytona: auto-stop of {} (idle)", sandbox.id);
                            due.push((sandbox.id.clone(), "stop"));
                        }
                        "stopped" => {
                            let stopped =
                                sandbox.stopped_at.map(|t| t.elapsed()).unwrap_or_default();
                            if sandbox.auto_delete >= 0 && stopped >= minutes(sandbox.auto_delete) {
                                due.push((sandbox.id.clone(), "delete"));
                            } else if sandbox.auto_archive > 0
                                && stopped >= minutes(sandbox.auto_archive)
                            {
                                due.push((sandbox.id.clone(), "archive"));
                            }
                        }
                        _ => {}
                    }
                }
            }
            for (id, action) in due {
                match action {
                    "stop" => self.transition(&id, "stopped", &["stopping", "stopped"]),
                    "archive" => self.transition(&id, "archived", &["archiving", "archived"]),
                    _ => self.transition(&id, "destroyed", &["destroying", "destroyed"]),
                }
            }
        }
    }
}

async fn config() -> Answer {
    ok_json(json!({
        "version": "0.0.0-fake",
        "oidc": {"issuer": "http://127.0.0.1/fake", "clientId": "fake", "audience": "fake", "provider": "fake"},
        "linkedAccountsEnabled": false,
        "announcements": {},
        "proxyTemplateUrl": "http://{{PORT}}-{{sandboxId}}.127.0.0.1",
        "proxyToolboxUrl": "http://127.0.0.1/toolbox",
        "defaultSnapshot": "fake-default",
        "dashboardUrl": "http://127.0.0.1/dashboard",
        "maxAutoArchiveInterval": 43200,
        "maintananceMode": false,
        "environment": "fake",
        "analyticsApiUrl": null,
    }))
}

fn int_field(body: &Value, key: &str, default: i64) -> i64 {
    body.get(key).and_then(Value::as_i64).unwrap_or(default)
}

async fn create_sandbox(State(fake): State<Fake>, body: Bytes) -> Answer {
    let body: Value = serde_json::from_slice(&body)
        .map_err(|e| Failure::api(StatusCode::BAD_REQUEST, format!("invalid JSON: {e}")))?;
    let id = uuid::Uuid::new_v4().to_string();
    let name = body
        .get("name")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| id.clone());
    {
        let sandboxes = fake.lock();
        if sandboxes.by_id.values().any(|s| s.name == name) {
            return Err(Failure::api(
                StatusCode::CONFLICT,
                format!("Sandbox with name {name} already exists"),
            ));
        }
    }
    let object = |key: &str| {
        body.get(key)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    // The answer's BuildInfo is the server's record of the build, not the request.
    let build_info = body.get("buildInfo").map(|request| {
        json!({
            "dockerfileContent": request.get("dockerfileContent").cloned().unwrap_or(Value::Null),
            "contextHashes": request.get("contextHashes").cloned().unwrap_or(json!([])),
            "createdAt": now_iso(),
            "updatedAt": now_iso(),
            "snapshotRef": format!("fake-build-{}", uuid::Uuid::new_v4().simple()),
        })
    });
    let sandbox = Sandbox {
        id: id.clone(),
        name,
        labels: object("labels"),
        env: object("env"),
        snapshot: body
            .get("snapshot")
            .and_then(Value::as_str)
            .map(str::to_owned),
        build_info: build_info.clone(),
        target: body
            .get("target")
            .and_then(Value::as_str)
            .unwrap_or("us")
            .to_owned(),
        cpu: int_field(&body, "cpu", 2),
        memory: int_field(&body, "memory", 4),
        disk: int_field(&body, "disk", 10),
        state: "creating",
        desired: "started",
        auto_stop: int_field(&body, "autoStopInterval", 15),
        auto_archive: int_field(&body, "autoArchiveInterval", 10_080),
        auto_delete: int_field(&body, "autoDeleteInterval", -1),
        created_at: now_iso(),
        updated_at: now_iso(),
        activity: Instant::now(),
        stopped_at: None,
        sessions: HashMap::new(),
    };
    let home = sandbox.home(&fake.dir);
    std::fs::create_dir_all(&home).map_err(|e| {
        Failure::api(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot make the sandbox's directory: {e}"),
        )
    })?;
    eprintln!(
        "fake-daytona: create {id} labels={} autoStop={} autoArchive={} autoDelete={}",
        Value::Object(sandbox.labels.clone()),
        sandbox.auto_stop,
        sandbox.auto_archive,
        sandbox.auto_delete
    );
    fake.lock().by_id.insert(id.clone(), sandbox);
    let states: &'static [&'static str] = if build_info.is_some() {
        &["pending_build", "building_snapshot", "starting", "started"]
    } else {
        &["creating", "started"]
    };
    fake.transition(&id, "started", states);
    fake.sandbox_json(&id)
}

async fn get_sandbox(State(fake): State<Fake>, Path(key): Path<String>) -> Answer {
    let id = fake.resolve(&key)?;
    fake.sandbox_json(&id)
}

async fn toolbox_proxy_url(State(fake): State<Fake>, Path(key): Path<String>) -> Answer {
    fake.resolve(&key)?;
    ok_json(json!({"url": fake.toolbox_url}))
}

async fn list_sandboxes(State(fake): State<Fake>, request: Request) -> Answer {
    let query = request.uri().query().unwrap_or("");
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query)
        .map_err(|e| Failure::api(StatusCode::BAD_REQUEST, format!("bad query: {e}")))?;
    let mut labels = Map::new();
    let mut states = Vec::new();
    let mut cursor = 0usize;
    let mut limit = 100usize;
    for (key, value) in pairs {
        match key.as_str() {
            "labels" => {
                labels = serde_json::from_str(&value).map_err(|e| {
                    Failure::api(
                        StatusCode::BAD_REQUEST,
                        format!("labels is not a JSON object: {e}"),
                    )
                })?
            }
            "states" => states.push(value),
            "cursor" => cursor = value.parse().unwrap_or(0),
            "limit" => limit = value.parse().unwrap_or(100).clamp(1, 200),
            _ => {}
        }
    }
    let sandboxes = fake.lock();
    let matching: Vec<Value> = sandboxes
        .by_id
        .values()
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
        .filter(|s| states.is_empty() || states.iter().any(|st| st == s.state))
        .map(|s| s.json(&fake.toolbox_url))
        .collect();
    let page: Vec<Value> = matching.iter().skip(cursor).take(limit).cloned().collect();
    let next = (cursor + limit < matching.len()).then(|| (cursor + limit).to_string());
    ok_json(json!({"items": page, "nextCursor": next}))
}

async fn start_sandbox(State(fake): State<Fake>, Path(key): Path<String>) -> Answer {
    let id = fake.resolve(&key)?;
    let state = fake.lock().by_id.get(&id).map(|s| s.state).unwrap_or("");
    match state {
        "started" => {}
        "stopped" | "archived" => fake.transition(&id, "started", &["starting", "started"]),
        other => {
            return Err(Failure::api(
                StatusCode::BAD_REQUEST,
                format!("Sandbox is not in a state that can be started ({other})"),
            ));
        }
    }
    fake.sandbox_json(&id)
}

async fn stop_sandbox(State(fake): State<Fake>, Path(key): Path<String>) -> Answer {
    let id = fake.resolve(&key)?;
    let state = fake.lock().by_id.get(&id).map(|s| s.state).unwrap_or("");
    if state != "stopped" {
        fake.transition(&id, "stopped", &["stopping", "stopped"]);
    }
    // A sandbox that is deleted on stop may already be gone.
    match fake.sandbox_json(&id) {
        Err(_) => ok_json(json!({"id": id, "state": "destroyed"})),
        answer => answer,
    }
}

async fn delete_sandbox(State(fake): State<Fake>, Path(key): Path<String>) -> Answer {
    let id = fake.resolve(&key)?;
    let answer = fake.sandbox_json(&id);
    fake.transition(&id, "destroyed", &["destroying", "destroyed"]);
    answer
}

async fn replace_labels(
    State(fake): State<Fake>,
    Path(key): Path<String>,
    axum::Json(body): axum::Json<Value>,
) -> Answer {
    let id = fake.resolve(&key)?;
    let labels = body
        .get("labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(sandbox) = fake.lock().by_id.get_mut(&id) {
        sandbox.labels = labels.clone();
    }
    ok_json(json!({"labels": labels}))
}

// ---------------------------------------------------------------- toolbox

/// What a toolbox call needs: the sandbox is there and started; the call
/// counts as activity.
struct Place {
    id: String,
    home: PathBuf,
    env: Vec<(String, String)>,
}

impl Fake {
    fn place(&self, id: &str) -> Result<Place, Failure> {
        let mut sandboxes = self.lock();
        let Some(sandbox) = sandboxes.by_id.get_mut(id) else {
            return Err(Failure::toolbox(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                format!("sandbox {id} not found"),
            ));
        };
        if sandbox.state != "started" {
            return Err(Failure::toolbox(
                StatusCode::BAD_REQUEST,
                "BAD_REQUEST",
                format!("sandbox {id} is not started (state {})", sandbox.state),
            ));
        }
        sandbox.activity = Instant::now();
        let home = sandbox.home(&self.dir);
        let mut env = vec![
            ("PATH".to_owned(), SYSTEM_PATH.to_owned()),
            ("HOME".to_owned(), home.display().to_string()),
            ("USER".to_owned(), sandbox_user()),
            ("DAYTONA_SANDBOX_ID".to_owned(), sandbox.id.clone()),
            ("DAYTONA_SANDBOX_USER".to_owned(), sandbox_user()),
        ];
        for (key, value) in &sandbox.env {
            if let Some(value) = value.as_str() {
                env.push((key.clone(), value.to_owned()));
            }
        }
        Ok(Place {
            id: sandbox.id.clone(),
            home,
            env,
        })
    }

    fn resolve_path(place: &Place, path: &str) -> PathBuf {
        if path.starts_with('/') {
            PathBuf::from(path)
        } else {
            place.home.join(path)
        }
    }
}

fn sandbox_command(place: &Place, program: &str) -> Command {
    let mut command = Command::new(program);
    command
        .env_clear()
        .envs(place.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&place.home)
        .process_group(0)
        .kill_on_drop(false);
    command
}

#[derive(Deserialize)]
struct ExecuteBody {
    command: String,
    cwd: Option<String>,
    envs: Option<HashMap<String, String>>,
    timeout: Option<u64>,
}

async fn execute(State(fake): State<Fake>, Path(id): Path<String>, body: Bytes) -> Answer {
    let place = fake.place(&id)?;
    let request: ExecuteBody = serde_json::from_slice(&body)
        .map_err(|e| Failure::toolbox(StatusCode::BAD_REQUEST, "BAD_REQUEST", e.to_string()))?;
    let mut command = sandbox_command(&place, "bash");
    command
        .arg("-c")
        .arg(format!("exec 2>&1\n{}", request.command))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(cwd) = &request.cwd {
        command.current_dir(Fake::resolve_path(&place, cwd));
    }
    if let Some(envs) = &request.envs {
        command.envs(envs);
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(err) => return ok_json(json!({"exitCode": -1, "result": err.to_string()})),
    };
    let pgid = child.id().unwrap_or(0);
    let output = child.wait_with_output();
    let output = match request.timeout.filter(|t| *t > 0) {
        Some(secs) => match tokio::time::timeout(Duration::from_secs(secs), output).await {
            Ok(output) => output,
            Err(_) => {
                kill_group(pgid);
                return Err(Failure::toolbox(
                    StatusCode::REQUEST_TIMEOUT,
                    "PROCESS_EXECUTION_TIMEOUT",
                    format!("command timed out after {secs} seconds"),
                ));
            }
        },
        None => output.await,
    };
    let output = output.map_err(|e| {
        Failure::toolbox(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_ERROR",
            e.to_string(),
        )
    })?;
    let code = exit_code(output.status);
    ok_json(json!({"exitCode": code, "result": String::from_utf8_lossy(&output.stdout)}))
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewSession {
    session_id: String,
}

async fn create_session(State(fake): State<Fake>, Path(id): Path<String>, body: Bytes) -> Answer {
    let place = fake.place(&id)?;
    let request: NewSession = serde_json::from_slice(&body)
        .map_err(|e| Failure::toolbox(StatusCode::BAD_REQUEST, "BAD_REQUEST", e.to_string()))?;
    if fake
        .lock()
        .by_id
        .get(&id)
        .is_some_and(|s| s.sessions.contains_key(&request.session_id))
    {
        return Err(Failure::toolbox(
            StatusCode::CONFLICT,
            "CONFLICT",
            format!("session {} already exists", request.session_id),
        ));
    }
    let dir = place
        .home
        .parent()
        .unwrap_or(&place.home)
        .join("sessions")
        .join(uuid::Uuid::new_v4().to_string());
    std::fs::create_dir_all(&dir).map_err(|e| {
        Failure::toolbox(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_ERROR",
            e.to_string(),
        )
    })?;
    let mut child = sandbox_command(&place, "bash")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            Failure::toolbox(
                StatusCode::INTERNAL_SERVER_ERROR,
                "INTERNAL_ERROR",
                e.to_string(),
            )
        })?;
    let pgid = child.id().unwrap_or(0);
    let Some(stdin) = child.stdin.take() else {
        return Err(Failure::toolbox(
            StatusCode::INTERNAL_SERVER_ERROR,
            "INTERNAL_ERROR",
            "no stdin",
        ));
    };
    // A command that ends the session's shell (`exit 3`) still gets its
    // exit code: the shell's own.
    let current = dir.join("current");
    tokio::spawn(async move {
        let status = child.wait().await;
        if let (Ok(status), Ok(cid)) = (status, std::fs::read_to_string(&current)) {
            let files = command_files(current.parent().unwrap_or(FsPath::new("/")), cid.trim());
            if read_rc(&files).is_none() {
                let _ = std::fs::write(&files.rc, exit_code(status).to_string());
            }
        }
    });
    let session = Session {
        stdin: Arc::new(tokio::sync::Mutex::new(stdin)),
        pgid,
        dir,
        commands: Vec::new(),
    };
    if let Some(sandbox) = fake.lock().by_id.get_mut(&place.id) {
        sandbox.sessions.insert(request.session_id, session);
    }
    Ok(StatusCode::CREATED.into_response())
}

fn session_of<T>(
    fake: &Fake,
    id: &str,
    sid: &str,
    f: impl FnOnce(&mut Session) -> T,
) -> Result<T, Failure> {
    let mut sandboxes = fake.lock();
    sandboxes
        .by_id
        .get_mut(id)
        .and_then(|s| s.sessions.get_mut(sid))
        .map(f)
        .ok_or_else(|| {
            Failure::toolbox(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                format!("session {sid} not found"),
            )
        })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionExec {
    command: String,
    #[serde(default)]
    run_async: bool,
    #[serde(default, rename = "async")]
    old_async: bool,
}

struct CommandFiles {
    out: PathBuf,
    err: PathBuf,
    rc: PathBuf,
}

fn command_files(dir: &FsPath, cid: &str) -> CommandFiles {
    CommandFiles {
        out: dir.join(format!("{cid}.out")),
        err: dir.join(format!("{cid}.err")),
        rc: dir.join(format!("{cid}.rc")),
    }
}

fn read_rc(files: &CommandFiles) -> Option<i64> {
    std::fs::read_to_string(&files.rc)
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

fn read_lossy(path: &FsPath) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned()
}

async fn session_execute(
    State(fake): State<Fake>,
    Path((id, sid)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    fake.place(&id)?;
    let request: SessionExec = serde_json::from_slice(&body)
        .map_err(|e| Failure::toolbox(StatusCode::BAD_REQUEST, "BAD_REQUEST", e.to_string()))?;
    let cid = uuid::Uuid::new_v4().to_string();
    let (stdin, dir) = session_of(&fake, &id, &sid, |session| {
        session
            .commands
            .push((cid.clone(), request.command.clone()));
        (session.stdin.clone(), session.dir.clone())
    })?;
    let files = command_files(&dir, &cid);
    // The session's bash runs the command in its own context (cd and export
    // persist), its output into the command's files, then records the code.
    let line = format!(
        "echo {cid} > '{}'; {{ {}\n}} > '{}' 2> '{}'; echo $? > '{}.tmp'; mv '{}.tmp' '{}'\n",
        dir.join("current").display(),
        request.command,
        files.out.display(),
        files.err.display(),
        files.rc.display(),
        files.rc.display(),
        files.rc.display()
    );
    stdin
        .lock()
        .await
        .write_all(line.as_bytes())
        .await
        .map_err(|e| {
            Failure::toolbox(
                StatusCode::GONE,
                "SESSION_ENDED",
                format!("session {sid} ended: {e}"),
            )
        })?;
    if request.run_async || request.old_async {
        return Ok((StatusCode::ACCEPTED, axum::Json(json!({"cmdId": cid}))).into_response());
    }
    let code = loop {
        if let Some(code) = read_rc(&files) {
            break code;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let stdout = read_lossy(&files.out);
    let stderr = read_lossy(&files.err);
    let mut answer = json!({"cmdId": cid, "exitCode": code, "output": format!("{stdout}{stderr}")});
    if split_output(&headers) {
        answer["stdout"] = json!(stdout);
        answer["stderr"] = json!(stderr);
    }
    ok_json(answer)
}

async fn session_command(
    State(fake): State<Fake>,
    Path((id, sid, cid)): Path<(String, String, String)>,
) -> Answer {
    fake.place(&id)?;
    let (dir, command) = session_of(&fake, &id, &sid, |s| {
        (
            s.dir.clone(),
            s.commands
                .iter()
                .find(|(c, _)| *c == cid)
                .map(|(_, c)| c.clone()),
        )
    })?;
    let command = command.ok_or_else(|| {
        Failure::toolbox(
            StatusCode::NOT_FOUND,
            "PROCESS_NOT_FOUND",
            format!("command {cid} not found"),
        )
    })?;
    let code = read_rc(&command_files(&dir, &cid));
    ok_json(json!({"id": cid, "command": command, "exitCode": code}))
}

async fn session_logs(
    State(fake): State<Fake>,
    Path((id, sid, cid)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Answer {
    fake.place(&id)?;
    let (dir, known) = session_of(&fake, &id, &sid, |s| {
        (s.dir.clone(), s.commands.iter().any(|(c, _)| *c == cid))
    })?;
    if !known {
        return Err(Failure::toolbox(
            StatusCode::NOT_FOUND,
            "PROCESS_NOT_FOUND",
            format!("command {cid} not found"),
        ));
    }
    let files = command_files(&dir, &cid);
    let stdout = read_lossy(&files.out);
    let stderr = read_lossy(&files.err);
    if split_output(&headers) {
        ok_json(json!({"output": format!("{stdout}{stderr}"), "stdout": stdout, "stderr": stderr}))
    } else {
        Ok((
            [(header::CONTENT_TYPE, "text/plain")],
            format!("{stdout}{stderr}"),
        )
            .into_response())
    }
}

async fn session_input(
    State(fake): State<Fake>,
    Path((id, sid, cid)): Path<(String, String, String)>,
    axum::Json(body): axum::Json<Value>,
) -> Answer {
    fake.place(&id)?;
    let data = body
        .get("data")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let (stdin, dir) = session_of(&fake, &id, &sid, |s| (s.stdin.clone(), s.dir.clone()))?;
    if read_rc(&command_files(&dir, &cid)).is_some() {
        return Err(Failure::toolbox(
            StatusCode::GONE,
            "COMMAND_ALREADY_COMPLETED",
            format!("command {cid} has ended"),
        ));
    }
    stdin
        .lock()
        .await
        .write_all(data.as_bytes())
        .await
        .map_err(|e| Failure::toolbox(StatusCode::GONE, "SESSION_ENDED", e.to_string()))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn get_session(State(fake): State<Fake>, Path((id, sid)): Path<(String, String)>) -> Answer {
    fake.place(&id)?;
    let (dir, commands) = session_of(&fake, &id, &sid, |s| (s.dir.clone(), s.commands.clone()))?;
    let commands: Vec<Value> = commands
        .iter()
        .map(|(cid, command)| {
            json!({"id": cid, "command": command, "exitCode": read_rc(&command_files(&dir, cid))})
        })
        .collect();
    ok_json(json!({"sessionId": sid, "commands": commands}))
}

async fn list_sessions(State(fake): State<Fake>, Path(id): Path<String>) -> Answer {
    fake.place(&id)?;
    let sandboxes = fake.lock();
    let sessions: Vec<Value> = sandboxes
        .by_id
        .get(&id)
        .map(|s| {
            s.sessions
                .iter()
                .map(|(sid, session)| {
                    let commands: Vec<Value> = session
                        .commands
                        .iter()
                        .map(|(cid, command)| json!({"id": cid, "command": command, "exitCode": read_rc(&command_files(&session.dir, cid))}))
                        .collect();
                    json!({"sessionId": sid, "commands": commands})
                })
                .collect()
        })
        .unwrap_or_default();
    ok_json(Value::Array(sessions))
}

async fn delete_session(
    State(fake): State<Fake>,
    Path((id, sid)): Path<(String, String)>,
) -> Answer {
    fake.place(&id)?;
    let session = {
        let mut sandboxes = fake.lock();
        sandboxes
            .by_id
            .get_mut(&id)
            .and_then(|s| s.sessions.remove(&sid))
    };
    let session = session.ok_or_else(|| {
        Failure::toolbox(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            format!("session {sid} not found"),
        )
    })?;
    kill_group(session.pgid);
    let _ = std::fs::remove_dir_all(&session.dir);
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ---------------------------------------------------------------- files

/// One part of a `multipart/form-data` body: name, filename, content.
type Part = (String, Option<String>, Vec<u8>);

/// The parts of a `multipart/form-data` body.
fn multipart_parts(headers: &HeaderMap, body: &[u8]) -> Result<Vec<Part>, Failure> {
    let bad = |m: &str| Failure::toolbox(StatusCode::BAD_REQUEST, "BAD_REQUEST", m.to_owned());
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let boundary = content_type
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("boundary="))
        .next()
        .map(|b| b.trim_matches('"').to_owned())
        .ok_or_else(|| bad("not multipart/form-data"))?;
    let delimiter = format!("--{boundary}").into_bytes();
    let mut parts = Vec::new();
    let mut rest = body;
    let start = find(rest, &delimiter).ok_or_else(|| bad("no multipart boundary"))?;
    rest = &rest[start + delimiter.len()..];
    loop {
        if rest.starts_with(b"--") {
            break;
        }
        rest = rest.strip_prefix(b"\r\n").unwrap_or(rest);
        let head_end = find(rest, b"\r\n\r\n").ok_or_else(|| bad("truncated part headers"))?;
        let head = String::from_utf8_lossy(&rest[..head_end]).into_owned();
        let after = &rest[head_end + 4..];
        let mut end_marker = b"\r\n".to_vec();
        end_marker.extend_from_slice(&delimiter);
        let end = find(after, &end_marker).ok_or_else(|| bad("truncated part"))?;
        let content = after[..end].to_vec();
        let mut name = String::new();
        let mut filename = None;
        for line in head.lines() {
            if line.to_ascii_lowercase().starts_with("content-disposition") {
                name = disposition_param(line, "name").unwrap_or_default();
                filename = disposition_param(line, "filename");
            }
        }
        parts.push((name, filename, content));
        rest = &after[end + end_marker.len()..];
    }
    Ok(parts)
}

fn disposition_param(line: &str, key: &str) -> Option<String> {
    line.split(';').map(str::trim).find_map(|p| {
        p.strip_prefix(&format!("{key}="))
            .map(|v| v.trim_matches('"').to_owned())
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn write_file(path: &FsPath, content: &[u8]) -> Result<(), Failure> {
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    std::fs::write(path, content).map_err(|e| {
        Failure::toolbox(
            StatusCode::BAD_REQUEST,
            "FILE_ACCESS_DENIED",
            format!("cannot write {}: {e}", path.display()),
        )
    })
}

async fn bulk_upload(
    State(fake): State<Fake>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let place = fake.place(&id)?;
    let parts = multipart_parts(&headers, &body)?;
    let mut paths: HashMap<String, String> = HashMap::new();
    let mut contents: HashMap<String, Vec<u8>> = HashMap::new();
    for (name, _filename, content) in parts {
        if let Some(index) = name.strip_suffix(".path") {
            paths.insert(
                index.to_owned(),
                String::from_utf8_lossy(&content).into_owned(),
            );
        } else if let Some(index) = name.strip_suffix(".file") {
            contents.insert(index.to_owned(), content);
        }
    }
    for (index, content) in contents {
        let path = paths.get(&index).ok_or_else(|| {
            Failure::toolbox(
                StatusCode::BAD_REQUEST,
                "BAD_REQUEST",
                format!("{index}.path is missing"),
            )
        })?;
        write_file(&Fake::resolve_path(&place, path), &content)?;
    }
    Ok(StatusCode::OK.into_response())
}

#[derive(Deserialize)]
struct PathQuery {
    path: String,
}

async fn upload_one(
    State(fake): State<Fake>,
    Path(id): Path<String>,
    Query(query): Query<PathQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer {
    let place = fake.place(&id)?;
    let parts = multipart_parts(&headers, &body)?;
    let (_, _, content) = parts
        .into_iter()
        .find(|(name, _, _)| name == "file")
        .ok_or_else(|| {
            Failure::toolbox(StatusCode::BAD_REQUEST, "BAD_REQUEST", "no part named file")
        })?;
    let path = Fake::resolve_path(&place, &query.path);
    write_file(&path, &content)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    ok_json(json!({"name": name, "path": path.display().to_string(), "type": "file"}))
}

fn read_for_download(place: &Place, path: &str) -> Result<Vec<u8>, Failure> {
    let resolved = Fake::resolve_path(place, path);
    if resolved.is_dir() {
        return Err(Failure::toolbox(
            StatusCode::BAD_REQUEST,
            "INVALID_FILE_PATH",
            format!("{path} is a directory"),
        ));
    }
    std::fs::read(&resolved).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Failure::toolbox(
            StatusCode::NOT_FOUND,
            "FILE_NOT_FOUND",
            format!("file not found: {path}"),
        ),
        _ => Failure::toolbox(
            StatusCode::FORBIDDEN,
            "FILE_ACCESS_DENIED",
            format!("{path}: {e}"),
        ),
    })
}

async fn download_one(
    State(fake): State<Fake>,
    Path(id): Path<String>,
    Query(query): Query<PathQuery>,
) -> Answer {
    let place = fake.place(&id)?;
    let content = read_for_download(&place, &query.path)?;
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        content,
    )
        .into_response())
}

async fn bulk_download(
    State(fake): State<Fake>,
    Path(id): Path<String>,
    axum::Json(body): axum::Json<Value>,
) -> Answer {
    let place = fake.place(&id)?;
    let paths: Vec<String> = body
        .get("paths")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let boundary = format!("fake-daytona-{}", uuid::Uuid::new_v4().simple());
    let mut out = Vec::new();
    for path in paths {
        out.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        match read_for_download(&place, &path) {
            Ok(content) => {
                out.extend_from_slice(
                    format!("Content-Disposition: form-data; name=\"file\"; filename=\"{path}\"\r\nContent-Type: application/octet-stream\r\n\r\n").as_bytes(),
                );
                out.extend_from_slice(&content);
            }
            Err(failure) => {
                let error = json!({"message": failure.message, "statusCode": failure.status.as_u16(), "code": failure.code});
                out.extend_from_slice(
                    format!("Content-Disposition: form-data; name=\"error\"; filename=\"{path}\"\r\nContent-Type: application/json\r\n\r\n{error}").as_bytes(),
                );
            }
        }
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    Ok((
        [(
            header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={boundary}"),
        )],
        Body::from(out),
    )
        .into_response())
}

// ---------------------------------------------------------------- processes

fn kill_group(pgid: u32) {
    if let Ok(pid) = i32::try_from(pgid)
        && pid > 1
    {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Every process whose environment names the sandbox (`DAYTONA_SANDBOX_ID`):
/// what a stopped container would take with it, double-forked orphans included.
fn kill_sandbox_processes(id: &str) {
    let needle = format!("DAYTONA_SANDBOX_ID={id}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

async fn not_implemented(method: Method, request: Request) -> Response {
    eprintln!("fake-daytona: no route for {method} {}", request.uri());
    Failure::api(
        StatusCode::NOT_FOUND,
        format!(
            "Cannot {method} {} (not implemented by fake-daytona)",
            request.uri().path()
        ),
    )
    .into_response()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let options = parse_options()?;
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], options.port))).await?;
    let port = listener.local_addr()?.port();
    let fake = Fake {
        inner: Arc::default(),
        minute: options.minute,
        step: options.step,
        dir: options.dir.clone(),
        toolbox_url: format!("http://127.0.0.1:{port}/toolbox"),
    };
    let api = Router::new()
        .route("/config", get(config))
        .route("/sandbox", post(create_sandbox).get(list_sandboxes))
        .route("/sandbox/{id}", get(get_sandbox).delete(delete_sandbox))
        .route("/sandbox/{id}/start", post(start_sandbox))
        .route("/sandbox/{id}/stop", post(stop_sandbox))
        .route("/sandbox/{id}/labels", put(replace_labels))
        .route("/sandbox/{id}/toolbox-proxy-url", get(toolbox_proxy_url));
    let toolbox = Router::new()
        .route("/process/execute", post(execute))
        .route("/process/session", post(create_session).get(list_sessions))
        .route(
            "/process/session/{sid}",
            get(get_session).delete(delete_session),
        )
        .route("/process/session/{sid}/exec", post(session_execute))
        .route("/process/session/{sid}/command/{cid}", get(session_command))
        .route(
            "/process/session/{sid}/command/{cid}/logs",
            get(session_logs),
        )
        .route(
            "/process/session/{sid}/command/{cid}/input",
            post(session_input),
        )
        .route("/files/bulk-upload", post(bulk_upload))
        .route("/files/upload-v2", post(upload_one))
        .route("/files/bulk-download", post(bulk_download))
        .route("/files/download", get(download_one));
    let app = Router::new()
        .nest("/api", api)
        .nest("/toolbox/{id}", toolbox)
        .fallback(not_implemented)
        .layer(middleware::from_fn(authenticate))
        .layer(axum::extract::DefaultBodyLimit::max(1 << 30))
        .with_state(fake.clone());
    tokio::spawn(fake.clone().lifecycle_loop());
    println!("listening on 127.0.0.1:{port}");
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    axum::serve(listener, app).await?;
    Ok(())
}
