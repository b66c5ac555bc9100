//! What `caduceus mcp serve` drives: a remote coordinator over the Control
//! API, or an embedded coordinator with a local worker. Every operation takes
//! the caller's [`Credential`], so that against a remote coordinator each MCP
//! client acts with its own token: the coordinator checks that token's role
//! and names it in the audit log; this process holds no authority of its own.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use tonic::Code;

use caduceus_common::result::CallStatus;
use caduceus_coordinator::ClientCall;
use caduceus_coordinator::call::ToolFilter;
use caduceus_coordinator::dispatch::RawArguments;
use caduceus_coordinator::gate::{Decision, Scope};
use caduceus_proto::{
    AnswerApprovalRequest, CallToolRequest, ListApprovalsRequest, ListToolsRequest,
    ReleaseEnvironmentRequest, StatusRequest, StatusResponse,
};

use crate::target::{Client, Embedded, TokenNotAHeader, connect};

/// The audit log's name for calls an embedded fleet takes from MCP clients.
const EMBEDDED_CALLER: &str = "mcp";

/// How long a bearer token the coordinator accepted is trusted without
/// asking again. Calls carry the token anyway (the coordinator refuses a
/// revoked one at once); this only spares a round trip per HTTP request.
const VERIFIED_FOR: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The coordinator refused the token (missing, unknown, revoked, expired).
    #[error("{0}")]
    Unauthenticated(String),
    /// The token is valid but its role may not do this.
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    Unavailable(String),
}

/// Who is asking: the token an MCP client presented (HTTP), or the one
/// `mcp serve` was started with (stdio).
#[derive(Clone)]
pub struct Credential(pub Option<String>);

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(<redacted>)")
    }
}

/// One call's answer.
pub struct Reply {
    /// The text the model would read (`caduceus call`'s output).
    pub text: String,
    pub status: CallStatus,
    pub worker: String,
}

pub enum Fleet {
    Remote(RemoteFleet),
    Embedded(Embedded),
}

pub struct RemoteFleet {
    url: String,
    ca: Option<PathBuf>,
    /// One connection per token (a tonic channel multiplexes concurrent calls).
    clients: Mutex<HashMap<String, (Client, Option<Instant>)>>,
}

impl RemoteFleet {
    pub fn new(url: String, ca: Option<PathBuf>) -> Self {
        RemoteFleet {
            url,
            ca,
            clients: Mutex::new(HashMap::new()),
        }
    }

    async fn client(&self, credential: &Credential) -> Result<Client, FleetError> {
        let token = credential.0.as_deref().ok_or_else(|| {
            FleetError::Unauthenticated(
                "missing token: a remote coordinator needs one (pass --token or --token-file, or set CADUCEUS_TOKEN)".to_owned(),
            )
        })?;
        if let Some((client, _)) = lock(&self.clients).get(token) {
            return Ok(client.clone());
        }
        let client = connect(&self.url, token, self.ca.as_deref())
            .await
            .map_err(|e| connect_error(&e))?;
        lock(&self.clients).insert(token.to_owned(), (client.clone(), None));
        Ok(client)
    }
}

/// A failed connection: a token no header can carry is the caller's to fix
/// (401); anything else means the coordinator cannot be reached.
fn connect_error(err: &anyhow::Error) -> FleetError {
    if err.is::<TokenNotAHeader>() {
        FleetError::Unauthenticated(err.to_string())
    } else {
        FleetError::Unavailable(format!("{err:#}"))
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn refusal(status: &tonic::Status) -> FleetError {
    let message = status.message().to_owned();
    match status.code() {
        Code::Unauthenticated => FleetError::Unauthenticated(message),
        Code::PermissionDenied => FleetError::PermissionDenied(message),
        _ => FleetError::Unavailable(format!("the coordinator did not answer: {message}")),
    }
}

impl Fleet {
    /// Whether `presented` may use this server: the remote coordinator
    /// decides for its tokens (any role that may call tools); an embedded
    /// fleet admits only `expected`, the token `mcp serve` was given.
    pub async fn admit(&self, presented: &str, expected: Option<&str>) -> Result<(), FleetError> {
        match self {
            Fleet::Embedded(_) => match expected {
                Some(expected) if caduceus_proto::tokens_match(expected, presented) => Ok(()),
                _ => Err(FleetError::Unauthenticated(
                    "invalid token: this server admits only the token it was started with"
                        .to_owned(),
                )),
            },
            Fleet::Remote(remote) => {
                let credential = Credential(Some(presented.to_owned()));
                let fresh = lock(&remote.clients)
                    .get(presented)
                    .and_then(|(_, verified)| *verified)
                    .is_some_and(|at| at.elapsed() < VERIFIED_FOR);
                if fresh {
                    return Ok(());
                }
                let mut client = remote.client(&credential).await?;
                // `ListTools` needs the client role: a worker token is refused
                // here as it would be by every tool call.
                let outcome = client
                    .list_tools(ListToolsRequest::default())
                    .await
                    .map_err(|s| refusal(&s));
                match outcome {
                    Ok(_) => {
                        if let Some(entry) = lock(&remote.clients).get_mut(presented) {
                            entry.1 = Some(Instant::now());
                        }
                        Ok(())
                    }
                    Err(err) => {
                        lock(&remote.clients).remove(presented);
                        Err(err)
                    }
                }
            }
        }
    }

    /// The definitions a model would see (OpenAI function shape).
    pub async fn definitions(&self, credential: &Credential) -> Result<Vec<Value>, FleetError> {
        match self {
            Fleet::Embedded(embedded) => embedded
                .coordinator
                .definitions(&ToolFilter::default())
                .map(|(definitions, _)| definitions)
                .map_err(|e| FleetError::Unavailable(e.to_string())),
            Fleet::Remote(remote) => {
                let response = remote
                    .client(credential)
                    .await?
                    .list_tools(ListToolsRequest::default())
                    .await
                    .map_err(|s| refusal(&s))?
                    .into_inner();
                response
                    .definitions_json
                    .iter()
                    .map(|d| {
                        serde_json::from_str(d).map_err(|e| {
                            FleetError::Unavailable(format!(
                                "the coordinator sent an invalid definition: {e}"
                            ))
                        })
                    })
                    .collect()
            }
        }
    }

    /// One tool call in the environment of `task_id`. Dropping the future
    /// cancels the call on the worker (remote: the stream is reset).
    pub async fn call(
        &self,
        credential: &Credential,
        tool: &str,
        arguments_json: String,
        task_id: &str,
        labels: BTreeMap<String, String>,
    ) -> Result<Reply, FleetError> {
        match self {
            Fleet::Embedded(embedded) => {
                let outcome = embedded
                    .coordinator
                    .call_tool(ClientCall {
                        caller: Some(EMBEDDED_CALLER.to_owned()),
                        labels,
                        ..ClientCall::new(tool, RawArguments::Text(arguments_json), task_id)
                    })
                    .await;
                Ok(Reply {
                    text: outcome.render(),
                    status: outcome.status,
                    worker: outcome.worker.unwrap_or_default(),
                })
            }
            Fleet::Remote(remote) => {
                let response = remote
                    .client(credential)
                    .await?
                    .call_tool(CallToolRequest {
                        tool: tool.to_owned(),
                        arguments_json,
                        task_id: task_id.to_owned(),
                        session_id: String::new(),
                        labels: labels.into_iter().collect(),
                    })
                    .await
                    .map_err(|s| refusal(&s))?
                    .into_inner();
                Ok(Reply {
                    text: response.result,
                    status: caduceus_proto::call_status(response.status),
                    worker: response.worker,
                })
            }
        }
    }

    pub async fn status(&self, credential: &Credential) -> Result<StatusResponse, FleetError> {
        match self {
            Fleet::Embedded(embedded) => Ok(embedded.coordinator.status().await),
            Fleet::Remote(remote) => Ok(remote
                .client(credential)
                .await?
                .status(StatusRequest {})
                .await
                .map_err(|s| refusal(&s))?
                .into_inner()),
        }
    }

    /// Ends the task's environment on its worker; false when it had none.
    pub async fn release(
        &self,
        credential: &Credential,
        task_id: &str,
    ) -> Result<bool, FleetError> {
        match self {
            Fleet::Embedded(embedded) => {
                Ok(embedded.coordinator.release_environment(task_id).await)
            }
            Fleet::Remote(remote) => Ok(remote
                .client(credential)
                .await?
                .release_environment(ReleaseEnvironmentRequest {
                    task_id: task_id.to_owned(),
                })
                .await
                .map_err(|s| refusal(&s))?
                .into_inner()
                .released),
        }
    }

    /// Whether this caller may answer approvals (an admin token, or an
    /// embedded fleet). Asked before a person is asked anything: an answer
    /// that could not be delivered would waste their decision.
    pub async fn may_answer_approvals(&self, credential: &Credential) -> bool {
        match self {
            Fleet::Embedded(embedded) => embedded.coordinator.approvals().is_some(),
            Fleet::Remote(remote) => match remote.client(credential).await {
                Ok(mut client) => client.list_approvals(ListApprovalsRequest {}).await.is_ok(),
                Err(_) => false,
            },
        }
    }

    /// Answers a pending approval; the coordinator's message on success.
    pub async fn answer_approval(
        &self,
        credential: &Credential,
        id: &str,
        decision: Decision,
    ) -> Result<String, FleetError> {
        match self {
            Fleet::Embedded(embedded) => {
                let approvals = embedded.coordinator.approvals().ok_or_else(|| {
                    FleetError::Unavailable("this coordinator has no approvals queue".to_owned())
                })?;
                let id = id.to_owned();
                // "always" may write the configuration file.
                tokio::task::spawn_blocking(move || approvals.answer(&id, decision))
                    .await
                    .map_err(|e| FleetError::Unavailable(format!("the answer was lost: {e}")))?
                    .map(|answered| answered.message)
                    .map_err(|e| FleetError::Unavailable(e.to_string()))
            }
            Fleet::Remote(remote) => {
                let (approve, scope, reason) = match decision {
                    Decision::Approve(scope) => (true, scope.as_str().to_owned(), String::new()),
                    Decision::Deny { reason } => (false, String::new(), reason.unwrap_or_default()),
                };
                let response = remote
                    .client(credential)
                    .await?
                    .answer_approval(AnswerApprovalRequest {
                        id: id.to_owned(),
                        approve,
                        scope,
                        reason,
                    })
                    .await
                    .map_err(|s| refusal(&s))?
                    .into_inner();
                if response.accepted {
                    Ok(response.message)
                } else {
                    Err(FleetError::Unavailable(response.message))
                }
            }
        }
    }

    /// Ends an embedded fleet's environments (no stray processes).
    pub async fn close(self) {
        if let Fleet::Embedded(embedded) = self {
            embedded.stop().await;
        }
    }
}

/// The scope names an approval prompt offers, as [`Scope::parse`] reads them.
pub fn parse_decision(answer: &str) -> Decision {
    match answer {
        "deny" => Decision::Deny {
            reason: Some("denied in the MCP client".to_owned()),
        },
        other => Decision::Approve(Scope::parse(other).unwrap_or(Scope::Once)),
    }
}
