//! `execute_code` in the pipeline: the script runs on the task's worker, and
//! every tool call it makes comes back here and goes through the whole
//! pipeline (name, coercion, hooks, the gate and its approvals, the audit
//! line) as a call of the same caller — never a shortcut on the worker.
//! This side owns the allow-list and the call limit (hermes
//! `_handle_rpc_request`); the worker owns the run's token.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use caduceus_common::execute_code::TERMINAL_BLOCKED_PARAMS;
use caduceus_common::result::tool_error;

use super::{CallRequest, Dispatcher, RawArguments, WorkerRun};
use crate::call::{CallContext, ToolResult};
use crate::registry::ToolRegistry;
use crate::registry::execute_code::{NAME, sandbox_tools_among};
use crate::scheduler::{ScriptCalls, ScriptRequest};

type NestedCall<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

impl Dispatcher {
    /// Runs an `execute_code` call on the task's worker and serves its
    /// script's tool calls until the run ends.
    /// (Boxed with its `Send` declared: the pipeline calls itself through
    /// it, and the compiler cannot infer that on a cycle.)
    pub(super) fn run_code<'a>(
        &'a self,
        snapshot: &'a ToolRegistry,
        result_cap: u64,
        args: &'a Map<String, Value>,
        ctx: &'a CallContext,
        backend: &'a str,
        timeout: Option<Duration>,
    ) -> Pin<Box<dyn Future<Output = WorkerRun> + Send + 'a>> {
        Box::pin(self.serve_code(snapshot, result_cap, args, ctx, backend, timeout))
    }

    async fn serve_code(
        &self,
        snapshot: &ToolRegistry,
        result_cap: u64,
        args: &Map<String, Value>,
        ctx: &CallContext,
        backend: &str,
        timeout: Option<Duration>,
    ) -> WorkerRun {
        // The sandbox tools this caller may use: the module offers these
        // and nothing else.
        let allowed = match snapshot.available_names(&ctx.filter) {
            Ok(names) => sandbox_tools_among(|t| names.contains(t)),
            Err(_) => Vec::new(),
        };
        let (requests, mut incoming) = mpsc::unbounded_channel();
        let run = self.run_on_worker(
            super::WorkerJob {
                tool: NAME,
                args,
                result_cap_chars: result_cap,
                timeout,
            },
            ctx,
            backend,
            Some(ScriptCalls {
                tools: allowed.clone(),
                requests,
            }),
        );
        tokio::pin!(run);
        let max = self.config.code_max_tool_calls;
        let mut dispatched = 0u32;
        let mut running: FuturesUnordered<NestedCall<'_>> = FuturesUnordered::new();
        loop {
            tokio::select! {
                // Whatever is still running when the script has ended (its
                // timeout killed it) is dropped, which cancels it.
                done = &mut run => return done,
                Some(request) = incoming.recv() => {
                    let ScriptRequest { call, answer } = request;
                    if !allowed.contains(&call.tool) {
                        answer.send(
                            tool_error(format!(
                                "Tool '{}' is not available in execute_code. Available: {}",
                                call.tool,
                                allowed.join(", ")
                            )),
                            false,
                        );
                        continue;
                    }
                    if dispatched >= max {
                        answer.send(
                            tool_error(format!(
                                "Tool call limit reached ({max}). No more tool calls allowed in this execution."
                            )),
                            false,
                        );
                        continue;
                    }
                    dispatched += 1;
                    let mut arguments = serde_json::from_str::<Value>(&call.arguments_json)
                        .unwrap_or(Value::Null);
                    if call.tool == "terminal"
                        && let Value::Object(map) = &mut arguments
                    {
                        for param in TERMINAL_BLOCKED_PARAMS {
                            map.remove(*param);
                        }
                    }
                    let nested = CallRequest {
                        tool: call.tool,
                        arguments: RawArguments::Value(arguments),
                        ctx: CallContext {
                            tool_call_id: ctx
                                .tool_call_id
                                .as_ref()
                                .map(|id| format!("{id}_rpc_{}", call.seq)),
                            from_agent_loop: false,
                            ..ctx.clone()
                        },
                    };
                    let result = self.call(nested);
                    running.push(Box::pin(async move {
                        let result: ToolResult = result.await;
                        answer.send(result.render(), true);
                    }));
                }
                Some(()) = running.next(), if !running.is_empty() => {}
            }
        }
    }
}
