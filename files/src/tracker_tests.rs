use super::*;

fn key(path: &str) -> RegionKey {
    RegionKey {
        path: path.into(),
        offset: 1,
        limit: 500,
    }
}

const STAMP: FileStamp = FileStamp {
    mtime_ns: 1,
    size: 2,
};

#[test]
fn consecutive_calls_count_and_reset() {
    let tracker = ReadTracker::new();
    assert_eq!(
        tracker.full_read(key("/a"), "read a".into(), Some(STAMP)),
        1
    );
    assert_eq!(
        tracker.full_read(key("/a"), "read a".into(), Some(STAMP)),
        2
    );
    assert_eq!(tracker.search("search x".into()), 1);
    assert_eq!(
        tracker.full_read(key("/a"), "read a".into(), Some(STAMP)),
        1
    );
    assert_eq!(
        tracker.full_read(key("/a"), "read a".into(), Some(STAMP)),
        2
    );
    tracker.note_other_tool();
    assert_eq!(
        tracker.full_read(key("/a"), "read a".into(), Some(STAMP)),
        1
    );
}

#[test]
fn stubs_are_counted_until_the_next_full_read_or_other_tool() {
    let tracker = ReadTracker::new();
    tracker.full_read(key("/a"), "read a".into(), Some(STAMP));
    assert_eq!(tracker.region_stamp(&key("/a")), Some(STAMP));
    assert_eq!(tracker.stub_served(&key("/a")), 1);
    assert_eq!(tracker.stub_served(&key("/a")), 2);
    tracker.note_other_tool();
    assert_eq!(tracker.stub_served(&key("/a")), 1);
    tracker.reset_dedup();
    assert_eq!(tracker.region_stamp(&key("/a")), None);
}

#[test]
fn writes_invalidate_regions_and_refresh_stamps() {
    let tracker = ReadTracker::new();
    tracker.full_read(key("/a"), "read a".into(), Some(STAMP));
    let newer = FileStamp {
        mtime_ns: 9,
        size: 3,
    };
    tracker.wrote("/a", Some(newer));
    assert_eq!(tracker.region_stamp(&key("/a")), None);
    assert_eq!(tracker.seen_stamp("/a"), Some(newer));
}

#[test]
fn bounded_map_drops_oldest() {
    let mut map: Bounded<u32, u32> = Bounded::default();
    for value in 0..5 {
        map.insert(value, value, 3);
    }
    assert!(map.get(&0).is_none() && map.get(&1).is_none());
    assert_eq!(map.get(&4), Some(&4));
}

#[test]
fn patch_failures_escalate_and_reset() {
    let tracker = ReadTracker::new();
    assert_eq!(tracker.patch_failed("/a"), 1);
    assert_eq!(tracker.patch_failed("/a"), 2);
    tracker.patch_succeeded("/a");
    assert_eq!(tracker.patch_failed("/a"), 1);
}
