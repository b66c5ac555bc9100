//! `caduceus cron list | show ID | runs ID`: the scheduled jobs recorded in
//! this host's `$CADUCEUS_HOME/state.db` (created with the `cronjob` tool)
//! and their runs. Read-only; the serving coordinator runs the jobs.

use std::path::Path;

use anyhow::{Result, bail};
use clap::Subcommand;
use serde_json::{Value, json};

use caduceus_coordinator::cron::jobs::{self, Job, Run};
use caduceus_coordinator::cron::{format_job, schedule::iso};

use crate::config::home_dir;
use crate::out;

#[derive(Subcommand)]
pub enum CronCommand {
    /// List the jobs, paused and completed ones included, oldest first.
    List {
        /// Print JSON (one array, the `cronjob` tool's job objects).
        #[arg(long)]
        json: bool,
    },
    /// Show one job: its settings, full prompt and last run.
    Show {
        /// The job id.
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// The runs of one job, oldest first: when, how each ended, its session.
    Runs {
        /// The job id.
        id: String,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(command: CronCommand) -> Result<()> {
    let db = home_dir().join("state.db");
    if !db.exists() {
        bail!(
            "no job database at {} (no job was created with this CADUCEUS_HOME)",
            db.display()
        );
    }
    match command {
        CronCommand::List { json } => list(&db, json),
        CronCommand::Show { id, json } => show(&db, &id, json),
        CronCommand::Runs { id, json } => runs(&db, &id, json),
    }
}

fn job_of(db: &Path, id: &str) -> Result<Job> {
    match jobs::get_job(&jobs::open(db)?, id)? {
        Some(job) => Ok(job),
        None => bail!("no cron job '{id}' in {}", db.display()),
    }
}

fn list(db: &Path, as_json: bool) -> Result<()> {
    let all = jobs::list_jobs(&jobs::open(db)?, true)?;
    if as_json {
        let rows: Vec<Value> = all.iter().map(format_job).collect();
        return out(&serde_json::to_string_pretty(&rows)?);
    }
    if all.is_empty() {
        return out("no cron jobs");
    }
    out(&format!(
        "{:<13} {:<24} {:<16} {:<10} {:<26} LAST",
        "ID", "NAME", "SCHEDULE", "STATE", "NEXT RUN"
    ))?;
    for job in &all {
        out(&format!(
            "{:<13} {:<24} {:<16} {:<10} {:<26} {}",
            job.id,
            one_line(&job.name, 24),
            one_line(&job.schedule_display, 16),
            job.state,
            job.next_run_at.map(iso).unwrap_or_else(|| "-".to_owned()),
            job.last_status.as_deref().unwrap_or("-")
        ))?;
    }
    Ok(())
}

fn show(db: &Path, id: &str, as_json: bool) -> Result<()> {
    let job = job_of(db, id)?;
    let runs = jobs::runs_of(&jobs::open(db)?, id)?;
    if as_json {
        let mut value = format_job(&job);
        value["prompt"] = json!(job.prompt);
        value["created_at"] = json!(iso(job.created_at));
        value["runs"] = json!(runs.len());
        return out(&serde_json::to_string_pretty(&value)?);
    }
    out(&format!(
        "job {} · {} · {} · {}",
        job.id, job.name, job.schedule_display, job.state
    ))?;
    let repeat = match job.repeat_times {
        None => "forever".to_owned(),
        Some(times) => format!("{}/{times}", job.repeat_completed),
    };
    out(&format!("repeat {repeat} · {} runs recorded", runs.len()))?;
    if let Some(next) = job.next_run_at {
        out(&format!("next run {}", iso(next)))?;
    }
    if let Some(last) = job.last_run_at {
        out(&format!(
            "last run {} · {}",
            iso(last),
            job.last_status.as_deref().unwrap_or("running")
        ))?;
    }
    if let Some(error) = &job.last_error {
        out(&format!("last error: {}", one_line(error, 200)))?;
    }
    if let Some(reason) = &job.paused_reason {
        out(&format!("paused: {reason}"))?;
    }
    for (label, value) in [
        ("model", job.model.clone()),
        ("workdir", job.workdir.clone()),
        (
            "toolsets",
            job.enabled_toolsets.as_ref().map(|t| t.join(", ")),
        ),
        (
            "skills",
            Some(job.skills.join(", ")).filter(|s| !s.is_empty()),
        ),
    ] {
        if let Some(value) = value {
            out(&format!("{label}: {value}"))?;
        }
    }
    out(&format!("prompt: {}", job.prompt))
}

fn run_json(run: &Run) -> Value {
    json!({
        "run_id": run.id,
        "job_id": run.job_id,
        "scheduled_for": iso(run.scheduled_for),
        "claimed_at": iso(run.claimed_at),
        "ended_at": run.ended_at.map(iso),
        "state": run.state,
        "status": run.status,
        "exit_reason": run.exit_reason,
        "session_id": run.session_id,
        "final_response": run.final_response,
        "error": run.error,
    })
}

fn runs(db: &Path, id: &str, as_json: bool) -> Result<()> {
    let runs = jobs::runs_of(&jobs::open(db)?, id)?;
    if runs.is_empty() && jobs::get_job(&jobs::open(db)?, id)?.is_none() {
        bail!("no cron job '{id}' in {}", db.display());
    }
    if as_json {
        let rows: Vec<Value> = runs.iter().map(run_json).collect();
        return out(&serde_json::to_string_pretty(&rows)?);
    }
    if runs.is_empty() {
        return out("no runs yet");
    }
    for run in &runs {
        let outcome = match (&run.status, &run.exit_reason) {
            (Some(status), Some(reason)) => format!("{status} ({reason})"),
            _ => run.state.clone(),
        };
        out(&format!(
            "{} {} {:<24} {}",
            run.id,
            iso(run.claimed_at),
            outcome,
            run.session_id
        ))?;
        let text = run
            .final_response
            .as_deref()
            .or(run.error.as_deref())
            .unwrap_or_default();
        if !text.is_empty() {
            out(&format!("    {}", one_line(text, 160)))?;
        }
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
