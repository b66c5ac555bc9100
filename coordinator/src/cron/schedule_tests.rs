use super::*;

/// 2026-12-02 17:00:30 UTC.
const NOW: i64 = 1_796_230_830;

#[test]
fn durations_are_one_shots_from_now() {
    assert_eq!(
        parse("30m", NOW).unwrap(),
        (
            Schedule::Once { run_at: NOW + 1800 },
            "once in 30m".to_owned()
        )
    );
    assert_eq!(parse_duration("2 hours").unwrap(), 120);
    assert_eq!(parse_duration("1d").unwrap(), 1440);
    assert_eq!(
        parse_duration("5 weeks").unwrap_err(),
        "Invalid duration: '5 weeks'. Use format like '30m', '2h', or '1d'"
    );
}

#[test]
fn every_is_an_interval_in_minutes() {
    let (schedule, display) = parse("every 2h", NOW).unwrap();
    assert_eq!(schedule, Schedule::Interval { minutes: 120 });
    assert_eq!(display, "every 120m");
    assert_eq!(schedule.first_run(NOW), Some(NOW + 7200));
    assert_eq!(schedule.default_repeat(), None);
    assert!(parse("every 0m", NOW).is_err());
    assert_eq!(
        parse("every fortnight", NOW).unwrap_err(),
        "Invalid duration: 'fortnight'. Use format like '30m', '2h', or '1d'"
    );
}

#[test]
fn five_fields_are_a_crontab_expression_in_utc() {
    let (schedule, display) = parse("*/5 * * * *", NOW).unwrap();
    assert_eq!(display, "*/5 * * * *");
    // 17:00:30 → 17:05:00, and strictly after a time that matches.
    assert_eq!(schedule.after_run(NOW), Some(NOW - 30 + 300));
    assert_eq!(schedule.after_run(NOW - 30 + 300), Some(NOW - 30 + 600));
    let (daily, _) = parse("0 9 * * MON-FRI", NOW).unwrap();
    // Wednesday 17:00 → Thursday 09:00.
    assert_eq!(daily.after_run(NOW), Some(NOW - 30 - 8 * 3600 + 24 * 3600));
}

#[test]
fn a_bad_crontab_expression_says_why() {
    let err = parse("61 * * * *", NOW).unwrap_err();
    assert!(
        err.starts_with("Invalid cron expression '61 * * * *': "),
        "{err}"
    );
    // Six fields (seconds) are not the standard crontab.
    assert!(parse("0 */5 * * * *", NOW).is_err());
}

#[test]
fn timestamps_are_one_shots_at_that_time() {
    let (schedule, display) = parse("2026-12-03T09:00:00", NOW).unwrap();
    assert_eq!(
        schedule,
        Schedule::Once {
            run_at: 1_796_288_400
        }
    );
    assert_eq!(display, "once at 2026-12-03 09:00");
    assert_eq!(schedule.default_repeat(), Some(1));
    assert_eq!(schedule.after_run(NOW), None);
    let (offset, _) = parse("2026-12-03T10:00:00+01:00", NOW).unwrap();
    assert_eq!(offset, schedule);
}

#[test]
fn anything_else_gets_hermes_help_text() {
    assert_eq!(
        parse("whenever you like", NOW).unwrap_err(),
        "Invalid schedule 'whenever you like'. Use:\n  - Duration: '30m', '2h', '1d' (one-shot)\n  - Interval: 'every 30m', 'every 2h' (recurring)\n  - Cron: '0 9 * * *' (cron expression)\n  - Timestamp: '2026-02-03T14:00:00' (one-shot)"
    );
}

#[test]
fn times_read_as_iso_8601() {
    assert_eq!(iso(NOW), "2026-12-02T17:00:30+00:00");
}
