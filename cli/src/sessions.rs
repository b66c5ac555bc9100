//! `caduceus sessions list | show ID`: the sessions recorded in this host's
//! session database (`$CADUCEUS_HOME/state.db`, where embedded runs and a
//! coordinator started with the same home record them). Read-only; a
//! running coordinator keeps writing while these read.

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Subcommand;
use serde_json::json;

use caduceus_coordinator::agent::store::{self, StoredSession};

use crate::config::home_dir;
use crate::out;

#[derive(Subcommand)]
pub enum SessionsCommand {
    /// List the recorded sessions, oldest first (children indented under
    /// their parent).
    List {
        /// Print JSON (one array).
        #[arg(long)]
        json: bool,
    },
    /// Show one session: its row, children, transcript and tool calls.
    Show {
        /// The session id (`sess_…`).
        id: String,
        /// Print JSON (one object).
        #[arg(long)]
        json: bool,
    },
}

fn database() -> Result<PathBuf> {
    let path = home_dir().join("state.db");
    if !path.exists() {
        bail!(
            "no session database at {} (no session has run with this CADUCEUS_HOME)",
            path.display()
        );
    }
    Ok(path)
}

pub fn run(command: SessionsCommand) -> Result<()> {
    let db = database()?;
    match command {
        SessionsCommand::List { json } => list(&db, json),
        SessionsCommand::Show { id, json } => show(&db, &id, json),
    }
}

fn list(db: &std::path::Path, as_json: bool) -> Result<()> {
    let sessions = store::read_sessions(db)?;
    if as_json {
        return out(&serde_json::to_string_pretty(&sessions)?);
    }
    if sessions.is_empty() {
        return out("no sessions recorded");
    }
    for session in &sessions {
        out(&format!(
            "{}{:<29} {:<14} calls={:<3} {}",
            "  ".repeat(session.depth as usize),
            session.id,
            session.state,
            session.api_calls,
            one_line(&session.prompt, 70)
        ))?;
    }
    Ok(())
}

fn show(db: &std::path::Path, id: &str, as_json: bool) -> Result<()> {
    let Some(session) = store::read_session(db, id)? else {
        bail!("no session '{id}' is recorded in {}", db.display());
    };
    let children: Vec<StoredSession> = store::read_sessions(db)?
        .into_iter()
        .filter(|s| s.parent_id.as_deref() == Some(id))
        .collect();
    let transcript = store::read_transcript(db, id)?;
    let calls = store::read_calls(db, id)?;
    if as_json {
        return out(&serde_json::to_string_pretty(&json!({
            "session": session,
            "children": children,
            "transcript": transcript,
            "calls": calls,
        }))?);
    }
    out(&format!(
        "session {} · {} · model {} · task {}",
        session.id, session.state, session.model, session.task_id
    ))?;
    if let Some(parent) = &session.parent_id {
        out(&format!("parent {parent}"))?;
    }
    out(&format!("prompt: {}", one_line(&session.prompt, 200)))?;
    for child in &children {
        out(&format!("child {} · {}", child.id, child.state))?;
    }
    for message in &transcript {
        let calls = message.message["tool_calls"]
            .as_array()
            .map(|calls| {
                calls
                    .iter()
                    .map(|c| c["function"]["name"].as_str().unwrap_or("?"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .filter(|names| !names.is_empty())
            .map(|names| format!(" → {names}"))
            .unwrap_or_default();
        out(&format!(
            "[{}] {:<9} {}{}",
            message.index,
            message.role,
            one_line(message.content.as_deref().unwrap_or_default(), 120),
            calls
        ))?;
    }
    for call in calls.iter().filter(|c| c.state != "done") {
        out(&format!(
            "call {} ({}) is {}: no result was recorded",
            call.call_id, call.tool, call.state
        ))?;
    }
    if let Some(text) = &session.final_response {
        out(&format!("final: {}", one_line(text, 200)))?;
    }
    if let Some(error) = &session.error {
        out(&format!("error: {}", one_line(error, 200)))?;
    }
    Ok(())
}

fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &flat[..cut]),
        None => flat,
    }
}
