//! Where client commands go: a remote coordinator over gRPC, or an embedded
//! coordinator with an embedded local worker (one machine, no setup).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};

use caduceus_coordinator::call::ToolFilter;
use caduceus_coordinator::dispatch::RawArguments;
use caduceus_coordinator::gate::Gate;
use caduceus_coordinator::{ClientCall, Coordinator};
use caduceus_proto::control_client::ControlClient;
use caduceus_proto::{
    CallToolRequest, ListToolsRequest, StatusRequest, StatusResponse, bearer, worker_event,
};
use caduceus_worker::{Worker, WorkerConfig};

use crate::config::Config;
use crate::token::TokenArgs;

/// A Control client that presents a token on every request. Cloning it is
/// cheap and clones share one connection (calls then run concurrently).
pub type Client = ControlClient<InterceptedService<Channel, Bearer>>;

/// Adds `authorization: Bearer <token>` to every request.
#[derive(Clone)]
pub struct Bearer(MetadataValue<Ascii>);

impl Interceptor for Bearer {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        request
            .metadata_mut()
            .insert(caduceus_proto::AUTHORIZATION, self.0.clone());
        Ok(request)
    }
}

/// The token cannot be sent: it holds characters a header may not carry.
#[derive(Debug)]
pub struct TokenNotAHeader;

impl std::fmt::Display for TokenNotAHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the token contains characters not allowed in a header")
    }
}

impl std::error::Error for TokenNotAHeader {}

/// The connection to a remote coordinator broke while a call was in flight
/// (the coordinator died or the network failed): no result will come.
#[derive(Debug)]
pub struct ConnectionLost(pub String);

impl std::fmt::Display for ConnectionLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the connection to the coordinator was lost: {}", self.0)
    }
}

impl std::error::Error for ConnectionLost {}

/// The result of one call as the CLI reports it.
pub struct CallReply {
    pub result: String,
    pub worker: String,
    pub status: caduceus_coordinator::call::CallStatus,
}

impl CallReply {
    /// `caduceus call --json`: the result (parsed when it is JSON, as tool
    /// results are), the worker that ran it and how it ended.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "result": serde_json::from_str::<Value>(&self.result)
                .unwrap_or_else(|_| Value::String(self.result.clone())),
            "worker": (!self.worker.is_empty()).then_some(&self.worker),
            "status": self.status.as_str(),
        })
    }
}

pub enum Target {
    Remote(Client),
    Embedded(Embedded),
}

/// A coordinator and a local worker in this process.
pub struct Embedded {
    pub coordinator: Arc<Coordinator>,
    pub workers: Vec<Arc<Worker>>,
    shutdown: CancellationToken,
}

/// Connection settings of client commands.
#[derive(Debug, Clone, Default)]
pub struct Remote {
    pub url: Option<String>,
    pub token: Option<String>,
    pub ca: Option<PathBuf>,
}

impl Remote {
    /// Command-line flags over the configuration (which already holds
    /// `CADUCEUS_COORDINATOR` and the token of the environment). The token is
    /// read (a token file too) only when there is a coordinator to give it to.
    pub fn from_flags(
        url: Option<String>,
        token: &TokenArgs,
        ca: Option<PathBuf>,
        config: &Config,
    ) -> Result<Self> {
        let url = url.or_else(|| config.coordinator.clone());
        Ok(Remote {
            token: match url {
                Some(_) => token.resolve(config)?,
                None => None,
            },
            url,
            ca: ca.or_else(|| config.tls.ca.clone()),
        })
    }

    /// A client of the remote coordinator; `None` without an address.
    pub async fn client(&self) -> Result<Option<Client>> {
        let Some(url) = &self.url else {
            return Ok(None);
        };
        let token = self.token.as_deref().ok_or_else(|| {
            anyhow!("--coordinator needs a token: pass --token or --token-file, or set CADUCEUS_TOKEN or CADUCEUS_TOKEN_FILE")
        })?;
        Ok(Some(connect(url, token, self.ca.as_deref()).await?))
    }
}

impl Target {
    /// A remote coordinator when an address is given, else an embedded one
    /// with `workers` local workers.
    pub async fn open(
        remote: &Remote,
        config: &Config,
        gate: Arc<dyn Gate>,
        workers: usize,
    ) -> Result<Self> {
        Ok(match remote.client().await? {
            Some(client) => Target::Remote(client),
            None => Target::Embedded(Embedded::start(config, gate, workers).await?),
        })
    }

    pub async fn call(
        &mut self,
        tool: &str,
        arguments: &str,
        task_id: &str,
        labels: BTreeMap<String, String>,
    ) -> Result<CallReply> {
        match self {
            Target::Remote(client) => {
                let response = client
                    .call_tool(CallToolRequest {
                        tool: tool.to_owned(),
                        arguments_json: arguments.to_owned(),
                        task_id: task_id.to_owned(),
                        session_id: String::new(),
                        labels: labels.into_iter().collect(),
                    })
                    .await
                    .map_err(|s| call_error(&s))?
                    .into_inner();
                Ok(CallReply {
                    status: caduceus_proto::call_status(response.status),
                    result: response.result,
                    worker: response.worker,
                })
            }
            Target::Embedded(embedded) => {
                let outcome = embedded
                    .coordinator
                    .call_tool(ClientCall {
                        labels,
                        ..ClientCall::new(tool, RawArguments::Text(arguments.to_owned()), task_id)
                    })
                    .await;
                Ok(CallReply {
                    result: outcome.render(),
                    status: outcome.status,
                    worker: outcome.worker.unwrap_or_default(),
                })
            }
        }
    }

    /// After a call was abandoned (its future dropped, which resets its
    /// stream and so cancels it on the coordinator): waits until the
    /// coordinator has answered a later request on the same connection, so
    /// the reset has reached it. False when it did not answer within `within`.
    pub async fn confirm_abandoned(&mut self, within: Duration) -> bool {
        match self {
            Target::Remote(client) => tokio::time::timeout(within, client.status(StatusRequest {}))
                .await
                .is_ok_and(|answered| answered.is_ok()),
            // In process, dropping the call cancelled it on the worker.
            Target::Embedded(_) => true,
        }
    }

    pub async fn definitions(&mut self, filter: ToolFilter) -> Result<Vec<Value>> {
        match self {
            Target::Remote(client) => {
                let response = client
                    .list_tools(ListToolsRequest {
                        enabled_toolsets: filter.enabled_toolsets,
                        disabled_toolsets: filter.disabled_toolsets,
                    })
                    .await
                    .map_err(|s| status_error(&s))?
                    .into_inner();
                response
                    .definitions_json
                    .iter()
                    .map(|d| {
                        serde_json::from_str(d)
                            .context("the coordinator sent an invalid definition")
                    })
                    .collect()
            }
            Target::Embedded(embedded) => Ok(embedded
                .coordinator
                .definitions(&filter)
                .map_err(|e| anyhow!("{e}"))?
                .0),
        }
    }

    pub async fn status(&mut self) -> Result<StatusResponse> {
        match self {
            Target::Remote(client) => Ok(client
                .status(StatusRequest {})
                .await
                .map_err(|s| status_error(&s))?
                .into_inner()),
            Target::Embedded(embedded) => Ok(embedded.coordinator.status().await),
        }
    }

    /// Ends embedded workers' environments (no stray processes).
    pub async fn close(self) {
        if let Target::Embedded(embedded) = self {
            embedded.stop().await;
        }
    }
}

impl Embedded {
    /// Starts a coordinator with `workers` local workers attached in-process,
    /// and waits until they have joined (the registry then offers their
    /// tools: attaching publishes a worker's backends before it returns).
    pub async fn start(config: &Config, gate: Arc<dyn Gate>, workers: usize) -> Result<Self> {
        let coordinator = crate::plugins::start_coordinator(
            config,
            crate::coordinator_config(config, uuid::Uuid::new_v4().simple().to_string())?,
            gate,
        )
        .await?;
        let shutdown = CancellationToken::new();
        let mut backends = vec!["local".to_owned()];
        if config.terminal.backend != "local" {
            backends.push(config.terminal.backend.clone());
        }
        let settings = crate::worker_config(
            config,
            "local".to_owned(),
            backends,
            Default::default(),
            None,
            None,
        )?;
        let mut started = Vec::new();
        for index in 0..workers {
            let name = if workers == 1 {
                "local".to_owned()
            } else {
                format!("local-{}", index + 1)
            };
            let worker = Worker::new(WorkerConfig {
                name,
                ..settings.clone()
            });
            worker.start_housekeeping(shutdown.clone()).await;
            attach_in_process(&coordinator, worker.clone(), shutdown.clone()).await?;
            started.push(worker);
        }
        Ok(Embedded {
            coordinator,
            workers: started,
            shutdown,
        })
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        for worker in &self.workers {
            worker.shutdown().await;
        }
        self.coordinator.shutdown();
    }
}

/// Connects a worker to a coordinator in the same process over channels.
async fn attach_in_process(
    coordinator: &Arc<Coordinator>,
    worker: Arc<Worker>,
    shutdown: CancellationToken,
) -> Result<()> {
    let (events, events_rx) = mpsc::channel(256);
    let (commands, commands_rx) = mpsc::unbounded_channel();
    events
        .send(caduceus_proto::WorkerEvent {
            event: Some(worker_event::Event::Hello(worker.hello())),
        })
        .await
        .map_err(|_| anyhow!("the embedded worker's channel closed"))?;
    let stream = Box::pin(ReceiverStream::new(events_rx).map(Ok));
    coordinator
        .attach_worker(stream, commands, "in-process".to_owned())
        .await
        .map_err(|s| status_error(&s))?;
    tokio::spawn(caduceus_worker::link::serve_in_process(
        worker,
        tokio_stream::wrappers::UnboundedReceiverStream::new(commands_rx),
        events,
        shutdown,
    ));
    Ok(())
}

/// A Control client that presents the token on every request.
pub async fn connect(url: &str, token: &str, ca: Option<&std::path::Path>) -> Result<Client> {
    let endpoint = caduceus_proto::coordinator_endpoint(url, ca, None, Duration::from_secs(10))?;
    let channel = endpoint
        .connect()
        .await
        .with_context(|| format!("cannot reach the coordinator at {}", endpoint.uri()))?;
    let value = bearer(token).parse().map_err(|_| TokenNotAHeader)?;
    Ok(ControlClient::with_interceptor(channel, Bearer(value))
        .max_decoding_message_size(caduceus_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(caduceus_proto::MAX_MESSAGE_BYTES))
}

fn status_error(status: &Status) -> anyhow::Error {
    anyhow!("{}", status.message())
}

/// A failed CallTool: a broken connection is [`ConnectionLost`]; the
/// coordinator's own refusals (a bad token) keep their message. The Control
/// service answers every call with a result, so any other status comes from
/// the transport.
fn call_error(status: &Status) -> anyhow::Error {
    use tonic::Code;
    match status.code() {
        Code::Unavailable | Code::Unknown | Code::Cancelled | Code::Internal | Code::Aborted => {
            let mut detail = status.message().to_owned();
            let mut source = std::error::Error::source(status);
            while let Some(cause) = source {
                detail.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            ConnectionLost(detail).into()
        }
        _ => status_error(status),
    }
}
