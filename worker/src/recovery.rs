//! A sandbox that disappears under its environment (a container killed,
//! OOM-killed or removed, an instance stopped) is recreated once, and the
//! call's result says so.
//!
//! Before a call, [`live`] replaces a sandbox already known to be dead.
//! After it, [`after_call`] looks again: a sandbox that died before the call
//! began (the watcher had not told us yet) means the call cannot have run,
//! so it runs again in the fresh environment; one that died during the call
//! is reported, and the next call gets the fresh environment.

use std::sync::Arc;
use std::time::SystemTime;

use caduceus_common::result::ToolReply;

use crate::env::{EnvManager, Environment};

/// How the reset notice says when the sandbox was lost.
const VANISHED_BEFORE: &str = "this call ran in a fresh environment";
const VANISHED_DURING: &str = "it vanished during this call, whose command may not have completed; the next call runs in a fresh environment";

/// The environment to run in, recreated if its sandbox is known to be gone
/// (with the reset notice then).
pub(crate) async fn live(
    envs: &EnvManager,
    env: Arc<Environment>,
    task_id: &str,
) -> Result<(Arc<Environment>, Option<String>), ToolReply> {
    envs.ensure_live(env).await.map_err(|err| {
        ToolReply::error(format!(
            "The environment of task '{task_id}' was lost and could not be recreated: {err}"
        ))
    })
}

/// What to do once the call has run.
pub(crate) enum AfterCall {
    /// Keep the result; the notice, if any, goes with it.
    Done(Option<String>),
    /// The call cannot have run: run it again here, with this notice.
    Rerun(Arc<Environment>, Option<String>),
}

/// Looks at the sandbox the call ran in (`started` = when it began).
pub(crate) async fn after_call(
    envs: &EnvManager,
    env: Arc<Environment>,
    started: SystemTime,
    reset: Option<String>,
) -> AfterCall {
    if reset.is_some() || !env.sandbox.vanished() {
        return AfterCall::Done(reset);
    }
    let task_id = env.task_id.clone();
    let died_before = env.sandbox.gone_before(started).await;
    match envs.ensure_live(env).await {
        Ok((fresh, notice)) if died_before => AfterCall::Rerun(fresh, notice),
        Ok((_, notice)) => {
            AfterCall::Done(notice.map(|n| n.replace(VANISHED_BEFORE, VANISHED_DURING)))
        }
        Err(err) => {
            tracing::warn!(task = %task_id, "cannot recreate the environment: {err}");
            AfterCall::Done(None)
        }
    }
}
