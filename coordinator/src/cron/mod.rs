//! `cronjob`: scheduled agent jobs (hermes `tools/cronjob_tools.py`,
//! `cron/jobs.py`), kept on the coordinator — one schedule for the whole
//! fleet — in `state.db` ([`jobs`]), fired by the Cron actor
//! ([`runner`]), each run a normal session placed on the fleet like any
//! other.
//!
//! The tool (`action create|list|update|pause|resume|remove|run`) answers
//! in hermes' shapes: `{"success": true, "job_id", …, "job": {…}}`,
//! `{"success": true, "count", "jobs"}`, `{"success": false, "error"}`.
//! Differences, each deliberate:
//! - `run` marks the job due now and nudges the actor (hermes' trigger):
//!   the run happens on the serving coordinator, whichever process asked;
//! - output is kept, not delivered: `deliver` accepts `local` (and
//!   `origin`, which is the same here); every run's outcome is in
//!   `cron_runs` and `$CADUCEUS_HOME/cron/output/<job>/<run>.md`;
//! - a job whose repeat count is used up is kept as `completed` (disabled),
//!   not deleted, so its runs stay listed;
//! - `script`, `no_agent`, `context_from` and chat delivery are not built.

pub mod clock;
pub mod jobs;
pub mod runner;
pub mod schedule;

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use crate::call::{CallContext, ToolReply};
use crate::registry::{Handler, LocalTool, ParallelClass, RegistryError, ToolEntry};
use clock::Clock;
use jobs::Job;
use schedule::{Schedule, iso};

/// The `cronjob` tool over the jobs in `db`.
pub struct CronTool {
    db: PathBuf,
    clock: Arc<dyn Clock>,
    /// Nudges the Cron actor after a change (it also polls, for changes
    /// made by other processes).
    wake: Arc<Notify>,
}

impl CronTool {
    pub fn new(db: PathBuf, clock: Arc<dyn Clock>, wake: Arc<Notify>) -> Self {
        CronTool { db, clock, wake }
    }
}

fn failure(message: impl Into<String>) -> Value {
    json!({"success": false, "error": message.into()})
}

/// hermes `_repeat_display`.
fn repeat_display(job: &Job) -> String {
    match job.repeat_times {
        None => "forever".to_owned(),
        Some(1) if job.repeat_completed == 0 => "once".to_owned(),
        Some(1) => "1/1".to_owned(),
        Some(times) if job.repeat_completed > 0 => format!("{}/{times}", job.repeat_completed),
        Some(times) => format!("{times} times"),
    }
}

/// hermes `_format_job` (plus the fields caduceus keeps).
pub fn format_job(job: &Job) -> Value {
    let preview = if job.prompt.chars().count() > 100 {
        format!("{}...", job.prompt.chars().take(100).collect::<String>())
    } else {
        job.prompt.clone()
    };
    json!({
        "job_id": job.id,
        "name": job.name,
        "skill": job.skills.first(),
        "skills": job.skills,
        "prompt_preview": preview,
        "model": job.model,
        "schedule": job.schedule_display,
        "repeat": repeat_display(job),
        "deliver": job.deliver,
        "next_run_at": job.next_run_at.map(iso),
        "last_run_at": job.last_run_at.map(iso),
        "last_status": job.last_status,
        "last_error": job.last_error,
        "enabled": job.enabled,
        "state": job.state,
        "paused_at": job.paused_at.map(iso),
        "paused_reason": job.paused_reason,
        "workdir": job.workdir,
        "enabled_toolsets": job.enabled_toolsets,
    })
}

/// hermes' cron prompt scan (the same patterns as memory's, cron's texts).
fn scan_prompt(prompt: &str) -> Option<String> {
    let first = crate::memory::threats::scan(prompt).into_iter().next()?;
    Some(match first.strip_prefix("invisible_unicode_") {
        Some(codepoint) => {
            format!("Blocked: prompt contains invisible unicode {codepoint} (possible injection).")
        }
        None => format!(
            "Blocked: prompt matches threat pattern '{first}'. Cron prompts must not contain injection or exfiltration payloads."
        ),
    })
}

/// The tool's arguments, read once.
#[derive(Debug, Default)]
struct Args {
    action: String,
    job_id: Option<String>,
    prompt: Option<String>,
    schedule: Option<String>,
    name: Option<String>,
    repeat: Option<i64>,
    deliver: Option<String>,
    include_disabled: bool,
    skills: Option<Vec<String>>,
    model: Option<String>,
    reason: Option<String>,
    workdir: Option<String>,
    enabled_toolsets: Option<Vec<String>>,
    /// hermes arguments caduceus does not serve (named in the refusal).
    unsupported: Option<&'static str>,
}

fn text(args: &Map<String, Value>, key: &str) -> Option<String> {
    match args.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    }
}

fn list(args: &Map<String, Value>, key: &str) -> Option<Vec<String>> {
    match args.get(key)? {
        Value::Array(items) => Some(
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        ),
        Value::String(s) => Some(
            s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect(),
        ),
        _ => None,
    }
}

impl Args {
    fn from_map(args: &Map<String, Value>) -> Self {
        // `skill` (one) and `skills` (several) merge, in order, once each.
        let skills = match (text(args, "skill"), list(args, "skills")) {
            (None, None) => None,
            (one, many) => {
                let mut all: Vec<String> = one.into_iter().map(|s| s.trim().to_owned()).collect();
                for s in many.unwrap_or_default() {
                    if !all.contains(&s) {
                        all.push(s);
                    }
                }
                all.retain(|s| !s.is_empty());
                Some(all)
            }
        };
        let unsupported = if text(args, "script").is_some_and(|s| !s.is_empty()) {
            Some("script")
        } else if args.get("no_agent").and_then(Value::as_bool) == Some(true) {
            Some("no_agent")
        } else if list(args, "context_from").is_some_and(|l| !l.is_empty()) {
            Some("context_from")
        } else {
            None
        };
        Args {
            action: text(args, "action")
                .unwrap_or_default()
                .trim()
                .to_lowercase(),
            job_id: text(args, "job_id").filter(|s| !s.trim().is_empty()),
            prompt: text(args, "prompt"),
            schedule: text(args, "schedule").filter(|s| !s.trim().is_empty()),
            name: text(args, "name"),
            repeat: args.get("repeat").and_then(|v| match v {
                Value::Number(n) => n.as_i64(),
                Value::String(s) => match s.trim() {
                    "forever" => Some(0),
                    "once" => Some(1),
                    other => other.parse().ok(),
                },
                _ => None,
            }),
            deliver: text(args, "deliver"),
            include_disabled: args
                .get("include_disabled")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            skills,
            model: text(args, "model"),
            reason: text(args, "reason"),
            workdir: text(args, "workdir"),
            enabled_toolsets: list(args, "enabled_toolsets"),
            unsupported,
        }
    }
}

/// `deliver` as caduceus can honour it: the job's log only.
fn check_deliver(deliver: Option<&str>) -> Result<String, Value> {
    match deliver.map(str::trim) {
        None | Some("" | "local" | "origin") => Ok("local".to_owned()),
        Some(other) => Err(failure(format!(
            "deliver '{other}' is not available: caduceus keeps a job's output in its run log (`caduceus cron runs <job_id>`); use 'local'"
        ))),
    }
}

fn check_workdir(workdir: &str) -> Result<Option<String>, Value> {
    let workdir = workdir.trim();
    if workdir.is_empty() {
        return Ok(None);
    }
    if !workdir.starts_with('/') {
        return Err(failure(format!(
            "workdir must be an absolute path, got '{workdir}'"
        )));
    }
    Ok(Some(workdir.to_owned()))
}

/// A repeat count: none or ≤ 0 is forever.
fn repeat_of(repeat: Option<i64>, schedule: &Schedule) -> Option<i64> {
    match repeat {
        None => schedule.default_repeat(),
        Some(n) if n <= 0 => None,
        Some(n) => Some(n),
    }
}

fn new_job_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

fn store_failure(err: &impl std::fmt::Display) -> Value {
    failure(format!("the job database failed: {err}"))
}

impl CronTool {
    /// Runs one action against the database (blocking).
    fn act(&self, args: &Args) -> Value {
        let conn = match jobs::open(&self.db) {
            Ok(conn) => conn,
            Err(err) => return store_failure(&err),
        };
        let now = self.clock.now();
        if let Some(name) = args.unsupported {
            return failure(format!(
                "'{name}' is not supported by caduceus cron jobs: every run is an agent session; give the job a prompt (and skills)."
            ));
        }
        match args.action.as_str() {
            "create" => return self.create(&conn, args, now),
            "list" => {
                return match jobs::list_jobs(&conn, args.include_disabled) {
                    Ok(all) => {
                        let all: Vec<Value> = all.iter().map(format_job).collect();
                        json!({"success": true, "count": all.len(), "jobs": all})
                    }
                    Err(err) => store_failure(&err),
                };
            }
            _ => {}
        }
        let Some(job_id) = args.job_id.as_deref() else {
            return failure(format!("job_id is required for action '{}'", args.action));
        };
        // The job is found before the action is checked (hermes' order).
        match jobs::get_job(&conn, job_id) {
            Ok(Some(_)) => {}
            Ok(None) => {
                return failure(format!(
                    "Job with ID '{job_id}' not found. Use cronjob(action='list') to inspect jobs."
                ));
            }
            Err(err) => return store_failure(&err),
        }
        if args.action == "remove" {
            return self.remove(&conn, job_id);
        }
        if !matches!(
            args.action.as_str(),
            "update" | "pause" | "resume" | "run" | "run_now" | "trigger"
        ) {
            return failure(format!("Unknown cron action '{}'", args.action));
        }
        let mut conn = conn;
        let result = mutate(&mut conn, job_id, |job| match args.action.as_str() {
            "pause" => {
                job.enabled = false;
                job.state = "paused".to_owned();
                job.paused_at = Some(now);
                job.paused_reason = args.reason.clone().filter(|r| !r.trim().is_empty());
                Ok(None)
            }
            "resume" => {
                job.enabled = true;
                job.state = "scheduled".to_owned();
                job.paused_at = None;
                job.paused_reason = None;
                job.next_run_at = job.schedule.first_run(now);
                Ok(None)
            }
            "update" => update(job, args, now).map(|()| None),
            _ => {
                if !job.enabled {
                    return Err(failure("Job is paused/disabled; resume it before running."));
                }
                job.next_run_at = Some(now);
                Ok(Some(
                    "The job runs now, in a fresh session on the serving coordinator; its outcome shows as last_status here and in `caduceus cron runs <job_id>`.",
                ))
            }
        });
        match result {
            Ok((job, note)) => {
                self.wake.notify_one();
                let mut out = json!({"success": true, "job": format_job(&job)});
                if let Some(note) = note {
                    out["note"] = json!(note);
                }
                out
            }
            Err(value) => value,
        }
    }

    fn create(&self, conn: &rusqlite::Connection, args: &Args, now: i64) -> Value {
        let Some(schedule_text) = args.schedule.as_deref() else {
            return failure("schedule is required for create");
        };
        let prompt = args.prompt.clone().unwrap_or_default();
        let skills = args.skills.clone().unwrap_or_default();
        if prompt.trim().is_empty() && skills.is_empty() {
            return failure("create requires either prompt or at least one skill");
        }
        if let Some(blocked) = scan_prompt(&prompt) {
            return failure(blocked);
        }
        let (schedule, display) = match schedule::parse(schedule_text, now) {
            Ok(parsed) => parsed,
            Err(err) => return failure(err),
        };
        let deliver = match check_deliver(args.deliver.as_deref()) {
            Ok(d) => d,
            Err(err) => return err,
        };
        let workdir = match check_workdir(args.workdir.as_deref().unwrap_or_default()) {
            Ok(w) => w,
            Err(err) => return err,
        };
        let name = match args
            .name
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty())
        {
            Some(name) => name.to_owned(),
            None if !prompt.trim().is_empty() => {
                let flat: String = prompt.split_whitespace().collect::<Vec<_>>().join(" ");
                if flat.chars().count() > 50 {
                    format!("{}...", flat.chars().take(50).collect::<String>())
                } else {
                    flat
                }
            }
            None => skills.first().cloned().unwrap_or_default(),
        };
        let job = Job {
            id: new_job_id(),
            name,
            prompt,
            repeat_times: repeat_of(args.repeat, &schedule),
            next_run_at: schedule.first_run(now),
            schedule,
            schedule_display: display,
            repeat_completed: 0,
            enabled: true,
            state: "scheduled".to_owned(),
            paused_at: None,
            paused_reason: None,
            skills,
            model: args.model.clone().filter(|m| !m.trim().is_empty()),
            workdir,
            enabled_toolsets: args.enabled_toolsets.clone().filter(|t| !t.is_empty()),
            deliver,
            created_at: now,
            last_run_at: None,
            last_status: None,
            last_error: None,
        };
        if let Err(err) = jobs::save_job(conn, &job) {
            return store_failure(&err);
        }
        self.wake.notify_one();
        json!({
            "success": true,
            "job_id": job.id,
            "name": job.name,
            "skill": job.skills.first(),
            "skills": job.skills,
            "schedule": job.schedule_display,
            "repeat": repeat_display(&job),
            "deliver": job.deliver,
            "next_run_at": job.next_run_at.map(iso),
            "job": format_job(&job),
            "message": format!("Cron job '{}' created.", job.name),
        })
    }

    fn remove(&self, conn: &rusqlite::Connection, job_id: &str) -> Value {
        let job = match jobs::get_job(conn, job_id) {
            Ok(Some(job)) => job,
            Ok(None) => return failure(format!("Failed to remove job '{job_id}'")),
            Err(err) => return store_failure(&err),
        };
        match jobs::delete_job(conn, job_id) {
            Ok(true) => {
                self.wake.notify_one();
                json!({
                    "success": true,
                    "message": format!("Cron job '{}' removed.", job.name),
                    "removed_job": {"id": job.id, "name": job.name, "schedule": job.schedule_display},
                })
            }
            Ok(false) => failure(format!("Failed to remove job '{job_id}'")),
            Err(err) => store_failure(&err),
        }
    }
}

/// `update`'s fields over `job` (hermes `_action_update`): blank values of
/// `name` are no-ops, `''`/`[]` clear `workdir`, `skills` and
/// `enabled_toolsets`; a new schedule re-schedules (an unpaused job is
/// enabled again).
fn update(job: &mut Job, args: &Args, now: i64) -> Result<(), Value> {
    let mut changed = false;
    if let Some(prompt) = &args.prompt {
        if let Some(blocked) = scan_prompt(prompt) {
            return Err(failure(blocked));
        }
        job.prompt = prompt.clone();
        changed = true;
    }
    if let Some(name) = args
        .name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        job.name = name.to_owned();
        changed = true;
    }
    if args.deliver.is_some() {
        job.deliver = check_deliver(args.deliver.as_deref())?;
        changed = true;
    }
    if let Some(skills) = &args.skills {
        job.skills = skills.clone();
        changed = true;
    }
    if let Some(model) = &args.model {
        job.model = Some(model.trim().to_owned()).filter(|m| !m.is_empty());
        changed = true;
    }
    if let Some(workdir) = &args.workdir {
        job.workdir = check_workdir(workdir)?;
        changed = true;
    }
    if let Some(toolsets) = &args.enabled_toolsets {
        job.enabled_toolsets = Some(toolsets.clone()).filter(|t| !t.is_empty());
        changed = true;
    }
    if let Some(repeat) = args.repeat {
        job.repeat_times = if repeat <= 0 { None } else { Some(repeat) };
        changed = true;
    }
    if let Some(text) = &args.schedule {
        let (schedule, display) = schedule::parse(text, now).map_err(failure)?;
        job.next_run_at = schedule.first_run(now);
        job.schedule = schedule;
        job.schedule_display = display;
        if job.state != "paused" {
            job.state = "scheduled".to_owned();
            job.enabled = true;
        }
        changed = true;
    }
    if !changed {
        return Err(failure("No updates provided."));
    }
    Ok(())
}

/// Reads, changes and writes one job in one write transaction, so a change
/// never undoes a run the actor claimed meanwhile.
fn mutate(
    conn: &mut rusqlite::Connection,
    job_id: &str,
    change: impl FnOnce(&mut Job) -> Result<Option<&'static str>, Value>,
) -> Result<(Job, Option<&'static str>), Value> {
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(|e| store_failure(&e))?;
    let mut job = jobs::get_job(&tx, job_id)
        .map_err(|e| store_failure(&e))?
        .ok_or_else(|| {
            failure(format!(
                "Job with ID '{job_id}' not found. Use cronjob(action='list') to inspect jobs."
            ))
        })?;
    let note = change(&mut job)?;
    jobs::save_job(&tx, &job).map_err(|e| store_failure(&e))?;
    tx.commit().map_err(|e| store_failure(&e))?;
    Ok((job, note))
}

#[async_trait]
impl LocalTool for CronTool {
    async fn call(&self, _ctx: &CallContext, args: Map<String, Value>) -> ToolReply {
        let tool = CronTool {
            db: self.db.clone(),
            clock: self.clock.clone(),
            wake: self.wake.clone(),
        };
        let args = Args::from_map(&args);
        let value = tokio::task::spawn_blocking(move || tool.act(&args))
            .await
            .unwrap_or_else(|err| failure(err.to_string()));
        ToolReply::success_document(&value)
    }
}

/// The registry entry of `cronjob` over the jobs in `db`.
pub fn registry_entry(tool: CronTool) -> Result<ToolEntry, RegistryError> {
    let invalid = |reason: String| RegistryError::InvalidSchema {
        name: "cronjob".to_owned(),
        reason,
    };
    jobs::open(&tool.db).map_err(|e| invalid(e.to_string()))?;
    let schema: Value = serde_json::from_str(include_str!("../../schemas/cronjob.json"))
        .map_err(|e| invalid(e.to_string()))?;
    Ok(
        ToolEntry::new("cronjob", "cronjob", schema, Handler::Local(Arc::new(tool)))
            .with_parallel(ParallelClass::Sequential)
            .with_emoji("⏰"),
    )
}

#[cfg(test)]
#[path = "cron_tests.rs"]
mod tests;
