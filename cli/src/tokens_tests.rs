use std::time::Duration;

use super::*;

#[test]
fn lifetimes_take_seconds_minutes_hours_and_days() {
    assert_eq!(parse_lifetime("90").unwrap(), Duration::from_secs(90));
    assert_eq!(parse_lifetime("90s").unwrap(), Duration::from_secs(90));
    assert_eq!(parse_lifetime("30m").unwrap(), Duration::from_secs(1800));
    assert_eq!(parse_lifetime("24h").unwrap(), Duration::from_secs(86_400));
    assert_eq!(
        parse_lifetime(" 7d ").unwrap(),
        Duration::from_secs(7 * 86_400)
    );
    for bad in ["", "h", "24x", "1.5h", "0h", "-1h"] {
        assert!(parse_lifetime(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn lifetimes_read_back_in_the_largest_units() {
    assert_eq!(lifetime_text(45), "45s");
    assert_eq!(lifetime_text(3599), "59m");
    assert_eq!(lifetime_text(86_399), "23h59m");
    assert_eq!(lifetime_text(90_000), "1d1h");
}
