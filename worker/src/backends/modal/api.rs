//! Modal's gRPC API over tonic: the control plane (`modal.client.ModalClient`
//! at `MODAL_SERVER_URL`) and a sandbox's task command router (at the URL its
//! `CommandRouterAccess` names), with the metadata the official SDK sends,
//! retries on the codes the SDK retries, and errors that name the service
//! and the gRPC status (`Modal: PERMISSION_DENIED (…)`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use caduceus_modal_proto::client as pb;
use caduceus_modal_proto::client::modal_client_client::ModalClientClient;
use caduceus_modal_proto::task_command_router::task_command_router_client::TaskCommandRouterClient;
use tonic::Code;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

/// The API version we speak: the SDK whose descriptors `modal-proto` holds
/// and that the stand-in was checked with. Modal defines no client type for
/// a Rust client; we send CLIENT (1), the type token credentials go with.
pub const CLIENT_VERSION: &str = "1.6.4";
const CLIENT_TYPE: &str = "1";
/// Unary calls: 3 retries, 100 ms doubling up to 1 s (the SDK's policy).
const RETRIES: u32 = 3;
/// Router calls: 10 retries, 10 ms doubling (the SDK's router policy).
const ROUTER_RETRIES: u32 = 10;

/// `MODAL_TOKEN_ID` / `MODAL_TOKEN_SECRET`.
#[derive(Clone)]
pub struct Credentials {
    pub token_id: String,
    pub token_secret: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Neither is shown whole (the environment hygiene counts both secret).
        let id: String = self.token_id.chars().take(5).collect();
        write!(f, "Credentials({id}…, …)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ModalError {
    /// The service answered with a gRPC error status.
    #[error("Modal: {} ({message})", code_name(*code))]
    Status { code: Code, message: String },
    /// No answer.
    #[error("Modal: cannot reach {url}: {reason}")]
    Transport { url: String, reason: String },
    /// An answer or a setting we cannot use.
    #[error("Modal: {0}")]
    Protocol(String),
}

impl ModalError {
    pub fn code(&self) -> Option<Code> {
        match self {
            ModalError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == Some(Code::NotFound)
    }

    fn from_status(status: &tonic::Status, url: &str) -> Self {
        // tonic reports a connection that failed as UNAVAILABLE/UNKNOWN
        // with a transport source; say "cannot reach" for those.
        if std::error::Error::source(status).is_some()
            && matches!(status.code(), Code::Unavailable | Code::Unknown)
        {
            return ModalError::Transport {
                url: url.to_owned(),
                reason: status.message().to_owned(),
            };
        }
        ModalError::Status {
            code: status.code(),
            message: status.message().to_owned(),
        }
    }
}

/// The canonical name of a gRPC code, as Modal's errors print it.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// The codes the SDK retries on every unary call (with the same
/// idempotency key, so a retried create does not create twice).
pub fn retryable(code: Code) -> bool {
    matches!(
        code,
        Code::DeadlineExceeded
            | Code::Unavailable
            | Code::Cancelled
            | Code::Internal
            | Code::Unknown
    )
}

/// One attempt of a call whose retries share one deadline: the server is
/// told the time left (`grpc-timeout`) and the client stops waiting then
/// too, since a server that is stopped or wedged enforces nothing.
async fn within<Req, Resp, Fut>(
    until: Instant,
    mut req: tonic::Request<Req>,
    rpc: impl FnOnce(tonic::Request<Req>) -> Fut,
) -> Result<tonic::Response<Resp>, tonic::Status>
where
    Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
{
    let left = until.saturating_duration_since(Instant::now());
    req.set_timeout(left);
    match tokio::time::timeout(left, rpc(req)).await {
        Ok(answer) => answer,
        Err(_) => Err(tonic::Status::deadline_exceeded("no answer in time")),
    }
}

fn backoff(attempt: u32, first: Duration, cap: Duration) -> Duration {
    (first * 2u32.saturating_pow(attempt)).min(cap)
}

/// `exp` of a JWT, read without verifying (as the SDK does).
pub fn jwt_expiry(token: &str) -> Option<u64> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let doc: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    doc.get("exp")?.as_f64().map(|e| e as u64)
}

fn epoch_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Is `url`'s host this machine? The SDK allows a plain-http router only
/// for a control plane there (its own tests); so do we.
fn is_localhost(url: &str) -> bool {
    url::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .is_some_and(|h| matches!(h.as_str(), "localhost" | "127.0.0.1" | "::1" | "[::1]"))
}

fn channel(url: &str) -> Result<Channel, ModalError> {
    let mut endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|e| ModalError::Protocol(format!("bad server URL {url}: {e}")))?
        .connect_timeout(Duration::from_secs(10))
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .tcp_nodelay(true);
    if url.starts_with("https://") {
        endpoint = endpoint
            .tls_config(ClientTlsConfig::new().with_webpki_roots())
            .map_err(|e| ModalError::Protocol(format!("TLS for {url}: {e}")))?;
    }
    Ok(endpoint.connect_lazy())
}

fn ascii(value: &str, what: &str) -> Result<MetadataValue<tonic::metadata::Ascii>, ModalError> {
    value
        .parse()
        .map_err(|_| ModalError::Protocol(format!("{what} is not a valid header value")))
}

/// The control plane, with its credentials and the cached auth token.
#[derive(Clone)]
pub struct Api {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    channel: Channel,
    credentials: Credentials,
    /// The `AuthTokenGet` JWT and when to fetch a new one.
    auth: tokio::sync::Mutex<Option<(String, Instant)>>,
    routers: std::sync::Mutex<HashMap<String, Channel>>,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("url", &self.inner.url)
            .field("credentials", &self.inner.credentials)
            .finish()
    }
}

impl Api {
    /// `url` is `MODAL_SERVER_URL`: its first entry when it lists fallbacks.
    pub fn new(url: &str, credentials: Credentials) -> Result<Self, ModalError> {
        let url = url
            .split(',')
            .next()
            .unwrap_or(url)
            .trim()
            .trim_end_matches('/')
            .to_owned();
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(ModalError::Protocol(format!(
                "MODAL_SERVER_URL must be http(s)://…, not {url:?}"
            )));
        }
        // The token secret travels in every request's metadata: in the
        // clear only to this host (a local stand-in or tunnel).
        if url.starts_with("http://") && !is_localhost(&url) {
            return Err(ModalError::Protocol(format!(
                "MODAL_SERVER_URL {url:?} is plain http to another host; the token would travel unencrypted (use https://)"
            )));
        }
        Ok(Api {
            inner: Arc::new(Inner {
                channel: channel(&url)?,
                url,
                credentials,
                auth: tokio::sync::Mutex::new(None),
                routers: std::sync::Mutex::new(HashMap::new()),
            }),
        })
    }

    pub fn url(&self) -> &str {
        &self.inner.url
    }

    fn metadata(&self, meta: &mut MetadataMap, auth: Option<&str>) -> Result<(), ModalError> {
        let credentials = &self.inner.credentials;
        meta.insert(
            "x-modal-token-id",
            ascii(&credentials.token_id, "MODAL_TOKEN_ID")?,
        );
        meta.insert(
            "x-modal-token-secret",
            ascii(&credentials.token_secret, "MODAL_TOKEN_SECRET")?,
        );
        meta.insert(
            "x-modal-client-type",
            MetadataValue::from_static(CLIENT_TYPE),
        );
        meta.insert(
            "x-modal-client-version",
            MetadataValue::from_static(CLIENT_VERSION),
        );
        meta.insert(
            "x-modal-caduceus-version",
            MetadataValue::from_static(env!("CARGO_PKG_VERSION")),
        );
        if let Some(token) = auth {
            meta.insert("x-modal-auth-token", ascii(token, "the auth token")?);
        }
        Ok(())
    }

    /// The `AuthTokenGet` JWT, fetched again once half its life has passed.
    async fn auth_token(&self) -> Result<String, ModalError> {
        let mut cached = self.inner.auth.lock().await;
        if let Some((token, refresh_at)) = &*cached
            && Instant::now() < *refresh_at
        {
            return Ok(token.clone());
        }
        let token = self
            .call(
                "AuthTokenGet",
                pb::AuthTokenGetRequest {},
                false,
                Duration::from_secs(15),
                |mut c, r| async move { c.auth_token_get(r).await },
            )
            .await?
            .token;
        let now = epoch_now();
        let life = jwt_expiry(&token)
            .map(|exp| exp.saturating_sub(now))
            .unwrap_or(600);
        *cached = Some((
            token.clone(),
            Instant::now() + Duration::from_secs(life / 2),
        ));
        Ok(token)
    }

    /// One unary control-plane call, retried on transient codes with the
    /// same idempotency key while `deadline` (the whole call's) lasts. `auth`: also send the auth token (every call
    /// but `AuthTokenGet` may; the V2 sandbox calls must).
    pub async fn call<Req, Resp, F, Fut>(
        &self,
        what: &'static str,
        request: Req,
        auth: bool,
        deadline: Duration,
        rpc: F,
    ) -> Result<Resp, ModalError>
    where
        Req: Clone,
        F: Fn(ModalClientClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let token = if auth {
            Some(Box::pin(self.auth_token()).await?)
        } else {
            None
        };
        let key = uuid::Uuid::new_v4().to_string();
        let until = Instant::now() + deadline;
        let mut attempt = 0;
        loop {
            let mut req = tonic::Request::new(request.clone());
            self.metadata(req.metadata_mut(), token.as_deref())?;
            req.metadata_mut()
                .insert("x-idempotency-key", ascii(&key, "key")?);
            req.metadata_mut()
                .insert("x-retry-attempt", ascii(&attempt.to_string(), "attempt")?);
            let client = ModalClientClient::new(self.inner.channel.clone())
                .max_decoding_message_size(64 << 20);
            match within(until, req, |req| rpc(client, req)).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status)
                    if retryable(status.code()) && attempt < RETRIES && Instant::now() < until =>
                {
                    tracing::debug!(
                        "Modal {what}: {} ({}), retrying",
                        code_name(status.code()),
                        status.message()
                    );
                    tokio::time::sleep(backoff(
                        attempt,
                        Duration::from_millis(100),
                        Duration::from_secs(1),
                    ))
                    .await;
                    attempt += 1;
                }
                Err(status) => return Err(ModalError::from_status(&status, &self.inner.url)),
            }
        }
    }

    /// A router client for `url` (one channel per router, shared).
    pub fn router_channel(&self, url: &str) -> Result<Channel, ModalError> {
        if url.starts_with("http://") && !is_localhost(&self.inner.url) {
            return Err(ModalError::Protocol(format!(
                "task router URL must be https, got {url}"
            )));
        }
        let mut routers = match self.inner.routers.lock() {
            Ok(routers) => routers,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(channel) = routers.get(url) {
            return Ok(channel.clone());
        }
        let made = channel(url)?;
        routers.insert(url.to_owned(), made.clone());
        Ok(made)
    }
}

/// One sandbox's task command router: its channel and bearer JWT, fetched
/// again through the control plane when the router says UNAUTHENTICATED.
#[derive(Clone)]
pub struct Router {
    api: Api,
    sandbox_id: String,
    url: String,
    channel: Channel,
    jwt: Arc<std::sync::Mutex<String>>,
    health: Arc<RouterHealth>,
}

/// What the router's answers say about it (see [`Router::stalled`]).
#[derive(Default)]
struct RouterHealth {
    /// A control exec got no answer in time (cleared by any answer).
    stalled: AtomicBool,
    /// Quick calls in flight, by start.
    in_flight: std::sync::Mutex<HashMap<u64, Instant>>,
    next: std::sync::atomic::AtomicU64,
    /// A probe is out (at most one at a time).
    probing: AtomicBool,
    /// When the router last answered anything.
    last_answer: std::sync::Mutex<Option<Instant>>,
}

/// How long a quick router call (an exec start, a stdin write) may go
/// unanswered before the router counts as stalled: they answer in
/// milliseconds, and a command's own timeout is often only a few seconds.
pub const ROUTER_STALL: Duration = Duration::from_secs(5);
/// How long the probe of a stalled router waits for its answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Removes a quick call from the in-flight set when it ends either way.
struct InFlight<'a> {
    health: &'a RouterHealth,
    key: u64,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Ok(mut in_flight) = self.health.in_flight.lock() {
            in_flight.remove(&self.key);
        }
    }
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router").field("url", &self.url).finish()
    }
}

impl Router {
    pub fn new(
        api: &Api,
        sandbox_id: &str,
        access: &pb::CommandRouterAccess,
    ) -> Result<Self, ModalError> {
        Ok(Router {
            api: api.clone(),
            sandbox_id: sandbox_id.to_owned(),
            url: access.url.clone(),
            channel: api.router_channel(&access.url)?,
            jwt: Arc::new(std::sync::Mutex::new(access.jwt.clone())),
            health: Arc::default(),
        })
    }

    fn jwt(&self) -> String {
        self.jwt.lock().map(|j| j.clone()).unwrap_or_default()
    }

    async fn refresh(&self) -> Result<(), ModalError> {
        let access = self
            .api
            .call(
                "SandboxGetCommandRouterAccess",
                pb::SandboxGetCommandRouterAccessRequest {
                    target: Some(
                        pb::sandbox_get_command_router_access_request::Target::SandboxId(
                            self.sandbox_id.clone(),
                        ),
                    ),
                },
                true,
                Duration::from_secs(30),
                |mut c, r| async move { c.sandbox_get_command_router_access(r).await },
            )
            .await?;
        if let Ok(mut jwt) = self.jwt.lock() {
            *jwt = access.jwt;
        }
        Ok(())
    }

    /// A request carrying the router's bearer token.
    pub fn request<T>(&self, message: T) -> Result<tonic::Request<T>, ModalError> {
        let mut req = tonic::Request::new(message);
        req.metadata_mut().insert(
            "authorization",
            ascii(&format!("Bearer {}", self.jwt()), "the router token")?,
        );
        Ok(req)
    }

    /// A control exec got no answer in time: until the router answers
    /// anything again it counts as stalled (see [`Router::stalled`]).
    pub fn mark_stalled(&self) {
        self.health.stalled.store(true, Ordering::SeqCst);
    }

    /// Stalled: a control exec went unanswered, or a quick call has been
    /// waiting [`ROUTER_STALL`] or longer with no answer to anything in
    /// that time. Control execs and kills are then refused at once instead
    /// of each waiting out its own timeout: a frozen router would otherwise
    /// hold a timed-out command through every signal of its stop sequence,
    /// past the coordinator's deadline. Any answer clears it
    /// ([`Router::probe`] asks for one).
    pub fn stalled(&self) -> bool {
        self.stalled_for().is_some()
    }

    /// How long it has been stalled, when it is (zero: marked by a
    /// control exec with nothing in flight now).
    pub fn stalled_for(&self) -> Option<Duration> {
        let oldest = self
            .health
            .in_flight
            .lock()
            .ok()
            .and_then(|in_flight| in_flight.values().min().copied());
        let quiet = self
            .health
            .last_answer
            .lock()
            .ok()
            .and_then(|at| *at)
            .is_none_or(|at| at.elapsed() >= ROUTER_STALL);
        if let Some(since) = oldest.filter(|since| since.elapsed() >= ROUTER_STALL)
            && quiet
        {
            return Some(since.elapsed());
        }
        self.health
            .stalled
            .load(Ordering::SeqCst)
            .then_some(Duration::ZERO)
    }

    /// The router answered (a reply or a chunk of output).
    pub fn answered(&self) {
        self.health.stalled.store(false, Ordering::SeqCst);
        if let Ok(mut at) = self.health.last_answer.lock() {
            *at = Some(Instant::now());
        }
    }

    fn track(&self) -> InFlight<'_> {
        let key = self.health.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut in_flight) = self.health.in_flight.lock() {
            in_flight.insert(key, Instant::now());
        }
        InFlight {
            health: &self.health,
            key,
        }
    }

    /// Asks a stalled router for any answer in the background, one probe
    /// at a time (see [`Router::probe_now`]). Without it a router that came
    /// back would stay refused while nothing else was in flight.
    pub fn probe(&self, task_id: &str) {
        if self.health.probing.swap(true, Ordering::SeqCst) {
            return;
        }
        let router = self.clone();
        let task_id = task_id.to_owned();
        tokio::spawn(async move {
            router.probe_now(&task_id).await;
            router.health.probing.store(false, Ordering::SeqCst);
        });
    }

    /// Asks the router for any answer (a `TaskExecPoll` of an exec that
    /// does not exist: NOT_FOUND is an answer too), waiting at most
    /// [`PROBE_TIMEOUT`]; true (and the stall cleared) when it answered.
    pub async fn probe_now(&self, task_id: &str) -> bool {
        let request = caduceus_modal_proto::task_command_router::TaskExecPollRequest {
            task_id: task_id.to_owned(),
            exec_id: "caduceus-probe".to_owned(),
        };
        let Ok(req) = self.request(request) else {
            return false;
        };
        let answered =
            match tokio::time::timeout(PROBE_TIMEOUT, self.client().task_exec_poll(req)).await {
                Ok(Ok(_)) => true,
                // A status the server sent, not one tonic made up for a
                // connection that failed.
                Ok(Err(status)) => std::error::Error::source(&status).is_none(),
                Err(_) => false,
            };
        if answered {
            self.answered();
        }
        answered
    }

    pub fn client(&self) -> TaskCommandRouterClient<Channel> {
        TaskCommandRouterClient::new(self.channel.clone()).max_decoding_message_size(64 << 20)
    }

    /// One quick unary router call (an exec start, a stdin write): retried
    /// on transient codes while `deadline` (the whole call's) lasts, and
    /// once after fetching a fresh JWT on UNAUTHENTICATED; while it waits it
    /// counts towards [`Router::stalled`].
    pub async fn call<Req, Resp, F, Fut>(
        &self,
        request: Req,
        deadline: Duration,
        rpc: F,
    ) -> Result<Resp, ModalError>
    where
        Req: Clone,
        F: Fn(TaskCommandRouterClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let _in_flight = self.track();
        self.call_blocking(request, deadline, rpc).await
    }

    /// [`Router::call`] for a call that blocks by design (`TaskExecWait`):
    /// its wait says nothing about the router's health.
    pub async fn call_blocking<Req, Resp, F, Fut>(
        &self,
        request: Req,
        deadline: Duration,
        rpc: F,
    ) -> Result<Resp, ModalError>
    where
        Req: Clone,
        F: Fn(TaskCommandRouterClient<Channel>, tonic::Request<Req>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    {
        let until = Instant::now() + deadline;
        let mut attempt = 0;
        let mut refreshed = false;
        loop {
            let req = self.request(request.clone())?;
            match within(until, req, |req| rpc(self.client(), req)).await {
                Ok(response) => {
                    self.answered();
                    return Ok(response.into_inner());
                }
                Err(status) if status.code() == Code::Unauthenticated && !refreshed => {
                    refreshed = true;
                    self.refresh().await?;
                }
                Err(status)
                    if retryable(status.code())
                        && attempt < ROUTER_RETRIES
                        && Instant::now() < until =>
                {
                    tokio::time::sleep(backoff(
                        attempt,
                        Duration::from_millis(10),
                        Duration::from_secs(1),
                    ))
                    .await;
                    attempt += 1;
                }
                Err(status) => return Err(ModalError::from_status(&status, &self.url)),
            }
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn error(&self, status: &tonic::Status) -> ModalError {
        ModalError::from_status(status, &self.url)
    }

    /// Fetches a fresh JWT (after a stream said UNAUTHENTICATED).
    pub async fn reauthenticate(&self) -> Result<(), ModalError> {
        self.refresh().await
    }
}
