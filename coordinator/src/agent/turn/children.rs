//! `delegate_task`: children started as linked session actors, watched by
//! the stall monitor while they run, and reported in hermes' shape — waited
//! for in the call, or (a top-level session's `background: true`) delivered
//! later as a message; `action=list|steer|stop` over this session's
//! background children.

use super::*;
use crate::agent::delegate::{Role, StallPhase};
use crate::agent::resume;
use crate::agent::session::start_session;
use crate::agent::store::StoredSession;
use crate::gate::AutoAnswer;

/// A child of one of this session's background delegations, for `list`,
/// `steer` and `stop`.
pub(super) struct BackgroundChild {
    pub subagent_id: String,
    pub delegation_id: String,
    pub task_index: usize,
    pub goal: String,
    pub started: Instant,
    pub shared: Arc<SessionShared>,
    pub cancel: CancellationToken,
    /// How it ended, once its delegation was delivered.
    pub ended: Option<ChildStatus>,
}

/// A finished background delegation on its way into the parent's conversation.
pub(super) struct Delivery {
    pub delegation_id: String,
    pub entries: Vec<ChildEntry>,
    pub total: Duration,
}

/// One child being waited for, with everything its result entry needs.
struct Waiting {
    task: ChildTask,
    session_id: String,
    task_id: String,
    cancel: CancellationToken,
    wait: ChildWait,
}

impl AgentLoop {
    /// `delegate_task`: a control action, or new children — waited for, or
    /// (background) handed back as a handle. (At the depth limit the call
    /// never gets here: [`Self::route`] refuses it.)
    pub(super) async fn delegate(&mut self, call_id: &str, args: &Map<String, Value>) -> ToolReply {
        match args
            .get("action")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|a| !a.is_empty())
        {
            None => {}
            Some("list") => return self.list_children(),
            Some("steer") => return self.steer_child(args),
            Some("stop") => return self.stop_child(args),
            Some(other) => {
                return ToolReply::error(format!(
                    "Unknown action '{other}': use 'list', 'steer' or 'stop', or leave action out to start subagents."
                ));
            }
        }
        let config = self.hub.settings.delegation.clone();
        let max_depth = config.max_spawn_depth();
        let DelegateRequest {
            tasks,
            share_environment,
        } = match delegate::parse_request(args, config.max_concurrent_children()) {
            Ok(request) => request,
            Err(result) => return result,
        };
        let background_asked = args.get("background").and_then(Value::as_bool) == Some(true);
        let background = background_asked && self.spec.depth == 0;
        if background {
            let running = self.background_running.load(Ordering::SeqCst);
            let cap = config.max_concurrent_children();
            if running >= cap {
                return delegate::background_capacity_error(cap, tasks.len());
            }
        }
        let started = Instant::now();
        let child_model = match self.hub.child_model(&self.model) {
            Ok(model) => model,
            Err(err) => {
                return ToolReply::error(format!("cannot use delegation.model: {err}"));
            }
        };
        let model_label = config
            .model
            .clone()
            .filter(|m| !m.trim().is_empty())
            .unwrap_or_else(|| self.spec.model_label.clone());
        let workspace = if share_environment {
            self.task_cwd().await
        } else {
            None
        };
        let child_depth = self.spec.depth + 1;
        let limits = config.stall_limits();

        let mut adopted = self.adopted_children(call_id);
        let mut waits = Vec::with_capacity(tasks.len());
        for task in tasks {
            if let Some(child) = adopted.remove(&task.index) {
                let (cancel, wait) = self.adopt_child(&child, &child_model).await;
                waits.push(Waiting {
                    task,
                    session_id: child.id,
                    task_id: child.task_id,
                    cancel,
                    wait,
                });
                continue;
            }
            let role = effective_role(task.role, child_depth, &config);
            let session_id = new_session_id();
            let task_id = if share_environment {
                self.spec.task_id.clone()
            } else {
                format!(
                    "{}-sub{}-{}",
                    self.spec.task_id,
                    task.index + 1,
                    &session_id[5..13]
                )
            };
            if !share_environment {
                // The parent's placement labels, the child's own over them.
                let scheduler = self.hub.dispatcher.scheduler();
                let mut labels = scheduler.task_labels(&self.spec.task_id).await;
                labels.extend(task.labels.clone());
                scheduler.set_task_labels(&task_id, labels);
            }
            let spec = SessionSpec {
                session_id: session_id.clone(),
                parent_id: Some(self.spec.session_id.clone()),
                root_id: self.spec.root_id.clone(),
                depth: child_depth,
                task_id: task_id.clone(),
                release_task: !share_environment,
                prompt: task.goal.clone(),
                system_prompt: Some(child_system_prompt(
                    &task,
                    role,
                    workspace.as_deref(),
                    max_depth,
                    child_depth,
                )),
                filter: child_filter(&self.spec.filter, role),
                caller: self.spec.caller.clone(),
                max_iterations: config.max_iterations(),
                model_label: model_label.clone(),
                role: Some(role),
                interactive: false,
                cancel: self.spec.cancel.child_token(),
                task_index: Some(task.index),
                parent_call_id: Some(call_id.to_owned()),
                output_schema: task.output_schema.clone(),
                workdir: None,
            };
            self.emit(
                events::CHILD_STARTED,
                &json!({
                    "call_id": call_id,
                    "child_session_id": session_id,
                    "task_index": task.index,
                    "goal": task.goal,
                    "role": role,
                    "task_id": task_id,
                    "shared_environment": share_environment,
                    "background": background,
                }),
            );
            let cancel = spec.cancel.clone();
            let wait = self.spawn_child(spec, &child_model, None).await;
            waits.push(Waiting {
                task,
                session_id,
                task_id,
                cancel,
                wait,
            });
        }

        if background {
            return self.dispatch_background(call_id, waits, limits, model_label, started);
        }
        // An orchestrator waiting for its children is not stalled: they are
        // watched themselves.
        self.shared.set_delegating(true);
        let futures = waits.into_iter().map(|waiting| {
            wait_child(
                waiting,
                limits,
                self.events.clone(),
                self.spec.session_id.clone(),
                call_id.to_owned(),
                model_label.clone(),
            )
        });
        let mut entries: Vec<ChildEntry> = futures::future::join_all(futures).await;
        self.shared.set_delegating(false);
        apply_summary_budget(&self.hub, &self.spec.task_id, &mut entries).await;
        for entry in &entries {
            self.workers.extend(entry.workers.iter().cloned());
        }
        let note = background_asked.then_some(delegate::BACKGROUND_ONLY_TOP_LEVEL);
        delegate::results_json(&entries, started.elapsed(), note)
    }

    /// Leaves the children running and returns their handle; a task waits
    /// for them and posts the delivery the loop injects between turns.
    fn dispatch_background(
        &mut self,
        call_id: &str,
        waits: Vec<Waiting>,
        limits: delegate::StallLimits,
        model_label: String,
        started: Instant,
    ) -> ToolReply {
        let delegation_id = format!("deleg_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let goals: Vec<String> = waits.iter().map(|w| w.task.goal.clone()).collect();
        let ids: Vec<String> = waits.iter().map(|w| w.session_id.clone()).collect();
        self.watch_background(&delegation_id, call_id, waits, limits, model_label, started);
        delegate::dispatched_json(&delegation_id, &goals, &ids)
    }

    /// Tracks a background delegation's children (for `list`, `steer`,
    /// `stop`) and starts the task that waits for them and posts the delivery.
    fn watch_background(
        &mut self,
        delegation_id: &str,
        call_id: &str,
        waits: Vec<Waiting>,
        limits: delegate::StallLimits,
        model_label: String,
        started: Instant,
    ) {
        for waiting in &waits {
            let shared = match &waiting.wait {
                ChildWait::Running { shared, .. } => shared.clone(),
                // Never running: nothing to steer.
                _ => {
                    let shared = Arc::new(SessionShared::default());
                    shared.close_steering();
                    shared
                }
            };
            self.background.push(BackgroundChild {
                subagent_id: waiting.session_id.clone(),
                delegation_id: delegation_id.to_owned(),
                task_index: waiting.task.index,
                goal: waiting.task.goal.clone(),
                started,
                shared,
                cancel: waiting.cancel.clone(),
                ended: None,
            });
        }
        self.outstanding += 1;
        let running = self.background_running.clone();
        running.fetch_add(1, Ordering::SeqCst);
        let hub = self.hub.clone();
        let events = self.events.clone();
        let parent = self.spec.session_id.clone();
        let task_id = self.spec.task_id.clone();
        let call_id = call_id.to_owned();
        let deliveries = self.deliveries_tx.clone();
        let id = delegation_id.to_owned();
        tokio::spawn(async move {
            let futures = waits.into_iter().map(|waiting| {
                wait_child(
                    waiting,
                    limits,
                    events.clone(),
                    parent.clone(),
                    call_id.clone(),
                    model_label.clone(),
                )
            });
            let mut entries: Vec<ChildEntry> = futures::future::join_all(futures).await;
            running.fetch_sub(1, Ordering::SeqCst);
            apply_summary_budget(&hub, &task_id, &mut entries).await;
            // The parent settles its deliveries before it ends
            // (`settle_background`); one that gave up waiting reported this
            // delegation as abandoned.
            let _ = deliveries.send(Delivery {
                delegation_id: id,
                entries,
                total: started.elapsed(),
            });
        });
    }

    /// After a restart: the background delegations this session dispatched
    /// and never received (their `delegate_task` calls are recorded done, with
    /// the handle as result) are taken back — children that were running
    /// resume and report as before, children that ended report their stored
    /// outcome, and a child that never got a record is reported as not
    /// started. Their results arrive as they would have; the delegation is
    /// listed again (`action=list`). Event `delegation_resumed` for each.
    pub(super) async fn recover_background(&mut self) {
        if self.spec.depth != 0 {
            return;
        }
        let Some(store) = self.hub.store() else {
            return;
        };
        let db = store.path().to_owned();
        let calls = match crate::agent::store::read_calls(&db, &self.spec.session_id) {
            Ok(calls) => calls,
            Err(err) => {
                tracing::warn!(session = %self.spec.session_id, "cannot read the calls to recover background delegations: {err}");
                return;
            }
        };
        let delivered: Vec<String> = self
            .messages
            .iter()
            .filter(|m| m.role == caduceus_llm::Role::User)
            .map(|m| m.text().into_owned())
            .filter(|t| t.starts_with("[Background delegation"))
            .collect();
        let config = self.hub.settings.delegation.clone();
        let limits = config.stall_limits();
        let model_label = config
            .model
            .clone()
            .filter(|m| !m.trim().is_empty())
            .unwrap_or_else(|| self.spec.model_label.clone());
        for call in calls
            .iter()
            .filter(|c| c.tool == "delegate_task" && c.state == "done")
        {
            let Some(handle) = call
                .result
                .as_deref()
                .and_then(|r| serde_json::from_str::<Value>(r).ok())
                .filter(|r| r["status"] == "dispatched")
            else {
                continue;
            };
            let Some(delegation_id) = handle["delegation_id"].as_str().map(str::to_owned) else {
                continue;
            };
            let marker = format!("[Background delegation {delegation_id} ");
            if delivered.iter().any(|t| t.starts_with(&marker)) {
                continue;
            }
            let child_model = match self.hub.child_model(&self.model) {
                Ok(model) => model,
                Err(err) => {
                    tracing::warn!(session = %self.spec.session_id, "cannot resume background children: {err}");
                    continue;
                }
            };
            let rows =
                crate::agent::store::read_children(&db, &self.spec.session_id, &call.call_id)
                    .unwrap_or_default();
            let ids: Vec<String> = handle["subagent_ids"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            let mut waits = Vec::with_capacity(ids.len());
            let mut resumed = 0;
            for (index, id) in ids.iter().enumerate() {
                let goal = handle["goals"][index]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let row = rows.iter().find(|r| &r.id == id);
                let task = ChildTask {
                    index: row.and_then(|r| r.task_index).unwrap_or(index),
                    goal,
                    context: None,
                    role: Role::parse(
                        row.and_then(|r| r.spec.role.clone())
                            .map(Value::String)
                            .as_ref(),
                    ),
                    labels: std::collections::BTreeMap::new(),
                    output_schema: row.and_then(|r| r.spec.output_schema.clone()),
                };
                let (cancel, wait, task_id) = match row {
                    Some(row) => {
                        let (cancel, wait) = self.adopt_child(row, &child_model).await;
                        if matches!(wait, ChildWait::Running { .. }) {
                            resumed += 1;
                        }
                        (cancel, wait, row.task_id.clone())
                    }
                    None => (
                        self.spec.cancel.child_token(),
                        ChildWait::NotStarted(
                            "The coordinator restarted before this subagent started; it never ran."
                                .to_owned(),
                        ),
                        String::new(),
                    ),
                };
                waits.push(Waiting {
                    task,
                    session_id: id.clone(),
                    task_id,
                    cancel,
                    wait,
                });
            }
            self.emit(
                events::DELEGATION_RESUMED,
                &json!({"delegation_id": delegation_id, "subagent_ids": ids, "resumed": resumed}),
            );
            self.watch_background(
                &delegation_id,
                &call.call_id,
                waits,
                limits,
                model_label.clone(),
                Instant::now(),
            );
        }
    }

    /// A finished background delegation enters the conversation.
    pub(super) fn deliver(&mut self, delivery: Delivery) {
        self.deliver_as(delivery, None);
    }

    /// `parent_end`: the parent had already ended (how) — the results are
    /// recorded in its transcript for whoever reads it, with no turn after.
    fn deliver_as(&mut self, delivery: Delivery, parent_end: Option<EndStatus>) {
        let Delivery {
            delegation_id,
            entries,
            total,
        } = delivery;
        self.outstanding = self.outstanding.saturating_sub(1);
        for entry in &entries {
            self.workers.extend(entry.workers.iter().cloned());
            if let Some(child) = self
                .background
                .iter_mut()
                .find(|c| c.subagent_id == entry.session_id)
            {
                child.ended = Some(entry.status);
            }
        }
        self.emit(
            events::DELEGATION_FINISHED,
            &json!({
                "delegation_id": delegation_id,
                "count": entries.len(),
                "statuses": entries.iter().map(|e| e.status).collect::<Vec<_>>(),
                "parent_ended": parent_end.map(EndStatus::as_str),
            }),
        );
        let text = delegate::background_message(
            &delegation_id,
            &entries,
            total,
            parent_end.map(EndStatus::as_str),
        );
        self.push(ChatMessage::user(text), None);
    }

    /// A parent that ends while background delegations are outstanding
    /// (budget spent, model failure, cancelled): its
    /// running children are stopped, and each delegation's results — partial,
    /// status `interrupted` — are delivered into its transcript and reported
    /// as `delegation_finished` before its `final`; never silently dropped. A
    /// delegation whose children do not unwind within the stall grace is
    /// reported `abandoned` instead.
    pub(super) async fn settle_background(&mut self, status: EndStatus) {
        if self.outstanding == 0 {
            return;
        }
        for child in self.background.iter().filter(|c| c.ended.is_none()) {
            child.cancel.cancel();
        }
        let grace = self.hub.settings.delegation.stall_limits().grace;
        let deadline = tokio::time::Instant::now() + grace;
        while self.outstanding > 0 {
            match tokio::time::timeout_at(deadline, self.deliveries.recv()).await {
                Ok(Some(delivery)) => self.deliver_as(delivery, Some(status)),
                Ok(None) | Err(_) => break,
            }
        }
        if self.outstanding == 0 {
            return;
        }
        let mut abandoned: Vec<&BackgroundChild> = self
            .background
            .iter()
            .filter(|c| c.ended.is_none())
            .collect();
        abandoned.sort_by(|a, b| a.delegation_id.cmp(&b.delegation_id));
        let ids: Vec<&str> = abandoned.iter().map(|c| c.subagent_id.as_str()).collect();
        let delegations: BTreeSet<&str> =
            abandoned.iter().map(|c| c.delegation_id.as_str()).collect();
        let text = delegate::abandoned_message(&delegations, &ids, grace, status.as_str());
        for delegation in &delegations {
            self.emit(
                events::DELEGATION_FINISHED,
                &json!({
                    "delegation_id": delegation,
                    "abandoned": true,
                    "subagent_ids": abandoned.iter().filter(|c| c.delegation_id == *delegation).map(|c| c.subagent_id.as_str()).collect::<Vec<_>>(),
                    "parent_ended": status.as_str(),
                }),
            );
        }
        self.outstanding = 0;
        self.push(ChatMessage::user(text), None);
    }

    /// `action=list`: this session's background children.
    fn list_children(&self) -> ToolReply {
        let subagents: Vec<Value> = self
            .background
            .iter()
            .map(|child| {
                let status = match child.ended {
                    Some(status) => json!(status),
                    None if child.shared.accepting_steer() => json!("running"),
                    // Ended; its delegation's other children still run.
                    None => json!("finished"),
                };
                json!({
                    "subagent_id": child.subagent_id,
                    "delegation_id": child.delegation_id,
                    "task_index": child.task_index,
                    "goal": child.goal,
                    "status": status,
                    "running_seconds": delegate::round2(child.started.elapsed().as_secs_f64()),
                    "api_calls": child.shared.api_calls(),
                    "accepting_steer": child.shared.accepting_steer(),
                })
            })
            .collect();
        ToolReply::json(&json!({"count": subagents.len(), "subagents": subagents}))
    }

    /// The background child a control action names, or the error to return.
    fn named_child(
        &self,
        args: &Map<String, Value>,
        action: &str,
    ) -> Result<&BackgroundChild, ToolReply> {
        let id = args
            .get("subagent_id")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                ToolReply::error(format!(
                    "action='{action}' needs 'subagent_id' (from action='list' or the subagent_ids of a background call)."
                ))
            })?;
        self.background
            .iter()
            .find(|c| c.subagent_id == id)
            .ok_or_else(|| {
                ToolReply::error(format!(
                    "No background subagent '{id}' in this session. Use action='list' to see yours."
                ))
            })
    }

    /// `action=steer`: queued for the child's next step, or too late.
    fn steer_child(&self, args: &Map<String, Value>) -> ToolReply {
        let child = match self.named_child(args, "steer") {
            Ok(child) => child,
            Err(reply) => return reply,
        };
        let Some(message) = args
            .get("message")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|m| !m.is_empty())
        else {
            return ToolReply::error("action='steer' needs a non-empty 'message'.");
        };
        if child.shared.steer(message.to_owned()) {
            self.emit(
                events::STEER_QUEUED,
                &json!({"subagent_id": child.subagent_id, "message": message}),
            );
            ToolReply::json(&json!({
                "status": "queued",
                "subagent_id": child.subagent_id,
                "note": "Queued, not yet delivered: the subagent reads it before its next step. If it finishes first, its result reports the steer as missed.",
            }))
        } else {
            ToolReply::json(&json!({
                "status": "rejected",
                "subagent_id": child.subagent_id,
                "error": "Too late: the subagent has already finished, so the steer was not delivered. Act on its result (it arrives with its delegation), or delegate a new task.",
            }))
        }
    }

    /// `action=stop`: the child ends at its next step, interrupted.
    fn stop_child(&self, args: &Map<String, Value>) -> ToolReply {
        let child = match self.named_child(args, "stop") {
            Ok(child) => child,
            Err(reply) => return reply,
        };
        if child.ended.is_some() || !child.shared.accepting_steer() {
            return ToolReply::json(&json!({
                "status": "already_finished",
                "subagent_id": child.subagent_id,
            }));
        }
        child.cancel.cancel();
        ToolReply::json(&json!({
            "status": "stopping",
            "subagent_id": child.subagent_id,
            "note": "The subagent stops at its next step; its partial result (status interrupted) arrives with its delegation.",
        }))
    }

    /// Starts a child session linked to this session's.
    async fn spawn_child(
        &self,
        spec: SessionSpec,
        model: &Arc<dyn ChatModel>,
        restored: Option<Restored>,
    ) -> ChildWait {
        let (report_tx, report_rx) = oneshot::channel();
        self.answer_child_approvals(&spec);
        let shared = Arc::new(SessionShared::default());
        let args = SessionArgs {
            hub: self.hub.clone(),
            spec,
            model: model.clone(),
            events: self.events.clone(),
            report: Some(report_tx),
            restored,
            shared: shared.clone(),
        };
        match start_session(args, Some(self.myself.get_cell())).await {
            Ok(_) => ChildWait::Running {
                report: report_rx,
                shared,
            },
            Err(err) => ChildWait::NotStarted(format!("the subagent could not start: {err}")),
        }
    }

    /// No person answers a child's approvals: as hermes, its dangerous
    /// commands are refused at once, or approved once each with
    /// `delegation.subagent_auto_approve: true` (rather than held as
    /// `pending_approval` for a minute that nobody is watching). The standing
    /// answer lasts as long as the child: its token is cancelled when its
    /// actor stops.
    fn answer_child_approvals(&self, spec: &SessionSpec) {
        let Some(approvals) = self.hub.dispatcher.gate().approvals() else {
            return;
        };
        let answer = if self.hub.settings.delegation.subagent_auto_approve == Some(true) {
            AutoAnswer::ApproveOnce
        } else {
            AutoAnswer::Deny
        };
        let standing = approvals.auto_answer(&spec.session_id, answer);
        let ended = spec.cancel.clone();
        tokio::spawn(async move {
            ended.cancelled().await;
            drop(standing);
        });
    }

    /// After a restart, the children an interrupted `delegate_task` had
    /// started, by their position in it.
    fn adopted_children(&mut self, call_id: &str) -> HashMap<usize, StoredSession> {
        if self.recovered.remove(call_id) != Some(Recovered::Adopt) {
            return HashMap::new();
        }
        let Some(store) = self.hub.store() else {
            return HashMap::new();
        };
        match crate::agent::store::read_children(store.path(), &self.spec.session_id, call_id) {
            Ok(children) => children
                .into_iter()
                .filter_map(|c| c.task_index.map(|i| (i, c)))
                .collect(),
            Err(err) => {
                tracing::warn!(session = %self.spec.session_id, "cannot read the children to adopt: {err}");
                HashMap::new()
            }
        }
    }

    /// An adopted child: one that ended reports its stored outcome; one that
    /// was running resumes and reports when it ends.
    async fn adopt_child(
        &self,
        child: &StoredSession,
        model: &Arc<dyn ChatModel>,
    ) -> (CancellationToken, ChildWait) {
        let cancel = self.spec.cancel.child_token();
        let Some(store) = self.hub.store() else {
            return (
                cancel,
                ChildWait::NotStarted("sessions are not recorded".to_owned()),
            );
        };
        if child.state != "running" {
            return (
                cancel,
                ChildWait::Ended(resume::outcome_of(store.path(), child)),
            );
        }
        match resume::restore(store.path(), child) {
            Ok(restored) => {
                let spec = resume::spec_of(child, cancel.clone());
                let wait = self.spawn_child(spec, model, Some(restored)).await;
                (cancel, wait)
            }
            Err(err) => (
                cancel,
                ChildWait::NotStarted(format!("the subagent could not resume: {err}")),
            ),
        }
    }
}

/// Waits for one child (watched by the stall monitor) and tells the
/// parent's stream how it ended.
async fn wait_child(
    waiting: Waiting,
    limits: delegate::StallLimits,
    events: EventStream,
    parent_session: String,
    call_id: String,
    model_label: String,
) -> ChildEntry {
    let end = waiting.wait.finish(limits, &waiting.cancel).await;
    let entry = child_entry(
        &waiting.task,
        &waiting.session_id,
        &waiting.task_id,
        &model_label,
        end,
    );
    events.emit(
        &parent_session,
        events::CHILD_FINISHED,
        &child_finished_json(&entry, &call_id),
    );
    entry
}

/// Trims summaries above `delegation.max_summary_chars`, saving the full
/// text in the parent's sandbox (`task_id`) so `read_file` can page through it.
async fn apply_summary_budget(hub: &HubInner, task_id: &str, entries: &mut [ChildEntry]) {
    let Some(cap) = hub.settings.delegation.max_summary_chars() else {
        return;
    };
    for entry in entries.iter_mut() {
        let Some(summary) = entry.summary.as_ref().filter(|s| s.chars().count() > cap) else {
            continue;
        };
        let id = format!("subagent-summary-{}-{}", entry.task_index, now_ms());
        let spill = hub
            .dispatcher
            .scheduler()
            .persist(task_id, &id, summary)
            .await;
        let trimmed = delegate::trim_summary(summary, cap, spill.as_deref());
        entry.summary = Some(trimmed);
        entry.summary_truncated = Some(true);
        if entry.schema_valid == Some(true) {
            entry.schema_note = Some(crate::agent::output_schema::trimmed_note(spill.as_deref()));
        }
        entry.summary_full_path = spill;
    }
}

/// A child being waited for.
pub(super) enum ChildWait {
    Running {
        report: oneshot::Receiver<SessionOutcome>,
        /// Its signs of progress, read by the stall monitor.
        shared: Arc<SessionShared>,
    },
    /// Ended before a restart; its stored outcome.
    Ended(SessionOutcome),
    NotStarted(String),
}

/// How the wait for a child ended.
pub(super) enum ChildEnd {
    Finished(SessionOutcome),
    /// No progress for `child_timeout_seconds`.
    TimedOut {
        after: Duration,
        outcome: Option<SessionOutcome>,
    },
    /// No progress past the stall threshold.
    Stalled {
        quiet: Duration,
        threshold: Duration,
        phase: StallPhase,
        grace: Duration,
        /// `None`: it did not unwind within the grace.
        outcome: Option<SessionOutcome>,
    },
    /// The child actor went away without a report.
    Vanished,
    NotStarted(String),
}

impl ChildWait {
    /// Waits for the child's report while the stall monitor watches it:
    /// asleep until the moment the child's last sign of progress becomes too
    /// old (no polling), then either progress happened meanwhile and the
    /// watch starts over, or the child is interrupted and given the grace to
    /// unwind and report what it did.
    pub(super) async fn finish(
        self,
        limits: delegate::StallLimits,
        cancel: &CancellationToken,
    ) -> ChildEnd {
        let (mut report, shared) = match self {
            ChildWait::Running { report, shared } => (report, shared),
            ChildWait::Ended(outcome) => return ChildEnd::Finished(outcome),
            ChildWait::NotStarted(reason) => return ChildEnd::NotStarted(reason),
        };
        loop {
            // Entering or leaving a tool call changes the threshold: start
            // over (listening before the phase is read, so no change is missed).
            let phase_changed = shared.phase_changed();
            if shared.delegating() {
                // Waiting on its own children is not a stall (their monitors
                // watch them): sleep until that wait ends, which touches the
                // activity clock, and watch afresh from there.
                tokio::select! {
                    reported = &mut report => {
                        return match reported {
                            Ok(outcome) => ChildEnd::Finished(outcome),
                            Err(_) => ChildEnd::Vanished,
                        };
                    }
                    () = phase_changed => continue,
                }
            }
            let last = shared.last_activity_ms();
            let phase = if shared.in_tool() {
                StallPhase::InTool
            } else {
                StallPhase::Idle
            };
            let stall = match phase {
                StallPhase::Idle => limits.idle,
                StallPhase::InTool => limits.in_tool,
            };
            let (limit, capped) = match limits.cap {
                Some(cap) if cap < stall => (cap, true),
                _ => (stall, false),
            };
            let limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
            let due_in = last.saturating_add(limit_ms).saturating_sub(now_ms());
            tokio::select! {
                reported = &mut report => {
                    return match reported {
                        Ok(outcome) => ChildEnd::Finished(outcome),
                        Err(_) => ChildEnd::Vanished,
                    };
                }
                () = phase_changed => continue,
                () = tokio::time::sleep(Duration::from_millis(due_in)) => {}
            }
            let quiet_ms = now_ms().saturating_sub(shared.last_activity_ms());
            if shared.last_activity_ms() != last || shared.delegating() || quiet_ms < limit_ms {
                continue;
            }
            cancel.cancel();
            let grace = limits.grace;
            let outcome = tokio::time::timeout(grace, report)
                .await
                .ok()
                .and_then(Result::ok);
            return if capped {
                ChildEnd::TimedOut {
                    after: limit,
                    outcome,
                }
            } else {
                ChildEnd::Stalled {
                    quiet: Duration::from_millis(quiet_ms),
                    threshold: limit,
                    phase,
                    grace,
                    outcome,
                }
            };
        }
    }
}

/// The result entry of one child (hermes `_run_single_child`).
pub(super) fn child_entry(
    task: &ChildTask,
    session_id: &str,
    task_id: &str,
    model: &str,
    end: ChildEnd,
) -> ChildEntry {
    let mut entry = ChildEntry {
        task_index: task.index,
        status: ChildStatus::Error,
        summary: None,
        api_calls: 0,
        duration_seconds: 0.0,
        model: Some(model.to_owned()),
        exit_reason: "error".to_owned(),
        tokens: None,
        tool_trace: Vec::new(),
        error: None,
        summary_truncated: None,
        summary_full_path: None,
        missed_steer: None,
        stalled_after_quiet_seconds: None,
        stall_threshold_seconds: None,
        stall_phase: None,
        stall_grace_seconds: None,
        schema_valid: None,
        schema_errors: None,
        schema_note: None,
        orphaned_processes: None,
        session_id: session_id.to_owned(),
        task_id: task_id.to_owned(),
        workers: Vec::new(),
    };
    match end {
        ChildEnd::Finished(outcome) => {
            let summary = outcome
                .final_text
                .clone()
                .filter(|s| !s.trim().is_empty() && s.trim() != "(empty)");
            let (status, exit_reason) = match outcome.status {
                EndStatus::Interrupted => (ChildStatus::Interrupted, "interrupted"),
                EndStatus::Crashed => (ChildStatus::Error, "error"),
                EndStatus::Failed => (ChildStatus::Failed, "error"),
                EndStatus::Completed if summary.is_some() => (ChildStatus::Completed, "completed"),
                EndStatus::MaxIterations if summary.is_some() => {
                    (ChildStatus::Completed, "max_iterations")
                }
                EndStatus::Completed => (ChildStatus::Failed, "completed"),
                EndStatus::MaxIterations => (ChildStatus::Failed, "max_iterations"),
            };
            entry.status = status;
            entry.exit_reason = exit_reason.to_owned();
            entry.api_calls = outcome.api_calls;
            entry.duration_seconds = delegate::round2(outcome.duration.as_secs_f64());
            entry.tokens = Some(outcome.tokens);
            entry.tool_trace = outcome.tool_trace;
            entry.workers = outcome.workers.into_iter().collect();
            entry.summary = summary;
            if !outcome.killed_processes.is_empty() {
                entry.orphaned_processes = Some(outcome.killed_processes.clone());
            }
            if let Some(check) = &outcome.schema {
                entry.schema_valid = Some(check.valid);
                if !check.valid {
                    entry.schema_errors = Some(check.errors.clone());
                    entry.schema_note =
                        Some(crate::agent::output_schema::UNVALIDATED_NOTE.to_owned());
                }
            }
            if !outcome.missed_steer.is_empty() {
                let missed = outcome.missed_steer.join("\n");
                let note = delegate::missed_steer_note(&missed);
                entry.summary = Some(match entry.summary.take() {
                    Some(summary) => format!("{summary}\n\n{note}"),
                    None => note,
                });
                entry.missed_steer = Some(missed);
            }
            if matches!(status, ChildStatus::Failed | ChildStatus::Error) {
                entry.error = Some(
                    outcome
                        .error
                        .unwrap_or_else(|| "Subagent did not produce a response.".to_owned()),
                );
            }
        }
        ChildEnd::TimedOut { after, outcome } => {
            let api_calls = outcome.as_ref().map(|o| o.api_calls).unwrap_or(0);
            entry.status = ChildStatus::Timeout;
            entry.exit_reason = "timeout".to_owned();
            entry.api_calls = api_calls;
            entry.duration_seconds = delegate::round2(after.as_secs_f64());
            entry.error = Some(delegate::timeout_error(after, api_calls));
            if let Some(outcome) = outcome {
                entry.tool_trace = outcome.tool_trace;
                entry.workers = outcome.workers.into_iter().collect();
            }
        }
        ChildEnd::Stalled {
            quiet,
            threshold,
            phase,
            grace,
            outcome,
        } => {
            let api_calls = outcome.as_ref().map(|o| o.api_calls).unwrap_or(0);
            entry.status = ChildStatus::Stalled;
            entry.exit_reason = "stalled".to_owned();
            entry.api_calls = api_calls;
            entry.error = Some(delegate::stalled_error(
                api_calls,
                threshold,
                phase,
                outcome.is_some(),
            ));
            entry.stalled_after_quiet_seconds = Some(delegate::round2(quiet.as_secs_f64()));
            entry.stall_threshold_seconds = Some(delegate::round2(threshold.as_secs_f64()));
            entry.stall_phase = Some(phase);
            entry.stall_grace_seconds = Some(delegate::round2(grace.as_secs_f64()));
            if let Some(outcome) = outcome {
                entry.duration_seconds = delegate::round2(outcome.duration.as_secs_f64());
                entry.tokens = Some(outcome.tokens);
                entry.tool_trace = outcome.tool_trace;
                entry.workers = outcome.workers.into_iter().collect();
                // The partial work the child had reported before it stalled.
                entry.summary = outcome.final_text.filter(|s| !s.trim().is_empty());
            }
        }
        ChildEnd::Vanished => {
            entry.error = Some("The subagent stopped without reporting a result.".to_owned())
        }
        ChildEnd::NotStarted(reason) => entry.error = Some(reason),
    }
    entry
}

pub(super) fn child_finished_json(entry: &ChildEntry, call_id: &str) -> Value {
    json!({
        "call_id": call_id,
        "child_session_id": entry.session_id,
        "task_index": entry.task_index,
        "status": entry.status,
        "summary": entry.summary,
        "error": entry.error,
        "api_calls": entry.api_calls,
        "duration_seconds": entry.duration_seconds,
        "exit_reason": entry.exit_reason,
        "task_id": entry.task_id,
        "workers": entry.workers,
    })
}
