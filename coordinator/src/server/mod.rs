//! The gRPC services: `WorkerGateway` (workers attach) and `Control` (clients).
//! Both require the shared token; TLS when a certificate is configured.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::service::Interceptor;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

use caduceus_proto::control_server::{Control, ControlServer};
use caduceus_proto::worker_gateway_server::{WorkerGateway, WorkerGatewayServer};
use caduceus_proto::*;

use crate::Coordinator;
use crate::dispatch::RawArguments;
use crate::registry::ToolFilter;

/// Largest message either side accepts (a write_file of a big file, a large result).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;

/// Certificate and key (PEM) for TLS.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
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

/// Refuses every request without the shared token.
#[derive(Clone)]
pub struct TokenAuth {
    token: Arc<str>,
}

impl TokenAuth {
    pub fn new(token: &str) -> Self {
        TokenAuth {
            token: Arc::from(token),
        }
    }
}

impl Interceptor for TokenAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let presented = request
            .metadata()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(token_from_authorization);
        match presented {
            Some(token) if tokens_match(&self.token, token) => Ok(request),
            Some(_) => Err(Status::unauthenticated(
                "invalid token: the coordinator refused the token presented (check --token or CADUCEUS_TOKEN)",
            )),
            None => Err(Status::unauthenticated(
                "missing token: every request needs `authorization: Bearer <token>` (set --token or CADUCEUS_TOKEN)",
            )),
        }
    }
}

/// Serves both services on `listener` until `shutdown` resolves.
pub async fn serve(
    coordinator: Arc<Coordinator>,
    listener: TcpListener,
    tls: Option<TlsFiles>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let auth = TokenAuth::new(coordinator.token());
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
        builder = builder
            .tls_config(ServerTlsConfig::new().identity(identity))
            .map_err(ServeError::Tls)?;
    }
    let gateway = tonic::service::interceptor::InterceptedService::new(
        WorkerGatewayServer::new(GatewayService {
            coordinator: coordinator.clone(),
        })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES),
        auth.clone(),
    );
    let control = tonic::service::interceptor::InterceptedService::new(
        ControlServer::new(ControlService { coordinator })
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
        auth,
    );
    builder
        .add_service(gateway)
        .add_service(control)
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await
        .map_err(ServeError::Transport)
}

struct GatewayService {
    coordinator: Arc<Coordinator>,
}

#[tonic::async_trait]
impl WorkerGateway for GatewayService {
    type AttachStream = ReceiverStream<Result<WorkerCommand, Status>>;

    async fn attach(
        &self,
        request: Request<Streaming<WorkerEvent>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let peer = request
            .remote_addr()
            .map(|a: SocketAddr| a.to_string())
            .unwrap_or_default();
        let (commands, rx) = mpsc::channel(64);
        self.coordinator
            .attach_worker(Box::pin(request.into_inner()), commands, peer)
            .await?;
        Ok(Response::new(ReceiverStream::new(rx)))
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
        let req = request.into_inner();
        let session = (!req.session_id.is_empty()).then_some(req.session_id);
        let outcome = self
            .coordinator
            .call_tool(
                &req.tool,
                RawArguments::Text(req.arguments_json),
                &req.task_id,
                session,
            )
            .await;
        Ok(Response::new(CallToolResponse {
            result: outcome.result,
            worker: outcome.worker.unwrap_or_default(),
            duration_us: u64::try_from(outcome.duration.as_micros()).unwrap_or(u64::MAX),
        }))
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
        _request: Request<StartSessionRequest>,
    ) -> Result<Response<Self::StartSessionStream>, Status> {
        Err(Status::unimplemented(
            "agent sessions are not available on this coordinator yet",
        ))
    }

    async fn cancel_session(
        &self,
        _request: Request<CancelSessionRequest>,
    ) -> Result<Response<CancelSessionResponse>, Status> {
        Err(Status::unimplemented(
            "agent sessions are not available on this coordinator yet",
        ))
    }

    async fn answer_clarify(
        &self,
        _request: Request<AnswerClarifyRequest>,
    ) -> Result<Response<AnswerClarifyResponse>, Status> {
        Err(Status::unimplemented(
            "agent sessions are not available on this coordinator yet",
        ))
    }

    async fn list_approvals(
        &self,
        _request: Request<ListApprovalsRequest>,
    ) -> Result<Response<ListApprovalsResponse>, Status> {
        Err(Status::unimplemented(
            "approvals are not available on this coordinator yet",
        ))
    }

    async fn answer_approval(
        &self,
        _request: Request<AnswerApprovalRequest>,
    ) -> Result<Response<AnswerApprovalResponse>, Status> {
        Err(Status::unimplemented(
            "approvals are not available on this coordinator yet",
        ))
    }
}
