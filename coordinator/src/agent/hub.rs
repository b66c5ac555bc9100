//! The `SessionHub`: starts sessions, finds live ones by id (cancel, clarify
//! answers, status) and routes environment notices to the session that
//! started the process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use ractor::{Actor, ActorRef};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use caduceus_llm::{ChatModel, LlmConfig, model_from_config};
use caduceus_proto::{EnvironmentNotice, SessionEvent, SessionStatus};

use super::AgentSettings;
use super::events::EventStream;
use super::session::{SessionActor, SessionArgs, SessionMsg, SessionShared, SessionSpec};
use super::store::SessionStore;
use crate::dispatch::Dispatcher;
use crate::registry::ToolFilter;

/// Why a session could not start.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error(
        "no model configured: pass --model, set CADUCEUS_MODEL, or set llm.model in config.yaml (\"replay:FILE\" replays a recorded session)"
    )]
    NoModel,
    #[error("cannot use model '{model}': {reason}")]
    Model { model: String, reason: String },
    #[error("{0}")]
    Toolsets(String),
    #[error("the session actor failed to start: {0}")]
    Spawn(String),
}

/// What a client asks for (the `StartSession` request).
#[derive(Debug, Clone, Default)]
pub struct StartRequest {
    pub prompt: String,
    /// "" = the configured model; `replay:FILE` replays; any other name is
    /// asked of the configured OpenAI-compatible endpoint.
    pub model: String,
    pub enabled_toolsets: Vec<String>,
    pub disabled_toolsets: Vec<String>,
    /// 0 = the configured default (90).
    pub max_iterations: u32,
    /// "" = a new environment, released when the session ends; a given id
    /// reuses (and keeps) that task's environment.
    pub task_id: String,
    /// The client answers `clarify` questions (AnswerClarify).
    pub interactive: bool,
    /// The client token's name (audit log); `None` for in-process starts.
    pub caller: Option<String>,
}

/// A started session: its id and its event stream (children included). The
/// stream ends after the root's `final` event.
pub struct SessionStream {
    pub session_id: String,
    pub events: mpsc::UnboundedReceiver<SessionEvent>,
}

pub(crate) struct LiveSession {
    actor: ActorRef<SessionMsg>,
    shared: Arc<SessionShared>,
    parent_id: Option<String>,
    cancel: CancellationToken,
}

pub(crate) struct HubInner {
    pub dispatcher: Arc<Dispatcher>,
    pub settings: AgentSettings,
    /// Opened with the first session, so commands that start none leave no database behind.
    store: OnceLock<Option<SessionStore>>,
    live: Mutex<HashMap<String, LiveSession>>,
    child_model: OnceLock<Result<Arc<dyn ChatModel>, String>>,
}

impl HubInner {
    pub(crate) fn store(&self) -> Option<&SessionStore> {
        self.store
            .get_or_init(|| {
                let path = self.settings.state_db.as_ref()?;
                match SessionStore::open(path) {
                    Ok(store) => Some(store),
                    Err(err) => {
                        tracing::warn!("sessions will not be recorded: {err}");
                        None
                    }
                }
            })
            .as_ref()
    }

    pub(crate) fn register(
        &self,
        spec: &SessionSpec,
        actor: ActorRef<SessionMsg>,
        shared: Arc<SessionShared>,
    ) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.insert(
            spec.session_id.clone(),
            LiveSession {
                actor,
                shared,
                parent_id: spec.parent_id.clone(),
                cancel: spec.cancel.clone(),
            },
        );
    }

    pub(crate) fn unregister(&self, session_id: &str) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.remove(session_id);
    }

    fn actor(&self, session_id: &str) -> Option<ActorRef<SessionMsg>> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.get(session_id).map(|s| s.actor.clone())
    }

    /// The model of delegated children: `delegation.model` when configured,
    /// else the parent's (so a replay file drives the whole tree).
    pub(crate) fn child_model(
        &self,
        parent: &Arc<dyn ChatModel>,
    ) -> Result<Arc<dyn ChatModel>, String> {
        let delegation = &self.settings.delegation;
        let Some(model) = delegation.model.as_ref().filter(|m| !m.trim().is_empty()) else {
            return Ok(parent.clone());
        };
        self.child_model
            .get_or_init(|| {
                let mut config = self.settings.llm.clone();
                config.model = model.clone();
                if let Some(base_url) = &delegation.base_url {
                    config.base_url = base_url.clone();
                }
                if let Some(api_key) = &delegation.api_key {
                    config.api_key = Some(api_key.clone());
                }
                model_from_config(&config).map_err(|e| e.to_string())
            })
            .clone()
    }
}

/// Starts and tracks agent sessions. Cheap to clone.
#[derive(Clone)]
pub struct SessionHub {
    inner: Arc<HubInner>,
}

impl SessionHub {
    pub fn new(dispatcher: Arc<Dispatcher>, settings: AgentSettings) -> Self {
        SessionHub {
            inner: Arc::new(HubInner {
                dispatcher,
                settings,
                store: OnceLock::new(),
                live: Mutex::new(HashMap::new()),
                child_model: OnceLock::new(),
            }),
        }
    }

    pub fn settings(&self) -> &AgentSettings {
        &self.inner.settings
    }

    /// The session database, when sessions are recorded.
    pub fn store(&self) -> Option<&SessionStore> {
        self.inner.store()
    }

    /// The model a request names.
    fn resolve_model(&self, name: &str) -> Result<(Arc<dyn ChatModel>, String), SessionError> {
        let mut config: LlmConfig = self.inner.settings.llm.clone();
        if !name.trim().is_empty() {
            config.model = name.trim().to_owned();
        }
        if config.model.trim().is_empty() {
            return Err(SessionError::NoModel);
        }
        let label = config.model.clone();
        let model = model_from_config(&config).map_err(|e| SessionError::Model {
            model: label.clone(),
            reason: e.to_string(),
        })?;
        Ok((model, label))
    }

    /// Starts a session with the model the request names.
    pub async fn start(&self, request: StartRequest) -> Result<SessionStream, SessionError> {
        if request.prompt.trim().is_empty() {
            return Err(SessionError::EmptyPrompt);
        }
        let (model, label) = self.resolve_model(&request.model)?;
        self.start_with_model(request, model, label).await
    }

    /// Starts a session with a given model (tests, embedders).
    pub async fn start_with_model(
        &self,
        request: StartRequest,
        model: Arc<dyn ChatModel>,
        label: String,
    ) -> Result<SessionStream, SessionError> {
        if request.prompt.trim().is_empty() {
            return Err(SessionError::EmptyPrompt);
        }
        let filter = ToolFilter {
            enabled_toolsets: request.enabled_toolsets,
            disabled_toolsets: request.disabled_toolsets,
            blocked_tools: Vec::new(),
        };
        self.inner
            .dispatcher
            .registry()
            .snapshot()
            .selected_names(&filter)
            .map_err(|e| SessionError::Toolsets(e.to_string()))?;
        let session_id = new_session_id();
        let (release_task, task_id) = match request.task_id.trim() {
            "" => (true, format!("task-{}", &session_id[5..])),
            given => (false, given.to_owned()),
        };
        let spec = SessionSpec {
            session_id: session_id.clone(),
            parent_id: None,
            root_id: session_id.clone(),
            depth: 0,
            task_id,
            release_task,
            prompt: request.prompt,
            system_prompt: None,
            filter,
            caller: request.caller,
            max_iterations: if request.max_iterations > 0 {
                request.max_iterations
            } else {
                self.inner.settings.max_iterations
            },
            model_label: label,
            role: None,
            interactive: request.interactive,
            cancel: CancellationToken::new(),
            task_index: None,
        };
        let (events, rx) = EventStream::new();
        if spec.interactive {
            self.forward_approvals(&spec, &events);
        }
        let args = SessionArgs {
            hub: self.inner.clone(),
            spec,
            model,
            events,
            report: None,
        };
        Actor::spawn(None, SessionActor, args)
            .await
            .map_err(|e| SessionError::Spawn(e.to_string()))?;
        Ok(SessionStream {
            session_id,
            events: rx,
        })
    }

    /// A person follows this session: the gate's approval requests for it go
    /// to its event stream as `approval_needed` events and the call waits for
    /// the answer (AnswerApproval) instead of failing closed at once. The
    /// forwarding ends with the session (its cancellation token is cancelled
    /// when its actor stops), so the stream still ends after `final`, or
    /// earlier when nobody reads the stream any more.
    fn forward_approvals(&self, spec: &SessionSpec, events: &EventStream) {
        let Some(approvals) = self.inner.dispatcher.gate().approvals() else {
            return;
        };
        let mut listener = approvals.attach_listener(&spec.session_id);
        let events = events.clone();
        let session_id = spec.session_id.clone();
        let ended = spec.cancel.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    request = listener.recv() => match request {
                        Some(request) => events.emit(&session_id, super::events::APPROVAL_NEEDED, &request.to_json()),
                        None => break,
                    },
                    () = ended.cancelled() => break,
                    () = events.closed() => break,
                }
            }
        });
    }

    /// Cancels a live session and its children. `false` if it is not running.
    pub fn cancel(&self, session_id: &str) -> bool {
        let live = self.inner.live.lock().unwrap_or_else(|e| e.into_inner());
        match live.get(session_id) {
            Some(session) => {
                session.cancel.cancel();
                let _ = session.actor.cast(SessionMsg::Cancel);
                true
            }
            None => false,
        }
    }

    /// Answers a pending clarify question. `false` if none was waiting.
    pub async fn answer_clarify(&self, session_id: &str, question_id: &str, answer: &str) -> bool {
        let Some(actor) = self.inner.actor(session_id) else {
            return false;
        };
        let asked = actor
            .call(
                |reply| SessionMsg::AnswerClarify {
                    question_id: question_id.to_owned(),
                    answer: answer.to_owned(),
                    reply,
                },
                Some(std::time::Duration::from_secs(10)),
            )
            .await;
        matches!(asked, Ok(ractor::rpc::CallResult::Success(true)))
    }

    /// The live sessions, for `Status`.
    pub fn statuses(&self) -> Vec<SessionStatus> {
        let live = self.inner.live.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<SessionStatus> = live
            .iter()
            .map(|(id, s)| SessionStatus {
                session_id: id.clone(),
                state: "running".to_owned(),
                parent_id: s.parent_id.clone().unwrap_or_default(),
                api_calls: s.shared.api_calls(),
            })
            .collect();
        out.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        out
    }

    /// Hands a worker's notice to the session that started the process.
    pub fn route_notice(&self, worker: String, notice: EnvironmentNotice) {
        match self.inner.actor(&notice.session_id) {
            Some(actor) => {
                let _ = actor.cast(SessionMsg::Notice { worker, notice });
            }
            None => {
                tracing::debug!(session = %notice.session_id, kind = %notice.kind, "a notice for no live session was dropped")
            }
        }
    }

    /// Routes every notice arriving on `notices` until the channel closes.
    pub fn spawn_notice_router(
        &self,
        mut notices: mpsc::UnboundedReceiver<(String, EnvironmentNotice)>,
    ) {
        let hub = self.clone();
        tokio::spawn(async move {
            while let Some((worker, notice)) = notices.recv().await {
                hub.route_notice(worker, notice);
            }
        });
    }

    /// Cancels every live session (shutdown).
    pub fn cancel_all(&self) {
        let live = self.inner.live.lock().unwrap_or_else(|e| e.into_inner());
        for session in live.values() {
            session.cancel.cancel();
        }
    }
}

/// `sess_` and 24 hex digits.
pub(crate) fn new_session_id() -> String {
    format!("sess_{}", &uuid::Uuid::new_v4().simple().to_string()[..24])
}

#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;
