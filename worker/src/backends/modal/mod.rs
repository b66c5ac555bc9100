//! The Modal backend: one Modal sandbox (V2) per environment, created and
//! ended through Modal's control plane, its processes run through the
//! sandbox's task command router (see [`sandbox`]); the wire is Modal's own
//! gRPC API (`caduceus-modal-proto`, from the 1.6.4 SDK's descriptors).
//!
//! Ownership follows the other backends: the `caduceus.*` labels as Modal
//! tags at creation, the lease's renewal time in the tag
//! `caduceus.renewed-at` (tags can be replaced), and the sweeper's
//! `lease::judge` over `SandboxListV2` by tag. Self-expiry is Modal's own:
//! every sandbox's entrypoint is a lease watchdog ([`watchdog_args`]) that
//! ends it one lease after the last renewal, its `idle_timeout` is one
//! lease, and its `timeout` (its whole lifetime, at least the lease) bounds
//! the rest, so a sandbox is ended on Modal's side even when no worker is
//! left. Modal cannot extend a running sandbox's timeout: an environment
//! that outlives it is recreated with a reset notice, like any vanished one.

pub mod api;
pub mod sandbox;

#[cfg(test)]
#[path = "modal_tests.rs"]
mod tests;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use caduceus_modal_proto::client as pb;

pub use api::{Api, Credentials, ModalError, Router};
pub use sandbox::{ModalSandbox, RENEWED_TAG};

use super::lease::{self, LeaseLabels, LeaseRecord, SweepCandidate, Verdict, label};
use super::{CreateRequest, Provider, SweepContext};
use crate::backends::shell_fs::ShellFs;
use crate::sandbox::{Sandbox, SandboxError};

/// The control plane when `MODAL_SERVER_URL` is not set (the SDK's first).
pub const DEFAULT_SERVER_URL: &str = "https://api.modal.com";
/// The app our sandboxes belong to (created if missing).
pub const APP_NAME: &str = "caduceus";
/// The image when `terminal.modal_image` is not set.
pub const DEFAULT_IMAGE: &str = "debian:bookworm-slim";
/// The builder version when the environment names none (libmodal's).
const BUILDER_VERSION: &str = "2024.10";
/// Modal's longest sandbox timeout (24 h).
const MAX_TIMEOUT_SECS: u64 = 24 * 3600;

/// `terminal.modal_*` and the `MODAL_*` variables.
#[derive(Debug, Clone)]
pub struct ModalSettings {
    pub server_url: String,
    pub credentials: Credentials,
    /// `MODAL_ENVIRONMENT` (empty: the workspace's default).
    pub environment: String,
    /// Registry image sandboxes run (`terminal.modal_image`).
    pub image: String,
    /// Directory shells start in; the sandbox's `$HOME` when `None`.
    pub cwd: Option<String>,
    /// How long a sandbox outlives its worker's last renewal.
    pub lease: Duration,
    /// The sandbox's Modal `timeout`: its whole lifetime
    /// (`terminal.modal_timeout_seconds`); never below the lease.
    pub timeout: Duration,
    /// How long to wait for the sandbox's task.
    pub start_timeout: Duration,
}

/// A profile of `~/.modal.toml` (or `MODAL_CONFIG_PATH`): `MODAL_PROFILE`,
/// else the one marked `active = true`, else `default`.
fn profile(get: &dyn Fn(&str) -> Option<String>) -> Option<toml::Table> {
    let path = match get("MODAL_CONFIG_PATH") {
        Some(path) => std::path::PathBuf::from(path),
        None => std::path::PathBuf::from(get("HOME")?).join(".modal.toml"),
    };
    let text = std::fs::read_to_string(&path).ok()?;
    let doc: toml::Table = match text.parse() {
        Ok(doc) => doc,
        Err(err) => {
            tracing::warn!(
                "{} is not TOML ({err}); Modal profiles ignored",
                path.display()
            );
            return None;
        }
    };
    let tables = || doc.iter().filter_map(|(k, v)| v.as_table().map(|t| (k, t)));
    let chosen = match get("MODAL_PROFILE") {
        Some(name) => tables().find(|(k, _)| **k == name),
        None => tables()
            .find(|(_, t)| t.get("active").and_then(toml::Value::as_bool) == Some(true))
            .or_else(|| tables().find(|(k, _)| k.as_str() == "default")),
    };
    chosen.map(|(_, t)| t.clone())
}

impl ModalSettings {
    /// Settings from `get` (the worker's withheld environment): `MODAL_*`
    /// variables first, then the active profile of `~/.modal.toml`, as the
    /// SDK reads them. `None`: no token, not configured.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let value = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let profile = profile(&value).unwrap_or_default();
        let from_profile = |key: &str| {
            profile
                .get(key)
                .and_then(toml::Value::as_str)
                .filter(|v| !v.trim().is_empty())
                .map(str::to_owned)
        };
        let setting = |env: &str, key: &str| value(env).or_else(|| from_profile(key));
        let credentials = Credentials {
            token_id: setting("MODAL_TOKEN_ID", "token_id")?,
            token_secret: setting("MODAL_TOKEN_SECRET", "token_secret")?,
        };
        // A secret from the environment is masked with the rest of the
        // withheld environment; one read from a profile file is not among
        // those, and a `cat ~/.modal.toml` in a local sandbox of the same
        // worker would show it in the clear.
        caduceus_common::redact::known::register_secret(&credentials.token_secret);
        Some(ModalSettings {
            server_url: setting("MODAL_SERVER_URL", "server_url")
                .unwrap_or_else(|| DEFAULT_SERVER_URL.to_owned()),
            credentials,
            environment: setting("MODAL_ENVIRONMENT", "environment").unwrap_or_default(),
            image: DEFAULT_IMAGE.to_owned(),
            cwd: None,
            lease: Duration::from_secs(600),
            timeout: Duration::from_secs(3600),
            start_timeout: Duration::from_secs(300),
        })
    }

    /// The sandbox `timeout_secs`: the lifetime, at least the lease, at most
    /// Modal's 24 hours.
    pub fn timeout_secs(&self) -> u32 {
        let secs = self
            .timeout
            .as_secs()
            .max(self.lease.as_secs())
            .clamp(1, MAX_TIMEOUT_SECS);
        u32::try_from(secs).unwrap_or(u32::MAX)
    }

    /// The sandbox `idle_timeout_secs`: one lease (renewals run an exec a
    /// third of a lease apart), never past the timeout.
    pub fn idle_timeout_secs(&self) -> u32 {
        let secs = self.lease.as_secs().max(1);
        u32::try_from(secs)
            .unwrap_or(u32::MAX)
            .min(self.timeout_secs())
    }
}

/// The sandbox's entrypoint: a lease watchdog. Modal ends a sandbox when
/// its entrypoint exits, so this one exits once `lease_file` has not been
/// touched for a lease (the worker touches it at every renewal): a sandbox
/// whose worker died ends one lease after the last renewal, on Modal's side,
/// without waiting for the sandbox `timeout`. Modal's own `idle_timeout`
/// cannot do this alone: a running exec counts as activity, and the live
/// shell is one. A file it cannot read (removed from inside) never ends it;
/// the `timeout` still does.
pub fn watchdog_args(lease_file: &str, lease: Duration) -> Vec<String> {
    let lease = lease.as_secs().max(1);
    let step = (lease / 6).clamp(1, 10);
    vec![
        "sh".to_owned(),
        "-c".to_owned(),
        concat!(
            "touch \"$1\"; while sleep \"$3\"; do ",
            "m=$(stat -c %Y \"$1\" 2>/dev/null) || continue; ",
            "[ $(( $(date +%s) - m )) -le \"$2\" ] && continue; ",
            "echo \"caduceus: lease not renewed for $2s, ending the sandbox\" >&2; exit 0; done"
        )
        .to_owned(),
        "caduceus-lease".to_owned(),
        lease_file.to_owned(),
        lease.to_string(),
        step.to_string(),
    ]
}

/// The `SandboxCreateV2` definition: the lease watchdog as entrypoint, the
/// timeout, an idle timeout of one lease (a sandbox nobody runs anything in
/// for that long is abandoned: renewals are execs), open network (what the
/// SDK sends by default).
pub fn definition(settings: &ModalSettings, image_id: &str, lease_file: &str) -> pb::Sandbox {
    pb::Sandbox {
        entrypoint_args: watchdog_args(lease_file, settings.lease),
        image_id: image_id.to_owned(),
        timeout_secs: settings.timeout_secs(),
        idle_timeout_secs: Some(settings.idle_timeout_secs()),
        workdir: settings.cwd.clone(),
        network_access: Some(pb::NetworkAccess {
            network_access_type: pb::network_access::NetworkAccessType::Open as i32,
            ..Default::default()
        }),
        open_ports_oneof: Some(pb::sandbox::OpenPortsOneof::OpenPorts(
            pb::PortSpecs::default(),
        )),
        ..Default::default()
    }
}

pub struct ModalProvider {
    settings: ModalSettings,
    api: Result<Api, String>,
    /// Our app's id, once looked up.
    app_id: tokio::sync::OnceCell<String>,
    /// The image's id, once built.
    image_id: tokio::sync::OnceCell<String>,
    /// The last reachability probe: when, and its answer.
    probe: std::sync::Mutex<Option<(Instant, bool)>>,
}

impl ModalProvider {
    pub fn new(settings: ModalSettings) -> Self {
        let api =
            Api::new(&settings.server_url, settings.credentials.clone()).map_err(|e| e.to_string());
        ModalProvider {
            settings,
            api,
            app_id: tokio::sync::OnceCell::new(),
            image_id: tokio::sync::OnceCell::new(),
            probe: std::sync::Mutex::new(None),
        }
    }

    fn api(&self) -> Result<&Api, SandboxError> {
        self.api
            .as_ref()
            .map_err(|e| SandboxError::Other(e.clone()))
    }

    async fn app_id(&self, api: &Api) -> Result<String, ModalError> {
        self.app_id
            .get_or_try_init(|| async {
                api.call(
                    "AppGetOrCreate",
                    pb::AppGetOrCreateRequest {
                        app_name: APP_NAME.to_owned(),
                        environment_name: self.settings.environment.clone(),
                        object_creation_type: pb::ObjectCreationType::CreateIfMissing as i32,
                    },
                    false,
                    Duration::from_secs(30),
                    |mut c, r| async move { c.app_get_or_create(r).await },
                )
                .await
                .map(|a| a.app_id)
            })
            .await
            .cloned()
    }

    /// `ImageGetOrCreate` of `FROM <image>`, joined until built when Modal
    /// has to build it.
    async fn image_id(&self, api: &Api, app_id: &str) -> Result<String, ModalError> {
        self.image_id
            .get_or_try_init(|| async {
                let created = api
                    .call(
                        "ImageGetOrCreate",
                        pb::ImageGetOrCreateRequest {
                            app_id: app_id.to_owned(),
                            image: Some(pb::Image {
                                dockerfile_commands: vec![format!("FROM {}", self.settings.image)],
                                ..Default::default()
                            }),
                            builder_version: BUILDER_VERSION.to_owned(),
                            namespace: pb::DeploymentNamespace::Workspace as i32,
                            ..Default::default()
                        },
                        false,
                        Duration::from_secs(60),
                        |mut c, r| async move { c.image_get_or_create(r).await },
                    )
                    .await?;
                let mut result = sandbox::finished(created.result.as_ref()).cloned();
                let mut last_entry = String::new();
                let deadline = Instant::now() + self.settings.start_timeout;
                while result.is_none() {
                    if Instant::now() >= deadline {
                        return Err(ModalError::Protocol(format!(
                            "image {} was not built within {}s",
                            self.settings.image,
                            self.settings.start_timeout.as_secs()
                        )));
                    }
                    let (found, last) =
                        self.join_image(api, &created.image_id, &last_entry).await?;
                    result = found;
                    last_entry = last;
                }
                match result {
                    Some(r) if r.status == pb::generic_result::GenericStatus::Success as i32 => {
                        Ok(created.image_id)
                    }
                    Some(r) => Err(ModalError::Protocol(format!(
                        "building image {} failed (status {}): {}",
                        self.settings.image, r.status, r.exception
                    ))),
                    None => Err(ModalError::Protocol("no image result".to_owned())),
                }
            })
            .await
            .cloned()
    }

    /// One `ImageJoinStreaming` stream: the result when it came, and the
    /// last entry id (to resume from).
    async fn join_image(
        &self,
        api: &Api,
        image_id: &str,
        last_entry: &str,
    ) -> Result<(Option<pb::GenericResult>, String), ModalError> {
        use tokio_stream::StreamExt;
        let mut stream = api
            .call(
                "ImageJoinStreaming",
                pb::ImageJoinStreamingRequest {
                    image_id: image_id.to_owned(),
                    timeout: 55.0,
                    last_entry_id: last_entry.to_owned(),
                    ..Default::default()
                },
                false,
                Duration::from_secs(65),
                |mut c, r| async move { c.image_join_streaming(r).await },
            )
            .await?;
        let mut last = last_entry.to_owned();
        let mut result = None;
        while let Some(item) = stream.next().await {
            let item = item.map_err(|s| ModalError::Status {
                code: s.code(),
                message: s.message().to_owned(),
            })?;
            if !item.entry_id.is_empty() {
                last = item.entry_id.clone();
            }
            if let Some(found) = sandbox::finished(item.result.as_ref()) {
                result = Some(found.clone());
            }
            if item.eof {
                break;
            }
        }
        Ok((result, last))
    }

    async fn start(
        &self,
        api: &Api,
        tags: Vec<(String, String)>,
    ) -> Result<Arc<ModalSandbox>, SandboxError> {
        let fail =
            |e: ModalError| SandboxError::Other(format!("creating a Modal sandbox failed: {e}"));
        let app_id = self.app_id(api).await.map_err(fail)?;
        let image_id = self.image_id(api, &app_id).await.map_err(fail)?;
        let lease_file = format!("/tmp/.caduceus-lease-{}", uuid::Uuid::new_v4().simple());
        let created = api
            .call(
                "SandboxCreateV2",
                pb::SandboxCreateV2Request {
                    app_id,
                    definition: Some(definition(&self.settings, &image_id, &lease_file)),
                    tags: sandbox::tags_of(&tags),
                    ..Default::default()
                },
                true,
                Duration::from_secs(60),
                |mut c, r| async move { c.sandbox_create_v2(r).await },
            )
            .await
            .map_err(fail)?;
        let id = created.sandbox_id.clone();
        let ready = async {
            let task_id = self.wait_for_task(api, &id, &created.task_id).await?;
            let access = match created.command_router_access.clone() {
                Some(access) if !access.url.is_empty() => access,
                _ => {
                    let access = api
                        .call(
                            "SandboxGetCommandRouterAccess",
                            pb::SandboxGetCommandRouterAccessRequest {
                                target: Some(
                                    pb::sandbox_get_command_router_access_request::Target::SandboxId(
                                        id.clone(),
                                    ),
                                ),
                            },
                            true,
                            Duration::from_secs(30),
                            |mut c, r| async move { c.sandbox_get_command_router_access(r).await },
                        )
                        .await
                        .map_err(|e| SandboxError::Other(e.to_string()))?;
                    pb::CommandRouterAccess {
                        jwt: access.jwt,
                        url: access.url,
                    }
                }
            };
            let router = Router::new(api, &id, &access).map_err(|e| SandboxError::Other(e.to_string()))?;
            let sandbox = Arc::new_cyclic(|weak: &std::sync::Weak<ModalSandbox>| {
                let weak: std::sync::Weak<dyn Sandbox> = weak.clone();
                ModalSandbox {
                    api: api.clone(),
                    router,
                    id: id.clone(),
                    task_id,
                    home: std::sync::Mutex::new("/root".to_owned()),
                    cwd: std::sync::Mutex::new(None),
                    tags: std::sync::Mutex::new(tags),
                    lease_file,
                    vanished: Arc::new(AtomicBool::new(false)),
                    watcher: std::sync::Mutex::new(None),
                    files: Arc::new(ShellFs::new(weak)),
                }
            });
            let (code, home) = sandbox.run(sandbox::home_probe()).await?;
            let home = String::from_utf8_lossy(&home).into_owned();
            let home = if code == 0 && home.starts_with('/') {
                home
            } else {
                "/root".to_owned()
            };
            sandbox.set_home(home, self.settings.cwd.clone());
            sandbox.start_watcher();
            Ok::<_, SandboxError>(sandbox)
        }
        .await;
        if ready.is_err() {
            // Never leave a sandbox that will not serve.
            let _ = api
                .call(
                    "SandboxTerminateV2",
                    pb::SandboxTerminateRequest { sandbox_id: id },
                    true,
                    Duration::from_secs(60),
                    |mut c, r| async move { c.sandbox_terminate_v2(r).await },
                )
                .await;
        }
        ready
    }

    /// The sandbox's task id: from the create answer, else polled every
    /// 0.5 s until scheduled (a result without a task: it already ended).
    async fn wait_for_task(
        &self,
        api: &Api,
        id: &str,
        known: &str,
    ) -> Result<String, SandboxError> {
        if !known.is_empty() {
            return Ok(known.to_owned());
        }
        let deadline = Instant::now() + self.settings.start_timeout;
        loop {
            let answer = api
                .call(
                    "SandboxGetTaskIdV2",
                    pb::SandboxGetTaskIdRequest {
                        sandbox_id: id.to_owned(),
                        timeout: Some(10.0),
                        wait_until_ready: false,
                    },
                    true,
                    Duration::from_secs(15),
                    |mut c, r| async move { c.sandbox_get_task_id_v2(r).await },
                )
                .await
                .map_err(|e| SandboxError::Other(e.to_string()))?;
            match (answer.task_id, answer.task_result) {
                (Some(task), _) if !task.is_empty() => return Ok(task),
                (_, Some(result)) => {
                    return Err(SandboxError::Other(format!(
                        "Modal sandbox {id} ended before it ran (returncode {}: {})",
                        sandbox::returncode(&result),
                        result.exception
                    )));
                }
                _ => {}
            }
            if Instant::now() >= deadline {
                return Err(SandboxError::Other(format!(
                    "Modal sandbox {id} was not scheduled within {}s",
                    self.settings.start_timeout.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Every sandbox of our app carrying `caduceus.managed=1`, every page.
    async fn list_managed(&self, api: &Api) -> Result<Vec<pb::SandboxInfo>, ModalError> {
        let app_id = self.app_id(api).await?;
        let mut all = Vec::new();
        let mut before = 0.0;
        loop {
            let page = api
                .call(
                    "SandboxListV2",
                    pb::SandboxListRequest {
                        app_id: app_id.clone(),
                        before_timestamp: before,
                        environment_name: self.settings.environment.clone(),
                        include_finished: false,
                        tags: sandbox::tags_of(&[(label::MANAGED.to_owned(), "1".to_owned())]),
                    },
                    true,
                    Duration::from_secs(30),
                    |mut c, r| async move { c.sandbox_list_v2(r).await },
                )
                .await?;
            let Some(last) = page.sandboxes.last() else {
                return Ok(all);
            };
            if before != 0.0 && last.created_at >= before {
                // A server that ignores the cursor: stop rather than loop.
                return Ok(all);
            }
            before = last.created_at;
            all.extend(page.sandboxes);
        }
    }
}

#[async_trait]
impl Provider for ModalProvider {
    fn name(&self) -> &'static str {
        "modal"
    }

    /// Configured and answering an authenticated `ClientHello` (cached 10 s).
    async fn available(&self) -> bool {
        if let Ok(probe) = self.probe.lock()
            && let Some((at, ok)) = *probe
            && at.elapsed() < Duration::from_secs(10)
        {
            return ok;
        }
        let Ok(api) = self.api() else {
            return false;
        };
        let ok = match api
            .call(
                "ClientHello",
                (),
                false,
                Duration::from_secs(5),
                |mut c, r| async move { c.client_hello(r).await },
            )
            .await
        {
            Ok(hello) => {
                if !hello.warning.is_empty() {
                    tracing::warn!("Modal says: {}", hello.warning);
                }
                true
            }
            Err(err) => {
                tracing::warn!("the modal backend is not available: {err}");
                false
            }
        };
        if let Ok(mut probe) = self.probe.lock() {
            *probe = Some((Instant::now(), ok));
        }
        ok
    }

    async fn create(&self, request: &CreateRequest) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let api = self.api()?;
        let now = lease::epoch_secs(SystemTime::now());
        let labels = LeaseLabels {
            owner: request.owner.clone(),
            worker: request.worker.clone(),
            worker_instance: request.worker_instance.clone(),
            task: request.task_id.clone(),
            created: now,
            lease_seconds: self.settings.lease.as_secs(),
            pool: None,
        };
        let mut tags: Vec<(String, String)> = labels.to_map().into_iter().collect();
        tags.sort();
        tags.push((RENEWED_TAG.to_owned(), now.to_string()));
        let sandbox = self.start(api, tags).await?;
        tracing::debug!(sandbox = %sandbox.id(), task = %request.task_id, "Modal sandbox running");
        Ok(sandbox)
    }

    /// Every managed sandbox of our app whose lease passed (any worker's),
    /// never one this worker holds.
    async fn sweep(&self, context: &SweepContext) -> Vec<String> {
        let Ok(api) = self.api() else {
            return Vec::new();
        };
        let listed = match self.list_managed(api).await {
            Ok(listed) => listed,
            Err(err) => {
                tracing::warn!("sweeping Modal sandboxes: {err}");
                return Vec::new();
            }
        };
        let now = SystemTime::now();
        let mut removed = Vec::new();
        for info in listed {
            let Some(candidate) = candidate_of(&info) else {
                continue;
            };
            if let Verdict::Remove(why) = lease::judge(&candidate, context, now) {
                match api
                    .call(
                        "SandboxTerminateV2",
                        pb::SandboxTerminateRequest {
                            sandbox_id: candidate.id.clone(),
                        },
                        true,
                        Duration::from_secs(60),
                        |mut c, r| async move { c.sandbox_terminate_v2(r).await },
                    )
                    .await
                {
                    Ok(_) => {
                        tracing::info!(sandbox = %candidate.id, "terminated Modal sandbox: {why}");
                        removed.push(candidate.id);
                    }
                    Err(err) if err.is_not_found() => {}
                    Err(err) => {
                        tracing::warn!(sandbox = %candidate.id, "terminating Modal sandbox: {err}")
                    }
                }
            }
        }
        removed
    }
}

/// A listed sandbox as the sweeper sees it (its tags carry the lease).
pub fn candidate_of(info: &pb::SandboxInfo) -> Option<SweepCandidate> {
    let map: std::collections::HashMap<String, String> = info
        .tags
        .iter()
        .map(|t| (t.tag_name.clone(), t.tag_value.clone()))
        .collect();
    let labels = LeaseLabels::from_map(&map)?;
    let record = map
        .get(RENEWED_TAG)
        .and_then(|v| v.parse().ok())
        .map(|renewed_at| LeaseRecord {
            owner: labels.owner.clone(),
            worker: labels.worker.clone(),
            worker_instance: labels.worker_instance.clone(),
            task: labels.task.clone(),
            renewed_at,
            ttl_secs: labels.lease_seconds,
        });
    Some(SweepCandidate {
        id: info.id.clone(),
        labels,
        record,
    })
}
