//! Who may call what. Every request of both services passes [`Authorized`],
//! which finds the caller's token and checks its role against the one the
//! method needs ([`required_role`]) before the service sees the request:
//!
//! | role | may call |
//! |---|---|
//! | worker | `WorkerGateway.Attach` only |
//! | client | `Control`: tools, status, environments, sessions, clarify answers; `GET /metrics` |
//! | admin | everything: also approvals and tokens (the shared `--token` is admin) |
//!
//! The caller (its role and scoped token, if any) rides in the request's
//! extensions, so that `Attach` can remember which token a worker used and a
//! revoked token disconnects it.

pub mod grants;
pub mod tokens;

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::Either;
use tonic::Status;
use tonic::codegen::{Service, http};
use tonic::server::NamedService;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use crate::audit::{AuditLog, TokenUseLine};
use caduceus_proto::{AUTHORIZATION, token_from_authorization, tokens_match};

pub use grants::{Grant, HostGrant, WorkerGrant, WorkerGrants};
pub use tokens::{Role, TokenError, TokenInfo, TokenStore};

/// Methods of `Control` a client may call; the others (approvals, tokens)
/// are for admins.
const CLIENT_METHODS: &[&str] = &[
    "ListTools",
    "CallTool",
    "Status",
    "ReleaseEnvironment",
    "StartSession",
    "CancelSession",
    "AttachSession",
    "AnswerClarify",
];

/// The role a gRPC method (`/package.Service/Method`) needs. Anything not
/// listed needs admin: a method added later is closed until it is classified
/// here.
pub fn required_role(path: &str) -> Role {
    // `GET /metrics` of `serve --metrics` (its own listener, same tokens):
    // what a client could learn from `Status` anyway.
    if path == caduceus_metrics::METRICS_PATH {
        return Role::Client;
    }
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let (service, method) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if service == caduceus_proto::worker_gateway_server::SERVICE_NAME && method == "Attach" {
        Role::Worker
    } else if service == caduceus_proto::control_server::SERVICE_NAME
        && CLIENT_METHODS.contains(&method)
    {
        Role::Client
    } else {
        Role::Admin
    }
}

/// Whether `role` may call a method that needs `needed`.
pub fn permits(role: Role, needed: Role) -> bool {
    role == Role::Admin || role == needed
}

/// Who made a request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub role: Role,
    /// The scoped token presented; `None` for the shared token.
    pub token: Option<TokenInfo>,
}

impl Caller {
    /// How the audit log names this caller: the scoped token's name, or
    /// `shared` for the shared token.
    pub fn name(&self) -> String {
        self.token
            .as_ref()
            .map_or_else(|| SHARED_TOKEN_NAME.to_owned(), |t| t.name.clone())
    }
}

/// The audit log's name for the shared `--token`.
pub const SHARED_TOKEN_NAME: &str = "shared";

/// Checks tokens: the shared one (admin), then the scoped ones.
#[derive(Clone)]
pub struct Authenticator {
    shared: Arc<str>,
    store: Arc<TokenStore>,
    /// `Attach` needs a verified TLS client certificate (`--tls-client-ca`).
    worker_certificates: bool,
    /// Token use is logged here, once per connection and token.
    audit: Option<AuditLog>,
}

impl Authenticator {
    pub fn new(shared: &str, store: Arc<TokenStore>) -> Self {
        Authenticator {
            shared: Arc::from(shared),
            store,
            worker_certificates: false,
            audit: None,
        }
    }

    pub fn with_audit(mut self, audit: Option<AuditLog>) -> Self {
        self.audit = audit;
        self
    }

    /// Logs the outcome of a request's token check (the first per
    /// connection and token: logging every request would make the log
    /// mostly `CallTool` noise, which the call lines already cover).
    fn audit_use(&self, peer: Option<SocketAddr>, path: &str, outcome: &Result<Caller, Status>) {
        let Some(audit) = &self.audit else { return };
        let (token, role, error) = match outcome {
            Ok(caller) => (Some(caller.name()), Some(caller.role.as_str()), None),
            Err(status) => (None, None, Some(status.message().to_owned())),
        };
        audit.token_use(TokenUseLine {
            token,
            role,
            peer: peer.map(|p| p.to_string()).unwrap_or_default(),
            method: path.to_owned(),
            admitted: outcome.is_ok(),
            error,
        });
    }

    /// Demands a client certificate of every worker that attaches (mutual
    /// TLS; the TLS layer has verified any certificate presented).
    pub fn with_worker_certificates(mut self, required: bool) -> Self {
        self.worker_certificates = required;
        self
    }

    /// The caller of `path` with the `authorization` value `header` over a
    /// connection that presented a verified client certificate or not, or the
    /// status that refuses the request.
    pub fn authorize(
        &self,
        path: &str,
        header: Option<&str>,
        client_certificate: bool,
    ) -> Result<Caller, Status> {
        let Some(presented) = header.and_then(token_from_authorization) else {
            return Err(Status::unauthenticated(
                "missing token: every request needs `authorization: Bearer <token>` (set --token or CADUCEUS_TOKEN)",
            ));
        };
        let caller = if tokens_match(&self.shared, presented) {
            Caller {
                role: Role::Admin,
                token: None,
            }
        } else {
            let token = self.store.lookup(presented).ok_or_else(|| {
                Status::unauthenticated(
                    "invalid token: the coordinator refused the token presented (check --token or CADUCEUS_TOKEN)",
                )
            })?;
            if token.revoked_at.is_some() {
                return Err(Status::unauthenticated(format!(
                    "revoked token: the token '{}' was revoked",
                    token.name
                )));
            }
            if token.expires_at.is_some_and(|at| at <= tokens::now_secs()) {
                return Err(Status::unauthenticated(format!(
                    "expired token: the token '{}' has expired",
                    token.name
                )));
            }
            Caller {
                role: token.role,
                token: Some(token),
            }
        };
        let needed = required_role(path);
        if needed == Role::Worker && self.worker_certificates && !client_certificate {
            return Err(Status::unauthenticated(
                "client certificate required: this coordinator admits workers only with a client certificate signed by its --tls-client-ca (pass --tls-cert and --tls-key to the worker)",
            ));
        }
        if !permits(caller.role, needed) {
            let method = path.rsplit('/').next().unwrap_or(path);
            return Err(Status::permission_denied(format!(
                "a {} token may not call {method}: it needs {} token",
                caller.role.as_str(),
                match needed {
                    Role::Worker => "a worker or admin",
                    Role::Client => "a client or admin",
                    Role::Admin => "an admin",
                }
            )));
        }
        Ok(caller)
    }
}

/// A service behind [`Authenticator`]: refused requests never reach it.
#[derive(Clone)]
pub struct Authorized<S> {
    inner: S,
    auth: Authenticator,
}

impl<S> Authorized<S> {
    pub fn new(inner: S, auth: Authenticator) -> Self {
        Authorized { inner, auth }
    }
}

impl<S: NamedService> NamedService for Authorized<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> Service<http::Request<B>> for Authorized<S>
where
    S: Service<http::Request<B>, Response = http::Response<tonic::body::Body>, Error = Infallible>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Either<Ready<Result<Self::Response, Infallible>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let header = request
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let certificate = request
            .extensions()
            .get::<TlsConnectInfo<TcpConnectInfo>>()
            .and_then(TlsConnectInfo::peer_certs)
            .is_some_and(|certs| !certs.is_empty());
        let peer = request
            .extensions()
            .get::<TlsConnectInfo<TcpConnectInfo>>()
            .map(TlsConnectInfo::get_ref)
            .or_else(|| request.extensions().get::<TcpConnectInfo>())
            .and_then(TcpConnectInfo::remote_addr);
        let outcome = self
            .auth
            .authorize(request.uri().path(), header, certificate);
        self.auth.audit_use(peer, request.uri().path(), &outcome);
        match outcome {
            Ok(caller) => {
                request.extensions_mut().insert(caller);
                Either::Right(self.inner.call(request))
            }
            Err(status) => Either::Left(ready(Ok(status.into_http()))),
        }
    }
}

#[cfg(test)]
#[path = "auth_tests.rs"]
mod tests;
