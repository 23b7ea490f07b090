//! robfig/cron v3.0.1's own test tables (spec_test.go, parser_test.go,
//! constantdelay_test.go), ported to the 5-field standard parser, plus the
//! behaviours Kubernetes users depend on.

use super::*;
use jiff::tz::{Offset, TimeZone};

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap_or_else(|e| panic!("bad instant {s}: {e}"))
}

fn tz(name: &str) -> TimeZone {
    jiff::tz::db().get(name).unwrap()
}

fn next(spec: &str, after: &str, zone: &TimeZone) -> Option<Timestamp> {
    parse(spec)
        .unwrap_or_else(|e| panic!("{spec}: {e}"))
        .next(ts(after), zone)
}

#[test]
fn robfig_activation_table() {
    // (instant, spec, fires exactly then)
    let cases = [
        ("2012-07-09T15:00:00Z", "0/15 * * * *", true),
        ("2012-07-09T15:45:00Z", "0/15 * * * *", true),
        ("2012-07-09T15:40:00Z", "0/15 * * * *", false),
        ("2012-07-09T15:05:00Z", "5/15 * * * *", true),
        ("2012-07-09T15:20:00Z", "5/15 * * * *", true),
        ("2012-07-09T15:50:00Z", "5/15 * * * *", true),
        ("2012-07-15T15:00:00Z", "0/15 * * Jul *", true),
        ("2012-07-15T15:00:00Z", "0/15 * * Jun *", false),
        ("2012-07-15T08:30:00Z", "30 08 ? Jul Sun", true),
        ("2012-07-15T08:30:00Z", "30 08 15 Jul ?", true),
        ("2012-07-16T08:30:00Z", "30 08 ? Jul Sun", false),
        ("2012-07-16T08:30:00Z", "30 08 15 Jul ?", false),
        ("2012-07-09T15:00:00Z", "@hourly", true),
        ("2012-07-09T15:04:00Z", "@hourly", false),
        ("2012-07-09T15:00:00Z", "@daily", false),
        ("2012-07-09T00:00:00Z", "@daily", true),
        ("2012-07-09T00:00:00Z", "@weekly", false),
        ("2012-07-08T00:00:00Z", "@weekly", true),
        ("2012-07-08T01:00:00Z", "@weekly", false),
        ("2012-07-08T00:00:00Z", "@monthly", false),
        ("2012-07-01T00:00:00Z", "@monthly", true),
        // Both day fields restricted: either may match.
        ("2012-07-15T00:00:00Z", "* * 1,15 * Sun", true),
        ("2012-06-15T00:00:00Z", "* * 1,15 * Sun", true),
        ("2012-08-01T00:00:00Z", "* * 1,15 * Sun", true),
        ("2012-07-15T00:00:00Z", "* * */10 * Sun", true),
        // One starred: both must match.
        ("2012-07-15T00:00:00Z", "* * * * Mon", false),
        ("2012-07-09T00:00:00Z", "* * 1,15 * *", false),
        ("2012-07-15T00:00:00Z", "* * 1,15 * *", true),
        ("2012-07-15T00:00:00Z", "* * */2 * Sun", true),
    ];
    for (at, spec, fires) in cases {
        let before = ts(at) - jiff::SignedDuration::from_secs(1);
        let got = parse(spec).unwrap().next(before, &TimeZone::UTC);
        assert_eq!(got == Some(ts(at)), fires, "{spec} at {at}: got {got:?}");
    }
}

#[test]
fn robfig_next_table() {
    // robfig's TestNext uses a seconds field; every row whose seconds field is
    // "0" is here with it dropped (the rows with "15/35" seconds cannot be
    // written in the 5-field standard syntax).
    let ny = tz("America/New_York");
    let utc = TimeZone::UTC;
    let cases: &[(&str, &TimeZone, &str, Option<&str>)] = &[
        (
            "2012-07-09T14:45:00Z",
            &utc,
            "0/15 * * * *",
            Some("2012-07-09T15:00:00Z"),
        ),
        (
            "2012-07-09T14:59:00Z",
            &utc,
            "0/15 * * * *",
            Some("2012-07-09T15:00:00Z"),
        ),
        (
            "2012-07-09T14:59:59Z",
            &utc,
            "0/15 * * * *",
            Some("2012-07-09T15:00:00Z"),
        ),
        (
            "2012-07-09T15:45:00Z",
            &utc,
            "20-35/15 * * * *",
            Some("2012-07-09T16:20:00Z"),
        ),
        (
            "2012-07-09T23:46:00Z",
            &utc,
            "*/15 * * * *",
            Some("2012-07-10T00:00:00Z"),
        ),
        (
            "2012-07-09T23:45:00Z",
            &utc,
            "20-35/15 * * * *",
            Some("2012-07-10T00:20:00Z"),
        ),
        (
            "2012-07-09T23:35:00Z",
            &utc,
            "0 0 9 Apr-Oct ?",
            Some("2012-08-09T00:00:00Z"),
        ),
        (
            "2012-07-09T23:35:00Z",
            &utc,
            "0 0 */5 Apr,Aug,Oct Mon",
            Some("2012-08-01T00:00:00Z"),
        ),
        (
            "2012-07-09T23:35:00Z",
            &utc,
            "0 0 */5 Oct Mon",
            Some("2012-10-01T00:00:00Z"),
        ),
        (
            "2012-07-09T23:35:00Z",
            &utc,
            "0 0 * Feb Mon",
            Some("2013-02-04T00:00:00Z"),
        ),
        (
            "2012-07-09T23:35:00Z",
            &utc,
            "0 0 * Feb Mon/2",
            Some("2013-02-01T00:00:00Z"),
        ),
        (
            "2012-12-31T23:59:45Z",
            &utc,
            "* * * * *",
            Some("2013-01-01T00:00:00Z"),
        ),
        (
            "2012-07-09T23:35:00Z",
            &utc,
            "0 0 29 Feb ?",
            Some("2016-02-29T00:00:00Z"),
        ),
        // Spring forward in New York: 2am EST (-5) becomes 3am EDT (-4).
        (
            "2012-03-11T00:00:00-05:00",
            &utc,
            "TZ=America/New_York 30 2 11 Mar ?",
            Some("2013-03-11T02:30:00-04:00"),
        ),
        (
            "2012-03-11T00:00:00-05:00",
            &utc,
            "TZ=America/New_York 0 * * * ?",
            Some("2012-03-11T01:00:00-05:00"),
        ),
        (
            "2012-03-11T01:00:00-05:00",
            &utc,
            "TZ=America/New_York 0 * * * ?",
            Some("2012-03-11T03:00:00-04:00"),
        ),
        (
            "2012-03-11T03:00:00-04:00",
            &utc,
            "TZ=America/New_York 0 * * * ?",
            Some("2012-03-11T04:00:00-04:00"),
        ),
        (
            "2012-03-11T04:00:00-04:00",
            &utc,
            "TZ=America/New_York 0 * * * ?",
            Some("2012-03-11T05:00:00-04:00"),
        ),
        (
            "2012-03-11T00:00:00-05:00",
            &utc,
            "CRON_TZ=America/New_York 0 * * * ?",
            Some("2012-03-11T01:00:00-05:00"),
        ),
        (
            "2012-03-11T01:00:00-05:00",
            &utc,
            "CRON_TZ=America/New_York 0 * * * ?",
            Some("2012-03-11T03:00:00-04:00"),
        ),
        (
            "2012-03-11T03:00:00-04:00",
            &utc,
            "CRON_TZ=America/New_York 0 * * * ?",
            Some("2012-03-11T04:00:00-04:00"),
        ),
        (
            "2012-03-11T04:00:00-04:00",
            &utc,
            "CRON_TZ=America/New_York 0 * * * ?",
            Some("2012-03-11T05:00:00-04:00"),
        ),
        (
            "2012-03-11T00:00:00-05:00",
            &utc,
            "TZ=America/New_York 0 1 * * ?",
            Some("2012-03-11T01:00:00-05:00"),
        ),
        (
            "2012-03-11T01:00:00-05:00",
            &utc,
            "TZ=America/New_York 0 1 * * ?",
            Some("2012-03-12T01:00:00-04:00"),
        ),
        // 2am does not exist that night: skipped, not moved.
        (
            "2012-03-11T00:00:00-05:00",
            &utc,
            "TZ=America/New_York 0 2 * * ?",
            Some("2012-03-12T02:00:00-04:00"),
        ),
        // Fall back: 2am EDT (-4) becomes 1am EST (-5).
        (
            "2012-11-04T00:00:00-04:00",
            &utc,
            "TZ=America/New_York 30 2 04 Nov ?",
            Some("2012-11-04T02:30:00-05:00"),
        ),
        (
            "2012-11-04T01:45:00-04:00",
            &utc,
            "TZ=America/New_York 30 1 04 Nov ?",
            Some("2012-11-04T01:30:00-05:00"),
        ),
        (
            "2012-11-04T00:00:00-04:00",
            &utc,
            "TZ=America/New_York 0 * * * ?",
            Some("2012-11-04T01:00:00-04:00"),
        ),
        (
            "2012-11-04T01:00:00-04:00",
            &utc,
            "TZ=America/New_York 0 * * * ?",
            Some("2012-11-04T01:00:00-05:00"),
        ),
        (
            "2012-11-04T01:00:00-05:00",
            &utc,
            "TZ=America/New_York 0 * * * ?",
            Some("2012-11-04T02:00:00-05:00"),
        ),
        // 1am runs twice.
        (
            "2012-11-04T00:00:00-04:00",
            &utc,
            "TZ=America/New_York 0 1 * * ?",
            Some("2012-11-04T01:00:00-04:00"),
        ),
        (
            "2012-11-04T01:00:00-04:00",
            &utc,
            "TZ=America/New_York 0 1 * * ?",
            Some("2012-11-04T01:00:00-05:00"),
        ),
        (
            "2012-11-04T01:00:00-05:00",
            &utc,
            "TZ=America/New_York 0 1 * * ?",
            Some("2012-11-05T01:00:00-05:00"),
        ),
        (
            "2012-11-04T00:00:00-04:00",
            &utc,
            "TZ=America/New_York 0 2 * * ?",
            Some("2012-11-04T02:00:00-05:00"),
        ),
        (
            "2012-11-04T02:00:00-05:00",
            &utc,
            "TZ=America/New_York 0 2 * * ?",
            Some("2012-11-05T02:00:00-05:00"),
        ),
        (
            "2012-11-04T00:00:00-04:00",
            &utc,
            "TZ=America/New_York 0 3 * * ?",
            Some("2012-11-04T03:00:00-05:00"),
        ),
        (
            "2012-11-04T03:00:00-05:00",
            &utc,
            "TZ=America/New_York 0 3 * * ?",
            Some("2012-11-05T03:00:00-05:00"),
        ),
        // The same without a prefix, evaluated in the zone of the time given.
        (
            "2012-11-04T00:00:00-04:00",
            &ny,
            "0 * * * ?",
            Some("2012-11-04T01:00:00-04:00"),
        ),
        (
            "2012-11-04T01:00:00-04:00",
            &ny,
            "0 * * * ?",
            Some("2012-11-04T01:00:00-05:00"),
        ),
        (
            "2012-11-04T01:00:00-05:00",
            &ny,
            "0 * * * ?",
            Some("2012-11-04T02:00:00-05:00"),
        ),
        (
            "2012-11-04T00:00:00-04:00",
            &ny,
            "0 1 * * ?",
            Some("2012-11-04T01:00:00-04:00"),
        ),
        (
            "2012-11-04T01:00:00-04:00",
            &ny,
            "0 1 * * ?",
            Some("2012-11-04T01:00:00-05:00"),
        ),
        (
            "2012-11-04T01:00:00-05:00",
            &ny,
            "0 1 * * ?",
            Some("2012-11-05T01:00:00-05:00"),
        ),
        (
            "2012-11-04T00:00:00-04:00",
            &ny,
            "0 2 * * ?",
            Some("2012-11-04T02:00:00-05:00"),
        ),
        (
            "2012-11-04T02:00:00-05:00",
            &ny,
            "0 2 * * ?",
            Some("2012-11-05T02:00:00-05:00"),
        ),
        (
            "2012-11-04T00:00:00-04:00",
            &ny,
            "0 3 * * ?",
            Some("2012-11-04T03:00:00-05:00"),
        ),
        (
            "2012-11-04T03:00:00-05:00",
            &ny,
            "0 3 * * ?",
            Some("2012-11-05T03:00:00-05:00"),
        ),
        // Unsatisfiable.
        ("2012-07-09T23:35:00Z", &utc, "0 0 30 Feb ?", None),
        ("2012-07-09T23:35:00Z", &utc, "0 0 31 Apr ?", None),
        (
            "2012-11-04T00:00:00-04:00",
            &ny,
            "0 3 3 * ?",
            Some("2012-12-03T03:00:00-05:00"),
        ),
        // Midnight does not exist in Sao Paulo on 2018-11-04 (robfig issue 157).
        (
            "2018-10-17T05:00:00-04:00",
            &utc,
            "TZ=America/Sao_Paulo 0 9 10 * ?",
            Some("2018-11-10T06:00:00-05:00"),
        ),
        (
            "2018-02-14T05:00:00-05:00",
            &utc,
            "TZ=America/Sao_Paulo 0 9 22 * ?",
            Some("2018-02-22T07:00:00-05:00"),
        ),
    ];
    for &(after, zone, spec, want) in cases {
        assert_eq!(
            next(spec, after, zone),
            want.map(ts),
            "{spec} after {after}"
        );
    }
}

#[test]
fn robfig_next_with_fixed_offset_table() {
    let ist = TimeZone::fixed(Offset::from_seconds(19_800).unwrap());
    for (after, spec, want) in [
        (
            "2016-01-03T13:09:03+05:30",
            "14 14 * * *",
            "2016-01-03T14:14:00+05:30",
        ),
        (
            "2016-01-03T04:09:03+05:30",
            "14 14 * * ?",
            "2016-01-03T14:14:00+05:30",
        ),
        (
            "2016-01-03T14:09:03+05:30",
            "14 14 * * *",
            "2016-01-03T14:14:00+05:30",
        ),
        (
            "2016-01-03T14:00:00+05:30",
            "14 14 * * ?",
            "2016-01-03T14:14:00+05:30",
        ),
    ] {
        assert_eq!(
            next(spec, after, &ist),
            Some(ts(want)),
            "{spec} after {after}"
        );
    }
}

#[test]
fn robfig_constant_delay_table() {
    let cases = [
        (
            "2012-07-09T14:45:00Z",
            "@every 15m0.00000005s",
            "2012-07-09T15:00:00Z",
        ),
        ("2012-07-09T14:59:00Z", "@every 15m", "2012-07-09T15:14:00Z"),
        ("2012-07-09T14:59:59Z", "@every 15m", "2012-07-09T15:14:59Z"),
        ("2012-07-09T15:45:00Z", "@every 35m", "2012-07-09T16:20:00Z"),
        ("2012-07-09T23:46:00Z", "@every 14m", "2012-07-10T00:00:00Z"),
        ("2012-07-09T23:45:00Z", "@every 35m", "2012-07-10T00:20:00Z"),
        (
            "2012-07-09T23:35:51Z",
            "@every 44m24s",
            "2012-07-10T00:20:15Z",
        ),
        (
            "2012-07-09T23:35:51Z",
            "@every 25h44m24s",
            "2012-07-11T01:20:15Z",
        ),
        (
            "2012-07-09T23:35:00Z",
            "@every 2184h25m",
            "2012-10-09T00:00:00Z",
        ),
        ("2012-12-31T23:59:45Z", "@every 15s", "2013-01-01T00:00:00Z"),
        (
            "2012-07-09T14:45:00Z",
            "@every 15ms",
            "2012-07-09T14:45:01Z",
        ),
        (
            "2012-07-09T14:45:00.005Z",
            "@every 15m",
            "2012-07-09T15:00:00Z",
        ),
        (
            "2012-07-09T14:45:00.005Z",
            "@every 15m0.00000005s",
            "2012-07-09T15:00:00Z",
        ),
    ];
    for (after, spec, want) in cases {
        assert_eq!(
            next(spec, after, &TimeZone::UTC),
            Some(ts(want)),
            "{spec} after {after}"
        );
    }
}

#[test]
fn robfig_parse_tables() {
    // TestRange and TestField, through whole schedules (minute field 0-59).
    let minute_bits = |field: &str| match parse(&format!("{field} * * * *")).map(|s| s.kind) {
        Ok(Kind::Spec(f)) => Ok(f.minute),
        Ok(Kind::Every(_)) => unreachable!(),
        Err(e) => Err(e.to_string()),
    };
    assert_eq!(minute_bits("5"), Ok(1 << 5));
    assert_eq!(minute_bits("5-7"), Ok(0b111 << 5));
    assert_eq!(minute_bits("5-6/2"), Ok(1 << 5));
    assert_eq!(minute_bits("5-7/2"), Ok(1 << 5 | 1 << 7));
    assert_eq!(minute_bits("5-7/1"), Ok(0b111 << 5));
    assert_eq!(minute_bits("5,6,7"), Ok(0b111 << 5));
    assert_eq!(
        minute_bits("1,5-7/2,3"),
        Ok(1 << 1 | 1 << 5 | 1 << 7 | 1 << 3)
    );
    assert_eq!(minute_bits("50/5"), Ok(1 << 50 | 1 << 55));
    for (field, message) in [
        ("5--5", "minute: too many hyphens in \"5--5\""),
        ("2-x", "minute: \"x\" is not a number or a name"),
        ("*/-12", "minute: \"-12\" is negative"),
        ("*//2", "minute: too many slashes in \"*//2\""),
        ("60", "minute: 60 is above the maximum 59"),
        ("5-3", "minute: range \"5-3\" starts after it ends"),
        ("*/0", "minute: step in \"*/0\" must be a positive number"),
    ] {
        assert_eq!(minute_bits(field), Err(message.to_owned()), "{field}");
    }
    let err = |spec: &str| parse(spec).unwrap_err().to_string();
    assert_eq!(err("0 0 0 * *"), "day-of-month: 0 is below the minimum 1");
    assert_eq!(err("0 0 * * 7"), "day-of-week: 7 is above the maximum 6");
    assert_eq!(
        err("0 0 * * 1-7"),
        "day-of-week: 7 is above the maximum 6 in \"1-7\""
    );
    assert_eq!(err("0 0 * 13 *"), "month: 13 is above the maximum 12");
    assert!(err("* * * *").starts_with("expected exactly 5 fields"));
    assert_eq!(err(""), "empty schedule");
    assert!(err("@every Xm").starts_with("@every: invalid duration"));
    assert!(err("@unrecognized").starts_with("unrecognized descriptor"));
    // TestErrors and TestSlash0NoHang.
    for spec in [
        "xyz",
        "60 0 * * *",
        "0 60 * * *",
        "0 0 * * XYZ",
        "TZ=America/New_York 15/0 * * * *",
    ] {
        assert!(parse(spec).is_err(), "{spec}");
    }
}

#[test]
fn accepts_and_rejects_like_robfig() {
    let accepted = [
        "*/5 * * * *",
        "0 0 1 * MON",
        "0 0 * * sun-SAT",
        "0 0 * JAN-dec *",
        "5/15 * * * *",
        "0 12 */1 * 1",
        "+5 * * * *",
        "05 * * * *",
        "1-+5 * * * *",
        "0,,5 * * * *",
        ",0 * * * *",
        "*-5 * * * *",
        "*-foo-bar * * * *",
        "? ? ? ? ?",
        "0 0 , * *",
        "*/100 * * * *",
        "\t0  0\t* * *  ",
        "@yearly",
        "@annually",
        "@monthly",
        "@weekly",
        "@daily",
        "@midnight",
        "@hourly",
        "@every 1h30m",
        "@every 0s",
        "@every -1h",
        "@every 1500ms",
        "TZ=UTC @daily",
        "TZ= * * * * *",
        "CRON_TZ=Europe/Berlin 0 2 * * *",
        "TZ=Local 0 0 * * *",
        "TZ=Asia/Kolkata  * * * * * ",
        "0 0 * * FR\u{130}",
    ];
    for spec in accepted {
        assert!(parse(spec).is_ok(), "{spec:?}: {:?}", parse(spec));
    }
    let rejected = [
        "0 0 * * 7",
        "0 0 L * *",
        "0 0 * * MON#1",
        "0 0 * * Monday",
        "0 0 * January *",
        "@reboot",
        "@Daily",
        "@daily ",
        " @daily",
        "@every 1d",
        "@every  1h",
        "TZ=UTC",
        "TZ=Mars/Phobos * * * * *",
        "TZ=america/new_york * * * * *",
        "TZ=../etc/passwd * * * * *",
        "0 0 * * * *",
        "1-2-3 * * * *",
        "99999999999999999999 * * * *",
        "-1 * * * *",
        "1.5 * * * *",
        "0x1 * * * *",
        "1_0 * * * *",
        "tz=UTC * * * * *",
        "-0 * * * *",
    ];
    for spec in rejected {
        assert!(parse(spec).is_err(), "{spec:?} should be rejected");
    }
    assert_eq!(
        parse("TZ=UTC").unwrap_err().to_string(),
        "TZ must be followed by a space and a schedule"
    );
    assert_eq!(
        parse("TZ=Mars/Phobos * * * * *").unwrap_err().to_string(),
        "TZ: unknown time zone \"Mars/Phobos\""
    );
}

#[test]
fn dst_behaviour_kubernetes_users_see() {
    let utc = TimeZone::UTC;
    // Gap: New York 02:30 on 2024-03-10 is skipped; the next run is the next day.
    assert_eq!(
        next(
            "TZ=America/New_York 30 2 * * *",
            "2024-03-09T12:00:00Z",
            &utc
        ),
        Some(ts("2024-03-11T02:30:00-04:00"))
    );
    // Overlap: 01:30 fires twice in New York and 02:30 twice in Berlin.
    let ny = parse("30 1 * * *").unwrap();
    let zone = tz("America/New_York");
    let runs: Vec<_> = ny
        .upcoming(ts("2024-11-03T00:00:00Z"), &zone)
        .take(3)
        .collect();
    assert_eq!(
        runs[..2],
        [ts("2024-11-03T05:30:00Z"), ts("2024-11-03T06:30:00Z")]
    );
    let berlin = parse("TZ=Europe/Berlin 30 2 * * *").unwrap();
    let runs: Vec<_> = berlin
        .upcoming(ts("2024-10-26T12:00:00Z"), &utc)
        .take(2)
        .collect();
    assert_eq!(
        runs,
        [ts("2024-10-27T00:30:00Z"), ts("2024-10-27T01:30:00Z")]
    );
    // Sao Paulo 2018-11-04 has no midnight: the daily run skips that day.
    let sp = parse("TZ=America/Sao_Paulo 0 0 * * *").unwrap();
    let runs: Vec<_> = sp
        .upcoming(ts("2018-11-02T12:00:00Z"), &utc)
        .take(3)
        .collect();
    assert_eq!(
        runs,
        [
            ts("2018-11-03T00:00:00-03:00"),
            ts("2018-11-05T00:00:00-02:00"),
            ts("2018-11-06T00:00:00-02:00")
        ]
    );
}

#[test]
fn search_horizon_and_leap_years() {
    let utc = TimeZone::UTC;
    assert_eq!(
        next("0 0 29 2 *", "2024-03-01T00:00:00Z", &utc),
        Some(ts("2028-02-29T00:00:00Z"))
    );
    // 2100 is not a leap year: nothing within five years of 2097.
    assert_eq!(next("0 0 29 2 *", "2097-03-01T00:00:00Z", &utc), None);
    assert_eq!(next("59 23 31 2 *", "2024-01-01T00:00:00Z", &utc), None);
    assert_eq!(next("0 0 , * *", "2024-01-01T00:00:00Z", &utc), None);
    assert_eq!(next("* * * * *", "9998-12-31T23:00:00Z", &utc), None);
}

#[test]
fn every_counts_from_the_given_instant() {
    let s = parse("@every 1h").unwrap();
    assert_eq!(
        s.next(ts("2024-01-01T10:17:42.9Z"), &TimeZone::UTC),
        Some(ts("2024-01-01T11:17:42Z"))
    );
    // Before 1970 Go's sub-second part is still positive.
    assert_eq!(
        s.next(ts("1969-12-31T23:59:59.5Z"), &TimeZone::UTC),
        Some(ts("1970-01-01T00:59:59Z"))
    );
    // The zone prefix is checked but does not matter.
    assert!(parse("TZ=Bad/Zone @every 1h").is_err());
    assert!(parse("TZ=Asia/Tokyo @every 1h").unwrap().is_every());
}

#[test]
fn parsed_schedule_is_small() {
    assert!(
        std::mem::size_of::<Schedule>() <= 64,
        "{}",
        std::mem::size_of::<Schedule>()
    );
}

#[test]
fn skipped_calendar_day_ends_the_search_instead_of_hanging() {
    // Samoa skipped 2011-12-30. robfig's Next never returns here (it cycles
    // between the 29th and the 31st); shardcron gives up and says "never".
    let apia = tz("Pacific/Apia");
    let s = parse("* 15-19 * * 0/13,2").unwrap();
    let after = Timestamp::from_nanosecond(1_325_206_480_537_376_646).unwrap();
    assert_eq!(s.next(after, &apia), None);
    // A day later the search has left the missing day behind.
    let later = after + jiff::SignedDuration::from_hours(48);
    assert!(s.next(later, &apia).is_some());
}
#[test]
fn half_hour_dst_gap_lets_robfig_fire_outside_the_hour_field() {
    // Found by fuzzing, confirmed against robfig: Lord Howe springs forward
    // 30 minutes (02:00 -> 02:30). After firing at 01:31, robfig's minute
    // search walks from 01:59 into 02:30 without passing minute 0, so it
    // never re-checks the hour and fires again at 02:31. Kubernetes does
    // this too; shardcron keeps it.
    let z = tz("Australia/Lord_Howe");
    let s = parse("31 1 2 10 0").unwrap();
    let runs: Vec<_> = s.upcoming(ts("2022-10-01T05:00:00Z"), &z).take(3).collect();
    assert_eq!(
        runs,
        [
            ts("2022-10-02T01:31:00+10:30"),
            ts("2022-10-02T02:31:00+11:00"),
            ts("2022-10-09T01:31:00+11:00")
        ]
    );
    assert!(!s.matches(runs[1], &z));
}

/// Each slot from `after` on, up to `until`: `once` skips a fall-back's
/// repeated wall-clock times.
fn slots_until(spec: &str, after: &str, until: &str, zone: &TimeZone, once: bool) -> Vec<String> {
    let schedule = parse(spec).unwrap();
    let mut out = Vec::new();
    let mut t = ts(after);
    loop {
        let next = if once {
            schedule.next_once_per_wall_time(t, zone)
        } else {
            schedule.next(t, zone)
        };
        match next {
            Some(slot) if slot <= ts(until) => {
                out.push(slot.to_string());
                t = slot;
            }
            _ => return out,
        }
    }
}

#[test]
fn once_per_wall_time_skips_the_repeat_of_a_fall_back_and_nothing_else() {
    // Berlin falls back at 01:00Z on 2023-10-29: 02:00-02:59 happen at
    // 00:00Z-00:59Z (CEST) and again at 01:00Z-01:59Z (CET).
    let berlin = tz("Europe/Berlin");
    let (after, until) = ("2023-10-28T23:50:00Z", "2023-10-29T02:10:00Z");
    let twice = slots_until("*/30 * * * *", after, until, &berlin, false);
    let once = slots_until("*/30 * * * *", after, until, &berlin, true);
    assert_eq!(
        twice,
        [
            "2023-10-29T00:00:00Z",
            "2023-10-29T00:30:00Z",
            "2023-10-29T01:00:00Z",
            "2023-10-29T01:30:00Z",
            "2023-10-29T02:00:00Z",
        ]
    );
    assert_eq!(
        once,
        [
            "2023-10-29T00:00:00Z",
            "2023-10-29T00:30:00Z",
            "2023-10-29T02:00:00Z",
        ]
    );
    // The same schedule in its own zone (a TZ= prefix) is read in that zone.
    let prefixed = slots_until(
        "TZ=Europe/Berlin */30 * * * *",
        after,
        until,
        &TimeZone::UTC,
        true,
    );
    assert_eq!(prefixed, once);
    // Nothing changes where nothing repeats: UTC, a spring-forward, @every.
    for (spec, zone, after, until) in [
        ("*/30 * * * *", TimeZone::UTC, after, until),
        (
            "30 2 * * *",
            berlin.clone(),
            "2024-03-30T00:00:00Z",
            "2024-04-02T00:00:00Z",
        ),
        ("@every 30m", berlin.clone(), after, until),
    ] {
        assert_eq!(
            slots_until(spec, after, until, &zone, true),
            slots_until(spec, after, until, &zone, false),
            "{spec}"
        );
    }
}

#[test]
fn a_repeated_wall_time_is_the_later_instant_of_a_fold() {
    let berlin = tz("Europe/Berlin");
    assert!(!is_repeated_wall_time(ts("2023-10-29T00:30:00Z"), &berlin));
    assert!(is_repeated_wall_time(ts("2023-10-29T01:30:00Z"), &berlin));
    assert!(!is_repeated_wall_time(ts("2023-10-29T02:30:00Z"), &berlin));
    assert!(!is_repeated_wall_time(
        ts("2023-10-29T01:30:00Z"),
        &TimeZone::UTC
    ));
    // Lord Howe falls back half an hour (02:00 to 01:30, UTC+11 to +10:30).
    let lord_howe = tz("Australia/Lord_Howe");
    assert!(is_repeated_wall_time(
        ts("2024-04-06T15:15:00Z"),
        &lord_howe
    ));
}
