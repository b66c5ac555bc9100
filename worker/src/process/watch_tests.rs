use std::time::{Duration, Instant};

use super::*;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn matches_whole_lines_and_lines_split_across_chunks() {
    let mut watch = Watch::new(vec!["READY".into()]);
    let t0 = Instant::now();
    assert_eq!(watch.check("starting\nserver RE", t0), None);
    let event = watch.check("ADY on :8080\nmore\n", t0);
    assert_eq!(
        event,
        Some(WatchEvent::Matched {
            pattern: "READY".into(),
            output: "server READY on :8080".into(),
            suppressed: 0
        })
    );
    // A prompt without a newline matches at once, and only once.
    let mut watch = Watch::new(vec!["Password:".into()]);
    assert!(matches!(
        watch.check("Password:", t0),
        Some(WatchEvent::Matched { .. })
    ));
    assert_eq!(watch.check(" \n", t0 + secs(60)), None);
}

#[test]
fn one_notification_per_fifteen_seconds_then_strikes_disable() {
    let mut watch = Watch::new(vec!["ERR".into()]);
    let t0 = Instant::now();
    assert!(matches!(
        watch.check("ERR 1\n", t0),
        Some(WatchEvent::Matched { suppressed: 0, .. })
    ));
    // Inside the cooldown: dropped, one strike for the window.
    assert_eq!(watch.check("ERR 2\nERR 3\n", t0 + secs(1)), None);
    assert_eq!(watch.check("ERR 4\n", t0 + secs(2)), None);
    // After the cooldown: delivered, with the count of what was dropped.
    let event = watch.check("ERR 5\n", t0 + secs(16));
    assert_eq!(
        event,
        Some(WatchEvent::Matched {
            pattern: "ERR".into(),
            output: "ERR 5".into(),
            suppressed: 3
        })
    );
    assert_eq!(watch.check("ERR 6\n", t0 + secs(17)), None); // strike 2
    assert!(matches!(
        watch.check("ERR 7\n", t0 + secs(32)),
        Some(WatchEvent::Matched { .. })
    ));
    // Strike 3 disables the patterns.
    assert_eq!(
        watch.check("ERR 8\n", t0 + secs(33)),
        Some(WatchEvent::Disabled { suppressed: 1 })
    );
    assert!(watch.active_patterns().is_empty());
    assert_eq!(watch.check("ERR 9\n", t0 + secs(100)), None);
}

#[test]
fn a_clean_window_resets_the_strikes() {
    let mut watch = Watch::new(vec!["X".into()]);
    let t0 = Instant::now();
    watch.check("X\n", t0);
    assert_eq!(watch.check("X\n", t0 + secs(1)), None); // strike 1
    watch.check("X\n", t0 + secs(16));
    assert_eq!(watch.check("X\n", t0 + secs(17)), None); // strike 2
    watch.check("X\n", t0 + secs(32)); // emitted; this window stays clean
    watch.check("X\n", t0 + secs(60)); // clean window: strikes reset
    assert_eq!(watch.check("X\n", t0 + secs(61)), None); // strike 1 again, not 3
    assert!(!watch.active_patterns().is_empty());
}

#[test]
fn matched_output_is_capped() {
    let mut watch = Watch::new(vec!["hit".into()]);
    let text: String = (0..50)
        .map(|i| format!("hit {i} {}\n", "y".repeat(200)))
        .collect();
    let Some(WatchEvent::Matched { output, .. }) = watch.check(&text, Instant::now()) else {
        panic!("no match")
    };
    assert!(output.ends_with("\n...(truncated)"));
    assert_eq!(output.chars().count(), 2000 + "\n...(truncated)".len());
}

#[test]
fn the_global_breaker_trips_after_fifteen_in_ten_seconds() {
    let breaker = GlobalBreaker::default();
    let t0 = Instant::now();
    for i in 0..15 {
        assert!(
            breaker.admit(t0 + Duration::from_millis(i * 100)).admit,
            "match {i}"
        );
    }
    let trip = breaker.admit(t0 + secs(2));
    assert_eq!(
        trip,
        Admission {
            admit: false,
            tripped: true,
            released_after: None
        }
    );
    assert_eq!(
        breaker.admit(t0 + secs(20)),
        Admission {
            admit: false,
            tripped: false,
            released_after: None
        }
    );
    // 30 s after the trip: admitted again, with the summary of the 2 dropped.
    assert_eq!(
        breaker.admit(t0 + secs(33)),
        Admission {
            admit: true,
            tripped: false,
            released_after: Some(2)
        }
    );
    // A new window starts then.
    assert!(breaker.admit(t0 + secs(34)).admit);
}
