//! `schedule` as hermes reads it (`cron/jobs.py` `parse_schedule`): a
//! duration is a one-shot that far from now (`30m`, `2h`, `1d`), `every …`
//! an interval, five fields a cron expression (parsed by `croner`, evaluated
//! in UTC), an ISO timestamp a one-shot at that time (UTC when it names no
//! offset).

use chrono::{DateTime, NaiveDateTime, TimeZone, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use serde::{Deserialize, Serialize};

/// A parsed schedule, as stored (`cron_jobs.schedule`, JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Schedule {
    /// Runs once, at `run_at` (Unix seconds).
    Once { run_at: i64 },
    /// Runs every `minutes`.
    Interval { minutes: i64 },
    /// Runs at the times a 5-field crontab expression names.
    Cron { expr: String },
}

/// hermes' answer for a schedule it cannot read.
fn invalid(original: &str) -> String {
    format!(
        "Invalid schedule '{original}'. Use:\n  - Duration: '30m', '2h', '1d' (one-shot)\n  - Interval: 'every 30m', 'every 2h' (recurring)\n  - Cron: '0 9 * * *' (cron expression)\n  - Timestamp: '2026-02-03T14:00:00' (one-shot)"
    )
}

/// Minutes in `30m`, `2 h`, `1day`, … (hermes `parse_duration`).
pub fn parse_duration(text: &str) -> Result<i64, String> {
    let lower = text.trim().to_lowercase();
    let digits = lower.chars().take_while(char::is_ascii_digit).count();
    let (number, unit) = lower.split_at(digits);
    let factor = match unit.trim() {
        "m" | "min" | "mins" | "minute" | "minutes" => 1,
        "h" | "hr" | "hrs" | "hour" | "hours" => 60,
        "d" | "day" | "days" => 1440,
        _ => 0,
    };
    match number.parse::<i64>() {
        Ok(n) if factor > 0 => Ok(n.saturating_mul(factor)),
        _ => Err(format!(
            "Invalid duration: '{lower}'. Use format like '30m', '2h', or '1d'"
        )),
    }
}

/// The standard crontab: exactly five fields, no seconds, no year.
fn cron_parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
}

fn parse_cron(expr: &str) -> Result<Cron, String> {
    cron_parser()
        .parse(expr)
        .map_err(|e| format!("Invalid cron expression '{expr}': {e}"))
}

/// Five fields that start like crontab fields (digits, `*`).
fn looks_like_cron(text: &str) -> bool {
    let fields: Vec<&str> = text.split_whitespace().collect();
    fields.len() == 5
        && fields[0]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '*')
}

fn parse_timestamp(text: &str) -> Option<i64> {
    if let Ok(at) = DateTime::parse_from_rfc3339(&text.replace(' ', "T")) {
        return Some(at.timestamp());
    }
    for format in [
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M:%S",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(naive) = NaiveDateTime::parse_from_str(text, format) {
            return Some(Utc.from_utc_datetime(&naive).timestamp());
        }
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|naive| Utc.from_utc_datetime(&naive).timestamp())
}

/// Parses `text` at `now`: the schedule and how it reads (hermes' `display`).
pub fn parse(text: &str, now: i64) -> Result<(Schedule, String), String> {
    let original = text.trim();
    let lower = original.to_lowercase();
    if let Some(rest) = lower.strip_prefix("every ") {
        let minutes = parse_duration(rest)?;
        if minutes < 1 {
            return Err(invalid(original));
        }
        return Ok((Schedule::Interval { minutes }, format!("every {minutes}m")));
    }
    if looks_like_cron(original) {
        parse_cron(original)?;
        return Ok((
            Schedule::Cron {
                expr: original.to_owned(),
            },
            original.to_owned(),
        ));
    }
    if original.contains('T')
        || original
            .get(..4)
            .is_some_and(|y| y.chars().all(|c| c.is_ascii_digit()))
            && original.get(4..5) == Some("-")
    {
        let run_at = parse_timestamp(original).ok_or_else(|| invalid(original))?;
        return Ok((
            Schedule::Once { run_at },
            format!("once at {}", format_minute(run_at)),
        ));
    }
    match parse_duration(original) {
        Ok(minutes) => Ok((
            Schedule::Once {
                run_at: now.saturating_add(minutes.saturating_mul(60)),
            },
            format!("once in {original}"),
        )),
        Err(_) => Err(invalid(original)),
    }
}

impl Schedule {
    /// The first run of a new (or re-scheduled) job.
    pub fn first_run(&self, now: i64) -> Option<i64> {
        match self {
            Schedule::Once { run_at } => Some(*run_at),
            _ => self.after_run(now),
        }
    }

    /// The next run after one that started at `now`: later than `now`
    /// whatever times were missed before it (the catch-up rule: runs
    /// missed while no coordinator ticked collapse into the one run at
    /// `now`). A one-shot has none.
    pub fn after_run(&self, now: i64) -> Option<i64> {
        match self {
            Schedule::Once { .. } => None,
            Schedule::Interval { minutes } => Some(now.saturating_add(minutes.saturating_mul(60))),
            Schedule::Cron { expr } => {
                let cron = parse_cron(expr).ok()?;
                let from = Utc.timestamp_opt(now, 0).single()?;
                cron.find_next_occurrence(&from, false)
                    .ok()
                    .map(|t| t.timestamp())
            }
        }
    }

    /// One-shots run once unless told otherwise; the others forever.
    pub fn default_repeat(&self) -> Option<i64> {
        match self {
            Schedule::Once { .. } => Some(1),
            _ => None,
        }
    }
}

/// `2026-12-02 17:05` (UTC).
fn format_minute(at: i64) -> String {
    Utc.timestamp_opt(at, 0)
        .single()
        .map(|t| t.format("%Y-%m-%d %H:%M").to_string())
        .unwrap_or_default()
}

/// A time in the results: ISO 8601 with its offset (hermes' `isoformat()`).
pub fn iso(at: i64) -> String {
    Utc.timestamp_opt(at, 0)
        .single()
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, false))
        .unwrap_or_default()
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
