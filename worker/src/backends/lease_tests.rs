#![allow(clippy::unwrap_used)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn labels(created: u64) -> LeaseLabels {
    LeaseLabels {
        owner: "coord".into(),
        worker: "w1".into(),
        worker_instance: "inst-1".into(),
        task: "t".into(),
        created,
        lease_seconds: 90,
        pool: None,
    }
}

fn record(renewed_at: u64) -> LeaseRecord {
    LeaseRecord {
        owner: "coord".into(),
        worker: "w2".into(),
        worker_instance: "inst-2".into(),
        task: "t".into(),
        renewed_at,
        ttl_secs: 90,
    }
}

fn candidate(created: u64, renewed: Option<u64>) -> SweepCandidate {
    SweepCandidate {
        id: "c1".into(),
        labels: labels(created),
        record: renewed.map(record),
    }
}

fn sweeper() -> SweepContext {
    SweepContext {
        worker_instance: "sweeper".into(),
        live: Default::default(),
    }
}

#[test]
fn labels_round_trip_and_only_managed_ones_count() {
    let mut l = labels(1000);
    l.pool = Some("docker|img".into());
    let map = l.to_map();
    assert_eq!(map[label::WORKER_INSTANCE], "inst-1");
    assert_eq!(LeaseLabels::from_map(&map), Some(l));
    let mut foreign = map;
    foreign.remove(label::MANAGED);
    assert_eq!(LeaseLabels::from_map(&foreign), None);
}

#[test]
fn a_fresh_lease_is_kept_and_an_expired_one_removed() {
    assert_eq!(
        judge(&candidate(1000, None), &sweeper(), at(1089)),
        Verdict::Keep
    );
    let Verdict::Remove(reason) = judge(&candidate(1000, None), &sweeper(), at(1100)) else {
        panic!()
    };
    assert_eq!(
        reason,
        "lease expired 10s ago (last renewed by worker 'w1')"
    );
    // Renewals push the expiry; the record names who renewed last.
    assert_eq!(
        judge(&candidate(1000, Some(1050)), &sweeper(), at(1130)),
        Verdict::Keep
    );
    let Verdict::Remove(reason) = judge(&candidate(1000, Some(1050)), &sweeper(), at(1150)) else {
        panic!()
    };
    assert!(reason.contains("worker 'w2'"), "{reason}");
}

#[test]
fn held_sandboxes_stay_whatever_their_lease() {
    let mut context = sweeper();
    context.live.insert("c1".into());
    assert_eq!(
        judge(&candidate(0, None), &context, at(1_000_000)),
        Verdict::Keep
    );
}

#[test]
fn renewal_dates_far_in_the_future_are_not_believed() {
    // The sandbox wrote itself a lease for next year: only its creation counts.
    let cheat = candidate(1000, Some(1000 + 365 * 86_400));
    assert!(matches!(
        judge(&cheat, &sweeper(), at(1200)),
        Verdict::Remove(_)
    ));
    // A little clock skew is tolerated.
    assert_eq!(
        judge(&candidate(1000, Some(1210)), &sweeper(), at(1200)),
        Verdict::Keep
    );
}

#[test]
fn records_parse_back_and_policy_derives_intervals() {
    let r = record(5);
    assert_eq!(LeaseRecord::from_json(&r.to_json()), Some(r.clone()));
    assert_eq!(LeaseRecord::from_json("not json"), None);
    assert_eq!(r.renewed(at(77)).renewed_at, 77);
    let policy = LeasePolicy::new(Duration::from_secs(90), Duration::from_secs(60));
    assert_eq!(policy.renew_every, Duration::from_secs(30));
    assert_eq!(LeasePolicy::default(), policy);
}
