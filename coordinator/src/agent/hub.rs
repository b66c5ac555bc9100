//! The `SessionHub`: starts sessions, finds live ones by id (cancel, clarify
//! answers, status), routes environment notices to the session that
//! started the process, resumes sessions a restart interrupted and
//! reattaches clients to a session's stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use ractor::ActorRef;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use caduceus_llm::{ChatModel, LlmConfig, model_from_config};
use caduceus_proto::{EnvironmentNotice, SessionEvent, SessionStatus};

use super::AgentSettings;
use super::events::{self, EventStream};
use super::resume;
use super::session::{SessionArgs, SessionMsg, SessionShared, SessionSpec, start_session};
use super::store::{self, SessionEnd, SessionStore, StoredSession};
use crate::call::ToolFilter;
use crate::dispatch::Dispatcher;

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
    #[error("sessions are not recorded by this coordinator (no state database)")]
    NotRecorded,
    #[error("no session '{0}' is recorded")]
    Unknown(String),
    #[error("session '{0}' is running on another coordinator process")]
    Elsewhere(String),
    #[error("{0}")]
    Store(#[from] store::StoreError),
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
    /// Placement labels of the session's environment (and of its children's,
    /// under their own); empty = `placement.labels`.
    pub labels: std::collections::BTreeMap<String, String>,
    /// "" = a new id; a given `sess_…` id is the session's (the Cron actor
    /// records a run's session id before the session starts).
    pub session_id: String,
    /// The directory the session's environment starts in (a cron job's
    /// `workdir`); `None`: the backend's own.
    pub workdir: Option<String>,
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
    /// The event streams of running session trees, by root id.
    streams: Mutex<HashMap<String, EventStream>>,
    child_model: OnceLock<Result<Arc<dyn ChatModel>, String>>,
}

impl HubInner {
    pub(crate) fn store(&self) -> Option<&SessionStore> {
        self.store
            .get_or_init(|| {
                let path = self.settings.state_db.as_ref()?;
                match SessionStore::open(path, self.settings.durable) {
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

    /// A root's stream is no longer live (after its `final`).
    pub(crate) fn stream_ended(&self, root_id: &str) {
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        streams.remove(root_id);
    }

    fn stream(&self, root_id: &str) -> Option<EventStream> {
        let streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        streams.get(root_id).cloned()
    }

    /// A resumed session waits until the worker that last held its
    /// environment is attached (or, with none recorded, any worker), at most
    /// [`resume::WORKER_WAIT`]: its calls then find their environment again.
    pub(crate) async fn wait_for_workers(&self, task_id: &str, cancel: &CancellationToken) {
        let wanted = self
            .store()
            .and_then(|s| store::read_placement(s.path(), task_id).ok().flatten());
        let deadline = Instant::now() + resume::WORKER_WAIT;
        loop {
            let workers = self.dispatcher.scheduler().status().await;
            let back = workers
                .iter()
                .any(|w| w.state == "ready" && wanted.as_ref().is_none_or(|name| &w.name == name));
            if back || cancel.is_cancelled() || Instant::now() >= deadline {
                if !back {
                    tracing::warn!(task = %task_id, worker = ?wanted, "resuming without the worker that held the environment");
                }
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn register_stream(&self, root_id: &str, events: &EventStream) {
        let mut streams = self.streams.lock().unwrap_or_else(|e| e.into_inner());
        streams.insert(root_id.to_owned(), events.clone());
    }

    /// A session that cannot resume ends failed, saying why.
    async fn resume_failed(&self, spec: &SessionSpec, stream: &EventStream, reason: &str) {
        let message = format!("the session could not resume after a restart: {reason}");
        tracing::warn!(session = %spec.session_id, "{message}");
        if let Some(store) = self.store() {
            store.session_ended(SessionEnd {
                id: spec.session_id.clone(),
                state: "failed".to_owned(),
                api_calls: 0,
                exit_reason: "error".to_owned(),
                final_response: None,
                error: Some(message.clone()),
                input_tokens: 0,
                output_tokens: 0,
            });
            store.flush().await;
        }
        stream.emit(
            &spec.session_id,
            events::ERROR,
            &serde_json::json!({"message": message}),
        );
        stream.emit(
            &spec.session_id,
            events::FINAL,
            &serde_json::json!({"text": null, "status": "failed", "exit_reason": "error", "error": message}),
        );
        self.stream_ended(&spec.session_id);
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
                streams: Mutex::new(HashMap::new()),
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

    /// Waits until everything recorded so far is on disk (before a process exits).
    pub async fn flush(&self) {
        if let Some(Some(store)) = self.inner.store.get() {
            store.flush().await;
        }
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
        let session_id = match request.session_id.trim() {
            "" => new_session_id(),
            given => given.to_owned(),
        };
        let (release_task, task_id) = match request.task_id.trim() {
            "" => (
                true,
                format!(
                    "task-{}",
                    session_id.strip_prefix("sess_").unwrap_or(&session_id)
                ),
            ),
            given => (false, given.to_owned()),
        };
        if !request.labels.is_empty() {
            self.inner
                .dispatcher
                .scheduler()
                .set_task_labels(&task_id, request.labels);
        }
        let workdir = request.workdir.filter(|d| !d.is_empty());
        if let Some(dir) = &workdir {
            self.inner.dispatcher.set_task_workdir(&task_id, dir);
        }
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
            parent_call_id: None,
            output_schema: None,
            workdir,
        };
        let (events, rx) = EventStream::recorded(
            self.inner.store().map(|s| (s.clone(), session_id.clone())),
            0,
        );
        self.inner.register_stream(&session_id, &events);
        if spec.interactive {
            self.forward_approvals(&spec, &events);
        }
        let args = SessionArgs {
            hub: self.inner.clone(),
            spec,
            model,
            events,
            report: None,
            restored: None,
            shared: Arc::default(),
        };
        start_session(args, None)
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

    /// Resumes every session a previous coordinator of this database was
    /// running when it died (served coordinators' sessions only: see
    /// `AgentSettings::durable`). Returns how many.
    pub fn resume_orphans(&self) -> usize {
        // No database yet: nothing to resume, and none is created for it.
        if !self
            .inner
            .settings
            .state_db
            .as_ref()
            .is_some_and(|db| db.exists())
        {
            return 0;
        }
        let Some(store) = self.inner.store() else {
            return 0;
        };
        let orphans = match store::orphaned_roots(store.path()) {
            Ok(orphans) => orphans,
            Err(err) => {
                tracing::warn!("cannot look for sessions to resume: {err}");
                return 0;
            }
        };
        let count = orphans.len();
        for root in orphans {
            tracing::info!(session = %root.id, "resuming a session interrupted by a restart");
            self.adopt_root(root);
        }
        count
    }

    /// Takes over a stored, running root whose coordinator is gone: its
    /// stream goes on from its last recorded event, and it resumes once its
    /// workers are back.
    fn adopt_root(&self, root: StoredSession) -> EventStream {
        if let Some(stream) = self.inner.stream(&root.id) {
            return stream;
        }
        let store = self.inner.store().cloned();
        let last = store
            .as_ref()
            .and_then(|s| store::last_seq(s.path(), &root.id).ok())
            .unwrap_or(0);
        // No client started this stream: clarify questions get their
        // "no one to ask" answer until one reattaches.
        let (events, _) = EventStream::recorded(store.clone().map(|s| (s, root.id.clone())), last);
        self.inner.register_stream(&root.id, &events);
        let hub = self.inner.clone();
        let stream = events.clone();
        tokio::spawn(async move {
            let spec = resume::spec_of(&root, CancellationToken::new());
            // The environment starts where it did before (a cron job's workdir).
            if let Some(dir) = &spec.workdir {
                hub.dispatcher.set_task_workdir(&spec.task_id, dir);
            }
            let prepared = store
                .as_ref()
                .ok_or_else(|| "sessions are not recorded".to_owned())
                .and_then(|s| resume::restore(s.path(), &root).map_err(|e| e.to_string()))
                .and_then(|restored| {
                    let model = SessionHub { inner: hub.clone() }
                        .resolve_model(&root.model)
                        .map_err(|e| e.to_string())?;
                    Ok((restored, model.0))
                });
            let (restored, model) = match prepared {
                Ok(prepared) => prepared,
                Err(reason) => return hub.resume_failed(&spec, &stream, &reason).await,
            };
            let args = SessionArgs {
                hub: hub.clone(),
                spec: spec.clone(),
                model,
                events: stream.clone(),
                report: None,
                restored: Some(restored),
                shared: Arc::default(),
            };
            if let Err(err) = start_session(args, None).await {
                hub.resume_failed(&spec, &stream, &err.to_string()).await;
            }
        });
        events
    }

    /// Reattaches to a session tree's stream: the recorded events after
    /// `after`, then the live ones, until the root's `final`. `session_id`
    /// may name any session of the tree. A running tree whose coordinator
    /// process is gone is resumed here.
    pub async fn attach(
        &self,
        session_id: &str,
        after: u64,
    ) -> Result<mpsc::UnboundedReceiver<SessionEvent>, SessionError> {
        let store = self.inner.store().ok_or(SessionError::NotRecorded)?.clone();
        let db = store.path();
        let session = store::read_session(db, session_id)?
            .ok_or_else(|| SessionError::Unknown(session_id.to_owned()))?;
        let root = match session.parent_id {
            None => session,
            Some(_) => store::read_session(db, &session.root_id)?
                .ok_or_else(|| SessionError::Unknown(session.root_id.clone()))?,
        };
        let live = match self.inner.stream(&root.id) {
            Some(stream) => Some(stream),
            None if root.state == "running" => {
                if store::owner_alive(db, root.owner.as_deref().unwrap_or_default()) {
                    return Err(SessionError::Elsewhere(root.id));
                }
                Some(self.adopt_root(root.clone()))
            }
            None => None,
        };
        let (until, mut live) = match live.map(|s| s.observe()) {
            Some((seq, rx)) => (Some(seq), Some(rx)),
            None => (None, None),
        };
        store.flush().await;
        let history = store::read_events(db, &root.id, after, until)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let root_id = root.id;
        tokio::spawn(async move {
            let is_end = |e: &SessionEvent| e.session_id == root_id && e.kind == events::FINAL;
            for event in history {
                let event = SessionEvent {
                    session_id: event.session_id,
                    seq: event.seq,
                    kind: event.kind,
                    json: event.json,
                };
                let end = is_end(&event);
                if tx.send(event).is_err() || end {
                    return;
                }
            }
            let Some(live) = live.as_mut() else { return };
            while let Some(event) = live.recv().await {
                let end = is_end(&event);
                if tx.send(event).is_err() || end {
                    return;
                }
            }
        });
        Ok(rx)
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
