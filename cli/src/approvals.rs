//! `caduceus approvals list | approve ID | deny ID`: answers the command
//! guard's pending approvals, and edits held by `approvals.edits: ask` (with
//! the diff they would apply), on a running coordinator.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, anyhow, bail};
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use caduceus_proto::{AnswerApprovalRequest, Approval, ListApprovalsRequest};

use crate::config::Config;
use crate::out;
use crate::target::{Client, Remote};
use crate::token::TokenArgs;

#[derive(Subcommand)]
pub enum ApprovalsCommand {
    /// List the approvals waiting for an answer.
    List {
        /// Print JSON (one array).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Approve a pending command: the model's retry of it runs.
    Approve {
        /// The approval id (`appr_…`).
        id: String,
        /// once: that command, once; session: every command with the same
        /// approval key in that session (or task); always: also add the key
        /// to command_allowlist in the coordinator's configuration file.
        #[arg(long, default_value = "once", value_parser = ["once", "session", "always"])]
        scope: String,
        /// Print `{"id", "accepted", "scope", "message"}`.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
    /// Deny a pending command: the model is told the user has not consented.
    Deny {
        /// The approval id (`appr_…`).
        id: String,
        /// Why, relayed to the model.
        #[arg(long)]
        reason: Option<String>,
        /// Print `{"id", "accepted", "scope", "message"}`.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        remote: RemoteArgs,
    },
}

/// Approvals live in a running coordinator, so these commands need one.
#[derive(Args, Clone)]
pub struct RemoteArgs {
    /// Coordinator address (http://host:port or https://host:port).
    #[arg(long, env = "CADUCEUS_COORDINATOR")]
    coordinator: Option<String>,
    #[command(flatten)]
    token: TokenArgs,
    /// CA certificate (PEM) to trust for an https coordinator.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
}

async fn client(remote: &RemoteArgs, config: &Config) -> Result<Client> {
    remote_client(
        remote,
        config,
        "approvals are answered on a running coordinator: pass --coordinator or set CADUCEUS_COORDINATOR (an embedded coordinator lives only as long as one command, so it never has approvals to answer)",
    )
    .await
}

/// A Control client of the coordinator `remote` names; `why` is the error
/// when it names none.
pub(crate) async fn remote_client(
    remote: &RemoteArgs,
    config: &Config,
    why: &str,
) -> Result<Client> {
    Remote::from_flags(
        remote.coordinator.clone(),
        &remote.token,
        remote.tls_ca.clone(),
        config,
    )?
    .client()
    .await?
    .ok_or_else(|| anyhow!("{why}"))
}

pub async fn run(command: ApprovalsCommand, config: &Config) -> Result<()> {
    match command {
        ApprovalsCommand::List { json, remote } => {
            let mut client = client(&remote, config).await?;
            let approvals = client
                .list_approvals(ListApprovalsRequest {})
                .await
                .map_err(|s| anyhow!("{}", s.message()))?
                .into_inner()
                .approvals;
            if json {
                let list: Vec<Value> = approvals.iter().map(approval_json).collect();
                return out(&serde_json::to_string_pretty(&list)?);
            }
            if approvals.is_empty() {
                return out("no pending approvals");
            }
            for line in table(&approvals) {
                out(&line)?;
            }
            // An edit's diff follows the table: what approving it applies.
            for a in approvals.iter().filter(|a| !a.diff.is_empty()) {
                out(&format!("\n{} would apply:\n{}", a.id, a.diff.trim_end()))?;
            }
            Ok(())
        }
        ApprovalsCommand::Approve {
            id,
            scope,
            json,
            remote,
        } => answer(&remote, config, id, true, scope, String::new(), json).await,
        ApprovalsCommand::Deny {
            id,
            reason,
            json,
            remote,
        } => {
            answer(
                &remote,
                config,
                id,
                false,
                String::new(),
                reason.unwrap_or_default(),
                json,
            )
            .await
        }
    }
}

async fn answer(
    remote: &RemoteArgs,
    config: &Config,
    id: String,
    approve: bool,
    scope: String,
    reason: String,
    json: bool,
) -> Result<()> {
    let mut client = client(remote, config).await?;
    let response = client
        .answer_approval(AnswerApprovalRequest {
            id: id.clone(),
            approve,
            scope,
            reason,
        })
        .await
        .map_err(|s| anyhow!("{}", s.message()))?
        .into_inner();
    if !response.accepted {
        bail!("{}", response.message);
    }
    if json {
        return out(&serde_json::to_string_pretty(&json!({
            "id": id,
            "accepted": true,
            "scope": (!response.scope.is_empty()).then_some(&response.scope),
            "message": response.message,
        }))?);
    }
    out(&response.message)
}

fn approval_json(a: &Approval) -> Value {
    json!({
        "id": a.id,
        "tool": a.tool,
        "command": a.command,
        "description": a.description,
        "pattern_key": a.pattern_key,
        "task_id": a.task_id,
        "session_id": (!a.session_id.is_empty()).then_some(&a.session_id),
        "age_ms": a.age_ms,
        "expires_in_ms": a.expires_in_ms,
        "waiting": a.waiting,
        "allow_permanent": a.allow_permanent,
        "diff": (!a.diff.is_empty()).then_some(&a.diff),
    })
}

/// One header and one line per approval.
fn table(approvals: &[Approval]) -> Vec<String> {
    let seconds = |ms: u64| format!("{}s", Duration::from_millis(ms).as_secs());
    let mut lines = vec![format!(
        "{:<18} {:>7} {:>5}  {:<24} {:<32} COMMAND",
        "ID", "EXPIRES", "AGE", "FOR", "DESCRIPTION"
    )];
    for a in approvals {
        let owner = if a.session_id.is_empty() {
            format!("task {}", a.task_id)
        } else {
            format!("session {}", a.session_id)
        };
        let command = a.command.replace('\n', "⏎");
        lines.push(format!(
            "{:<18} {:>7} {:>5}  {:<24} {:<32} {}",
            a.id,
            seconds(a.expires_in_ms),
            seconds(a.age_ms),
            owner,
            a.description,
            command
        ));
    }
    lines
}
