//! `fake-modal`: a stand-in for Modal's control plane (`modal.client.ModalClient`)
//! and task command router (`modal.task_command_router.TaskCommandRouter`),
//! both on one plain-HTTP/2 gRPC port, written from the 1.6.4 descriptors
//! (`modal-proto/`) and `reference/cloud-backends.md` Part A/C. Commands run
//! for real, as local processes, one directory per sandbox. The official
//! `modal` SDK is checked against it first (`tests/fake-modal/sdk_check.py`),
//! our own client after. See `tests/fake-modal/README.md`.
//!
//! ```text
//! fake-modal --port P [--dir D]   →  listening on 127.0.0.1:P
//! ```

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use base64::Engine as _;
use caduceus_modal_proto::client as api;
use caduceus_modal_proto::client::modal_client_server::{ModalClient, ModalClientServer};
use caduceus_modal_proto::task_command_router as tcr;
use caduceus_modal_proto::task_command_router::task_command_router_server::{
    TaskCommandRouter, TaskCommandRouterServer,
};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

/// The test credentials (README).
const TOKEN_ID: &str = "ak-fakemodaltest000000000";
const TOKEN_SECRET: &str = "as-fakemodaltestsecret00000000";
const SYSTEM_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The SDK's default sandbox timeout, used when a definition has none.
const DEFAULT_TIMEOUT_SECS: u32 = 300;
/// Largest output chunk one stdio read message carries.
const CHUNK: usize = 256 * 1024;
/// Builder version the environment reports (one the SDK accepts).
const BUILDER_VERSION: &str = "2024.10";

use api::generic_result::GenericStatus;

fn log(line: impl AsRef<str>) {
    eprintln!("fake-modal: {}", line.as_ref());
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// `prefix-` and `len` characters of [0-9a-z] (a uuid's hex, enough here).
fn mint(prefix: &str, len: usize) -> String {
    let mut text = String::new();
    while text.len() < len {
        text.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    text.truncate(len);
    format!("{prefix}-{text}")
}

/// An unsigned JWT with a numeric `exp` (the SDK reads it without verifying).
fn jwt(subject: &str, lifetime: Duration) -> String {
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let exp = (now_secs() + lifetime.as_secs_f64()) as u64;
    format!(
        "{}.{}.{}",
        engine.encode(br#"{"alg":"none","typ":"JWT"}"#),
        engine.encode(format!(
            r#"{{"sub":"{subject}","exp":{exp},"nonce":"{}"}}"#,
            uuid::Uuid::new_v4().simple()
        )),
        engine.encode(b"fake-modal")
    )
}

fn result(status: GenericStatus, exitcode: i32, exception: &str) -> api::GenericResult {
    api::GenericResult {
        status: status as i32,
        exitcode,
        exception: exception.to_owned(),
        ..Default::default()
    }
}

// ---------------------------------------------------------------- state

#[derive(Default)]
struct Exec {
    /// Per-descriptor append-only buffers (0 stdout, 1 stderr).
    out: [Vec<u8>; 2],
    /// Descriptor closed (reader saw end of file, or it was never piped).
    closed: [bool; 2],
    /// `Some(Ok(code))` or `Some(Err(signal))` once it ended.
    exit: Option<Result<i32, i32>>,
    /// Bytes of stdin accepted so far, and whether end of file was sent.
    stdin_received: u64,
    stdin_eof: bool,
    stdin: Option<std::sync::mpsc::Sender<Option<Vec<u8>>>>,
    pgid: u32,
    /// When it ended (the end of its activity, for the idle timeout).
    ended_at: Option<Instant>,
}

struct Box_ {
    id: String,
    task_id: String,
    app_id: String,
    image_id: String,
    tags: Vec<(String, String)>,
    created_at: f64,
    timeout_secs: u32,
    deadline: Instant,
    /// `idle_timeout_secs`: ended when nothing ran for this long.
    idle_timeout: Option<Duration>,
    /// Last moment it was active (created, or an exec running), as Modal
    /// counts activity: a running `exec` (stdin is written only to one).
    last_active: Instant,
    result: Option<api::GenericResult>,
    home: PathBuf,
    workdir: Option<String>,
    env: Vec<(String, String)>,
    execs: HashMap<String, Arc<Mutex<Exec>>>,
    /// Router JWTs issued for this sandbox's task.
    router_jwts: HashSet<String>,
    entry_pgid: u32,
}

#[derive(Default)]
struct Inner {
    apps: HashMap<String, String>,
    images: HashMap<String, (String, bool)>,
    boxes: HashMap<String, Box_>,
    tasks: HashMap<String, String>,
    auth_tokens: HashSet<String>,
}

#[derive(Clone)]
struct Fake {
    inner: Arc<Mutex<Inner>>,
    /// Bumped on every change a waiter may care about (output, exits, results).
    changed: Arc<watch::Sender<u64>>,
    dir: PathBuf,
    url: String,
}

impl Fake {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(inner) => inner,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Waits for the next change, at most `limit`.
    async fn next_change(rx: &mut watch::Receiver<u64>, limit: Duration) {
        let _ = tokio::time::timeout(limit, rx.changed()).await;
    }

    /// Ends a sandbox: its result, and every process it started killed.
    fn finish(&self, id: &str, outcome: api::GenericResult) {
        let pgids: Vec<u32> = {
            let mut inner = self.lock();
            let Some(sandbox) = inner.boxes.get_mut(id) else {
                return;
            };
            if sandbox.result.is_some() {
                return;
            }
            log(format!(
                "sandbox {id} finished: status {} exitcode {}",
                outcome.status, outcome.exitcode
            ));
            sandbox.result = Some(outcome);
            let mut pgids = vec![sandbox.entry_pgid];
            for exec in sandbox.execs.values() {
                if let Ok(exec) = exec.lock() {
                    pgids.push(exec.pgid);
                }
            }
            pgids
        };
        for pgid in pgids {
            kill_group(pgid);
        }
        kill_sandbox_processes(id);
        self.bump();
    }

    /// Ends sandboxes whose `timeout` passed (TIMEOUT, as Modal does), and
    /// those with an `idle_timeout` that were idle that long (IDLE_TIMEOUT):
    /// no exec running since.
    async fn timeout_loop(self) {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let now = Instant::now();
            let mut due = Vec::new();
            let mut idle = Vec::new();
            for b in self.lock().boxes.values_mut() {
                if b.result.is_some() {
                    continue;
                }
                if b.deadline <= now {
                    due.push(b.id.clone());
                    continue;
                }
                let mut running = false;
                for exec in b.execs.values() {
                    if let Ok(e) = exec.lock() {
                        running |= e.exit.is_none();
                        if let Some(ended) = e.ended_at {
                            b.last_active = b.last_active.max(ended);
                        }
                    }
                }
                if running {
                    b.last_active = now;
                } else if let Some(limit) = b.idle_timeout
                    && now.duration_since(b.last_active) >= limit
                {
                    idle.push(b.id.clone());
                }
            }
            for id in due {
                log(format!("sandbox {id} reached its timeout"));
                self.finish(&id, result(GenericStatus::Timeout, 0, "timed out"));
            }
            for id in idle {
                log(format!("sandbox {id} reached its idle timeout"));
                self.finish(&id, result(GenericStatus::IdleTimeout, 0, "idle timeout"));
            }
        }
    }

    /// Control-plane credentials; `auth` also needs the `AuthTokenGet` JWT.
    fn check(&self, meta: &MetadataMap, method: &str, auth: bool) -> Result<(), Status> {
        let get = |key: &str| meta.get(key).and_then(|v| v.to_str().ok()).unwrap_or("");
        let (id, secret) = (get("x-modal-token-id"), get("x-modal-token-secret"));
        if id.is_empty() || secret.is_empty() {
            log(format!("{method}: no token headers"));
            return Err(Status::unauthenticated("missing token credentials"));
        }
        if id != TOKEN_ID || secret != TOKEN_SECRET {
            log(format!("{method}: wrong token"));
            let shown: String = id.chars().take(5).collect();
            return Err(Status::permission_denied(format!(
                "token id {shown}… not valid"
            )));
        }
        if auth {
            let token = get("x-modal-auth-token");
            if !self.lock().auth_tokens.contains(token) {
                log(format!("{method}: no valid x-modal-auth-token"));
                return Err(Status::unauthenticated(
                    "invalid or missing x-modal-auth-token",
                ));
            }
        }
        Ok(())
    }

    /// The router's bearer check: a JWT issued for `task_id`'s sandbox.
    fn check_router(&self, meta: &MetadataMap, task_id: &str) -> Result<String, Status> {
        let bearer = meta
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        let inner = self.lock();
        let Some(sandbox_id) = inner.tasks.get(task_id) else {
            return Err(Status::not_found(format!("task {task_id} not found")));
        };
        let sandbox = inner
            .boxes
            .get(sandbox_id)
            .ok_or_else(|| Status::not_found(format!("task {task_id} not found")))?;
        if !sandbox.router_jwts.contains(bearer) {
            return Err(Status::unauthenticated("invalid router token"));
        }
        Ok(sandbox_id.clone())
    }

    fn router_access(&self, sandbox_id: &str) -> Result<api::CommandRouterAccess, Status> {
        let mut inner = self.lock();
        let sandbox = inner
            .boxes
            .get_mut(sandbox_id)
            .ok_or_else(|| Status::not_found(format!("sandbox {sandbox_id} not found")))?;
        let token = jwt(&sandbox.task_id, Duration::from_secs(3600));
        sandbox.router_jwts.insert(token.clone());
        Ok(api::CommandRouterAccess {
            jwt: token,
            url: self.url.clone(),
        })
    }

    fn create(
        &self,
        app_id: &str,
        definition: Option<api::Sandbox>,
        tags: &[api::SandboxTag],
        env: Vec<(String, String)>,
        v2: bool,
    ) -> Result<(String, String), Status> {
        let definition =
            definition.ok_or_else(|| Status::invalid_argument("no sandbox definition"))?;
        {
            let inner = self.lock();
            if !inner.apps.values().any(|a| a == app_id) {
                return Err(Status::not_found(format!("app {app_id} not found")));
            }
            if !inner
                .images
                .values()
                .any(|(i, _)| *i == definition.image_id)
            {
                return Err(Status::not_found(format!(
                    "image {} not found",
                    definition.image_id
                )));
            }
        }
        // V1 ids are sb- and 22 characters; anything else routes to V2.
        let id = if v2 { mint("sb", 26) } else { mint("sb", 22) };
        let task_id = if v2 {
            format!("{}V", mint("ta", 21))
        } else {
            format!("{}0", mint("ta", 21))
        };
        let home = self.dir.join(&id).join("home");
        std::fs::create_dir_all(&home)
            .map_err(|e| Status::internal(format!("cannot make {}: {e}", home.display())))?;
        let mut full_env = vec![
            ("PATH".to_owned(), SYSTEM_PATH.to_owned()),
            ("HOME".to_owned(), home.display().to_string()),
            ("MODAL_SANDBOX_ID".to_owned(), id.clone()),
            ("MODAL_TASK_ID".to_owned(), task_id.clone()),
        ];
        full_env.extend(env);
        let timeout_secs = if definition.timeout_secs == 0 {
            DEFAULT_TIMEOUT_SECS
        } else {
            definition.timeout_secs
        };
        let mut entry_args = definition.entrypoint_args.clone();
        if entry_args.is_empty() {
            entry_args = vec!["sleep".to_owned(), "infinity".to_owned()];
        }
        let workdir = definition.workdir.clone();
        let mut command = std::process::Command::new(&entry_args[0]);
        command
            .args(&entry_args[1..])
            .env_clear()
            .envs(full_env.iter().map(|(k, v)| (k, v)))
            .current_dir(workdir.clone().map(PathBuf::from).unwrap_or(home.clone()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command.spawn().map_err(|e| {
            Status::invalid_argument(format!("cannot start entrypoint {entry_args:?}: {e}"))
        })?;
        let entry_pgid = child.id();
        self.lock().boxes.insert(
            id.clone(),
            Box_ {
                id: id.clone(),
                task_id: task_id.clone(),
                app_id: app_id.to_owned(),
                image_id: definition.image_id,
                tags: tags
                    .iter()
                    .map(|t| (t.tag_name.clone(), t.tag_value.clone()))
                    .collect(),
                created_at: now_secs(),
                timeout_secs,
                deadline: Instant::now() + Duration::from_secs(u64::from(timeout_secs)),
                idle_timeout: definition
                    .idle_timeout_secs
                    .filter(|s| *s > 0)
                    .map(|s| Duration::from_secs(u64::from(s))),
                last_active: Instant::now(),
                result: None,
                home,
                workdir,
                env: full_env,
                execs: HashMap::new(),
                router_jwts: HashSet::new(),
                entry_pgid,
            },
        );
        self.lock().tasks.insert(task_id.clone(), id.clone());
        log(format!(
            "created sandbox {id} (task {task_id}, timeout {timeout_secs}s, tags {})",
            tags.iter()
                .map(|t| format!("{}={}", t.tag_name, t.tag_value))
                .collect::<Vec<_>>()
                .join(",")
        ));
        // The entrypoint's end is the sandbox's end.
        let fake = self.clone();
        let sandbox_id = id.clone();
        std::thread::spawn(move || {
            let status = child.wait();
            let outcome = match status
                .map(|s| (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)))
            {
                Ok((Some(0), _)) => result(GenericStatus::Success, 0, ""),
                Ok((Some(code), _)) => result(GenericStatus::Failure, code, "entrypoint failed"),
                Ok((None, Some(signal))) => {
                    result(GenericStatus::Failure, 128 + signal, "entrypoint killed")
                }
                _ => result(GenericStatus::InternalFailure, -1, "lost the entrypoint"),
            };
            fake.finish(&sandbox_id, outcome);
        });
        Ok((id, task_id))
    }

    fn info(sandbox: &Box_) -> api::SandboxInfo {
        api::SandboxInfo {
            id: sandbox.id.clone(),
            created_at: sandbox.created_at,
            task_info: Some(api::TaskInfo {
                id: sandbox.task_id.clone(),
                sandbox_id: sandbox.id.clone(),
                result: sandbox.result.clone(),
                ..Default::default()
            }),
            app_id: sandbox.app_id.clone(),
            tags: tags_of(&sandbox.tags),
            image_id: sandbox.image_id.clone(),
            timeout_secs: sandbox.timeout_secs,
            idle_timeout_secs: sandbox.idle_timeout.map(|d| d.as_secs() as u32),
            ..Default::default()
        }
    }

    async fn wait(&self, id: &str, timeout: f32) -> Result<Option<api::GenericResult>, Status> {
        let limit = Duration::from_secs_f32(timeout.clamp(0.0, 60.0));
        let until = Instant::now() + limit;
        let mut rx = self.changed.subscribe();
        loop {
            {
                let inner = self.lock();
                let sandbox = inner
                    .boxes
                    .get(id)
                    .ok_or_else(|| Status::not_found(format!("sandbox {id} not found")))?;
                if sandbox.result.is_some() {
                    return Ok(sandbox.result.clone());
                }
            }
            let now = Instant::now();
            if now >= until {
                return Ok(None);
            }
            Fake::next_change(&mut rx, until - now).await;
        }
    }

    fn list(&self, request: &api::SandboxListRequest) -> api::SandboxListResponse {
        let inner = self.lock();
        let mut found: Vec<&Box_> = inner
            .boxes
            .values()
            .filter(|b| request.app_id.is_empty() || b.app_id == request.app_id)
            .filter(|b| request.include_finished || b.result.is_none())
            .filter(|b| request.before_timestamp == 0.0 || b.created_at < request.before_timestamp)
            .filter(|b| {
                request.tags.iter().all(|t| {
                    b.tags
                        .iter()
                        .any(|(k, v)| *k == t.tag_name && *v == t.tag_value)
                })
            })
            .collect();
        found.sort_by(|a, b| b.created_at.total_cmp(&a.created_at));
        api::SandboxListResponse {
            sandboxes: found.into_iter().take(100).map(Fake::info).collect(),
        }
    }

    fn terminate(&self, id: &str) -> Result<api::SandboxTerminateResponse, Status> {
        let existing = {
            let inner = self.lock();
            inner
                .boxes
                .get(id)
                .ok_or_else(|| Status::not_found(format!("sandbox {id} not found")))?
                .result
                .clone()
        };
        if existing.is_none() {
            log(format!("terminating sandbox {id}"));
            self.finish(id, result(GenericStatus::Terminated, 0, "terminated"));
        }
        Ok(api::SandboxTerminateResponse {
            existing_result: existing,
        })
    }

    fn set_tags(&self, id: &str, tags: &[api::SandboxTag]) -> Result<(), Status> {
        let mut inner = self.lock();
        let sandbox = inner
            .boxes
            .get_mut(id)
            .ok_or_else(|| Status::not_found(format!("sandbox {id} not found")))?;
        sandbox.tags = tags
            .iter()
            .map(|t| (t.tag_name.clone(), t.tag_value.clone()))
            .collect();
        Ok(())
    }

    fn tags(&self, id: &str) -> Result<api::SandboxTagsGetResponse, Status> {
        let inner = self.lock();
        let sandbox = inner
            .boxes
            .get(id)
            .ok_or_else(|| Status::not_found(format!("sandbox {id} not found")))?;
        Ok(api::SandboxTagsGetResponse {
            tags: tags_of(&sandbox.tags),
        })
    }

    fn task_id(&self, id: &str) -> Result<api::SandboxGetTaskIdResponse, Status> {
        let inner = self.lock();
        let sandbox = inner
            .boxes
            .get(id)
            .ok_or_else(|| Status::not_found(format!("sandbox {id} not found")))?;
        Ok(match &sandbox.result {
            None => api::SandboxGetTaskIdResponse {
                task_id: Some(sandbox.task_id.clone()),
                task_result: None,
            },
            Some(done) => api::SandboxGetTaskIdResponse {
                task_id: None,
                task_result: Some(done.clone()),
            },
        })
    }

    fn exec_of(&self, sandbox_id: &str, exec_id: &str) -> Result<Arc<Mutex<Exec>>, Status> {
        self.lock()
            .boxes
            .get(sandbox_id)
            .and_then(|b| b.execs.get(exec_id).cloned())
            .ok_or_else(|| Status::not_found(format!("exec {exec_id} not found")))
    }
}

fn tags_of(tags: &[(String, String)]) -> Vec<api::SandboxTag> {
    tags.iter()
        .map(|(k, v)| api::SandboxTag {
            tag_name: k.clone(),
            tag_value: v.clone(),
        })
        .collect()
}

fn secret_env(sources: &[api::SecretSource]) -> Vec<(String, String)> {
    let mut env = Vec::new();
    for source in sources {
        if let Some(api::secret_source::Source::Env(map)) = &source.source {
            let mut pairs: Vec<_> = map.contents.iter().collect();
            pairs.sort();
            env.extend(pairs.into_iter().map(|(k, v)| (k.clone(), v.clone())));
        }
    }
    env
}

type Stream<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl ModalClient for Fake {
    async fn client_hello(
        &self,
        request: Request<()>,
    ) -> Result<Response<api::ClientHelloResponse>, Status> {
        self.check(request.metadata(), "ClientHello", false)?;
        log(format!(
            "ClientHello from client type {} version {}",
            request
                .metadata()
                .get("x-modal-client-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("?"),
            request
                .metadata()
                .get("x-modal-client-version")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("?")
        ));
        Ok(Response::new(api::ClientHelloResponse {
            warning: String::new(),
            image_builder_version: BUILDER_VERSION.to_owned(),
        }))
    }

    async fn auth_token_get(
        &self,
        request: Request<api::AuthTokenGetRequest>,
    ) -> Result<Response<api::AuthTokenGetResponse>, Status> {
        self.check(request.metadata(), "AuthTokenGet", false)?;
        let token = jwt("fake-workspace", Duration::from_secs(3600));
        self.lock().auth_tokens.insert(token.clone());
        log("AuthTokenGet");
        Ok(Response::new(api::AuthTokenGetResponse { token }))
    }

    async fn app_get_or_create(
        &self,
        request: Request<api::AppGetOrCreateRequest>,
    ) -> Result<Response<api::AppGetOrCreateResponse>, Status> {
        self.check(request.metadata(), "AppGetOrCreate", false)?;
        let request = request.into_inner();
        let mut inner = self.lock();
        let key = format!("{}/{}", request.environment_name, request.app_name);
        let app_id = match inner.apps.get(&key) {
            Some(id) => id.clone(),
            None if request.object_creation_type
                == api::ObjectCreationType::CreateIfMissing as i32 =>
            {
                let id = mint("ap", 22);
                inner.apps.insert(key, id.clone());
                log(format!("created app {} ({id})", request.app_name));
                id
            }
            None => {
                return Err(Status::not_found(format!(
                    "App '{}' not found",
                    request.app_name
                )));
            }
        };
        Ok(Response::new(api::AppGetOrCreateResponse { app_id }))
    }

    async fn environment_get_or_create(
        &self,
        request: Request<api::EnvironmentGetOrCreateRequest>,
    ) -> Result<Response<api::EnvironmentGetOrCreateResponse>, Status> {
        self.check(request.metadata(), "EnvironmentGetOrCreate", false)?;
        Ok(Response::new(api::EnvironmentGetOrCreateResponse {
            environment_id: "en-fakemodalmain0000000".to_owned(),
            metadata: Some(api::EnvironmentMetadata {
                name: "main".to_owned(),
                settings: Some(api::EnvironmentSettings {
                    image_builder_version: BUILDER_VERSION.to_owned(),
                    webhook_suffix: "fake-modal".to_owned(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }))
    }

    async fn image_get_or_create(
        &self,
        request: Request<api::ImageGetOrCreateRequest>,
    ) -> Result<Response<api::ImageGetOrCreateResponse>, Status> {
        self.check(request.metadata(), "ImageGetOrCreate", false)?;
        let request = request.into_inner();
        let image = request.image.unwrap_or_default();
        let key = format!(
            "{}|{:?}",
            image.dockerfile_commands.join("\n"),
            image
                .base_images
                .iter()
                .map(|b| (&b.image_id, &b.docker_tag))
                .collect::<Vec<_>>()
        );
        let mut inner = self.lock();
        // A new definition is "building" until someone joins it; a known,
        // built one answers SUCCESS at once (Modal's cache hit).
        let (image_id, built) = inner
            .images
            .entry(key)
            .or_insert_with(|| (mint("im", 22), false))
            .clone();
        log(format!(
            "ImageGetOrCreate {image_id} ({:?}, builder {}, {})",
            image.dockerfile_commands,
            request.builder_version,
            if built { "cached" } else { "building" }
        ));
        Ok(Response::new(api::ImageGetOrCreateResponse {
            image_id,
            result: built.then(|| result(GenericStatus::Success, 0, "")),
        }))
    }

    type ImageJoinStreamingStream = Stream<api::ImageJoinStreamingResponse>;

    async fn image_join_streaming(
        &self,
        request: Request<api::ImageJoinStreamingRequest>,
    ) -> Result<Response<Self::ImageJoinStreamingStream>, Status> {
        self.check(request.metadata(), "ImageJoinStreaming", false)?;
        let image_id = request.into_inner().image_id;
        {
            let mut inner = self.lock();
            let Some(entry) = inner.images.values_mut().find(|(i, _)| *i == image_id) else {
                return Err(Status::not_found(format!("image {image_id} not found")));
            };
            entry.1 = true;
        }
        log(format!("ImageJoinStreaming {image_id}: built"));
        let messages = vec![
            Ok(api::ImageJoinStreamingResponse {
                task_logs: vec![api::TaskLogs {
                    data: "fake-modal: no real build; commands run on the host\n".to_owned(),
                    file_descriptor: api::FileDescriptor::Stdout as i32,
                    ..Default::default()
                }],
                entry_id: "1".to_owned(),
                ..Default::default()
            }),
            Ok(api::ImageJoinStreamingResponse {
                result: Some(result(GenericStatus::Success, 0, "")),
                entry_id: "2".to_owned(),
                eof: true,
                ..Default::default()
            }),
        ];
        Ok(Response::new(Box::pin(tokio_stream::iter(messages))))
    }

    async fn sandbox_create(
        &self,
        request: Request<api::SandboxCreateRequest>,
    ) -> Result<Response<api::SandboxCreateResponse>, Status> {
        self.check(request.metadata(), "SandboxCreate", false)?;
        let request = request.into_inner();
        let (sandbox_id, _) = self.create(
            &request.app_id,
            request.definition,
            &request.tags,
            Vec::new(),
            false,
        )?;
        Ok(Response::new(api::SandboxCreateResponse {
            sandbox_id,
            metadata: Some(api::SandboxHandleMetadata {
                result: None,
                app_id: request.app_id,
            }),
        }))
    }

    async fn sandbox_create_v2(
        &self,
        request: Request<api::SandboxCreateV2Request>,
    ) -> Result<Response<api::SandboxCreateV2Response>, Status> {
        self.check(request.metadata(), "SandboxCreateV2", true)?;
        let request = request.into_inner();
        let mut env = secret_env(&request.secret_sources);
        if let Some(ephemeral) = &request.ephemeral_secrets {
            env.extend(
                ephemeral
                    .contents
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
        }
        let (sandbox_id, task_id) = self.create(
            &request.app_id,
            request.definition,
            &request.tags,
            env,
            true,
        )?;
        let access = self.router_access(&sandbox_id)?;
        Ok(Response::new(api::SandboxCreateV2Response {
            sandbox_id,
            task_id,
            metadata: Some(api::SandboxHandleMetadata {
                result: None,
                app_id: request.app_id,
            }),
            command_router_access: Some(access),
            sandbox_token: String::new(),
        }))
    }

    async fn sandbox_get_task_id(
        &self,
        request: Request<api::SandboxGetTaskIdRequest>,
    ) -> Result<Response<api::SandboxGetTaskIdResponse>, Status> {
        self.check(request.metadata(), "SandboxGetTaskId", false)?;
        Ok(Response::new(
            self.task_id(&request.into_inner().sandbox_id)?,
        ))
    }

    async fn sandbox_get_task_id_v2(
        &self,
        request: Request<api::SandboxGetTaskIdRequest>,
    ) -> Result<Response<api::SandboxGetTaskIdResponse>, Status> {
        self.check(request.metadata(), "SandboxGetTaskIdV2", true)?;
        Ok(Response::new(
            self.task_id(&request.into_inner().sandbox_id)?,
        ))
    }

    async fn sandbox_get_command_router_access(
        &self,
        request: Request<api::SandboxGetCommandRouterAccessRequest>,
    ) -> Result<Response<api::SandboxGetCommandRouterAccessResponse>, Status> {
        self.check(request.metadata(), "SandboxGetCommandRouterAccess", true)?;
        use api::sandbox_get_command_router_access_request::Target;
        let sandbox_id = match request.into_inner().target {
            Some(Target::SandboxId(id)) => id,
            Some(Target::TaskId(task)) => self
                .lock()
                .tasks
                .get(&task)
                .cloned()
                .ok_or_else(|| Status::not_found(format!("task {task} not found")))?,
            None => return Err(Status::invalid_argument("no sandbox_id or task_id")),
        };
        let access = self.router_access(&sandbox_id)?;
        Ok(Response::new(api::SandboxGetCommandRouterAccessResponse {
            jwt: access.jwt,
            url: access.url,
            worker_ipv4_address: "127.0.0.1".to_owned(),
        }))
    }

    async fn task_get_command_router_access(
        &self,
        request: Request<api::TaskGetCommandRouterAccessRequest>,
    ) -> Result<Response<api::TaskGetCommandRouterAccessResponse>, Status> {
        self.check(request.metadata(), "TaskGetCommandRouterAccess", false)?;
        let task = request.into_inner().task_id;
        let sandbox_id = self
            .lock()
            .tasks
            .get(&task)
            .cloned()
            .ok_or_else(|| Status::not_found(format!("task {task} not found")))?;
        let access = self.router_access(&sandbox_id)?;
        Ok(Response::new(api::TaskGetCommandRouterAccessResponse {
            jwt: access.jwt,
            url: access.url,
        }))
    }

    async fn sandbox_wait(
        &self,
        request: Request<api::SandboxWaitRequest>,
    ) -> Result<Response<api::SandboxWaitResponse>, Status> {
        self.check(request.metadata(), "SandboxWait", false)?;
        let request = request.into_inner();
        let result = self.wait(&request.sandbox_id, request.timeout).await?;
        Ok(Response::new(api::SandboxWaitResponse {
            result,
            metadata: None,
        }))
    }

    async fn sandbox_wait_v2(
        &self,
        request: Request<api::SandboxWaitRequest>,
    ) -> Result<Response<api::SandboxWaitResponse>, Status> {
        self.check(request.metadata(), "SandboxWaitV2", true)?;
        let request = request.into_inner();
        let result = self.wait(&request.sandbox_id, request.timeout).await?;
        Ok(Response::new(api::SandboxWaitResponse {
            result,
            metadata: None,
        }))
    }

    async fn sandbox_terminate(
        &self,
        request: Request<api::SandboxTerminateRequest>,
    ) -> Result<Response<api::SandboxTerminateResponse>, Status> {
        self.check(request.metadata(), "SandboxTerminate", false)?;
        Ok(Response::new(
            self.terminate(&request.into_inner().sandbox_id)?,
        ))
    }

    async fn sandbox_terminate_v2(
        &self,
        request: Request<api::SandboxTerminateRequest>,
    ) -> Result<Response<api::SandboxTerminateResponse>, Status> {
        self.check(request.metadata(), "SandboxTerminateV2", true)?;
        Ok(Response::new(
            self.terminate(&request.into_inner().sandbox_id)?,
        ))
    }

    async fn sandbox_list(
        &self,
        request: Request<api::SandboxListRequest>,
    ) -> Result<Response<api::SandboxListResponse>, Status> {
        self.check(request.metadata(), "SandboxList", false)?;
        Ok(Response::new(self.list(request.get_ref())))
    }

    async fn sandbox_list_v2(
        &self,
        request: Request<api::SandboxListRequest>,
    ) -> Result<Response<api::SandboxListResponse>, Status> {
        self.check(request.metadata(), "SandboxListV2", true)?;
        let listed = self.list(request.get_ref());
        log(format!(
            "SandboxListV2 tags {:?}: {} sandboxes",
            request
                .get_ref()
                .tags
                .iter()
                .map(|t| format!("{}={}", t.tag_name, t.tag_value))
                .collect::<Vec<_>>(),
            listed.sandboxes.len()
        ));
        Ok(Response::new(listed))
    }

    async fn sandbox_tags_set(
        &self,
        request: Request<api::SandboxTagsSetRequest>,
    ) -> Result<Response<()>, Status> {
        self.check(request.metadata(), "SandboxTagsSet", false)?;
        let request = request.into_inner();
        self.set_tags(&request.sandbox_id, &request.tags)?;
        Ok(Response::new(()))
    }

    async fn sandbox_tags_set_v2(
        &self,
        request: Request<api::SandboxTagsSetRequest>,
    ) -> Result<Response<()>, Status> {
        self.check(request.metadata(), "SandboxTagsSetV2", true)?;
        let request = request.into_inner();
        self.set_tags(&request.sandbox_id, &request.tags)?;
        Ok(Response::new(()))
    }

    async fn sandbox_tags_get(
        &self,
        request: Request<api::SandboxTagsGetRequest>,
    ) -> Result<Response<api::SandboxTagsGetResponse>, Status> {
        self.check(request.metadata(), "SandboxTagsGet", false)?;
        Ok(Response::new(self.tags(&request.into_inner().sandbox_id)?))
    }

    async fn sandbox_tags_get_v2(
        &self,
        request: Request<api::SandboxTagsGetRequest>,
    ) -> Result<Response<api::SandboxTagsGetResponse>, Status> {
        self.check(request.metadata(), "SandboxTagsGetV2", true)?;
        Ok(Response::new(self.tags(&request.into_inner().sandbox_id)?))
    }

    async fn sandbox_snapshot_fs(
        &self,
        request: Request<api::SandboxSnapshotFsRequest>,
    ) -> Result<Response<api::SandboxSnapshotFsResponse>, Status> {
        self.check(request.metadata(), "SandboxSnapshotFs", false)?;
        Err(Status::unimplemented(
            "filesystem snapshots are not emulated by fake-modal",
        ))
    }
}

// ---------------------------------------------------------------- router

#[tonic::async_trait]
impl TaskCommandRouter for Fake {
    async fn task_exec_start(
        &self,
        request: Request<tcr::TaskExecStartRequest>,
    ) -> Result<Response<tcr::TaskExecStartResponse>, Status> {
        let sandbox_id = self.check_router(request.metadata(), &request.get_ref().task_id)?;
        let request = request.into_inner();
        let (env, home, workdir) = {
            let inner = self.lock();
            let sandbox = inner
                .boxes
                .get(&sandbox_id)
                .ok_or_else(|| Status::not_found("task not found"))?;
            if sandbox.result.is_some() {
                return Err(Status::not_found(format!(
                    "task {} has finished",
                    request.task_id
                )));
            }
            // Idempotent on exec_id: a retried start changes nothing.
            if sandbox.execs.contains_key(&request.exec_id) {
                return Ok(Response::new(tcr::TaskExecStartResponse {}));
            }
            (
                sandbox.env.clone(),
                sandbox.home.clone(),
                sandbox.workdir.clone(),
            )
        };
        let Some((program, args)) = request.command_args.split_first() else {
            return Err(Status::invalid_argument("empty command_args"));
        };
        let mut env = env;
        env.extend(secret_env(&request.secret_sources));
        let mut extra: Vec<_> = request.env.iter().collect();
        extra.sort();
        env.extend(extra.into_iter().map(|(k, v)| (k.clone(), v.clone())));
        let cwd = request
            .workdir
            .clone()
            .or(workdir)
            .map(PathBuf::from)
            .unwrap_or(home);
        let piped = |config: i32| config == tcr::TaskExecStdoutConfig::Pipe as i32;
        let stdout_piped = piped(request.stdout_config);
        let stderr_mode = request.stderr_config;
        let (out_read, out_write) =
            nix::unistd::pipe().map_err(|e| Status::internal(e.to_string()))?;
        let (err_read, err_write) =
            nix::unistd::pipe().map_err(|e| Status::internal(e.to_string()))?;
        let mut command = std::process::Command::new(program);
        command
            .args(args)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k, v)))
            .current_dir(&cwd)
            .stdin(Stdio::piped());
        command.stdout(if stdout_piped {
            Stdio::from(
                out_write
                    .try_clone()
                    .map_err(|e| Status::internal(e.to_string()))?,
            )
        } else {
            Stdio::null()
        });
        command.stderr(if stderr_mode == tcr::TaskExecStderrConfig::Pipe as i32 {
            Stdio::from(err_write)
        } else if stderr_mode == tcr::TaskExecStderrConfig::Stdout as i32 && stdout_piped {
            Stdio::from(
                out_write
                    .try_clone()
                    .map_err(|e| Status::internal(e.to_string()))?,
            )
        } else {
            Stdio::null()
        });
        drop(out_write);
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(err) => {
                // Modal reports a command that cannot start as exit code 127-ish
                // output; the real text is unknown, so say what happened.
                return Err(Status::failed_precondition(format!(
                    "cannot start {program:?}: {err}"
                )));
            }
        };
        drop(command);
        let exec = Arc::new(Mutex::new(Exec {
            closed: [
                !stdout_piped,
                stderr_mode != tcr::TaskExecStderrConfig::Pipe as i32,
            ],
            pgid: child.id(),
            ..Default::default()
        }));
        // stdin: a thread of its own, so a child that does not read never
        // blocks an RPC.
        if let Some(mut stdin) = child.stdin.take() {
            let (tx, rx) = std::sync::mpsc::channel::<Option<Vec<u8>>>();
            if let Ok(mut e) = exec.lock() {
                e.stdin = Some(tx);
            }
            std::thread::spawn(move || {
                while let Ok(Some(chunk)) = rx.recv() {
                    if stdin.write_all(&chunk).is_err() {
                        break;
                    }
                }
            });
        }
        for (fd, reader) in [(0usize, out_read), (1usize, err_read)] {
            let exec = exec.clone();
            let fake = self.clone();
            std::thread::spawn(move || {
                let mut file = std::fs::File::from(reader);
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match file.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if let Ok(mut e) = exec.lock() {
                                e.out[fd].extend_from_slice(&buf[..n]);
                            }
                            fake.bump();
                        }
                    }
                }
                if let Ok(mut e) = exec.lock() {
                    e.closed[fd] = true;
                }
                fake.bump();
            });
        }
        {
            let exec = exec.clone();
            let fake = self.clone();
            std::thread::spawn(move || {
                let status = child.wait();
                if let Ok(mut e) = exec.lock() {
                    e.ended_at = Some(Instant::now());
                    e.exit = Some(match status {
                        Ok(s) => {
                            match (s.code(), std::os::unix::process::ExitStatusExt::signal(&s)) {
                                (Some(code), _) => Ok(code),
                                (None, Some(signal)) => Err(signal),
                                _ => Ok(-1),
                            }
                        }
                        Err(_) => Ok(-1),
                    });
                    // The process is gone: nothing reads its stdin any more.
                    e.stdin = None;
                }
                fake.bump();
            });
        }
        log(format!(
            "TaskExecStart {} in {sandbox_id}: {:?}",
            request.exec_id,
            request
                .command_args
                .iter()
                .map(|a| a.chars().take(60).collect::<String>())
                .collect::<Vec<_>>()
        ));
        if let Some(sandbox) = self.lock().boxes.get_mut(&sandbox_id) {
            sandbox.execs.insert(request.exec_id.clone(), exec);
        }
        Ok(Response::new(tcr::TaskExecStartResponse {}))
    }

    type TaskExecStdioReadStream = Stream<tcr::TaskExecStdioReadResponse>;

    async fn task_exec_stdio_read(
        &self,
        request: Request<tcr::TaskExecStdioReadRequest>,
    ) -> Result<Response<Self::TaskExecStdioReadStream>, Status> {
        let sandbox_id = self.check_router(request.metadata(), &request.get_ref().task_id)?;
        let request = request.into_inner();
        let exec = self.exec_of(&sandbox_id, &request.exec_id)?;
        let fd = if request.file_descriptor == tcr::TaskExecStdioFileDescriptor::Stderr as i32 {
            1
        } else {
            0
        };
        let (tx, rx) = mpsc::channel(4);
        let mut changes = self.changed.subscribe();
        let mut offset = request.offset as usize;
        tokio::spawn(async move {
            loop {
                let (chunk, done) = match exec.lock() {
                    Ok(e) => {
                        let data = &e.out[fd];
                        let start = offset.min(data.len());
                        let end = (start + CHUNK).min(data.len());
                        (
                            data[start..end].to_vec(),
                            e.closed[fd] && e.exit.is_some() && end == data.len(),
                        )
                    }
                    Err(_) => (Vec::new(), true),
                };
                if !chunk.is_empty() {
                    offset += chunk.len();
                    if tx
                        .send(Ok(tcr::TaskExecStdioReadResponse { data: chunk }))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    continue;
                }
                if done {
                    return;
                }
                Fake::next_change(&mut changes, Duration::from_millis(500)).await;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn task_exec_stdin_write(
        &self,
        request: Request<tcr::TaskExecStdinWriteRequest>,
    ) -> Result<Response<tcr::TaskExecStdinWriteResponse>, Status> {
        let sandbox_id = self.check_router(request.metadata(), &request.get_ref().task_id)?;
        let request = request.into_inner();
        let exec = self.exec_of(&sandbox_id, &request.exec_id)?;
        let mut e = exec.lock().map_err(|_| Status::internal("poisoned exec"))?;
        if e.stdin_eof {
            // A second end of file (a retry) is ignored, as by the router.
            return Ok(Response::new(tcr::TaskExecStdinWriteResponse {}));
        }
        if request.offset > e.stdin_received {
            return Err(Status::failed_precondition(format!(
                "stdin offset {} is past the {} bytes received",
                request.offset, e.stdin_received
            )));
        }
        // A retried write repeats bytes already taken: keep only the new ones.
        let skip = (e.stdin_received - request.offset) as usize;
        let fresh = request.data.get(skip..).unwrap_or(&[]).to_vec();
        e.stdin_received += fresh.len() as u64;
        if let Some(tx) = &e.stdin
            && !fresh.is_empty()
        {
            let _ = tx.send(Some(fresh));
        }
        if request.eof {
            e.stdin_eof = true;
            if let Some(tx) = e.stdin.take() {
                let _ = tx.send(None);
            }
        }
        Ok(Response::new(tcr::TaskExecStdinWriteResponse {}))
    }

    async fn task_exec_wait(
        &self,
        request: Request<tcr::TaskExecWaitRequest>,
    ) -> Result<Response<tcr::TaskExecWaitResponse>, Status> {
        let sandbox_id = self.check_router(request.metadata(), &request.get_ref().task_id)?;
        let exec = self.exec_of(&sandbox_id, &request.get_ref().exec_id)?;
        let mut changes = self.changed.subscribe();
        loop {
            let exit = exec.lock().ok().and_then(|e| e.exit);
            if let Some(exit) = exit {
                use tcr::task_exec_wait_response::ExitStatus;
                return Ok(Response::new(tcr::TaskExecWaitResponse {
                    exit_status: Some(match exit {
                        Ok(code) => ExitStatus::Code(code),
                        Err(signal) => ExitStatus::Signal(signal),
                    }),
                }));
            }
            Fake::next_change(&mut changes, Duration::from_millis(500)).await;
        }
    }

    async fn task_exec_poll(
        &self,
        request: Request<tcr::TaskExecPollRequest>,
    ) -> Result<Response<tcr::TaskExecPollResponse>, Status> {
        let sandbox_id = self.check_router(request.metadata(), &request.get_ref().task_id)?;
        let exec = self.exec_of(&sandbox_id, &request.get_ref().exec_id)?;
        let exit = exec.lock().ok().and_then(|e| e.exit);
        use tcr::task_exec_poll_response::ExitStatus;
        Ok(Response::new(tcr::TaskExecPollResponse {
            exit_status: exit.map(|exit| match exit {
                Ok(code) => ExitStatus::Code(code),
                Err(signal) => ExitStatus::Signal(signal),
            }),
        }))
    }

    async fn task_snapshot_filesystem(
        &self,
        request: Request<tcr::TaskSnapshotFilesystemRequest>,
    ) -> Result<Response<tcr::TaskSnapshotFilesystemResponse>, Status> {
        self.check_router(request.metadata(), &request.get_ref().task_id)?;
        Err(Status::unimplemented(
            "filesystem snapshots are not emulated by fake-modal",
        ))
    }
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

/// Every process whose environment names the sandbox (`MODAL_SANDBOX_ID`):
/// what an ended container takes with it, double-forked orphans included.
fn kill_sandbox_processes(id: &str) {
    let needle = format!("MODAL_SANDBOX_ID={id}");
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

struct Options {
    port: u16,
    dir: PathBuf,
}

fn parse_options() -> anyhow::Result<Options> {
    let mut port = 0u16;
    let mut dir = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--port" => {
                port = args
                    .next()
                    .context("--port needs a value")?
                    .parse()
                    .context("--port is a number")?
            }
            "--dir" => dir = Some(PathBuf::from(args.next().context("--dir needs a value")?)),
            "-h" | "--help" => {
                println!("fake-modal --port P [--dir D]   (tests/fake-modal/README.md)");
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other:?} (fake-modal --port P [--dir D])"),
        }
    }
    let dir = match dir {
        Some(dir) => dir,
        None => std::env::temp_dir().join(format!("fake-modal-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot make {}", dir.display()))?;
    Ok(Options { port, dir })
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let options = parse_options()?;
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], options.port))).await?;
    let port = listener.local_addr()?.port();
    let (changed, _) = watch::channel(0u64);
    let fake = Fake {
        inner: Arc::default(),
        changed: Arc::new(changed),
        dir: options.dir.clone(),
        // The router is this same server: a localhost control plane makes
        // a plain-http router URL legal for the SDK.
        url: format!("http://127.0.0.1:{port}"),
    };
    tokio::spawn(fake.clone().timeout_loop());
    println!("listening on 127.0.0.1:{port}");
    let _ = std::io::stdout().flush();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    tonic::transport::Server::builder()
        .add_service(
            ModalClientServer::new(fake.clone())
                .max_decoding_message_size(64 << 20)
                .max_encoding_message_size(64 << 20),
        )
        .add_service(
            TaskCommandRouterServer::new(fake)
                .max_decoding_message_size(64 << 20)
                .max_encoding_message_size(64 << 20),
        )
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}
