use super::*;

const T0: i64 = 1_796_230_800;

fn job(id: &str, schedule: Schedule, repeat_times: Option<i64>) -> Job {
    Job {
        id: id.to_owned(),
        name: id.to_owned(),
        prompt: "check the disk".to_owned(),
        next_run_at: schedule.first_run(T0),
        schedule,
        schedule_display: "every 1m".to_owned(),
        repeat_times,
        repeat_completed: 0,
        enabled: true,
        state: "scheduled".to_owned(),
        paused_at: None,
        paused_reason: None,
        skills: vec!["ops".to_owned()],
        model: None,
        workdir: Some("/srv".to_owned()),
        enabled_toolsets: Some(vec!["terminal".to_owned()]),
        deliver: "local".to_owned(),
        created_at: T0,
        last_run_at: None,
        last_status: None,
        last_error: None,
    }
}

fn db() -> (tempfile::TempDir, Connection) {
    let dir = tempfile::tempdir().unwrap();
    let conn = open(&dir.path().join("state.db")).unwrap();
    (dir, conn)
}

#[test]
fn a_job_reads_back_as_written() {
    let (_dir, conn) = db();
    let written = job("j1", Schedule::Interval { minutes: 1 }, None);
    save_job(&conn, &written).unwrap();
    assert_eq!(get_job(&conn, "j1").unwrap(), Some(written.clone()));
    assert_eq!(list_jobs(&conn, false).unwrap(), vec![written]);
    assert!(delete_job(&conn, "j1").unwrap());
    assert!(!delete_job(&conn, "j1").unwrap());
}

#[test]
fn a_due_time_is_claimed_once() {
    let (dir, mut conn) = db();
    let due = job("j1", Schedule::Interval { minutes: 1 }, None);
    save_job(&conn, &due).unwrap();
    assert!(due_jobs(&conn, T0 + 59).unwrap().is_empty());
    let seen = due_jobs(&conn, T0 + 60).unwrap();
    assert_eq!(seen.len(), 1);

    // Two claimers read the same row; the second one's compare-and-set fails.
    let mut other = open(&dir.path().join("state.db")).unwrap();
    let first = claim(&mut conn, &seen[0], T0 + 60, "a", "sess_a").unwrap();
    let second = claim(&mut other, &seen[0], T0 + 60, "b", "sess_b").unwrap();
    let run = first.unwrap();
    assert!(second.is_none());
    assert_eq!(
        (run.scheduled_for, run.state.as_str()),
        (T0 + 60, "claimed")
    );
    let after = get_job(&conn, "j1").unwrap().unwrap();
    assert_eq!(after.next_run_at, Some(T0 + 120));
    assert_eq!(after.repeat_completed, 1);
    assert_eq!(runs_of(&conn, "j1").unwrap(), vec![run]);
}

#[test]
fn missed_times_collapse_into_one_run() {
    let (_dir, mut conn) = db();
    save_job(&conn, &job("j1", Schedule::Interval { minutes: 1 }, None)).unwrap();
    // Nobody ticked for ten minutes.
    let late = T0 + 600 + 7;
    let seen = due_jobs(&conn, late).unwrap();
    assert!(
        claim(&mut conn, &seen[0], late, "a", "sess_a")
            .unwrap()
            .is_some()
    );
    assert!(due_jobs(&conn, late).unwrap().is_empty());
    assert_eq!(
        get_job(&conn, "j1").unwrap().unwrap().next_run_at,
        Some(late + 60)
    );
    assert_eq!(runs_of(&conn, "j1").unwrap().len(), 1);
}

#[test]
fn a_used_up_repeat_count_completes_the_job() {
    let (_dir, mut conn) = db();
    save_job(
        &conn,
        &job("j1", Schedule::Interval { minutes: 1 }, Some(2)),
    )
    .unwrap();
    for at in [T0 + 60, T0 + 120] {
        let seen = due_jobs(&conn, at).unwrap();
        assert!(
            claim(&mut conn, &seen[0], at, "a", &format!("sess_{at}"))
                .unwrap()
                .is_some()
        );
    }
    let done = get_job(&conn, "j1").unwrap().unwrap();
    assert_eq!(
        (
            done.enabled,
            done.state.as_str(),
            done.next_run_at,
            done.repeat_completed
        ),
        (false, "completed", None, 2)
    );
    assert!(due_jobs(&conn, T0 + 10_000).unwrap().is_empty());
    assert!(list_jobs(&conn, false).unwrap().is_empty());
    assert_eq!(list_jobs(&conn, true).unwrap().len(), 1);
}

#[test]
fn a_finished_run_sets_the_job_status() {
    let (_dir, mut conn) = db();
    save_job(&conn, &job("j1", Schedule::Interval { minutes: 1 }, None)).unwrap();
    let seen = due_jobs(&conn, T0 + 60).unwrap();
    let run = claim(&mut conn, &seen[0], T0 + 60, "a", "sess_a")
        .unwrap()
        .unwrap();
    run_started(&conn, &run.id, "a").unwrap();
    assert_eq!(unfinished_runs(&conn).unwrap()[0].state, "running");
    let failed = RunOutcome {
        status: "failed".to_owned(),
        exit_reason: "budget_exhausted".to_owned(),
        final_response: None,
        error: None,
    };
    run_finished(&mut conn, &run, &failed, T0 + 90).unwrap();
    assert!(unfinished_runs(&conn).unwrap().is_empty());
    let job = get_job(&conn, "j1").unwrap().unwrap();
    assert_eq!(job.last_status.as_deref(), Some("error"));
    assert_eq!(
        job.last_error.as_deref(),
        Some("the session ended failed (budget_exhausted)")
    );
    let recorded = &runs_of(&conn, "j1").unwrap()[0];
    assert_eq!(
        (
            recorded.state.as_str(),
            recorded.ended_at,
            recorded.exit_reason.as_deref()
        ),
        ("done", Some(T0 + 90), Some("budget_exhausted"))
    );
}

#[test]
fn an_unfinished_run_is_adopted_by_one_process() {
    let (_dir, mut conn) = db();
    save_job(&conn, &job("j1", Schedule::Interval { minutes: 1 }, None)).unwrap();
    let seen = due_jobs(&conn, T0 + 60).unwrap();
    let run = claim(&mut conn, &seen[0], T0 + 60, "dead", "sess_a")
        .unwrap()
        .unwrap();
    assert!(adopt_run(&conn, &run, "new").unwrap());
    // A second adopter read the same (old) owner: too late.
    assert!(!adopt_run(&conn, &run, "other").unwrap());
    assert_eq!(unfinished_runs(&conn).unwrap()[0].owner, "new");
}
