//! The batch executor: one turn's tool calls, planned into parallel and
//! sequential segments, run through the call pipeline (or, for `todo`,
//! `clarify` and `delegate_task`, here), with their events, their
//! bookkeeping and hermes' turn budget.

use super::*;
use crate::agent::resume;
use crate::agent::store::{CallResult as CallRecord, CallStart, SessionStore};

/// hermes' text for a call skipped because the session was interrupted.
pub(super) fn cancelled(tool: &str) -> ToolReply {
    ToolReply::new(CallStatus::Cancelled, cancelled_content(tool))
}

/// A call's result before it becomes a message.
pub(super) struct Finished {
    content: String,
    status: CallStatus,
    worker: Option<String>,
}

/// What every call of one session needs; cloned into parallel calls.
#[derive(Clone)]
pub(super) struct CallSite {
    dispatcher: Arc<Dispatcher>,
    events: EventStream,
    session_id: String,
    task_id: String,
    filter: ToolFilter,
    caller: Option<String>,
    iteration: u32,
    cancel: CancellationToken,
    store: Option<SessionStore>,
    /// Index of the assistant message whose calls these are.
    turn: usize,
}

impl CallSite {
    /// The write-ahead record: on disk before the call is dispatched.
    pub(super) async fn record_start(&self, call: &ToolCall) {
        if let Some(store) = &self.store {
            store
                .call_started(CallStart {
                    session_id: self.session_id.clone(),
                    turn: self.turn,
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    arguments: call.arguments.clone(),
                    task_id: self.task_id.clone(),
                })
                .await;
        }
    }

    pub(super) fn record_end(&self, call: &ToolCall, done: &Finished) {
        if let Some(store) = &self.store {
            store.call_finished(CallRecord {
                session_id: self.session_id.clone(),
                turn: self.turn,
                call_id: call.id.clone(),
                result: done.content.clone(),
                status: serde_json::to_value(done.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
                worker: done.worker.clone(),
            });
            if let Some(worker) = &done.worker {
                store.placement(&self.task_id, worker);
            }
        }
    }

    /// A recovered call's answer, with the `tool_finished` it never got.
    pub(super) fn recovered(&self, call: &ToolCall, recovered: Recovered) -> Finished {
        let status = recovered.status();
        let done = match recovered {
            Recovered::Done { result, worker, .. } => Finished {
                content: result,
                status,
                worker,
            },
            Recovered::Unknown | Recovered::Adopt => {
                let done = Finished {
                    content: resume::unknown_outcome(),
                    status,
                    worker: None,
                };
                // The record now says what the model was told.
                self.record_end(call, &done);
                done
            }
        };
        self.finished(call, (Instant::now(), now_ms()), &done);
        done
    }

    pub(super) fn started(
        &self,
        call: &ToolCall,
        parsed: Option<&Map<String, Value>>,
        parallel: bool,
    ) -> (Instant, u64) {
        let at = now_ms();
        let emoji = self
            .dispatcher
            .registry()
            .snapshot()
            .get(&call.name)
            .map(|e| e.emoji.clone())
            .unwrap_or_default();
        let arguments = match parsed {
            Some(args) if call.arguments.chars().count() <= EVENT_ARGUMENTS_MAX_CHARS => {
                Value::Object(args.clone())
            }
            _ => Value::String(preview(&call.arguments, EVENT_ARGUMENTS_MAX_CHARS)),
        };
        self.events.emit(
            &self.session_id,
            events::TOOL_STARTED,
            &json!({
                "call_id": call.id,
                "tool": call.name,
                "emoji": emoji,
                "arguments": arguments,
                "iteration": self.iteration,
                "parallel": parallel,
                "started_at_ms": at,
            }),
        );
        (Instant::now(), at)
    }

    pub(super) fn finished(&self, call: &ToolCall, started: (Instant, u64), done: &Finished) {
        let finished_at = now_ms();
        self.events.emit(
            &self.session_id,
            events::TOOL_FINISHED,
            &json!({
                "call_id": call.id,
                "tool": call.name,
                "status": done.status,
                "worker": done.worker,
                "duration_ms": u64::try_from(started.0.elapsed().as_millis()).unwrap_or(u64::MAX),
                "started_at_ms": started.1,
                "finished_at_ms": finished_at,
                "result_chars": done.content.chars().count(),
                "preview": preview(&done.content, EVENT_RESULT_PREVIEW_CHARS),
            }),
        );
    }

    /// One call through the pipeline, with its events. Cancelled with the session.
    pub(super) async fn dispatch(
        &self,
        call: &ToolCall,
        parsed: Option<&Map<String, Value>>,
        parallel: bool,
    ) -> Finished {
        let started = self.started(call, parsed, parallel);
        self.record_start(call).await;
        // Parsed once, in `run_batch`; text only when it is not an object
        // (the pipeline then answers with hermes' error).
        let arguments = match parsed {
            Some(args) => RawArguments::Value(Value::Object(args.clone())),
            None => RawArguments::Text(call.arguments.clone()),
        };
        let request = CallRequest {
            tool: call.name.clone(),
            arguments,
            ctx: CallContext {
                task_id: self.task_id.clone(),
                session_id: Some(self.session_id.clone()),
                tool_call_id: Some(call.id.clone()),
                from_agent_loop: true,
                filter: self.filter.clone(),
                caller: self.caller.clone(),
                // Each of the model's calls is a trace of its own.
                trace: None,
            },
        };
        let done = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Finished { content: cancelled_content(&call.name), status: CallStatus::Cancelled, worker: None },
            outcome = self.dispatcher.call(request) => Finished { content: outcome.render(), status: outcome.status, worker: outcome.worker },
        };
        self.record_end(call, &done);
        self.finished(call, started, &done);
        done
    }
}

impl AgentLoop {
    pub(super) fn call_site(&self, parallel_iteration: u32) -> CallSite {
        CallSite {
            dispatcher: self.hub.dispatcher.clone(),
            events: self.events.clone(),
            session_id: self.spec.session_id.clone(),
            task_id: self.spec.task_id.clone(),
            filter: self.spec.filter.clone(),
            caller: self.spec.caller.clone(),
            iteration: parallel_iteration,
            cancel: self.spec.cancel.clone(),
            store: self.hub.store().cloned(),
            turn: self.messages.len().saturating_sub(1),
        }
    }

    /// Runs one turn's calls as planned segments; results in call order.
    pub(super) async fn run_batch(&mut self, calls: &[ToolCall], routes: &[Route]) -> Vec<String> {
        let parsed: Vec<Option<Map<String, Value>>> = calls
            .iter()
            .map(|c| parse_argument_text(&c.arguments))
            .collect();
        let mut results: Vec<Option<Finished>> = calls.iter().map(|_| None).collect();
        let mut runnable = Vec::new();
        let site = self.call_site(self.api_calls);
        for (index, route) in routes.iter().enumerate() {
            // After a restart, a call with a record is answered from it.
            if let Some(recovered) = self.take_recovered(&calls[index].id) {
                results[index] = Some(site.recovered(&calls[index], recovered));
                continue;
            }
            match route {
                Route::Invalid(content) => {
                    results[index] = Some(Finished {
                        content: content.clone(),
                        status: CallStatus::Error,
                        worker: None,
                    });
                }
                _ => runnable.push(index),
            }
        }
        let plan_input: Vec<PlanCall<'_>> = runnable
            .iter()
            .map(|&i| PlanCall {
                class: routes[i].class(),
                args: parsed[i].as_ref(),
            })
            .collect();
        let cwd = if plan_input
            .iter()
            .any(|c| c.class == ParallelClass::PathScoped)
        {
            self.task_cwd().await
        } else {
            None
        };
        let segments = plan_batch(&plan_input, cwd.as_deref());

        for segment in &segments {
            if self.cancelled() {
                break;
            }
            let indices: Vec<usize> = segment.calls().iter().map(|&k| runnable[k]).collect();
            if segment.is_parallel() {
                // Inside tool calls, the stall monitor allows longer.
                let running = u32::try_from(indices.len()).unwrap_or(u32::MAX);
                self.shared.tools_started(running);
                let site = &site;
                let dispatched: Vec<Finished> = futures::stream::iter(
                    indices
                        .iter()
                        .copied()
                        .map(|i| site.dispatch(&calls[i], parsed[i].as_ref(), true)),
                )
                .buffered(MAX_PARALLEL_CALLS)
                .collect()
                .await;
                self.shared.tools_finished(running);
                for (&i, done) in indices.iter().zip(dispatched) {
                    results[i] = Some(done);
                }
            } else {
                for &i in &indices {
                    if self.cancelled() {
                        break;
                    }
                    let done = match &routes[i] {
                        Route::Dispatch(_) => {
                            self.shared.tools_started(1);
                            let done = site.dispatch(&calls[i], parsed[i].as_ref(), false).await;
                            self.shared.tools_finished(1);
                            done
                        }
                        route => {
                            self.run_loop_tool(&site, &calls[i], route, parsed[i].as_ref())
                                .await
                        }
                    };
                    results[i] = Some(done);
                }
            }
        }

        let mut contents = Vec::with_capacity(calls.len());
        for (index, call) in calls.iter().enumerate() {
            let done = results[index].take().unwrap_or_else(|| Finished {
                content: cancelled_content(&call.name),
                status: CallStatus::Cancelled,
                worker: None,
            });
            contents.push(self.after_call(call, done));
        }
        self.enforce_turn_budget(calls, &mut contents).await;
        contents
    }

    /// The record of an interrupted call, unless it is a `delegate_task`
    /// that runs again to adopt its children.
    fn take_recovered(&mut self, call_id: &str) -> Option<Recovered> {
        match self.recovered.get(call_id)? {
            Recovered::Adopt => None,
            _ => self.recovered.remove(call_id),
        }
    }

    /// Bookkeeping of one result; returns the content the model reads.
    pub(super) fn after_call(&mut self, call: &ToolCall, done: Finished) -> String {
        if let Some(worker) = &done.worker {
            self.workers.insert(worker.clone());
        }
        // One parse serves the trace, the awaited processes and the approval event.
        let parsed = result_object(&done.content);
        self.trace.push(TraceEntry {
            tool: call.name.clone(),
            args_bytes: call.arguments.len(),
            result_bytes: Some(done.content.len()),
            status: Some(if looks_like_error(&done.content, parsed.as_ref()) {
                "error"
            } else {
                "ok"
            }),
        });
        if let Some(result) = &parsed {
            let started =
                result.get("output").and_then(Value::as_str) == Some("Background process started");
            if call.name == "terminal"
                && started
                && let Some(process) = result.get("session_id").and_then(Value::as_str)
            {
                self.shared.process_started(process.to_owned());
            }
            if call.name == "terminal"
                && result.get("notify_on_complete").and_then(Value::as_bool) == Some(true)
            {
                let process = result
                    .get("session_id")
                    .or_else(|| result.get("process_id"))
                    .and_then(Value::as_str);
                if let Some(process) = process {
                    self.awaited_processes.insert(process.to_owned());
                }
            }
            if done.status == CallStatus::PendingApproval {
                let field = |key: &str| result.get(key).cloned().unwrap_or(Value::Null);
                self.emit(
                    events::APPROVAL_NEEDED,
                    &json!({
                        "call_id": call.id,
                        "tool": call.name,
                        "command": field("command"),
                        "description": field("description"),
                        "pattern_key": field("pattern_key"),
                        "approval_id": field("approval_id"),
                    }),
                );
            }
        }
        wrap_untrusted(&call.name, done.content)
    }

    /// hermes `enforce_turn_budget`: persist the largest results until the
    /// turn fits.
    pub(super) async fn enforce_turn_budget(&self, calls: &[ToolCall], contents: &mut [String]) {
        let sizes: Vec<ResultSize> = contents
            .iter()
            .map(|c| ResultSize {
                chars: c.chars().count(),
                persisted: is_persisted(c),
            })
            .collect();
        let mut plan = TurnBudget::new(&sizes, ResultBudget::default().per_turn);
        while let Some(index) = plan.next_to_persist() {
            let content = std::mem::take(&mut contents[index]);
            let replacement = self
                .hub
                .dispatcher
                .previewed(&self.spec.task_id, &calls[index].id, content)
                .await;
            plan.replaced(index, replacement.chars().count());
            contents[index] = replacement;
        }
    }

    /// `todo`, `clarify`, `delegate_task`, and refusals, with their events.
    pub(super) async fn run_loop_tool(
        &mut self,
        site: &CallSite,
        call: &ToolCall,
        route: &Route,
        parsed: Option<&Map<String, Value>>,
    ) -> Finished {
        let started = site.started(call, parsed, false);
        site.record_start(call).await;
        let reply = match (route, self.loop_tool_args(&call.name, parsed)) {
            (Route::Refused(reply), _) => reply.clone(),
            (_, Err(reply)) => reply,
            (Route::Todo, Ok(args)) => self.todo.call(&args),
            (Route::Clarify, Ok(args)) => self.clarify(&call.id, &args).await,
            (Route::Delegate, Ok(args)) => self.delegate(&call.id, &args).await,
            (_, Ok(_)) => cancelled(&call.name),
        };
        let done = Finished {
            content: reply.body,
            status: reply.status,
            worker: None,
        };
        site.record_end(call, &done);
        site.finished(call, started, &done);
        done
    }

    /// Arguments of an agent-loop tool: a JSON object, coerced to its schema.
    pub(super) fn loop_tool_args(
        &self,
        tool: &str,
        parsed: Option<&Map<String, Value>>,
    ) -> Result<Map<String, Value>, ToolReply> {
        let Some(args) = parsed else {
            return Err(invalid_arguments_result());
        };
        let mut args = args.clone();
        if let Some(parameters) = self
            .hub
            .dispatcher
            .registry()
            .snapshot()
            .get(tool)
            .and_then(|e| e.schema.get("parameters").cloned())
        {
            coerce_arguments(&mut args, &parameters);
        }
        Ok(args)
    }

    /// The working directory of the task's environment, from the workers' heartbeats.
    pub(super) async fn task_cwd(&self) -> Option<String> {
        let workers = self.hub.dispatcher.scheduler().status().await;
        workers
            .iter()
            .flat_map(|w| w.environments.iter())
            .find(|e| e.task_id == self.spec.task_id)
            .map(|e| e.cwd.clone())
            .filter(|cwd| !cwd.is_empty())
    }
}

/// A result that is a JSON object, parsed.
pub(super) fn result_object(content: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str::<Value>(content) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// hermes `_looks_like_error_output`: a JSON object result (`object`, see
/// [`result_object`]) with a truthy `error` or an error-ish `status`, or a
/// first line that starts like an error.
pub(super) fn looks_like_error(content: &str, object: Option<&Map<String, Value>>) -> bool {
    if let Some(map) = object {
        let truthy_error = match map.get("error") {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::String(s)) => !s.is_empty(),
            Some(_) => true,
        };
        let status = map
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .trim()
            .to_lowercase();
        if truthy_error || matches!(status.as_str(), "error" | "failed" | "failure" | "timeout") {
            return true;
        }
    }
    let first = content
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_lowercase();
    ["error:", "failed:", "traceback ", "exception:"]
        .iter()
        .any(|p| first.starts_with(p))
}
