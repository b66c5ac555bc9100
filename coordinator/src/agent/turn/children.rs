//! `delegate_task`: children started as linked session actors, waited for
//! (with the optional wall-clock limit), and reported in hermes' shape.

use super::*;
use crate::agent::resume;
use crate::agent::session::start_session;
use crate::agent::store::StoredSession;
use crate::gate::AutoAnswer;

impl AgentLoop {
    /// `delegate_task`: runs the children as linked Session actors and waits
    /// for all of them. (At the depth limit the call never gets here:
    /// [`Self::route`] refuses it.)
    pub(super) async fn delegate(&mut self, call_id: &str, args: &Map<String, Value>) -> ToolReply {
        let config = self.hub.settings.delegation.clone();
        let max_depth = config.max_spawn_depth();
        let DelegateRequest {
            tasks,
            share_environment,
        } = match delegate::parse_request(args, config.max_concurrent_children()) {
            Ok(request) => request,
            Err(result) => return result,
        };
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
        let timeout = config.child_timeout();

        let mut adopted = self.adopted_children(call_id);
        let mut waits = Vec::with_capacity(tasks.len());
        for task in tasks {
            if let Some(child) = adopted.remove(&task.index) {
                let (cancel, end) = self.adopt_child(&child, &child_model).await;
                waits.push((task, child.id, child.task_id, cancel, end));
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
                }),
            );
            let cancel = spec.cancel.clone();
            let end = self.spawn_child(spec, &child_model, None).await;
            waits.push((task, session_id, task_id, cancel, end));
        }

        let parent_session = self.spec.session_id.as_str();
        let events = &self.events;
        let label = model_label.as_str();
        let futures =
            waits
                .into_iter()
                .map(|(task, session_id, task_id, cancel, wait)| async move {
                    let end = wait.finish(timeout, &cancel).await;
                    let entry = child_entry(&task, &session_id, &task_id, label, end);
                    events.emit(
                        parent_session,
                        events::CHILD_FINISHED,
                        &child_finished_json(&entry, call_id),
                    );
                    entry
                });
        let mut entries: Vec<ChildEntry> = futures::future::join_all(futures).await;
        self.apply_summary_budget(&mut entries).await;
        for entry in &entries {
            self.workers.extend(entry.workers.iter().cloned());
        }
        delegate::results_json(&entries, started.elapsed())
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
        let args = SessionArgs {
            hub: self.hub.clone(),
            spec,
            model: model.clone(),
            events: self.events.clone(),
            report: Some(report_tx),
            restored,
        };
        match start_session(args, Some(self.myself.get_cell())).await {
            Ok(_) => ChildWait::Running(report_rx),
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

    /// Trims summaries above `delegation.max_summary_chars`, saving the full
    /// text in this session's sandbox so `read_file` can page through it.
    pub(super) async fn apply_summary_budget(&self, entries: &mut [ChildEntry]) {
        let Some(cap) = self.hub.settings.delegation.max_summary_chars() else {
            return;
        };
        for entry in entries.iter_mut() {
            let Some(summary) = entry.summary.as_ref().filter(|s| s.chars().count() > cap) else {
                continue;
            };
            let id = format!("subagent-summary-{}-{}", entry.task_index, now_ms());
            let spill = self
                .hub
                .dispatcher
                .scheduler()
                .persist(&self.spec.task_id, &id, summary)
                .await;
            let trimmed = delegate::trim_summary(summary, cap, spill.as_deref());
            entry.summary = Some(trimmed);
            entry.summary_truncated = Some(true);
            entry.summary_full_path = spill;
        }
    }
}

/// A child being waited for.
pub(super) enum ChildWait {
    Running(oneshot::Receiver<SessionOutcome>),
    /// Ended before a restart; its stored outcome.
    Ended(SessionOutcome),
    NotStarted(String),
}

/// How the wait for a child ended.
pub(super) enum ChildEnd {
    Finished(SessionOutcome),
    TimedOut {
        after: Duration,
        outcome: Option<SessionOutcome>,
    },
    /// The child actor went away without a report.
    Vanished,
    NotStarted(String),
}

impl ChildWait {
    pub(super) async fn finish(
        self,
        timeout: Option<Duration>,
        cancel: &CancellationToken,
    ) -> ChildEnd {
        let mut report = match self {
            ChildWait::Running(report) => report,
            ChildWait::Ended(outcome) => return ChildEnd::Finished(outcome),
            ChildWait::NotStarted(reason) => return ChildEnd::NotStarted(reason),
        };
        let Some(limit) = timeout else {
            return match report.await {
                Ok(outcome) => ChildEnd::Finished(outcome),
                Err(_) => ChildEnd::Vanished,
            };
        };
        match tokio::time::timeout(limit, &mut report).await {
            Ok(Ok(outcome)) => ChildEnd::Finished(outcome),
            Ok(Err(_)) => ChildEnd::Vanished,
            Err(_) => {
                cancel.cancel();
                let outcome = tokio::time::timeout(CHILD_STOP_GRACE, report)
                    .await
                    .ok()
                    .and_then(Result::ok);
                ChildEnd::TimedOut {
                    after: limit,
                    outcome,
                }
            }
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
