//! Delegation as hermes 0.21 ships it, end to end against the scripted
//! model: background children listed, steered and stopped; the stall
//! monitor. (A submodule of `hub_tests`, whose harness it uses.)

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::Notify;

use super::*;
use crate::agent::{DelegationConfig, delegate, output_schema};

/// Blocks until the test opens the gate its `name` argument names (or the
/// call is cancelled: the loop abandons it).
#[derive(Default)]
struct Gates {
    gates: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Gates {
    fn gate(&self, name: &str) -> Arc<Notify> {
        self.gates
            .lock()
            .unwrap()
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    fn open(&self, name: &str) {
        self.gate(name).notify_one();
    }
}

struct Hold(Arc<Gates>);

#[async_trait]
impl LocalTool for Hold {
    async fn call(&self, _ctx: &CallContext, args: Map<String, Value>) -> ToolReply {
        let name = args
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        self.0.gate(&name).notified().await;
        ToolReply::new(CallStatus::Ok, json!({"opened": name}).to_string())
    }
}

async fn with_gates(h: &Harness) -> Arc<Gates> {
    let gates = Arc::new(Gates::default());
    h.coordinator
        .registry()
        .register(
            ToolEntry::new(
                "hold",
                "test",
                schema("hold", json!({"name": {"type": "string"}})),
                Handler::Local(Arc::new(Hold(gates.clone()))),
            ),
            false,
        )
        .await
        .unwrap();
    gates
}

/// Reads a live stream, keeping what it saw.
struct Watch {
    stream: SessionStream,
    seen: Vec<Ev>,
}

impl Watch {
    async fn until(&mut self, what: &str, want: impl Fn(&Ev) -> bool) -> Ev {
        loop {
            let event = tokio::time::timeout(Duration::from_secs(30), self.stream.events.recv())
                .await
                .unwrap_or_else(|_| panic!("no {what}; events so far: {:#?}", self.seen))
                .unwrap_or_else(|| panic!("the stream ended before {what}: {:#?}", self.seen));
            let event = Ev {
                session: event.session_id,
                kind: event.kind,
                json: serde_json::from_str(&event.json).unwrap(),
            };
            self.seen.push(event.clone());
            if want(&event) {
                return event;
            }
        }
    }

    async fn rest(mut self) -> Vec<Ev> {
        let mut rest = collect(self.stream).await;
        self.seen.append(&mut rest);
        self.seen
    }
}

/// The result of the parent's call `id`, from the request that followed it.
fn result_of(h: &Harness, prompt: &str, id: &str) -> Value {
    let requests = h.server.requests();
    let request = requests
        .iter()
        .rev()
        .find(|r| r.first_user_text() == prompt)
        .unwrap();
    let message = request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .unwrap_or_else(|| panic!("no result of {id}"));
    serde_json::from_str(message["content"].as_str().unwrap()).unwrap()
}

fn user_texts(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_background_child_is_listed_steered_and_its_next_turn_sees_the_steer() {
    // The parent's turns have no match key; the child's are keyed by its goal.
    let h = harness(
        vec![
            ScriptedResponse::tool_calls(vec![call(
                "d",
                "delegate_task",
                json!({"goal": "job steerme", "background": true}),
            )]),
            ScriptedResponse::tool_calls(vec![call("c1", "hold", json!({"name": "child"}))])
                .for_conversation("steerme"),
            ScriptedResponse::tool_calls(vec![call("p1", "hold", json!({"name": "parent"}))]),
            ScriptedResponse::text("pricing looked at").for_conversation("steerme"),
        ],
        true,
        |_| {},
    )
    .await;
    let gates = with_gates(&h).await;
    let mut watch = Watch {
        stream: start(&h, "Research in the background", |_| {}).await,
        seen: Vec::new(),
    };
    let started = watch
        .until("child_started", |e| e.kind == "child_started")
        .await;
    let child = started.json["child_session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(started.json["background"], true);
    // The child is inside its tool call: list it and steer it.
    watch
        .until("the child's hold", |e| {
            e.kind == "tool_started" && e.session == child
        })
        .await;
    h.server.push(ScriptedResponse::tool_calls(vec![call(
        "l",
        "delegate_task",
        json!({"action": "list"}),
    )]));
    h.server.push(ScriptedResponse::tool_calls(vec![call(
        "s",
        "delegate_task",
        json!({"action": "steer", "subagent_id": child, "message": "focus on pricing instead"}),
    )]));
    h.server
        .push(ScriptedResponse::text("I will wait for the research."));
    h.server.push(ScriptedResponse::text("All done."));
    gates.open("parent");
    watch.until("the steer", |e| e.kind == "steer_queued").await;
    // The child ends only once the parent has answered, so its results wake
    // the parent for the last turn (opened earlier, they could arrive first).
    watch
        .until("the parent's answer", |e| {
            e.kind == "assistant_text" && e.json["text"] == "I will wait for the research."
        })
        .await;
    gates.open("child");
    let events = watch.rest().await;
    let root = root(&events);
    assert_eq!(final_of(&events, &root)["text"], "All done.");

    let prompt = "Research in the background";
    let dispatched = result_of(&h, prompt, "d");
    assert_eq!(dispatched["status"], "dispatched");
    assert_eq!(dispatched["mode"], "background");
    assert_eq!(dispatched["count"], 1);
    assert_eq!(dispatched["goals"], json!(["job steerme"]));
    assert_eq!(dispatched["subagent_ids"], json!([child]));
    let delegation = dispatched["delegation_id"].as_str().unwrap().to_owned();
    assert!(delegation.starts_with("deleg_"), "{delegation}");

    let listed = result_of(&h, prompt, "l");
    assert_eq!(listed["count"], 1);
    let entry = &listed["subagents"][0];
    assert_eq!(entry["subagent_id"], child.as_str());
    assert_eq!(entry["delegation_id"], delegation.as_str());
    assert_eq!(entry["goal"], "job steerme");
    assert_eq!(entry["status"], "running");
    assert_eq!(entry["accepting_steer"], true);

    let steered = result_of(&h, prompt, "s");
    assert_eq!(steered["status"], "queued", "{steered}");

    // The child's next request carries the steer as a user message.
    let requests = h.server.requests();
    let child_requests: Vec<_> = requests
        .iter()
        .filter(|r| r.first_user_text() == "job steerme")
        .collect();
    assert_eq!(child_requests.len(), 2);
    let second = user_texts(&child_requests[1].body);
    assert_eq!(
        second.last().unwrap(),
        &messages::steer_message("focus on pricing instead")
    );
    assert!(
        !user_texts(&child_requests[0].body)
            .iter()
            .any(|t| t.contains("pricing"))
    );
    assert!(
        events
            .iter()
            .any(|e| e.kind == "steer_received" && e.session == child)
    );

    // The results reached the parent as a message, after its own answer.
    let last = requests.last().unwrap();
    assert_eq!(last.first_user_text(), prompt);
    let delivered = user_texts(&last.body);
    let message = delivered.last().unwrap();
    assert!(
        message.starts_with(&format!(
            "[Background delegation {delegation} finished: 1 subagent(s). Their results:]\n<untrusted_tool_result source=\"delegate_task\">\n"
        )),
        "{message}"
    );
    let results = delegate::background_results(message).unwrap();
    assert_eq!(results["results"][0]["status"], "completed");
    assert_eq!(results["results"][0]["summary"], "pricing looked at");
    assert!(results["results"][0].get("missed_steer").is_none());
    let finished = events
        .iter()
        .find(|e| e.kind == "delegation_finished")
        .unwrap();
    assert_eq!(finished.json["delegation_id"], delegation.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopped_background_child_reports_interrupted_and_a_later_steer_is_too_late() {
    let h = harness(
        vec![
            ScriptedResponse::tool_calls(vec![call(
                "d",
                "delegate_task",
                json!({"goal": "job stopme", "background": true}),
            )]),
            // Never opened: only the stop ends it.
            ScriptedResponse::tool_calls(vec![call("c1", "hold", json!({"name": "never"}))])
                .for_conversation("stopme"),
            ScriptedResponse::tool_calls(vec![call("p1", "hold", json!({"name": "parent"}))]),
        ],
        true,
        |_| {},
    )
    .await;
    let gates = with_gates(&h).await;
    let mut watch = Watch {
        stream: start(&h, "Start and stop", |_| {}).await,
        seen: Vec::new(),
    };
    let started = watch
        .until("child_started", |e| e.kind == "child_started")
        .await;
    let child = started.json["child_session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    watch
        .until("the child's hold", |e| {
            e.kind == "tool_started" && e.session == child
        })
        .await;
    h.server.push(ScriptedResponse::tool_calls(vec![call(
        "stop",
        "delegate_task",
        json!({"action": "stop", "subagent_id": child}),
    )]));
    h.server.push(ScriptedResponse::tool_calls(vec![call(
        "p2",
        "hold",
        json!({"name": "parent2"}),
    )]));
    gates.open("parent");
    // The stop ends the child; then the parent acts on it.
    watch
        .until("the child's end", |e| {
            e.kind == "child_finished" && e.json["child_session_id"] == child.as_str()
        })
        .await;
    h.server.push(ScriptedResponse::tool_calls(vec![
        call(
            "late",
            "delegate_task",
            json!({"action": "steer", "subagent_id": child, "message": "too late now"}),
        ),
        call(
            "again",
            "delegate_task",
            json!({"action": "stop", "subagent_id": child}),
        ),
        call(
            "nobody",
            "delegate_task",
            json!({"action": "steer", "subagent_id": "sess_nobody", "message": "x"}),
        ),
    ]));
    // The delivery enters before or after that turn; either way the
    // parent's last answer is this one (a second copy for the second case).
    h.server.push(ScriptedResponse::text("Done."));
    h.server.push(ScriptedResponse::text("Done."));
    gates.open("parent2");
    let events = watch.rest().await;
    let root = root(&events);
    assert_eq!(final_of(&events, &root)["text"], "Done.");
    let prompt = "Start and stop";
    assert_eq!(result_of(&h, prompt, "stop")["status"], "stopping");
    // The child's call was cancelled and it ended interrupted; that is what
    // its delivery says.
    assert_eq!(final_of(&events, &child)["status"], "interrupted");
    let finished = events
        .iter()
        .find(|e| e.kind == "child_finished" && e.json["child_session_id"] == child.as_str())
        .unwrap();
    assert_eq!(finished.json["status"], "interrupted");
    let late = result_of(&h, prompt, "late");
    assert_eq!(late["status"], "rejected");
    assert!(
        late["error"]
            .as_str()
            .unwrap()
            .starts_with("Too late: the subagent has already finished"),
        "{late}"
    );
    assert_eq!(result_of(&h, prompt, "again")["status"], "already_finished");
    assert_eq!(
        result_of(&h, prompt, "nobody")["error"],
        "No background subagent 'sess_nobody' in this session. Use action='list' to see yours."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_child_with_no_progress_inside_a_tool_is_interrupted_and_reported_stalled() {
    let h = harness(
        vec![
            ScriptedResponse::tool_calls(vec![call(
                "d",
                "delegate_task",
                json!({"goal": "job stallme"}),
            )]),
            ScriptedResponse::tool_calls(vec![call("c1", "hold", json!({"name": "never"}))])
                .for_conversation("stallme"),
            ScriptedResponse::text("It stalled."),
        ],
        true,
        |agent| {
            agent.delegation = Arc::new(DelegationConfig {
                stall_in_tool_seconds: Some(0.3),
                stall_grace_seconds: Some(10.0),
                ..DelegationConfig::default()
            });
        },
    )
    .await;
    with_gates(&h).await;
    let events = run(&h, "Delegate something stuck", |_| {}).await;
    let root = root(&events);
    assert_eq!(final_of(&events, &root)["text"], "It stalled.");
    let results = result_of(&h, "Delegate something stuck", "d");
    let entry = &results["results"][0];
    assert_eq!(entry["status"], "stalled", "{entry}");
    assert_eq!(entry["exit_reason"], "stalled");
    assert_eq!(entry["stall_phase"], "in_tool");
    assert_eq!(entry["stall_threshold_seconds"], 0.3);
    assert_eq!(entry["stall_grace_seconds"], 10.0);
    assert!(entry["stalled_after_quiet_seconds"].as_f64().unwrap() >= 0.3);
    assert_eq!(
        entry["error"],
        "Subagent stopped making progress after 1 API call(s) — no activity for 0.3s inside a tool call (stall threshold); it was interrupted."
    );
    // Interrupted, so its cancelled call is in its trace.
    assert_eq!(entry["tool_trace"][0]["tool"], "hold");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_child_waiting_on_a_silent_model_is_stalled_between_steps() {
    let h = harness(
        vec![
            ScriptedResponse::tool_calls(vec![call(
                "d",
                "delegate_task",
                json!({"goal": "job quiet"}),
            )]),
            // Not streamed and answered long after the threshold: no sign of
            // progress meanwhile.
            ScriptedResponse::text("too late")
                .after(Duration::from_secs(20))
                .for_conversation("quiet"),
            ScriptedResponse::text("Reported."),
        ],
        false,
        |agent| {
            agent.delegation = Arc::new(DelegationConfig {
                stall_idle_seconds: Some(0.3),
                ..DelegationConfig::default()
            });
        },
    )
    .await;
    let events = run(&h, "Delegate to a slow model", |_| {}).await;
    let root = root(&events);
    assert_eq!(final_of(&events, &root)["text"], "Reported.");
    let entry = &result_of(&h, "Delegate to a slow model", "d")["results"][0];
    assert_eq!(entry["status"], "stalled", "{entry}");
    assert_eq!(entry["stall_phase"], "idle");
    assert_eq!(entry["stall_grace_seconds"], 120.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn background_from_a_child_waits_and_says_so() {
    let h = harness(
        vec![
            ScriptedResponse::tool_calls(vec![call(
                "d",
                "delegate_task",
                json!({"goal": "job orchestrate", "role": "orchestrator"}),
            )]),
            ScriptedResponse::tool_calls(vec![call(
                "dd",
                "delegate_task",
                json!({"goal": "job leafwork", "background": true}),
            )])
            .for_conversation("orchestrate"),
            ScriptedResponse::text("leaf done").for_conversation("leafwork"),
            ScriptedResponse::text("orchestrated").for_conversation("orchestrate"),
            ScriptedResponse::text("Top done."),
        ],
        true,
        |agent| {
            agent.delegation = Arc::new(DelegationConfig {
                max_spawn_depth: Some(2),
                ..DelegationConfig::default()
            });
        },
    )
    .await;
    let events = run(&h, "Nest it", |_| {}).await;
    assert_eq!(final_of(&events, &root(&events))["text"], "Top done.");
    let results = result_of(&h, "job orchestrate", "dd");
    assert_eq!(results["results"][0]["summary"], "leaf done");
    assert_eq!(
        results["note"],
        "background runs only for top-level sessions; this call waited for its subagents, whose results are above."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_answer_that_misses_its_output_schema_gets_one_correction_turn() {
    let schema = json!({
        "type": "object",
        "properties": {"healthy": {"type": "array", "items": {"type": "string"}}},
        "required": ["healthy"]
    });
    let h = harness(
        vec![
            ScriptedResponse::tool_calls(vec![call(
                "d",
                "delegate_task",
                json!({"tasks": [
                    {"goal": "job fixable", "output_schema": schema},
                    {"goal": "job stubborn", "output_schema": schema},
                ]}),
            )]),
            ScriptedResponse::text("All endpoints look fine.").for_conversation("fixable"),
            ScriptedResponse::text("```json\n{\"healthy\": [\"a.example\"]}\n```")
                .for_conversation("fixable"),
            ScriptedResponse::text("{\"healthy\": 3}").for_conversation("stubborn"),
            ScriptedResponse::text("{\"healthy\": \"still no\"}").for_conversation("stubborn"),
            ScriptedResponse::text("Checked."),
        ],
        true,
        |_| {},
    )
    .await;
    let events = run(&h, "Check with a contract", |_| {}).await;
    assert_eq!(final_of(&events, &root(&events))["text"], "Checked.");
    let results = result_of(&h, "Check with a contract", "d");

    let fixed = &results["results"][0];
    assert_eq!(fixed["status"], "completed");
    assert_eq!(fixed["schema_valid"], true, "{fixed}");
    assert!(fixed.get("schema_errors").is_none());
    assert_eq!(
        fixed["summary"],
        "```json\n{\"healthy\": [\"a.example\"]}\n```"
    );
    assert_eq!(fixed["api_calls"], 2);

    // A second miss keeps the raw text, marked unvalidated: no third turn.
    let stubborn = &results["results"][1];
    assert_eq!(stubborn["status"], "completed");
    assert_eq!(stubborn["schema_valid"], false);
    assert_eq!(stubborn["summary"], "{\"healthy\": \"still no\"}");
    assert_eq!(stubborn["api_calls"], 2);
    let errors = stubborn["schema_errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].as_str().unwrap().contains("/healthy"),
        "{errors:?}"
    );
    assert_eq!(stubborn["schema_note"], output_schema::UNVALIDATED_NOTE);

    // The child saw the contract up front and the errors in its correction.
    let requests = h.server.requests();
    let stubborn_requests: Vec<_> = requests
        .iter()
        .filter(|r| r.first_user_text() == "job stubborn")
        .collect();
    assert_eq!(stubborn_requests.len(), 2);
    let system = stubborn_requests[0].body["messages"][0]["content"]
        .as_str()
        .unwrap();
    assert!(system.contains("OUTPUT CONTRACT:"), "{system}");
    assert!(system.contains("\"required\""), "{system}");
    let correction = user_texts(&stubborn_requests[1].body).pop().unwrap();
    assert!(
        correction.starts_with("Your final answer does not satisfy the output contract"),
        "{correction}"
    );
    assert!(correction.contains("/healthy"), "{correction}");
    assert!(
        !correction.contains("\"required\""),
        "the schema is not re-pasted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_output_schema_that_is_not_one_is_refused_before_any_child_starts() {
    let h = harness(
        vec![
            ScriptedResponse::tool_calls(vec![call(
                "d",
                "delegate_task",
                json!({"goal": "job never", "output_schema": {"type": 7}}),
            )]),
            ScriptedResponse::text("Fine."),
        ],
        true,
        |_| {},
    )
    .await;
    let events = run(&h, "Bad contract", |_| {}).await;
    assert!(!events.iter().any(|e| e.kind == "child_started"));
    let error = result_of(&h, "Bad contract", "d")["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        error.starts_with("output_schema is not a usable JSON Schema: "),
        "{error}"
    );
}

/// Stands in for the worker's `process` tool: records every call and
/// answers a kill as killed.
#[derive(Default)]
struct Kills(Mutex<Vec<(String, Value)>>);

#[async_trait]
impl LocalTool for Kills {
    async fn call(&self, ctx: &CallContext, args: Map<String, Value>) -> ToolReply {
        let process = args.get("session_id").cloned().unwrap_or(Value::Null);
        self.0
            .lock()
            .unwrap()
            .push((ctx.task_id.clone(), Value::Object(args)));
        ToolReply::new(
            CallStatus::Ok,
            json!({"status": "killed", "session_id": process}).to_string(),
        )
    }
}

async fn with_kills(h: &Harness) -> Arc<Kills> {
    let kills = Arc::new(Kills::default());
    h.coordinator
        .registry()
        .register(
            ToolEntry::new(
                "process",
                "terminal",
                schema("process", json!({"action": {"type": "string"}})),
                Handler::Local(kills.clone()),
            ),
            false,
        )
        .await
        .unwrap();
    kills
}

/// Panics on the first request of a conversation (first user message
/// containing `needle`) that carries a tool result: after its first call.
struct PanicsAfterCall {
    inner: OpenAiClient,
    needle: &'static str,
}

#[async_trait]
impl ChatModel for PanicsAfterCall {
    async fn complete(
        &self,
        request: &ChatRequest,
        events: EventSink<'_>,
    ) -> Result<AssistantTurn, LlmError> {
        let mine = request
            .first_user_text()
            .unwrap_or_default()
            .contains(self.needle);
        if mine
            && request
                .messages
                .iter()
                .any(|m| m.role == caduceus_llm::Role::Tool)
        {
            panic!("model exploded after a call");
        }
        self.inner.complete(request, events).await
    }

    fn describe(&self) -> String {
        "panics-after-call".into()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_child_whose_loop_panics_has_its_background_processes_killed() {
    let h = harness(
        vec![
            ScriptedResponse::tool_calls(vec![call(
                "d",
                "delegate_task",
                json!({"goal": "explode after starting a build"}),
            )]),
            ScriptedResponse::tool_calls(vec![call(
                "t",
                "terminal",
                json!({"command": "make", "background": true}),
            )])
            .for_conversation("explode"),
            ScriptedResponse::text("The child crashed; carrying on."),
        ],
        true,
        |_| {},
    )
    .await;
    let kills = with_kills(&h).await;
    let config = h.coordinator.sessions().settings().llm.clone();
    let model: Arc<dyn ChatModel> = Arc::new(PanicsAfterCall {
        inner: OpenAiClient::new(config).unwrap(),
        needle: "explode",
    });
    let stream = h
        .coordinator
        .sessions()
        .start_with_model(
            StartRequest {
                prompt: "One job".into(),
                ..StartRequest::default()
            },
            model,
            "panics".into(),
        )
        .await
        .unwrap();
    let events = collect(stream).await;
    let root = root(&events);
    assert_eq!(
        final_of(&events, &root)["text"],
        "The child crashed; carrying on."
    );
    let finished = events.iter().find(|e| e.kind == "child_finished").unwrap();
    let child = finished.json["child_session_id"].as_str().unwrap();
    assert_eq!(final_of(&events, child)["status"], "crashed");
    // The process the child started was killed in the child's environment,
    // as for a child that ends normally, and its entry says so.
    let calls = kills.0.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].0, finished.json["task_id"].as_str().unwrap());
    assert_eq!(
        calls[0].1,
        json!({"action": "kill", "session_id": "proc_build"})
    );
    assert!(
        events.iter().any(|e| e.kind == "processes_killed"
            && e.session == child
            && e.json["process_ids"] == json!(["proc_build"])),
        "{events:#?}"
    );
    let entry = &result_of(&h, "One job", "d")["results"][0];
    assert_eq!(entry["status"], "error");
    assert_eq!(
        entry["orphaned_processes"],
        json!(["proc_build"]),
        "{entry}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_parent_that_spends_its_budget_stops_its_background_children_and_records_their_results() {
    let h = harness(
        vec![
            ScriptedResponse::tool_calls(vec![call(
                "d",
                "delegate_task",
                json!({"goal": "job slowpoke", "background": true}),
            )]),
            // Never opened: only the parent's end stops it.
            ScriptedResponse::tool_calls(vec![call("c1", "hold", json!({"name": "never"}))])
                .for_conversation("slowpoke"),
            ScriptedResponse::tool_calls(vec![call("e", "echo", json!({"n": 1}))]),
            ScriptedResponse::text("Out of budget; here is what I have."),
        ],
        true,
        |_| {},
    )
    .await;
    let _gates = with_gates(&h).await;
    let mut watch = Watch {
        stream: start(&h, "Spend the budget", |r| r.max_iterations = 2).await,
        seen: Vec::new(),
    };
    let started = watch
        .until("child_started", |e| e.kind == "child_started")
        .await;
    let child = started.json["child_session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = watch.rest().await;
    let root = root(&events);
    let last = final_of(&events, &root);
    assert_eq!(last["status"], "max_iterations");
    assert_eq!(last["text"], "Out of budget; here is what I have.");
    // The child was stopped, and its delegation reported before the
    // parent's `final`, saying the parent had ended.
    assert_eq!(final_of(&events, &child)["status"], "interrupted");
    let at = |want: &dyn Fn(&Ev) -> bool| events.iter().position(want).unwrap();
    let finished = at(&|e| e.kind == "delegation_finished");
    assert!(finished < at(&|e| e.kind == "final" && e.session == root));
    assert_eq!(events[finished].json["parent_ended"], "max_iterations");
    assert_eq!(events[finished].json["statuses"], json!(["interrupted"]));
    // The results are in the parent's recorded transcript, wrapped.
    h.coordinator.sessions().flush().await;
    let transcript = store::read_transcript(&h.db, &root).unwrap();
    let message = transcript.last().unwrap();
    assert_eq!(message.role, "user");
    let text = message.content.as_deref().unwrap();
    assert!(
        text.contains("was stopped because this session ended (max_iterations): 1 subagent(s)"),
        "{text}"
    );
    let results = delegate::background_results(text).unwrap();
    assert_eq!(results["results"][0]["status"], "interrupted");
    assert_eq!(results["results"][0]["session_id"], child.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_parent_whose_model_fails_records_its_background_childrens_results() {
    let h = harness(
        vec![
            ScriptedResponse::tool_calls(vec![call(
                "d",
                "delegate_task",
                json!({"goal": "job orphan", "background": true}),
            )]),
            ScriptedResponse::tool_calls(vec![call("c1", "hold", json!({"name": "never"}))])
                .for_conversation("orphan"),
            ScriptedResponse::error(400, "the model is gone"),
        ],
        true,
        |_| {},
    )
    .await;
    let _gates = with_gates(&h).await;
    let events = run(&h, "Fail with a child out", |_| {}).await;
    let root = root(&events);
    assert_eq!(final_of(&events, &root)["status"], "failed");
    let finished = events
        .iter()
        .find(|e| e.kind == "delegation_finished")
        .expect("the background delegation was reported");
    assert_eq!(finished.json["parent_ended"], "failed");
    assert_eq!(finished.json["statuses"], json!(["interrupted"]));
    h.coordinator.sessions().flush().await;
    let transcript = store::read_transcript(&h.db, &root).unwrap();
    let text = transcript.last().unwrap().content.clone().unwrap();
    assert!(text.contains("this session ended (failed)"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn background_delegations_count_against_max_concurrent_children() {
    let h = harness(
        vec![
            ScriptedResponse::tool_calls(vec![call(
                "d1",
                "delegate_task",
                json!({"goal": "job first", "background": true}),
            )]),
            ScriptedResponse::tool_calls(vec![call("c1", "hold", json!({"name": "first"}))])
                .for_conversation("first"),
            ScriptedResponse::text("first done").for_conversation("first"),
            ScriptedResponse::tool_calls(vec![call(
                "d2",
                "delegate_task",
                json!({"goal": "job second", "background": true}),
            )]),
            ScriptedResponse::tool_calls(vec![call(
                "d3",
                "delegate_task",
                json!({"tasks": [{"goal": "job third"}, {"goal": "job fourth"}], "background": true}),
            )]),
            ScriptedResponse::text("Waiting for the first."),
        ],
        true,
        |s| {
            s.delegation = Arc::new(DelegationConfig {
                max_concurrent_children: Some(1),
                ..DelegationConfig::default()
            });
        },
    )
    .await;
    let gates = with_gates(&h).await;
    let prompt = "One at a time";
    let mut watch = Watch {
        stream: start(&h, prompt, |_| {}).await,
        seen: Vec::new(),
    };
    watch
        .until("the parent's turn after the refusals", |e| {
            e.kind == "assistant_text" && e.json["text"] == "Waiting for the first."
        })
        .await;
    // Capacity frees when the first delegation finishes: a new one runs.
    h.server.push(ScriptedResponse::tool_calls(vec![call(
        "d4",
        "delegate_task",
        json!({"goal": "job fifth", "background": true}),
    )]));
    h.server
        .push(ScriptedResponse::text("fifth done").for_conversation("fifth"));
    h.server
        .push(ScriptedResponse::text("Waiting for the fifth."));
    h.server.push(ScriptedResponse::text("All done."));
    gates.open("first");
    let events = watch.rest().await;
    let root = root(&events);
    assert_eq!(final_of(&events, &root)["text"], "All done.");
    assert_eq!(
        result_of(&h, prompt, "d2")["error"],
        "Async delegation capacity reached (1 running). Wait for one to finish (its result will re-enter the chat), or run this task synchronously (background=false). Raise delegation.max_concurrent_children in config.yaml to allow more concurrent background subagents."
    );
    // A batch larger than the cap is refused for its size first, as hermes does.
    assert_eq!(
        result_of(&h, prompt, "d3")["error"],
        "Too many tasks: 2 provided, but max_concurrent_children is 1. Either reduce the task count, split into multiple delegate_task calls, or increase delegation.max_concurrent_children in config.yaml."
    );
    assert_eq!(result_of(&h, prompt, "d4")["status"], "dispatched");
    let goals: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == "child_started")
        .map(|e| e.json["goal"].as_str().unwrap())
        .collect();
    assert_eq!(goals, ["job first", "job fifth"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_validated_answer_trimmed_for_the_parent_says_it_no_longer_parses() {
    let schema = json!({"type": "object", "properties": {"lines": {"type": "array"}}, "required": ["lines"]});
    let lines: Vec<String> = (0..400).map(|i| format!("line number {i}")).collect();
    let answer = json!({ "lines": lines }).to_string();
    let h = harness(
        vec![
            ScriptedResponse::tool_calls(vec![call(
                "d",
                "delegate_task",
                json!({"goal": "job verbose", "output_schema": schema}),
            )]),
            ScriptedResponse::text(answer.clone()).for_conversation("verbose"),
            ScriptedResponse::text("Read it."),
        ],
        true,
        |s| {
            s.delegation = Arc::new(DelegationConfig {
                max_summary_chars: Some(2000),
                ..DelegationConfig::default()
            });
        },
    )
    .await;
    let events = run(&h, "A long contract", |_| {}).await;
    assert_eq!(final_of(&events, &root(&events))["text"], "Read it.");
    let entry = &result_of(&h, "A long contract", "d")["results"][0];
    assert_eq!(entry["schema_valid"], true, "{entry}");
    assert_eq!(entry["summary_truncated"], true, "{entry}");
    let summary = entry["summary"].as_str().unwrap();
    assert!(serde_json::from_str::<Value>(summary).is_err());
    // (No worker holds the parent's environment here, so nothing was saved.)
    assert_eq!(
        entry["schema_note"],
        output_schema::trimmed_note(None),
        "{entry}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_parent_records_its_stopped_background_children() {
    let h = harness(
        vec![
            ScriptedResponse::tool_calls(vec![call(
                "d",
                "delegate_task",
                json!({"goal": "job abandoned", "background": true}),
            )]),
            ScriptedResponse::tool_calls(vec![call("c1", "hold", json!({"name": "never"}))])
                .for_conversation("abandoned"),
            ScriptedResponse::tool_calls(vec![call("p1", "hold", json!({"name": "parent"}))]),
        ],
        true,
        |_| {},
    )
    .await;
    let _gates = with_gates(&h).await;
    let mut watch = Watch {
        stream: start(&h, "Cancel me", |_| {}).await,
        seen: Vec::new(),
    };
    let started = watch
        .until("child_started", |e| e.kind == "child_started")
        .await;
    let child = started.json["child_session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    watch
        .until("the child's hold", |e| {
            e.kind == "tool_started" && e.session == child
        })
        .await;
    // (The two holds start in either order.)
    let is_parent_hold = |e: &Ev| e.kind == "tool_started" && e.json["call_id"] == "p1";
    if !watch.seen.iter().any(is_parent_hold) {
        watch.until("the parent's hold", is_parent_hold).await;
    }
    // The client's Ctrl-C: the session is cancelled while its child runs.
    let parent = watch.seen[0].session.clone();
    assert!(h.coordinator.sessions().cancel(&parent));
    let events = watch.rest().await;
    let root = root(&events);
    assert_eq!(final_of(&events, &root)["status"], "interrupted");
    assert_eq!(final_of(&events, &child)["status"], "interrupted");
    let finished = events
        .iter()
        .find(|e| e.kind == "delegation_finished")
        .expect("the stopped delegation was reported");
    assert_eq!(finished.json["parent_ended"], "interrupted");
    h.coordinator.sessions().flush().await;
    let transcript = store::read_transcript(&h.db, &root).unwrap();
    let text = transcript.last().unwrap().content.clone().unwrap();
    let results = delegate::background_results(&text).unwrap();
    assert_eq!(results["results"][0]["status"], "interrupted");
}
