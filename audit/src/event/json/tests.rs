//! The hand-written JSON against serde_json's, and timestamps.

use super::*;

#[test]
fn strings_are_escaped_as_serde_json_does() {
    for text in [
        "plain",
        "q\"uote",
        "back\\slash",
        "new\nline\t\u{1}",
        "ünïcode ✓",
        "",
    ] {
        let mut out = Vec::new();
        string(&mut out, text);
        let expected = serde_json::to_string(text).expect("json");
        assert_eq!(String::from_utf8(out).expect("utf8"), expected);
    }
}

#[test]
fn timestamps_are_rfc3339_with_microseconds() {
    let at = |secs: u64, micros: u32| {
        let time = SystemTime::UNIX_EPOCH
            + std::time::Duration::from_secs(secs)
            + std::time::Duration::from_micros(u64::from(micros));
        let mut out = Vec::new();
        micro_time(&mut out, time);
        String::from_utf8(out).expect("utf8")
    };
    assert_eq!(at(0, 0), "1970-01-01T00:00:00.000000Z");
    assert_eq!(at(1_795_562_534, 372_125), "2026-11-24T23:22:14.372125Z");
    assert_eq!(at(951_782_400, 1), "2000-02-29T00:00:00.000001Z");
    assert_eq!(at(4_107_542_399, 999_999), "2100-02-28T23:59:59.999999Z");
}
