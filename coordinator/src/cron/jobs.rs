//! Jobs and their runs in `state.db`, next to the sessions they start.
//!
//! ```sql
//! cron_jobs(id PRIMARY KEY, name, prompt, schedule, schedule_display, repeat_times,
//!           repeat_completed, enabled, state, paused_at, paused_reason, skills, model,
//!           workdir, enabled_toolsets, deliver, created_at, next_run_at, last_run_at,
//!           last_status, last_error)
//! cron_runs(id PRIMARY KEY, job_id, scheduled_for, claimed_at, session_id, owner, state,
//!           ended_at, status, exit_reason, final_response, error)
//! ```
//! Times are whole Unix seconds. `schedule` is a [`Schedule`] as JSON,
//! `skills` and `enabled_toolsets` JSON arrays. A job's `state` is
//! `scheduled`, `paused` or `completed` (its repeat count is used up); a
//! run's is `claimed` (recorded, its session not yet known to have
//! started), `running` or `done`.
//!
//! A run is claimed by a compare-and-set on the job's `next_run_at` (and
//! `repeat_completed`) in the same transaction that inserts the run row
//! with the id its session will have: two coordinators on one database, or
//! a tick racing a manual `run`, claim a due time once. The run row exists
//! before the session starts, so a restart finds every claimed run (see
//! `runner.rs` for what it does with them).

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::Serialize;

use super::schedule::Schedule;
use crate::agent::store::{self, StoreError};

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    pub id: String,
    pub name: String,
    pub prompt: String,
    pub schedule: Schedule,
    pub schedule_display: String,
    /// `None`: forever.
    pub repeat_times: Option<i64>,
    pub repeat_completed: i64,
    pub enabled: bool,
    pub state: String,
    pub paused_at: Option<i64>,
    pub paused_reason: Option<String>,
    pub skills: Vec<String>,
    pub model: Option<String>,
    pub workdir: Option<String>,
    pub enabled_toolsets: Option<Vec<String>>,
    pub deliver: String,
    pub created_at: i64,
    pub next_run_at: Option<i64>,
    pub last_run_at: Option<i64>,
    pub last_status: Option<String>,
    pub last_error: Option<String>,
}

/// One run of a job: one session.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub id: String,
    pub job_id: String,
    /// The due time this run was claimed for.
    pub scheduled_for: i64,
    pub claimed_at: i64,
    pub session_id: String,
    /// The session store owner (coordinator process) that claimed it.
    pub owner: String,
    pub state: String,
    pub ended_at: Option<i64>,
    /// The session's end status (`completed`, `failed`, …).
    pub status: Option<String>,
    pub exit_reason: Option<String>,
    pub final_response: Option<String>,
    pub error: Option<String>,
}

/// How a run's session ended (its `final` event).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunOutcome {
    pub status: String,
    pub exit_reason: String,
    pub final_response: Option<String>,
    pub error: Option<String>,
}

impl RunOutcome {
    pub fn ok(&self) -> bool {
        self.status == "completed"
    }
}

const JOB_COLUMNS: &str = "id, name, prompt, schedule, schedule_display, repeat_times, repeat_completed, enabled, state, paused_at, paused_reason, skills, model, workdir, enabled_toolsets, deliver, created_at, next_run_at, last_run_at, last_status, last_error";
const RUN_COLUMNS: &str = "id, job_id, scheduled_for, claimed_at, session_id, owner, state, ended_at, status, exit_reason, final_response, error";

/// A connection with the cron tables (created when missing).
pub fn open(db: &Path) -> Result<Connection, StoreError> {
    let conn = store::connect(db)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS cron_jobs (
            id TEXT PRIMARY KEY, name TEXT NOT NULL, prompt TEXT NOT NULL, schedule TEXT NOT NULL,
            schedule_display TEXT NOT NULL, repeat_times INTEGER, repeat_completed INTEGER NOT NULL DEFAULT 0,
            enabled INTEGER NOT NULL, state TEXT NOT NULL, paused_at INTEGER, paused_reason TEXT,
            skills TEXT NOT NULL, model TEXT, workdir TEXT, enabled_toolsets TEXT, deliver TEXT NOT NULL,
            created_at INTEGER NOT NULL, next_run_at INTEGER, last_run_at INTEGER, last_status TEXT,
            last_error TEXT);
         CREATE TABLE IF NOT EXISTS cron_runs (
            id TEXT PRIMARY KEY, job_id TEXT NOT NULL, scheduled_for INTEGER NOT NULL,
            claimed_at INTEGER NOT NULL, session_id TEXT NOT NULL, owner TEXT NOT NULL,
            state TEXT NOT NULL, ended_at INTEGER, status TEXT, exit_reason TEXT, final_response TEXT,
            error TEXT);
         CREATE INDEX IF NOT EXISTS cron_runs_job ON cron_runs(job_id, claimed_at);",
    )?;
    Ok(conn)
}

fn json_list(text: Option<String>) -> Option<Vec<String>> {
    text.and_then(|t| serde_json::from_str(&t).ok())
}

fn job_of(row: &Row<'_>) -> rusqlite::Result<Job> {
    let schedule: String = row.get(3)?;
    let schedule = serde_json::from_str(&schedule).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(3, rusqlite::types::Type::Text, Box::new(e))
    })?;
    Ok(Job {
        id: row.get(0)?,
        name: row.get(1)?,
        prompt: row.get(2)?,
        schedule,
        schedule_display: row.get(4)?,
        repeat_times: row.get(5)?,
        repeat_completed: row.get(6)?,
        enabled: row.get(7)?,
        state: row.get(8)?,
        paused_at: row.get(9)?,
        paused_reason: row.get(10)?,
        skills: json_list(row.get(11)?).unwrap_or_default(),
        model: row.get(12)?,
        workdir: row.get(13)?,
        enabled_toolsets: json_list(row.get(14)?),
        deliver: row.get(15)?,
        created_at: row.get(16)?,
        next_run_at: row.get(17)?,
        last_run_at: row.get(18)?,
        last_status: row.get(19)?,
        last_error: row.get(20)?,
    })
}

fn run_of(row: &Row<'_>) -> rusqlite::Result<Run> {
    Ok(Run {
        id: row.get(0)?,
        job_id: row.get(1)?,
        scheduled_for: row.get(2)?,
        claimed_at: row.get(3)?,
        session_id: row.get(4)?,
        owner: row.get(5)?,
        state: row.get(6)?,
        ended_at: row.get(7)?,
        status: row.get(8)?,
        exit_reason: row.get(9)?,
        final_response: row.get(10)?,
        error: row.get(11)?,
    })
}

/// Writes a job (a new one, or every field of an existing one).
pub fn save_job(conn: &Connection, job: &Job) -> Result<(), StoreError> {
    let schedule = serde_json::to_string(&job.schedule).unwrap_or_default();
    let skills = serde_json::to_string(&job.skills).unwrap_or_default();
    let toolsets = job
        .enabled_toolsets
        .as_ref()
        .map(|t| serde_json::to_string(t).unwrap_or_default());
    conn.execute(
        &format!(
            "INSERT OR REPLACE INTO cron_jobs ({JOB_COLUMNS}) VALUES
             (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)"
        ),
        params![
            job.id,
            job.name,
            job.prompt,
            schedule,
            job.schedule_display,
            job.repeat_times,
            job.repeat_completed,
            job.enabled,
            job.state,
            job.paused_at,
            job.paused_reason,
            skills,
            job.model,
            job.workdir,
            toolsets,
            job.deliver,
            job.created_at,
            job.next_run_at,
            job.last_run_at,
            job.last_status,
            job.last_error
        ],
    )?;
    Ok(())
}

pub fn get_job(conn: &Connection, id: &str) -> Result<Option<Job>, StoreError> {
    Ok(conn
        .query_row(
            &format!("SELECT {JOB_COLUMNS} FROM cron_jobs WHERE id = ?1"),
            [id],
            job_of,
        )
        .optional()?)
}

/// Every job, oldest first; without `include_disabled`, only enabled ones.
pub fn list_jobs(conn: &Connection, include_disabled: bool) -> Result<Vec<Job>, StoreError> {
    let filter = if include_disabled {
        ""
    } else {
        "WHERE enabled = 1"
    };
    let mut statement = conn.prepare(&format!(
        "SELECT {JOB_COLUMNS} FROM cron_jobs {filter} ORDER BY created_at, id"
    ))?;
    let jobs = statement
        .query_map([], job_of)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(jobs)
}

pub fn delete_job(conn: &Connection, id: &str) -> Result<bool, StoreError> {
    Ok(conn.execute("DELETE FROM cron_jobs WHERE id = ?1", [id])? > 0)
}

/// Enabled jobs due at `now`, the earliest first.
pub fn due_jobs(conn: &Connection, now: i64) -> Result<Vec<Job>, StoreError> {
    let mut statement = conn.prepare(&format!(
        "SELECT {JOB_COLUMNS} FROM cron_jobs WHERE enabled = 1 AND next_run_at IS NOT NULL
         AND next_run_at <= ?1 ORDER BY next_run_at, id"
    ))?;
    let jobs = statement
        .query_map([now], job_of)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(jobs)
}

/// The earliest time an enabled job is due.
pub fn next_due(conn: &Connection) -> Result<Option<i64>, StoreError> {
    Ok(conn.query_row(
        "SELECT MIN(next_run_at) FROM cron_jobs WHERE enabled = 1",
        [],
        |row| row.get(0),
    )?)
}

/// Claims `job`'s due run at `now` for `owner`, if no one has: moves the
/// job on to its next run (the catch-up rule: later than `now`, however
/// many were missed) and records the run, in one transaction whose update
/// only applies if the job is still as `job` read it. `None`: someone else
/// claimed it, or the job changed meanwhile.
pub fn claim(
    conn: &mut Connection,
    job: &Job,
    now: i64,
    owner: &str,
    session_id: &str,
) -> Result<Option<Run>, StoreError> {
    let Some(due) = job.next_run_at else {
        return Ok(None);
    };
    let completed = job.repeat_completed + 1;
    let used_up = job.repeat_times.is_some_and(|times| completed >= times);
    let next = if used_up {
        None
    } else {
        job.schedule.after_run(now)
    };
    let finished = next.is_none();
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let changed = tx.execute(
        "UPDATE cron_jobs SET next_run_at = ?1, repeat_completed = ?2, last_run_at = ?3,
         enabled = CASE WHEN ?4 THEN 0 ELSE enabled END,
         state = CASE WHEN ?4 THEN 'completed' ELSE state END
         WHERE id = ?5 AND enabled = 1 AND next_run_at = ?6 AND repeat_completed = ?7",
        params![
            next,
            completed,
            now,
            finished,
            job.id,
            due,
            job.repeat_completed
        ],
    )?;
    if changed != 1 {
        return Ok(None);
    }
    let run = Run {
        id: format!("run_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
        job_id: job.id.clone(),
        scheduled_for: due,
        claimed_at: now,
        session_id: session_id.to_owned(),
        owner: owner.to_owned(),
        state: "claimed".to_owned(),
        ended_at: None,
        status: None,
        exit_reason: None,
        final_response: None,
        error: None,
    };
    tx.execute(
        &format!(
            "INSERT INTO cron_runs ({RUN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, NULL, NULL, NULL, NULL)"
        ),
        params![
            run.id,
            run.job_id,
            run.scheduled_for,
            run.claimed_at,
            run.session_id,
            run.owner,
            run.state
        ],
    )?;
    tx.commit()?;
    Ok(Some(run))
}

/// A run's session has started under `owner` (a restart's adoption
/// records the new owner).
pub fn run_started(conn: &Connection, run_id: &str, owner: &str) -> Result<(), StoreError> {
    conn.execute(
        "UPDATE cron_runs SET state = 'running', owner = ?2 WHERE id = ?1 AND state != 'done'",
        params![run_id, owner],
    )?;
    Ok(())
}

/// Takes over an unfinished run of an owner that is gone: `false` if
/// another process took it first.
pub fn adopt_run(conn: &Connection, run: &Run, owner: &str) -> Result<bool, StoreError> {
    Ok(conn.execute(
        "UPDATE cron_runs SET owner = ?2 WHERE id = ?1 AND owner = ?3 AND state != 'done'",
        params![run.id, owner, run.owner],
    )? == 1)
}

/// Records how a run ended, on the run and as the job's last status.
pub fn run_finished(
    conn: &mut Connection,
    run: &Run,
    outcome: &RunOutcome,
    now: i64,
) -> Result<(), StoreError> {
    let tx = conn.transaction()?;
    tx.execute(
        "UPDATE cron_runs SET state = 'done', ended_at = ?2, status = ?3, exit_reason = ?4,
         final_response = ?5, error = ?6 WHERE id = ?1",
        params![
            run.id,
            now,
            outcome.status,
            outcome.exit_reason,
            outcome.final_response,
            outcome.error
        ],
    )?;
    let error = outcome.error.clone().or_else(|| {
        (!outcome.ok()).then(|| {
            format!(
                "the session ended {} ({})",
                outcome.status, outcome.exit_reason
            )
        })
    });
    tx.execute(
        "UPDATE cron_jobs SET last_status = ?2, last_error = ?3 WHERE id = ?1",
        params![run.job_id, if outcome.ok() { "ok" } else { "error" }, error],
    )?;
    tx.commit()?;
    Ok(())
}

/// Runs not yet done (claimed or running), oldest first.
pub fn unfinished_runs(conn: &Connection) -> Result<Vec<Run>, StoreError> {
    let mut statement = conn.prepare(&format!(
        "SELECT {RUN_COLUMNS} FROM cron_runs WHERE state != 'done' ORDER BY claimed_at, id"
    ))?;
    let runs = statement
        .query_map([], run_of)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(runs)
}

/// A job's runs, oldest first.
pub fn runs_of(conn: &Connection, job_id: &str) -> Result<Vec<Run>, StoreError> {
    let mut statement = conn.prepare(&format!(
        "SELECT {RUN_COLUMNS} FROM cron_runs WHERE job_id = ?1 ORDER BY claimed_at, scheduled_for, id"
    ))?;
    let runs = statement
        .query_map([job_id], run_of)?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(runs)
}

#[cfg(test)]
#[path = "jobs_tests.rs"]
mod tests;
