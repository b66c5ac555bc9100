//! One MCP session: its tool list, its environments, and its calls.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ElicitationAction, Implementation, JsonObject, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};

use caduceus_common::result::{CallStatus, tool_error};
use caduceus_proto::{StatusResponse, token_from_authorization};

use super::environments::{Environments, Requested};
use super::fleet::{Credential, Fleet, FleetError, Reply, parse_decision};
use super::tools::{self, ENVIRONMENT_ARG};

/// How often a long call reports that it is still running.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);

/// How long a person has to answer an approval prompt. The approval itself
/// expires on the coordinator; past this the call answers `pending_approval`.
const ELICITATION_TIMEOUT: Duration = Duration::from_secs(300);

/// Status reads, 0.5 s apart, before a new environment's backend is known
/// (a worker reports its environments with every 1 s heartbeat).
const BACKEND_LOOKUPS: usize = 8;

/// What every session of one `mcp serve` shares.
pub struct Shared {
    pub fleet: Arc<Fleet>,
    /// The credential of stdio sessions (HTTP sessions present their own).
    pub credential: Credential,
}

/// One MCP session. Its environments are released when it ends.
#[derive(Clone)]
pub struct Session {
    shared: Arc<Shared>,
    environments: Arc<SessionEnvironments>,
}

/// Released on drop: the last clone of a session going away means its
/// transport closed (stdio's end, an HTTP session's DELETE or expiry).
struct SessionEnvironments {
    shared: Arc<Shared>,
    table: Environments,
    /// The credential that created them, to release them with.
    owner: std::sync::Mutex<Option<Credential>>,
}

impl Drop for SessionEnvironments {
    fn drop(&mut self) {
        let ids = self.table.drain();
        if ids.is_empty() {
            return;
        }
        let credential = self
            .owner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| self.shared.credential.clone());
        let fleet = self.shared.fleet.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            for id in ids {
                if let Err(err) = fleet.release(&credential, &id).await {
                    tracing::warn!(environment = %id, "releasing an ended MCP session's environment failed: {err}");
                }
            }
        });
    }
}

impl Session {
    pub fn new(shared: Arc<Shared>) -> Self {
        Session {
            environments: Arc::new(SessionEnvironments {
                shared: shared.clone(),
                table: Environments::new(),
                owner: std::sync::Mutex::new(None),
            }),
            shared,
        }
    }

    /// Releases every environment of the session now (stdio's end: the
    /// process exits right after, too soon for a spawned release).
    pub async fn release_all(&self) {
        let credential = self.credential_for_release();
        for id in self.environments.table.drain() {
            if let Err(err) = self.shared.fleet.release(&credential, &id).await {
                tracing::warn!(environment = %id, "releasing the environment failed: {err}");
            }
        }
    }

    fn credential_for_release(&self) -> Credential {
        self.environments
            .owner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| self.shared.credential.clone())
    }

    /// The caller's credential: an HTTP request's bearer token (checked by
    /// the listener before the request got here), else the server's own.
    fn credential(&self, context: &RequestContext<RoleServer>) -> Credential {
        let presented = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.headers.get(axum::http::header::AUTHORIZATION))
            .and_then(|value| value.to_str().ok())
            .and_then(token_from_authorization)
            .map(str::to_owned);
        let credential = match presented {
            Some(token) => Credential(Some(token)),
            None => self.shared.credential.clone(),
        };
        let mut owner = self
            .environments
            .owner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if owner.is_none() {
            *owner = Some(credential.clone());
        }
        credential
    }

    async fn create_environment(
        &self,
        credential: &Credential,
        arguments: &JsonObject,
    ) -> Result<Value, String> {
        let requested = requested(arguments)?;
        let fleet = &self.shared.fleet;
        let status = fleet.status(credential).await.map_err(|e| e.to_string())?;
        if let Some(missing) = unplaceable(&status, &requested) {
            return Err(missing);
        }
        let id = self
            .environments
            .table
            .create(requested.clone())
            .map_err(|e| e.to_string())?;
        // The first call places the task on a worker and starts its sandbox,
        // so the id names a real environment from here on.
        let started = fleet
            .call(
                credential,
                "terminal",
                json!({"command": "pwd"}).to_string(),
                &id,
                requested.labels.clone(),
            )
            .await;
        let reply = match started {
            Ok(reply) if reply.status == CallStatus::Ok => reply,
            Ok(reply) => {
                self.forget(credential, &id).await;
                return Err(format!(
                    "the environment could not be started: {}",
                    reply.text
                ));
            }
            Err(err) => {
                self.forget(credential, &id).await;
                return Err(err.to_string());
            }
        };
        self.environments.table.ran_on(&id, &reply.worker);
        let status = fleet.status(credential).await.map_err(|e| e.to_string())?;
        let worker = status.workers.iter().find(|w| w.name == reply.worker);
        let labels = worker.map(|w| w.labels.clone()).unwrap_or_default();
        // The scheduler placed the environment by the requested labels (they
        // became its task's placement labels); a mismatch here means the
        // task already had an environment elsewhere, and is refused rather
        // than silently wrong.
        if let Some(mismatch) = placement_mismatch(&requested, &reply.worker, &labels) {
            self.forget(credential, &id).await;
            return Err(mismatch);
        }
        let mut answer = json!({
            "environment": id,
            "worker": reply.worker,
            "labels": labels.into_iter().collect::<BTreeMap<_, _>>(),
        });
        if let Some(cwd) = output_line(&reply.text) {
            answer["cwd"] = json!(cwd);
        }
        if let Some(wanted) = &requested.backend {
            let backend = self.backend_of(credential, &id).await;
            if backend.as_deref() != Some(wanted.as_str()) {
                self.forget(credential, &id).await;
                return Err(format!(
                    "the coordinator started the environment on worker '{}' with backend '{}', not '{wanted}': it does not place environments by backend yet (set terminal.backend: {wanted} in the coordinator's configuration, or leave `backend` out)",
                    reply.worker,
                    backend.as_deref().unwrap_or("unknown")
                ));
            }
            answer["backend"] = json!(wanted);
        }
        Ok(answer)
    }

    /// The backend of a just-started environment, from the coordinator's
    /// status (which learns of it with the worker's next heartbeat, 1 s).
    async fn backend_of(&self, credential: &Credential, id: &str) -> Option<String> {
        for _ in 0..BACKEND_LOOKUPS {
            if let Ok(status) = self.shared.fleet.status(credential).await
                && let Some((_, _, env)) = find_environment(&status, id)
            {
                return Some(env.backend);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        None
    }

    async fn forget(&self, credential: &Credential, id: &str) {
        let _ = self.environments.table.remove(id);
        let _ = self.shared.fleet.release(credential, id).await;
    }

    async fn list_environments(&self, credential: &Credential) -> Result<Value, String> {
        let status = self
            .shared
            .fleet
            .status(credential)
            .await
            .map_err(|e| e.to_string())?;
        let listed: Vec<Value> = self
            .environments
            .table
            .all()
            .into_iter()
            .map(|listed| {
                let super::environments::Listed {
                    id,
                    requested,
                    default,
                    worker,
                } = listed;
                let mut entry = json!({"environment": id, "default": default, "worker": worker});
                if requested.backend.is_some() || !requested.labels.is_empty() {
                    entry["requested"] =
                        json!({"backend": requested.backend, "labels": requested.labels});
                }
                match find_environment(&status, &id) {
                    Some((worker, _, env)) => {
                        entry["state"] = json!("ready");
                        entry["worker"] = json!(worker);
                        entry["backend"] = json!(env.backend);
                        entry["cwd"] = json!(env.cwd);
                        entry["running_calls"] = json!(env.running_calls);
                        entry["background_processes"] = json!(env.background_processes);
                        entry["idle_seconds"] = json!(env.idle_ms / 1000);
                    }
                    // Just made (its worker's next heartbeat reports it), or
                    // its worker went away (the next call starts it afresh
                    // and says so).
                    None if worker.is_some() => entry["state"] = json!("placed"),
                    None => entry["state"] = json!("not started"),
                }
                entry
            })
            .collect();
        Ok(json!({"environments": listed}))
    }

    async fn release_environment(
        &self,
        credential: &Credential,
        arguments: &JsonObject,
    ) -> Result<Value, String> {
        let id = arguments
            .get(ENVIRONMENT_ARG)
            .and_then(Value::as_str)
            .ok_or("environment_release needs `environment`: the id environment_create returned")?;
        let id = self
            .environments
            .table
            .resolve(Some(id))
            .map_err(|e| e.to_string())?;
        self.environments
            .table
            .remove(&id)
            .map_err(|e| e.to_string())?;
        let released = self
            .shared
            .fleet
            .release(credential, &id)
            .await
            .map_err(|e| e.to_string())?;
        Ok(json!({"environment": id, "released": released}))
    }

    /// A fleet tool's call, with progress notifications while it runs and
    /// cancellation when the client cancels it.
    async fn run_tool(
        &self,
        credential: &Credential,
        name: &str,
        mut arguments: JsonObject,
        context: &RequestContext<RoleServer>,
    ) -> Result<Reply, String> {
        let named = match arguments.remove(ENVIRONMENT_ARG) {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(id),
            Some(other) => {
                return Err(format!(
                    "`environment` must be a string (an id from environment_create), not {other}"
                ));
            }
        };
        let task = self
            .environments
            .table
            .resolve(named.as_deref())
            .map_err(|e| e.to_string())?;
        let arguments_json = Value::Object(arguments).to_string();
        let reply = self
            .call_with_progress(credential, name, arguments_json.clone(), &task, context)
            .await?;
        self.environments.table.ran_on(&task, &reply.worker);
        if reply.status != CallStatus::PendingApproval || !elicitation_supported(context) {
            return Ok(reply);
        }
        if !self.shared.fleet.may_answer_approvals(credential).await {
            return Ok(reply);
        }
        let Some(decision) = ask_for_approval(&reply.text, context).await else {
            return Ok(reply);
        };
        let Some(id) = approval_id(&reply.text) else {
            return Ok(reply);
        };
        if let Err(err) = self
            .shared
            .fleet
            .answer_approval(credential, &id, parse_decision(&decision))
            .await
        {
            tracing::warn!(approval = %id, "the MCP client's answer was not applied: {err}");
            return Ok(reply);
        }
        // The answer is on the coordinator: the same command in the same
        // environment now runs (or reads the denial).
        self.call_with_progress(credential, name, arguments_json, &task, context)
            .await
    }

    async fn call_with_progress(
        &self,
        credential: &Credential,
        name: &str,
        arguments_json: String,
        task: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Reply, String> {
        let call = self
            .shared
            .fleet
            .call(credential, name, arguments_json, task, BTreeMap::new());
        tokio::pin!(call);
        let started = Instant::now();
        let progress = context.meta.get_progress_token();
        let mut ticks =
            tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
        loop {
            tokio::select! {
                reply = &mut call => return reply.map_err(|e| describe(&e)),
                // Dropping the call's future cancels it on the worker.
                () = context.ct.cancelled() => {
                    return Err("the call was cancelled by the client; its command was stopped".to_owned());
                }
                _ = ticks.tick(), if progress.is_some() => {
                    if let Some(token) = progress.clone() {
                        let elapsed = started.elapsed().as_secs_f64().floor();
                        let note = ProgressNotificationParam::new(token, elapsed)
                            .with_message(format!("{name} running in {task} for {elapsed:.0}s"));
                        let _ = context.peer.notify_progress(note).await;
                    }
                }
            }
        }
    }
}

fn describe(err: &FleetError) -> String {
    err.to_string()
}

fn requested(arguments: &JsonObject) -> Result<Requested, String> {
    let backend = match arguments.get("backend") {
        None | Some(Value::Null) => None,
        Some(Value::String(b)) if b.trim().is_empty() => None,
        Some(Value::String(b)) => Some(b.trim().to_owned()),
        Some(other) => return Err(format!("`backend` must be a string, not {other}")),
    };
    let mut labels = BTreeMap::new();
    match arguments.get("labels") {
        None | Some(Value::Null) => {}
        Some(Value::Object(map)) => {
            for (key, value) in map {
                let value = match value {
                    Value::String(s) => s.clone(),
                    Value::Bool(_) | Value::Number(_) => value.to_string(),
                    other => {
                        return Err(format!("label '{key}' must be a string, not {other}"));
                    }
                };
                labels.insert(key.clone(), value);
            }
        }
        Some(other) => {
            return Err(format!(
                "`labels` must be an object of strings, e.g. {{\"gpu\": \"true\"}}, not {other}"
            ));
        }
    }
    Ok(Requested { backend, labels })
}

/// Why no attached worker could hold an environment like `requested`, or
/// `None` when one can.
fn unplaceable(status: &StatusResponse, requested: &Requested) -> Option<String> {
    let fits = |w: &caduceus_proto::WorkerStatus| {
        w.state == "ready"
            && requested
                .backend
                .as_ref()
                .is_none_or(|b| w.backends.contains(b))
            && requested
                .labels
                .iter()
                .all(|(k, v)| w.labels.get(k) == Some(v))
    };
    if status.workers.iter().any(fits) {
        return None;
    }
    let offered: Vec<String> = status
        .workers
        .iter()
        .map(|w| {
            let mut labels: Vec<String> =
                w.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            labels.sort();
            format!(
                "{} ({}; backends {}; labels {})",
                w.name,
                w.state,
                w.backends.join(","),
                if labels.is_empty() {
                    "none".to_owned()
                } else {
                    labels.join(",")
                }
            )
        })
        .collect();
    let wanted = describe_requested(requested);
    Some(if offered.is_empty() {
        format!("no worker is attached, so no environment{wanted} can be created")
    } else {
        format!(
            "no ready worker offers an environment{wanted}; attached: {}",
            offered.join("; ")
        )
    })
}

fn describe_requested(requested: &Requested) -> String {
    let mut parts = Vec::new();
    if let Some(backend) = &requested.backend {
        parts.push(format!("backend '{backend}'"));
    }
    if !requested.labels.is_empty() {
        let labels: Vec<String> = requested
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        parts.push(format!("labels {}", labels.join(",")));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" with {}", parts.join(" and "))
    }
}

/// Where the coordinator holds `task_id`: worker name, worker labels, and
/// the environment.
fn find_environment(
    status: &StatusResponse,
    task_id: &str,
) -> Option<(
    String,
    HashMap<String, String>,
    caduceus_proto::EnvironmentInfo,
)> {
    status.workers.iter().find_map(|w| {
        w.environments
            .iter()
            .find(|e| e.task_id == task_id)
            .map(|e| (w.name.clone(), w.labels.clone(), e.clone()))
    })
}

/// Why an environment placed on `worker` is not what was asked for.
fn placement_mismatch(
    requested: &Requested,
    worker: &str,
    labels: &HashMap<String, String>,
) -> Option<String> {
    let missing: Vec<String> = requested
        .labels
        .iter()
        .filter(|(k, v)| labels.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "the coordinator placed the environment on worker '{worker}', which lacks the labels {}: this coordinator does not place environments by labels yet; try again, or leave `labels` out",
        missing.join(",")
    ))
}

/// The first line of a terminal result's output (`pwd`'s answer).
fn output_line(result: &str) -> Option<String> {
    let value: Value = serde_json::from_str(result).ok()?;
    let line = value
        .get("output")?
        .as_str()?
        .lines()
        .next()?
        .trim()
        .to_owned();
    (!line.is_empty()).then_some(line)
}

fn elicitation_supported(context: &RequestContext<RoleServer>) -> bool {
    context
        .peer
        .peer_info()
        .is_some_and(|info| info.capabilities.elicitation.is_some())
}

fn approval_id(text: &str) -> Option<String> {
    serde_json::from_str::<Value>(text)
        .ok()?
        .get("approval_id")?
        .as_str()
        .map(str::to_owned)
}

/// Puts a pending approval to the client's user; their decision (`once`,
/// `session`, `always` or `deny`), or `None` when the client could not ask.
async fn ask_for_approval(pending: &str, context: &RequestContext<RoleServer>) -> Option<String> {
    let pending: Value = serde_json::from_str(pending).ok()?;
    let command = pending.get("command").and_then(Value::as_str).unwrap_or("");
    let description = pending
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or("a dangerous command");
    let mut choices = vec!["once", "session"];
    if pending.get("allow_permanent").and_then(Value::as_bool) == Some(true) {
        choices.push("always");
    }
    choices.push("deny");
    let params: ElicitRequestParams = serde_json::from_value(json!({
        "mode": "form",
        "message": format!("caduceus: approve this command ({description})?\n\n{command}"),
        "requestedSchema": {
            "type": "object",
            "properties": {
                "decision": {
                    "type": "string",
                    "title": "Decision",
                    "description": "once: this command now; session: commands like it in this environment; always: add it to the allowlist; deny: do not run it",
                    "enum": choices,
                }
            },
            "required": ["decision"]
        }
    }))
    .map_err(|err| tracing::warn!("cannot build the approval prompt: {err}"))
    .ok()?;
    let answer = tokio::time::timeout(ELICITATION_TIMEOUT, context.peer.create_elicitation(params))
        .await
        .ok()?
        .map_err(|err| tracing::warn!("the MCP client could not ask for approval: {err}"))
        .ok()?;
    match answer.action {
        ElicitationAction::Accept => {
            let decision = answer
                .content
                .as_ref()
                .and_then(|c| c.get("decision"))
                .and_then(Value::as_str)
                .unwrap_or("deny")
                .to_owned();
            Some(if choices.contains(&decision.as_str()) {
                decision
            } else {
                "deny".to_owned()
            })
        }
        // Declined, cancelled, or an action a later protocol adds: not a yes.
        _ => Some("deny".to_owned()),
    }
}

fn text_result(text: String, is_error: bool) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.is_error = Some(is_error);
    result
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("caduceus", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "caduceus runs tools in sandboxes on a fleet of workers. Every tool takes an optional `environment`: without it calls share this session's default environment; environment_create makes more (on other workers), and calls in different environments run in parallel. Release environments you no longer need with environment_release; all of them end with the session.",
            )
    }

    /// Sessions (the default environment belongs to one) and server-to-client
    /// requests (approval prompts) exist only in the handshake-era protocol:
    /// 2026-07-28 is stateless and forbids server requests.
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let credential = self.credential(&context);
        let definitions = self
            .shared
            .fleet
            .definitions(&credential)
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let mut listed = tools::environment_tools();
        listed.extend(tools::fleet_tools(&definitions));
        Ok(ListToolsResult::with_all_items(listed))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let credential = self.credential(&context);
        let arguments = request.arguments.unwrap_or_default();
        let environment_tool = match request.name.as_ref() {
            tools::ENVIRONMENT_CREATE => {
                Some(self.create_environment(&credential, &arguments).await)
            }
            tools::ENVIRONMENT_LIST => Some(self.list_environments(&credential).await),
            tools::ENVIRONMENT_RELEASE => {
                Some(self.release_environment(&credential, &arguments).await)
            }
            name if tools::is_agent_loop_tool(name) => Some(Err(format!(
                "'{name}' belongs to caduceus' own agent loop and is not offered over MCP; use your client's own equivalent"
            ))),
            _ => None,
        };
        let result = match environment_tool {
            Some(Ok(answer)) => text_result(answer.to_string(), false),
            Some(Err(message)) => text_result(tool_error(message), true),
            None => match self
                .run_tool(&credential, &request.name, arguments, &context)
                .await
            {
                Ok(reply) => {
                    let failed = matches!(
                        reply.status,
                        CallStatus::Error
                            | CallStatus::Blocked
                            | CallStatus::Timeout
                            | CallStatus::Cancelled
                    );
                    text_result(reply.text, failed)
                }
                Err(message) => text_result(tool_error(message), true),
            },
        };
        Ok(CallToolResponse::Complete(result))
    }
}

#[cfg(test)]
#[path = "handler_tests.rs"]
mod tests;
