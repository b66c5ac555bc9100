//! The gRPC services: `WorkerGateway` (workers attach) and `Control` (clients).
//! Both sit behind [`Authorized`] (tokens and their roles, see `crate::auth`);
//! TLS when a certificate is configured.

mod metrics;

pub use metrics::serve_metrics;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, UnboundedReceiverStream};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

use caduceus_proto::control_server::{Control, ControlServer};
use caduceus_proto::trace::{TRACEPARENT, TraceParent};
use caduceus_proto::worker_gateway_server::{WorkerGateway, WorkerGatewayServer};
use caduceus_proto::*;

use crate::agent::{SessionError, StartRequest};
use crate::audit::{ApprovalLine, AuditEvent};
use crate::auth::{Authorized, Caller, Role, TokenError, TokenInfo};
use crate::call::ToolFilter;
use crate::dispatch::RawArguments;
use crate::gate::{AnswerError, Answered, Approvals, Decision, PendingApproval, Scope};
use crate::scheduler::OperationError;
use crate::{ClientCall, Coordinator};

/// Largest message either side accepts (a write_file of a big file, a large result).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Certificate and key (PEM) for TLS.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// CA (PEM) whose client certificates workers must present to attach
    /// (`--tls-client-ca`); clients need none.
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot read TLS file {path}: {source}")]
    TlsFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("TLS configuration rejected: {0}")]
    Tls(tonic::transport::Error),
    #[error("the gRPC server failed: {0}")]
    Transport(tonic::transport::Error),
}

/// Serves both services on `listener` until `shutdown` resolves.
pub async fn serve(
    coordinator: Arc<Coordinator>,
    listener: TcpListener,
    tls: Option<TlsFiles>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let auth = coordinator
        .authenticator()
        .with_worker_certificates(tls.as_ref().is_some_and(|t| t.client_ca.is_some()));
    // The builder's tcp_nodelay applies only to listeners tonic binds itself;
    // accepted sockets need it too, or small replies wait ~40 ms for Nagle.
    let incoming = TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(Duration::from_secs(30)));
    let mut builder = Server::builder()
        .tcp_nodelay(true)
        .http2_keepalive_interval(Some(Duration::from_secs(10)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)));
    if let Some(tls) = tls {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|source| ServeError::TlsFile {
                path: path.clone(),
                source,
            })
        };
        let identity = Identity::from_pem(read(&tls.cert)?, read(&tls.key)?);
        let mut config = ServerTlsConfig::new().identity(identity);
        if let Some(ca) = &tls.client_ca {
            // Optional at the handshake so that clients connect without one;
            // a certificate presented must verify, and Attach demands one
            // (crate::auth).
            config = config
                .client_ca_root(Certificate::from_pem(read(ca)?))
                .client_auth_optional(true);
        }
        builder = builder.tls_config(config).map_err(ServeError::Tls)?;
    }
    let gateway = Authorized::new(
        WorkerGatewayServer::new(GatewayService {
            coordinator: coordinator.clone(),
        })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES),
        auth.clone(),
    );
    let control = Authorized::new(
        ControlServer::new(ControlService { coordinator })
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
        auth,
    );
    builder
        .add_service(gateway)
        .add_service(control)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(ServeError::Transport)
}

struct GatewayService {
    coordinator: Arc<Coordinator>,
}

#[tonic::async_trait]
impl WorkerGateway for GatewayService {
    type AttachStream = UnboundedReceiverStream<Result<WorkerCommand, Status>>;

    async fn attach(
        &self,
        request: Request<Streaming<WorkerEvent>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let peer = request
            .remote_addr()
            .map(|a: SocketAddr| a.to_string())
            .unwrap_or_default();
        let caller = request.extensions().get::<Caller>().cloned();
        let token = caller.as_ref().and_then(|caller| caller.token.clone());
        let (commands, rx) = mpsc::unbounded_channel();
        self.coordinator
            .attach_worker_as(
                Box::pin(request.into_inner()),
                commands.clone(),
                peer,
                caller.as_ref(),
            )
            .await?;
        if let Some(token) = token {
            // Revoking the token, or its expiry, disconnects this worker.
            self.coordinator.worker_attached_with(token, commands);
        }
        Ok(Response::new(UnboundedReceiverStream::new(rx)))
    }
}

struct ControlService {
    coordinator: Arc<Coordinator>,
}

#[tonic::async_trait]
impl Control for ControlService {
    async fn list_tools(
        &self,
        request: Request<ListToolsRequest>,
    ) -> Result<Response<ListToolsResponse>, Status> {
        let req = request.into_inner();
        let filter = ToolFilter {
            enabled_toolsets: req.enabled_toolsets,
            disabled_toolsets: req.disabled_toolsets,
            blocked_tools: Vec::new(),
        };
        let (definitions, generation) = self
            .coordinator
            .definitions(&filter)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok(Response::new(ListToolsResponse {
            definitions_json: definitions.iter().map(ToString::to_string).collect(),
            generation,
        }))
    }

    async fn call_tool(
        &self,
        request: Request<CallToolRequest>,
    ) -> Result<Response<CallToolResponse>, Status> {
        let caller = caller_name(&request);
        // A client's trace context continues; a malformed one is ignored
        // (the call gets a new trace), never an error.
        let trace = request
            .metadata()
            .get(TRACEPARENT)
            .and_then(|v| v.to_str().ok())
            .and_then(TraceParent::parse);
        let req = request.into_inner();
        let session = (!req.session_id.is_empty()).then_some(req.session_id);
        let outcome = self
            .coordinator
            .call_tool(ClientCall {
                session_id: session,
                caller,
                labels: req.labels.into_iter().collect(),
                trace,
                ..ClientCall::new(
                    &req.tool,
                    RawArguments::Text(req.arguments_json),
                    &req.task_id,
                )
            })
            .await;
        let mut response = Response::new(CallToolResponse {
            result: outcome.render(),
            worker: outcome.worker.unwrap_or_default(),
            duration_us: u64::try_from(outcome.duration.as_micros()).unwrap_or(u64::MAX),
            status: caduceus_proto::CallStatus::from(outcome.status) as i32,
        });
        // The call's own context goes back, so a client can find its log lines.
        if let Some(value) = outcome.trace.and_then(|t| {
            t.to_string()
                .parse::<tonic::metadata::MetadataValue<_>>()
                .ok()
        }) {
            response.metadata_mut().insert(TRACEPARENT, value);
        }
        Ok(response)
    }

    async fn status(
        &self,
        _request: Request<StatusRequest>,
    ) -> Result<Response<StatusResponse>, Status> {
        Ok(Response::new(self.coordinator.status().await))
    }

    async fn release_environment(
        &self,
        request: Request<ReleaseEnvironmentRequest>,
    ) -> Result<Response<ReleaseEnvironmentResponse>, Status> {
        let released = self
            .coordinator
            .release_environment(&request.into_inner().task_id)
            .await;
        Ok(Response::new(ReleaseEnvironmentResponse { released }))
    }

    type StartSessionStream = ReceiverStream<Result<SessionEvent, Status>>;

    async fn start_session(
        &self,
        request: Request<StartSessionRequest>,
    ) -> Result<Response<Self::StartSessionStream>, Status> {
        let caller = caller_name(&request);
        let req = request.into_inner();
        let hub = self.coordinator.sessions().clone();
        let started = hub
            .start(StartRequest {
                prompt: req.prompt,
                model: req.model,
                enabled_toolsets: req.enabled_toolsets,
                disabled_toolsets: req.disabled_toolsets,
                max_iterations: req.max_iterations,
                task_id: req.task_id,
                interactive: req.interactive,
                caller,
                labels: req.labels.into_iter().collect(),
                session_id: String::new(),
                workdir: None,
            })
            .await
            .map_err(|e| session_status(&e))?;
        let (tx, rx) = mpsc::channel(256);
        let session_id = started.session_id;
        let mut events = started.events;
        tokio::spawn(async move {
            loop {
                let event = tokio::select! {
                    event = events.recv() => event,
                    // The client went away (even while the session is quiet):
                    // nobody will read the answer.
                    _ = tx.closed() => {
                        hub.cancel(&session_id);
                        break;
                    }
                };
                let Some(event) = event else { break };
                if tx.send(Ok(event)).await.is_err() {
                    hub.cancel(&session_id);
                    break;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    type AttachSessionStream = ReceiverStream<Result<SessionEvent, Status>>;

    async fn attach_session(
        &self,
        request: Request<AttachSessionRequest>,
    ) -> Result<Response<Self::AttachSessionStream>, Status> {
        let req = request.into_inner();
        let mut events = self
            .coordinator
            .sessions()
            .attach(&req.session_id, req.after_seq)
            .await
            .map_err(|e| session_status(&e))?;
        let (tx, rx) = mpsc::channel(256);
        // An observer: going away leaves the session running.
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                if tx.send(Ok(event)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn cancel_session(
        &self,
        request: Request<CancelSessionRequest>,
    ) -> Result<Response<CancelSessionResponse>, Status> {
        let cancelled = self
            .coordinator
            .sessions()
            .cancel(&request.into_inner().session_id);
        Ok(Response::new(CancelSessionResponse { cancelled }))
    }

    async fn answer_clarify(
        &self,
        request: Request<AnswerClarifyRequest>,
    ) -> Result<Response<AnswerClarifyResponse>, Status> {
        let req = request.into_inner();
        let accepted = self
            .coordinator
            .sessions()
            .answer_clarify(&req.session_id, &req.question_id, &req.answer)
            .await;
        Ok(Response::new(AnswerClarifyResponse { accepted }))
    }

    async fn list_approvals(
        &self,
        _request: Request<ListApprovalsRequest>,
    ) -> Result<Response<ListApprovalsResponse>, Status> {
        let approvals = self.approvals()?;
        Ok(Response::new(ListApprovalsResponse {
            approvals: approvals.list().into_iter().map(approval_message).collect(),
        }))
    }

    async fn answer_approval(
        &self,
        request: Request<AnswerApprovalRequest>,
    ) -> Result<Response<AnswerApprovalResponse>, Status> {
        let approvals = self.approvals()?;
        let answered_by = caller_name(&request).unwrap_or_default();
        let req = request.into_inner();
        // What was asked, for the audit line (the answer removes it).
        let asked = approvals.list().into_iter().find(|p| p.id == req.id.trim());
        let requested = if req.approve { "approve" } else { "deny" };
        let decision = if req.approve {
            Decision::Approve(Scope::parse(&req.scope).map_err(Status::invalid_argument)?)
        } else {
            let reason = req.reason.trim();
            Decision::Deny {
                reason: (!reason.is_empty()).then(|| reason.to_owned()),
            }
        };
        // "always" may write the configuration file.
        let id = req.id.clone();
        let answered = tokio::task::spawn_blocking(move || approvals.answer(&req.id, decision))
            .await
            .map_err(|err| Status::internal(format!("the answer was lost: {err}")))?;
        if let Some(audit) = self.coordinator.audit() {
            audit.record(AuditEvent::Approval(approval_line(
                id.trim(),
                answered_by,
                requested,
                asked,
                &answered,
            )));
        }
        Ok(Response::new(match answered {
            Ok(answered) => AnswerApprovalResponse {
                accepted: true,
                message: answered.message,
                scope: match answered.decision {
                    Decision::Approve(scope) => scope.as_str().to_owned(),
                    Decision::Deny { .. } => String::new(),
                },
            },
            Err(err) => AnswerApprovalResponse {
                accepted: false,
                message: err.to_string(),
                scope: String::new(),
            },
        }))
    }

    async fn create_token(
        &self,
        request: Request<CreateTokenRequest>,
    ) -> Result<Response<CreateTokenResponse>, Status> {
        let req = request.into_inner();
        let role = Role::parse(&req.role).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let expires_in =
            (req.expires_in_secs > 0).then(|| Duration::from_secs(req.expires_in_secs));
        let tokens = self.coordinator.tokens().clone();
        let (info, secret) =
            tokio::task::spawn_blocking(move || tokens.create(role, &req.name, expires_in))
                .await
                .map_err(|err| Status::internal(format!("the token was not created: {err}")))?
                .map_err(|err| token_status(&err))?;
        tracing::info!(id = %info.id, name = %info.name, role = info.role.as_str(), "token created");
        Ok(Response::new(CreateTokenResponse {
            token: Some(token_message(&info)),
            secret,
        }))
    }

    async fn list_tokens(
        &self,
        _request: Request<ListTokensRequest>,
    ) -> Result<Response<ListTokensResponse>, Status> {
        let tokens = self.coordinator.tokens().clone();
        let list = tokio::task::spawn_blocking(move || tokens.list())
            .await
            .map_err(|err| Status::internal(format!("the tokens were not read: {err}")))?
            .map_err(|err| token_status(&err))?;
        Ok(Response::new(ListTokensResponse {
            tokens: list.iter().map(token_message).collect(),
        }))
    }

    async fn revoke_token(
        &self,
        request: Request<RevokeTokenRequest>,
    ) -> Result<Response<RevokeTokenResponse>, Status> {
        let which = request.into_inner().token;
        let (revoked, workers) = self
            .coordinator
            .revoke_token(&which)
            .await
            .map_err(|err| token_status(&err))?;
        Ok(Response::new(RevokeTokenResponse {
            revoked: revoked.iter().map(token_message).collect(),
            workers_disconnected: u32::try_from(workers).unwrap_or(u32::MAX),
        }))
    }

    async fn cordon_worker(
        &self,
        request: Request<CordonWorkerRequest>,
    ) -> Result<Response<WorkerActionResponse>, Status> {
        let req = request.into_inner();
        let worker = self
            .coordinator
            .cordon_worker(req.name.trim(), req.cordon)
            .await
            .map_err(|err| operation_status(&err))?;
        Ok(Response::new(WorkerActionResponse {
            worker: Some(worker),
        }))
    }

    async fn drain_worker(
        &self,
        request: Request<DrainWorkerRequest>,
    ) -> Result<Response<WorkerActionResponse>, Status> {
        let req = request.into_inner();
        let worker = self
            .coordinator
            .drain_worker(req.name.trim())
            .await
            .map_err(|err| operation_status(&err))?;
        Ok(Response::new(WorkerActionResponse {
            worker: Some(worker),
        }))
    }
}

/// The gRPC status of a refused worker operation.
fn operation_status(err: &OperationError) -> Status {
    match err {
        OperationError::NoSuchWorker(_) => Status::not_found(err.to_string()),
        OperationError::Draining(_) => Status::failed_precondition(err.to_string()),
        OperationError::Unavailable => Status::unavailable(err.to_string()),
    }
}

fn token_message(info: &TokenInfo) -> caduceus_proto::TokenInfo {
    caduceus_proto::TokenInfo {
        id: info.id.clone(),
        name: info.name.clone(),
        role: info.role.as_str().to_owned(),
        created_at: info.created_at,
        expires_at: info.expires_at.unwrap_or(0),
        revoked_at: info.revoked_at.unwrap_or(0),
    }
}

fn token_status(err: &TokenError) -> Status {
    match err {
        TokenError::Role(_) => Status::invalid_argument(err.to_string()),
        TokenError::NotFound(_) => Status::not_found(err.to_string()),
        TokenError::Store { .. } | TokenError::Sql(_) | TokenError::Interrupted(_) => {
            Status::internal(err.to_string())
        }
    }
}

impl ControlService {
    fn approvals(&self) -> Result<Arc<Approvals>, Status> {
        self.coordinator.approvals().ok_or_else(|| {
            Status::unimplemented(
                "this coordinator runs without the command guard, so there are no approvals",
            )
        })
    }
}

/// The audit log's name for the caller of `request` (set by the auth layer).
fn caller_name<T>(request: &Request<T>) -> Option<String> {
    request.extensions().get::<Caller>().map(Caller::name)
}

fn approval_line(
    id: &str,
    answered_by: String,
    requested: &'static str,
    asked: Option<PendingApproval>,
    answered: &Result<Answered, AnswerError>,
) -> ApprovalLine {
    // The scope as applied ("always" may have become "session").
    let scope = match answered {
        Ok(Answered {
            decision: Decision::Approve(scope),
            ..
        }) => Some(scope.as_str()),
        _ => None,
    };
    ApprovalLine {
        approval_id: id.to_owned(),
        answered_by,
        decision: requested,
        scope,
        accepted: answered.is_ok(),
        session: asked.as_ref().and_then(|p| p.session_id.clone()),
        task: asked.as_ref().map(|p| p.task_id.clone()),
        tool: asked.as_ref().map(|p| p.tool.clone()),
        command: asked.map(|p| p.command),
    }
}

fn approval_message(pending: PendingApproval) -> Approval {
    let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    Approval {
        id: pending.id,
        command: pending.command,
        description: pending.description,
        pattern_key: pending.pattern_key,
        task_id: pending.task_id,
        session_id: pending.session_id.unwrap_or_default(),
        age_ms: millis(pending.age),
        expires_in_ms: millis(pending.expires_in),
        tool: pending.tool,
        waiting: pending.waiting,
        allow_permanent: pending.allow_permanent,
        diff: pending.diff.unwrap_or_default(),
    }
}

/// The gRPC status for a session that could not start.
fn session_status(err: &SessionError) -> Status {
    match err {
        SessionError::Spawn(_) | SessionError::Store(_) => Status::internal(err.to_string()),
        SessionError::Unknown(_) => Status::not_found(err.to_string()),
        SessionError::NotRecorded | SessionError::Elsewhere(_) => {
            Status::failed_precondition(err.to_string())
        }
        SessionError::NoModel | SessionError::Model { .. } => {
            Status::failed_precondition(err.to_string())
        }
        SessionError::EmptyPrompt | SessionError::Toolsets(_) => {
            Status::invalid_argument(err.to_string())
        }
    }
}
