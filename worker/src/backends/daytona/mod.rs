//! The Daytona backend: one Daytona sandbox per environment, created and
//! removed through Daytona's REST API, its processes run through the
//! toolbox API (see [`sandbox`]). Ownership follows the other backends:
//! the `caduceus.*` labels at creation, the lease's renewal time in the
//! label `caduceus.renewed-at` (Daytona labels can be replaced), and the
//! sweeper's `lease::judge`. Self-expiry is Daytona's own: every sandbox is
//! created with `autoStopInterval`, `autoArchiveInterval` and
//! `autoDeleteInterval` of the lease rounded up to whole minutes (never 0,
//! which would mean "never stop"), so a sandbox nobody talks to stops and is
//! deleted on Daytona's side even when no worker is left.

pub mod api;
pub mod files;
pub mod sandbox;
pub mod toolbox;

#[cfg(test)]
#[path = "daytona_tests.rs"]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use reqwest::Method;
use serde_json::{Map, Value, json};

pub use api::{Api, Credentials, DaytonaError};
pub use sandbox::{DaytonaSandbox, RENEWED_LABEL};

use super::lease::{self, LeaseLabels, LeaseRecord, SweepCandidate, Verdict, label};
use super::{CreateRequest, Provider, SweepContext};
use crate::backends::shell_fs::ShellFs;
use crate::sandbox::{Sandbox, SandboxError};
use toolbox::{Kind, Toolbox};

/// The API when `DAYTONA_API_URL` is not set (the SDK's default).
pub const DEFAULT_API_URL: &str = "https://app.daytona.io/api";

/// `terminal.daytona_*` and the `DAYTONA_*` variables.
#[derive(Debug, Clone)]
pub struct DaytonaSettings {
    pub api_url: String,
    pub credentials: Credentials,
    /// Region (`DAYTONA_TARGET`); the organization's default when `None`.
    pub target: Option<String>,
    /// Snapshot to create from (`terminal.daytona_snapshot`).
    pub snapshot: Option<String>,
    /// Image to create from when no snapshot is set (`terminal.daytona_image`);
    /// neither: the organization's default snapshot.
    pub image: Option<String>,
    /// Directory shells start in; the sandbox user's home when `None`.
    pub cwd: Option<String>,
    /// How long a sandbox outlives its worker's last renewal.
    pub lease: Duration,
    /// How long to wait for `started`.
    pub start_timeout: Duration,
    /// Persistent environments (`container_persistent`): an environment's
    /// end stops its sandbox instead of deleting it, and the task's next
    /// environment starts it again, files and all.
    pub persistent: bool,
    /// How long a stopped persistent sandbox is kept (Daytona's
    /// `autoDeleteInterval`; the sweeper's backstop).
    pub keep: Duration,
}

impl DaytonaSettings {
    /// Credentials from `get` (the worker's withheld environment): an API
    /// key, else a JWT with its organization. `None`: not configured.
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Option<Self> {
        let value = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let credentials = match (
            value("DAYTONA_API_KEY"),
            value("DAYTONA_JWT_TOKEN"),
            value("DAYTONA_ORGANIZATION_ID"),
        ) {
            (Some(key), _, _) => Credentials::ApiKey(key),
            (None, Some(token), Some(organization)) => Credentials::Jwt {
                token,
                organization,
            },
            _ => return None,
        };
        Some(DaytonaSettings {
            api_url: value("DAYTONA_API_URL").unwrap_or_else(|| DEFAULT_API_URL.to_owned()),
            credentials,
            target: value("DAYTONA_TARGET"),
            snapshot: None,
            image: None,
            cwd: None,
            lease: Duration::from_secs(600),
            start_timeout: Duration::from_secs(120),
            persistent: false,
            keep: Duration::from_secs(7 * 24 * 3600),
        })
    }
}

/// Daytona's lifecycle intervals are minutes; ours is the lease, rounded up.
pub fn lease_minutes(lease: Duration) -> u64 {
    lease.as_secs().div_ceil(60).max(1)
}

/// Label of a persistent sandbox ("1"): stopped, not deleted, at its end.
pub const PERSISTENT_LABEL: &str = "caduceus.persistent";
/// Label of the time (seconds since the epoch) a persistent sandbox was stopped.
pub const STOPPED_LABEL: &str = "caduceus.stopped-at";

/// The `POST /sandbox` body. A persistent sandbox is deleted by Daytona
/// only `keep` after it stopped; any other a lease after.
pub fn create_body(settings: &DaytonaSettings, labels: &Map<String, Value>) -> Value {
    let minutes = lease_minutes(settings.lease);
    let persistent = labels.contains_key(PERSISTENT_LABEL);
    let mut body = json!({
        "labels": labels,
        "autoStopInterval": minutes,
        "autoArchiveInterval": minutes,
        "autoDeleteInterval": if persistent { lease_minutes(settings.keep) } else { minutes },
    });
    if let Some(target) = &settings.target {
        body["target"] = json!(target);
    }
    if let Some(snapshot) = &settings.snapshot {
        body["snapshot"] = json!(snapshot);
    } else if let Some(image) = &settings.image {
        // Exactly what the SDK sends for a plain image name.
        body["buildInfo"] = json!({"dockerfileContent": format!("FROM {image}\n")});
    }
    body
}

pub struct DaytonaProvider {
    settings: DaytonaSettings,
    api: Result<Api, String>,
    /// The last reachability probe: when, and its answer.
    probe: std::sync::Mutex<Option<(Instant, bool)>>,
}

impl DaytonaProvider {
    pub fn new(settings: DaytonaSettings) -> Self {
        let api =
            Api::new(&settings.api_url, settings.credentials.clone()).map_err(|e| e.to_string());
        DaytonaProvider {
            settings,
            api,
            probe: std::sync::Mutex::new(None),
        }
    }

    fn api(&self) -> Result<&Api, SandboxError> {
        self.api
            .as_ref()
            .map_err(|e| SandboxError::Other(e.clone()))
    }

    async fn wait_started(&self, api: &Api, id: &str) -> Result<Value, SandboxError> {
        let deadline = Instant::now() + self.settings.start_timeout;
        let mut pause = Duration::from_millis(100);
        loop {
            let doc = api
                .json(
                    Method::GET,
                    &format!("/sandbox/{id}"),
                    None,
                    Duration::from_secs(30),
                )
                .await
                .map_err(|e| SandboxError::Other(e.to_string()))?;
            match doc.get("state").and_then(Value::as_str) {
                Some("started") => return Ok(doc),
                Some(state @ ("error" | "build_failed" | "destroyed")) => {
                    let reason = doc
                        .get("errorReason")
                        .and_then(Value::as_str)
                        .unwrap_or("no reason given");
                    return Err(SandboxError::Other(format!(
                        "Daytona sandbox {id} is {state} ({reason})"
                    )));
                }
                _ => {}
            }
            if Instant::now() >= deadline {
                return Err(SandboxError::Other(format!(
                    "Daytona sandbox {id} did not start within {}s",
                    self.settings.start_timeout.as_secs()
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause.mul_f32(1.5)).min(Duration::from_secs(1));
        }
    }

    async fn build(
        &self,
        api: &Api,
        doc: &Value,
        labels: Map<String, Value>,
    ) -> Result<Arc<DaytonaSandbox>, SandboxError> {
        let id = doc
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                SandboxError::Other("Daytona: a created sandbox without an id".to_owned())
            })?
            .to_owned();
        let proxy = match doc.get("toolboxProxyUrl").and_then(Value::as_str) {
            Some(url) if !url.is_empty() => url.to_owned(),
            _ => api
                .json(
                    Method::GET,
                    &format!("/sandbox/{id}/toolbox-proxy-url"),
                    None,
                    Duration::from_secs(30),
                )
                .await
                .ok()
                .and_then(|d| d.get("url").and_then(Value::as_str).map(str::to_owned))
                .ok_or_else(|| {
                    SandboxError::Other(format!("Daytona: no toolbox URL for sandbox {id}"))
                })?,
        };
        let toolbox = Toolbox::new(api.clone(), &proxy, &id);
        let (code, home) = toolbox
            .execute(Kind::Long, "printf '%s' \"$HOME\"", 30)
            .await
            .map_err(|e| SandboxError::Other(e.to_string()))?;
        let home = if code == 0 && home.starts_with('/') {
            home
        } else {
            "/root".to_owned()
        };
        let cwd = self.settings.cwd.clone().unwrap_or_else(|| home.clone());
        let files = Arc::new(ShellFs::with_runner(Arc::new(files::ToolboxScripts {
            toolbox: toolbox.clone(),
        })));
        let persistent = labels.contains_key(PERSISTENT_LABEL);
        let sandbox = Arc::new(DaytonaSandbox {
            id,
            persistent,
            toolbox,
            home,
            cwd,
            labels: std::sync::Mutex::new(labels),
            watcher: std::sync::Mutex::new(None),
            files,
        });
        sandbox.start_watcher();
        Ok(sandbox)
    }

    /// The task's stopped (or archived) persistent sandbox, started again
    /// with `labels` (this worker's, a fresh renewal) put on first, so no
    /// sweep takes it for an expired lease meanwhile. `None`: there is none.
    async fn restart_kept(
        &self,
        api: &Api,
        request: &CreateRequest,
        labels: &Map<String, Value>,
    ) -> Result<Option<Arc<DaytonaSandbox>>, SandboxError> {
        let fail = |e: DaytonaError| SandboxError::Other(format!("restarting a kept sandbox: {e}"));
        let kept = api
            .list_by_labels(&json!({
                label::MANAGED: "1",
                PERSISTENT_LABEL: "1",
                label::TASK: request.task_id,
            }))
            .await
            .map_err(fail)?;
        let Some(found) = kept.iter().find(|s| {
            matches!(
                s.get("state").and_then(Value::as_str),
                Some("stopped" | "archived")
            )
        }) else {
            return Ok(None);
        };
        let id = found.get("id").and_then(Value::as_str).unwrap_or("");
        api.call(
            Method::PUT,
            &format!("/sandbox/{id}/labels"),
            Some(&json!({"labels": labels})),
            Duration::from_secs(30),
        )
        .await
        .map_err(fail)?;
        api.call(
            Method::POST,
            &format!("/sandbox/{id}/start"),
            None,
            Duration::from_secs(60),
        )
        .await
        .map_err(fail)?;
        let doc = self.wait_started(api, id).await?;
        tracing::debug!(sandbox = %id, task = %request.task_id, "kept Daytona sandbox started again");
        self.build(api, &doc, labels.clone()).await.map(Some)
    }

    /// A sandbox for `request`, labelled as an entry of warm pool `pool`
    /// when given.
    async fn create_with(
        &self,
        request: &CreateRequest,
        pool: Option<&str>,
    ) -> Result<Arc<DaytonaSandbox>, SandboxError> {
        let api = self.api()?;
        let now = lease::epoch_secs(SystemTime::now());
        let lease_labels = LeaseLabels {
            owner: request.owner.clone(),
            worker: request.worker.clone(),
            worker_instance: request.worker_instance.clone(),
            task: request.task_id.clone(),
            created: now,
            lease_seconds: self.settings.lease.as_secs(),
            pool: pool.map(str::to_owned),
        };
        let mut labels: Map<String, Value> = lease_labels
            .to_map()
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        labels.insert(RENEWED_LABEL.to_owned(), json!(now.to_string()));
        // Pool entries serve any task, so they never persist one's files.
        if self.settings.persistent && pool.is_none() {
            labels.insert(PERSISTENT_LABEL.to_owned(), json!("1"));
            if let Some(sandbox) = self.restart_kept(api, request, &labels).await? {
                return Ok(sandbox);
            }
        }
        let body = create_body(&self.settings, &labels);
        let doc = api
            .json(
                Method::POST,
                "/sandbox",
                Some(&body),
                Duration::from_secs(60),
            )
            .await
            .map_err(|e| SandboxError::Other(format!("creating a sandbox failed: {e}")))?;
        let id = doc
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let ready = async {
            let doc = self.wait_started(api, &id).await?;
            self.build(api, &doc, labels).await
        }
        .await;
        match ready {
            Ok(sandbox) => {
                tracing::debug!(sandbox = %id, task = %request.task_id, "Daytona sandbox started");
                Ok(sandbox)
            }
            Err(err) => {
                // Never leave a sandbox that will not serve.
                let _ = api
                    .call(
                        Method::DELETE,
                        &format!("/sandbox/{id}"),
                        None,
                        Duration::from_secs(60),
                    )
                    .await;
                Err(err)
            }
        }
    }
}

#[async_trait]
impl Provider for DaytonaProvider {
    fn name(&self) -> &'static str {
        "daytona"
    }

    /// Configured and answering an authenticated list (cached 10 s).
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
                Method::GET,
                "/sandbox?limit=1",
                None,
                Duration::from_secs(5),
            )
            .await
        {
            Ok(_) => true,
            Err(err) => {
                tracing::warn!("the daytona backend is not available: {err}");
                false
            }
        };
        if let Ok(mut probe) = self.probe.lock() {
            *probe = Some((Instant::now(), ok));
        }
        ok
    }

    async fn create(&self, request: &CreateRequest) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let sandbox: Arc<dyn Sandbox> = self.create_with(request, None).await?;
        Ok(sandbox)
    }

    /// Every sandbox of this worker is made alike (the worker's snapshot or
    /// image; a request's settings are not read), so one pool serves all;
    /// none with persistent environments.
    fn pool_key(&self, _request: &CreateRequest) -> Option<String> {
        if self.settings.persistent {
            // A persistent task gets its own sandbox back, never a pool's.
            return None;
        }
        let source = match (&self.settings.snapshot, &self.settings.image) {
            (Some(snapshot), _) => format!("snapshot:{snapshot}"),
            (None, Some(image)) => format!("image:{image}"),
            (None, None) => "default".to_owned(),
        };
        Some(format!("daytona:{source}"))
    }

    async fn create_for_pool(
        &self,
        request: &CreateRequest,
        key: &str,
    ) -> Result<Arc<dyn Sandbox>, SandboxError> {
        let sandbox: Arc<dyn Sandbox> = self.create_with(request, Some(key)).await?;
        Ok(sandbox)
    }

    /// Every managed sandbox on the account whose lease passed (any worker's),
    /// never one this worker holds.
    async fn sweep(&self, context: &SweepContext) -> Vec<String> {
        let Ok(api) = self.api() else {
            return Vec::new();
        };
        let listed = match api.list_by_labels(&json!({label::MANAGED: "1"})).await {
            Ok(listed) => listed,
            Err(err) => {
                tracing::warn!("sweeping Daytona sandboxes: {err}");
                return Vec::new();
            }
        };
        let now = SystemTime::now();
        let mut removed = Vec::new();
        for item in listed {
            let Some(candidate) = candidate_of(&item) else {
                continue;
            };
            if let Some(keep) = kept_persistent(&item, &self.settings, now) {
                if keep {
                    continue;
                }
            } else if persistent(&item)
                && matches!(lease::judge(&candidate, context, now), Verdict::Remove(_))
            {
                // A persistent sandbox whose holder is gone keeps its files:
                // stopped, not deleted.
                if let Err(err) = stop_kept(api, &candidate.id, &item).await {
                    tracing::warn!(sandbox = %candidate.id, "stopping a Daytona sandbox: {err}");
                }
                continue;
            }
            if let Verdict::Remove(why) = lease::judge(&candidate, context, now) {
                match api
                    .call(
                        Method::DELETE,
                        &format!("/sandbox/{}", candidate.id),
                        None,
                        Duration::from_secs(60),
                    )
                    .await
                {
                    Ok(_) => {
                        tracing::info!(sandbox = %candidate.id, "removed Daytona sandbox: {why}");
                        removed.push(candidate.id);
                    }
                    Err(err) if err.status().is_some_and(|s| s.as_u16() == 404) => {}
                    Err(err) => {
                        tracing::warn!(sandbox = %candidate.id, "removing Daytona sandbox: {err}")
                    }
                }
            }
        }
        removed
    }
}

/// A listed sandbox as the sweeper sees it (its labels carry the lease).
pub fn candidate_of(item: &Value) -> Option<SweepCandidate> {
    let id = item.get("id").and_then(Value::as_str)?.to_owned();
    let map: std::collections::HashMap<String, String> = item
        .get("labels")
        .and_then(Value::as_object)?
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
        .collect();
    let labels = LeaseLabels::from_map(&map)?;
    let record = map
        .get(RENEWED_LABEL)
        .and_then(|v| v.parse().ok())
        .map(|renewed_at| LeaseRecord {
            owner: labels.owner.clone(),
            worker: labels.worker.clone(),
            worker_instance: labels.worker_instance.clone(),
            task: labels.task.clone(),
            renewed_at,
            ttl_secs: labels.lease_seconds,
        });
    Some(SweepCandidate { id, labels, record })
}

fn persistent(item: &Value) -> bool {
    item.pointer(&format!("/labels/{PERSISTENT_LABEL}"))
        .and_then(Value::as_str)
        == Some("1")
}

/// For a persistent sandbox that is not running: whether to keep it (until
/// `keep` after it stopped). `None`: not such a sandbox (the lease rule
/// applies).
pub fn kept_persistent(item: &Value, settings: &DaytonaSettings, now: SystemTime) -> Option<bool> {
    let state = item.get("state").and_then(Value::as_str)?;
    if !persistent(item) || !matches!(state, "stopped" | "stopping" | "archived" | "archiving") {
        return None;
    }
    let stopped = item
        .pointer(&format!("/labels/{STOPPED_LABEL}"))
        .and_then(Value::as_str)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    Some(stopped.saturating_add(settings.keep.as_secs()) >= lease::epoch_secs(now))
}

/// Stops a persistent sandbox, noting when in its labels.
pub async fn stop_kept(api: &Api, id: &str, item: &Value) -> Result<(), DaytonaError> {
    let mut labels = item
        .get("labels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    labels.insert(
        STOPPED_LABEL.to_owned(),
        json!(lease::epoch_secs(SystemTime::now()).to_string()),
    );
    api.call(
        Method::PUT,
        &format!("/sandbox/{id}/labels"),
        Some(&json!({"labels": labels})),
        Duration::from_secs(30),
    )
    .await?;
    api.call(
        Method::POST,
        &format!("/sandbox/{id}/stop"),
        None,
        Duration::from_secs(60),
    )
    .await
    .map(|_| ())
}
