//! The Cron actor: one task per coordinator that fires due jobs, each run
//! a normal session ([`SessionHub::start`], non-interactive: approvals fail
//! closed, `clarify` has no one to ask), and records how it ended.
//!
//! Its mailbox is a [`Notify`] (the `cronjob` tool nudges it after a
//! change) plus its clock: it wakes at the earliest `next_run_at`, when
//! nudged, and at least every [`POLL`] of real time, to see jobs another
//! process (an embedded `caduceus call cronjob …`) wrote into the database.
//!
//! Restart rules (no run lost, none doubled):
//! - a run is claimed in SQLite (compare-and-set, `jobs::claim`) before its
//!   session starts, with the session id it will have;
//! - the catch-up rule: a job due while no coordinator ticked runs once when
//!   one does, not once per missed time; its next run is the first one after
//!   that run (a run due while the job's previous run still goes waits for
//!   it, and likewise runs once);
//! - at start, each unfinished run of a process that is gone is adopted
//!   (compare-and-set on its owner): its session never recorded → started
//!   now (nothing of it left the old process: a session's row is written
//!   before any of its tool calls); recorded and ended → its outcome is
//!   copied; recorded and running → reattached (`SessionHub::attach`, which
//!   resumes it) and followed to its end.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use caduceus_proto::SessionEvent;

use super::clock::Clock;
use super::jobs::{self, Job, Run, RunOutcome};
use super::schedule::iso;
use crate::agent::events;
use crate::agent::new_session_id;
use crate::agent::store;
use crate::agent::{SessionHub, StartRequest};
use crate::skills::SkillStore;

/// Longest real-time wait between two looks at the database.
pub const POLL: Duration = Duration::from_secs(15);

/// The Cron actor's handle: stopping it leaves running sessions alone.
#[derive(Clone)]
pub struct CronActor {
    inner: Arc<Inner>,
}

struct Inner {
    db: PathBuf,
    clock: Arc<dyn Clock>,
    wake: Arc<Notify>,
    hub: SessionHub,
    /// The session store's owner id: whose runs these are.
    owner: String,
    skills: Option<SkillStore>,
    /// `$CADUCEUS_HOME/cron/output`: one Markdown file per run.
    output: Option<PathBuf>,
    /// Jobs with a run in progress in this process.
    running: Mutex<HashSet<String>>,
    stop: CancellationToken,
}

impl std::fmt::Debug for CronActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CronActor")
            .field("db", &self.inner.db)
            .field("owner", &self.inner.owner)
            .finish_non_exhaustive()
    }
}

/// What the actor needs.
pub struct CronStart {
    pub db: PathBuf,
    pub clock: Arc<dyn Clock>,
    pub wake: Arc<Notify>,
    pub hub: SessionHub,
    /// `$CADUCEUS_HOME`: skills are read from it, run logs written under it.
    pub home: Option<PathBuf>,
}

impl CronActor {
    /// Adopts the unfinished runs of gone processes, then ticks until stopped.
    /// `None` when sessions are not recorded (no database: nothing to tick).
    pub fn start(start: CronStart) -> Option<Self> {
        let owner = start.hub.store()?.owner().to_owned();
        let actor = CronActor {
            inner: Arc::new(Inner {
                db: start.db,
                clock: start.clock,
                wake: start.wake,
                hub: start.hub,
                owner,
                skills: start
                    .home
                    .as_ref()
                    .map(|h| SkillStore::new(h.join("skills"))),
                output: start.home.map(|h| h.join("cron").join("output")),
                running: Mutex::new(HashSet::new()),
                stop: CancellationToken::new(),
            }),
        };
        let inner = actor.inner.clone();
        tokio::spawn(async move {
            inner.recover().await;
            inner.tick_loop().await;
        });
        Some(actor)
    }

    /// Stops ticking (a shutdown); sessions already started go on.
    pub fn stop(&self) {
        self.inner.stop.cancel();
    }
}

/// Runs `f` on the blocking pool with a fresh connection.
async fn with_db<T: Send + 'static>(
    db: &std::path::Path,
    f: impl FnOnce(&mut rusqlite::Connection) -> Result<T, store::StoreError> + Send + 'static,
) -> Result<T, String> {
    let db = db.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut conn = jobs::open(&db)?;
        f(&mut conn)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())
}

impl Inner {
    async fn tick_loop(self: Arc<Self>) {
        loop {
            if self.stop.is_cancelled() {
                return;
            }
            let now = self.clock.now();
            match with_db(&self.db, move |c| jobs::due_jobs(c, now)).await {
                Ok(due) => {
                    for job in due {
                        self.fire(job, now).await;
                    }
                }
                Err(err) => tracing::warn!("cron: cannot read the due jobs: {err}"),
            }
            let next = with_db(&self.db, |c| jobs::next_due(c))
                .await
                .ok()
                .flatten()
                .unwrap_or(i64::MAX);
            tokio::select! {
                () = self.clock.wait_until(next, POLL) => {}
                () = self.wake.notified() => {}
                () = self.stop.cancelled() => return,
            }
        }
    }

    fn is_running(&self, job_id: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        running.contains(job_id)
    }

    fn set_running(&self, job_id: &str, on: bool) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if on {
            running.insert(job_id.to_owned());
        } else {
            running.remove(job_id);
        }
    }

    /// Claims `job`'s due run and starts its session, unless its previous
    /// run still goes or someone else claimed it.
    async fn fire(self: &Arc<Self>, job: Job, now: i64) {
        if self.is_running(&job.id) {
            return;
        }
        let owner = self.owner.clone();
        let session_id = new_session_id();
        let claimed_job = job.clone();
        let claimed = with_db(&self.db, move |c| {
            jobs::claim(c, &claimed_job, now, &owner, &session_id)
        })
        .await;
        match claimed {
            Ok(Some(run)) => {
                tracing::info!(job = %job.id, run = %run.id, session = %run.session_id, "cron: running a job");
                self.set_running(&job.id, true);
                let inner = self.clone();
                tokio::spawn(async move { inner.start_run(job, run).await });
            }
            Ok(None) => tracing::debug!(job = %job.id, "cron: the run was claimed elsewhere"),
            Err(err) => tracing::warn!(job = %job.id, "cron: cannot claim a run: {err}"),
        }
    }

    /// The prompt a run's session gets: the cron preamble, the job's skills,
    /// its working directory, the job's prompt.
    fn prompt_of(&self, job: &Job) -> String {
        let mut parts = vec![format!(
            "[SYSTEM: You are running as a scheduled cron job ('{}', {}). No one is watching this session: you cannot ask questions, and commands that need an approval are refused. Your final response is recorded as the job's output, so make it the report itself.]",
            job.name, job.id
        )];
        for name in &job.skills {
            let view = self
                .skills
                .as_ref()
                .map(|s| s.view(name, None))
                .unwrap_or(Value::Null);
            match view.get("content").and_then(Value::as_str) {
                Some(content) => parts.push(format!(
                    "[SYSTEM: The job loads the \"{name}\" skill; follow its instructions. Its full content:]\n\n{content}"
                )),
                None => parts.push(format!(
                    "[SYSTEM: The job names the skill \"{name}\", which could not be loaded: {}]",
                    view.get("error").and_then(Value::as_str).unwrap_or("no skills directory")
                )),
            }
        }
        if let Some(dir) = &job.workdir {
            parts.push(format!(
                "[SYSTEM: The job's working directory is {dir}: run your commands and file operations there.]"
            ));
        }
        parts.push(job.prompt.clone());
        parts.join("\n\n")
    }

    async fn start_run(self: Arc<Self>, job: Job, run: Run) {
        let request = StartRequest {
            prompt: self.prompt_of(&job),
            model: job.model.clone().unwrap_or_default(),
            enabled_toolsets: job.enabled_toolsets.clone().unwrap_or_default(),
            // A run schedules no jobs of its own (hermes offers cronjob only
            // where a person is present).
            disabled_toolsets: vec!["cronjob".to_owned()],
            interactive: false,
            caller: Some("cron".to_owned()),
            session_id: run.session_id.clone(),
            // The run's environment starts there (when it is a directory in
            // the environment), as hermes runs the job from its workdir.
            workdir: job.workdir.clone(),
            ..StartRequest::default()
        };
        match self.hub.start(request).await {
            Ok(stream) => {
                let (owner, id) = (self.owner.clone(), run.id.clone());
                let _ = with_db(&self.db, move |c| jobs::run_started(c, &id, &owner)).await;
                let outcome = follow(stream.events, &run.session_id).await;
                self.finish(&job, &run, outcome).await;
            }
            Err(err) => {
                let outcome = RunOutcome {
                    status: "failed".to_owned(),
                    exit_reason: "error".to_owned(),
                    final_response: None,
                    error: Some(format!("the job's session could not start: {err}")),
                };
                self.finish(&job, &run, outcome).await;
            }
        }
    }

    async fn finish(&self, job: &Job, run: &Run, outcome: RunOutcome) {
        let now = self.clock.now();
        let (done, result) = (run.clone(), outcome.clone());
        if let Err(err) = with_db(&self.db, move |c| {
            jobs::run_finished(c, &done, &result, now)
        })
        .await
        {
            tracing::warn!(job = %job.id, run = %run.id, "cron: cannot record how a run ended: {err}");
        }
        self.write_log(job, run, &outcome, now);
        tracing::info!(job = %job.id, run = %run.id, status = %outcome.status, "cron: run ended");
        self.set_running(&job.id, false);
        // The job may have become due while this run went on.
        self.wake.notify_one();
    }

    /// `cron/output/<job>/<run>.md`, as hermes keeps a run's output.
    fn write_log(&self, job: &Job, run: &Run, outcome: &RunOutcome, now: i64) {
        let Some(dir) = self.output.as_ref().map(|d| d.join(&job.id)) else {
            return;
        };
        let text = format!(
            "# Cron Job: {}\n\n**Job ID:** {}\n**Run:** {}\n**Scheduled for:** {}\n**Ended:** {}\n**Schedule:** {}\n**Session:** {}\n**Status:** {} ({})\n\n## Prompt\n\n{}\n\n## Response\n\n{}\n{}",
            job.name,
            job.id,
            run.id,
            iso(run.scheduled_for),
            iso(now),
            job.schedule_display,
            run.session_id,
            outcome.status,
            outcome.exit_reason,
            job.prompt,
            outcome
                .final_response
                .as_deref()
                .unwrap_or("(no final response)"),
            outcome
                .error
                .as_ref()
                .map(|e| format!("\n## Error\n\n{e}\n"))
                .unwrap_or_default()
        );
        let written = std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(dir.join(format!("{}.md", run.id)), text));
        if let Err(err) = written {
            tracing::warn!(job = %job.id, "cron: cannot write the run's log: {err}");
        }
    }

    /// Adopts the unfinished runs whose process is gone (see the module doc).
    async fn recover(self: &Arc<Self>) {
        let runs = match with_db(&self.db, |c| jobs::unfinished_runs(c)).await {
            Ok(runs) => runs,
            Err(err) => return tracing::warn!("cron: cannot read unfinished runs: {err}"),
        };
        for run in runs {
            if run.owner == self.owner || store::owner_alive(&self.db, &run.owner) {
                continue;
            }
            let (mine, owner) = (run.clone(), self.owner.clone());
            if !with_db(&self.db, move |c| jobs::adopt_run(c, &mine, &owner))
                .await
                .unwrap_or(false)
            {
                continue;
            }
            let job_id = run.job_id.clone();
            let job = with_db(&self.db, move |c| jobs::get_job(c, &job_id))
                .await
                .ok()
                .flatten()
                .unwrap_or_else(|| removed_job(&run.job_id));
            self.set_running(&job.id, true);
            let session = store::read_session(&self.db, &run.session_id)
                .ok()
                .flatten();
            let inner = self.clone();
            match session {
                None => {
                    tracing::info!(run = %run.id, "cron: starting a run claimed before a restart");
                    tokio::spawn(async move { inner.start_run(job, run).await });
                }
                Some(session) if session.state != "running" => {
                    let outcome = RunOutcome {
                        status: session.state,
                        exit_reason: session.exit_reason.unwrap_or_default(),
                        final_response: session.final_response,
                        error: session.error,
                    };
                    inner.finish(&job, &run, outcome).await;
                }
                Some(_) => {
                    tracing::info!(run = %run.id, session = %run.session_id, "cron: following a run a restart interrupted");
                    tokio::spawn(async move {
                        let outcome = match inner.hub.attach(&run.session_id, 0).await {
                            Ok(events) => follow(events, &run.session_id).await,
                            Err(err) => RunOutcome {
                                status: "failed".to_owned(),
                                exit_reason: "error".to_owned(),
                                final_response: None,
                                error: Some(format!(
                                    "the run could not be followed after a restart: {err}"
                                )),
                            },
                        };
                        inner.finish(&job, &run, outcome).await;
                    });
                }
            }
        }
    }
}

/// A stand-in for a run whose job was removed meanwhile (its outcome is
/// still recorded).
fn removed_job(id: &str) -> Job {
    Job {
        id: id.to_owned(),
        name: id.to_owned(),
        prompt: String::new(),
        schedule: super::schedule::Schedule::Once { run_at: 0 },
        schedule_display: String::new(),
        repeat_times: None,
        repeat_completed: 0,
        enabled: false,
        state: "completed".to_owned(),
        paused_at: None,
        paused_reason: None,
        skills: Vec::new(),
        model: None,
        workdir: None,
        enabled_toolsets: None,
        deliver: "local".to_owned(),
        created_at: 0,
        next_run_at: None,
        last_run_at: None,
        last_status: None,
        last_error: None,
    }
}

/// Reads a session's events until its own `final`: how it ended.
async fn follow(mut events: mpsc::UnboundedReceiver<SessionEvent>, session_id: &str) -> RunOutcome {
    while let Some(event) = events.recv().await {
        if event.session_id != session_id || event.kind != events::FINAL {
            continue;
        }
        let data: Value = serde_json::from_str(&event.json).unwrap_or(Value::Null);
        let text = |key: &str| data.get(key).and_then(Value::as_str).map(str::to_owned);
        return RunOutcome {
            status: text("status").unwrap_or_else(|| "failed".to_owned()),
            exit_reason: text("exit_reason").unwrap_or_default(),
            final_response: text("text"),
            error: text("error"),
        };
    }
    RunOutcome {
        status: "failed".to_owned(),
        exit_reason: "error".to_owned(),
        final_response: None,
        error: Some("the session's event stream ended before its final event".to_owned()),
    }
}
