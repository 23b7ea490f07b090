//! Event texts and robfig's parse errors, word for word.

use super::fixtures::*;
use crate::reconcile::schedule_setup::{ScheduleSetup, go_quote};
use crate::reconcile::*;

fn parse_error(schedule: &str) -> String {
    ScheduleSetup::new(schedule, None)
        .schedule
        .expect_err(schedule)
        .into()
}

#[test]
fn robfig_error_texts() {
    for (schedule, want) in [
        ("", "empty spec string"),
        ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
        (
            "TZ=UTC   * *  * * * *",
            "expected exactly 5 fields, found 6: [* * * * * *]",
        ),
        (
            "TZ=UTC",
            "invalid schedule format: runtime error: slice bounds out of range [:-1]",
        ),
        (
            "TZ=Mars/Base * * * * *",
            "provided bad location Mars/Base: unknown time zone Mars/Base",
        ),
        (
            "TZ=../etc * * * * *",
            "provided bad location ../etc: time: invalid location name",
        ),
        ("@reboot", "unrecognized descriptor: @reboot"),
        (
            "@every 1d",
            "failed to parse duration @every 1d: time: unknown unit \"d\" in duration \"1d\"",
        ),
        (
            "x * * * *",
            "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax",
        ),
        (
            "99999999999999999999 * * * *",
            "failed to parse int from 99999999999999999999: strconv.Atoi: parsing \"99999999999999999999\": value out of range",
        ),
        // robfig splits "-5" on the hyphen first.
        (
            "-5 * * * *",
            "failed to parse int from : strconv.Atoi: parsing \"\": invalid syntax",
        ),
        ("*/-1 * * * *", "negative number (-1) not allowed: -1"),
        ("60 * * * *", "end of range (60) above maximum (59): 60"),
        ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
        (
            "5-2 * * * *",
            "beginning of range (5) beyond end of range (2): 5-2",
        ),
        (
            "* * * * sat-mon",
            "beginning of range (6) beyond end of range (1): sat-mon",
        ),
        (
            "*/0 * * * *",
            "step of range should be a positive number: */0",
        ),
        ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
        ("1/2/3 * * * *", "too many slashes: 1/2/3"),
        ("* * * * 7", "end of range (7) above maximum (6): 7"),
    ] {
        assert_eq!(parse_error(schedule), want, "{schedule:?}");
    }
}

#[test]
fn time_zone_from_spec_prefixes_the_schedule() {
    let setup = ScheduleSetup::new("0 9 * * *", Some("Asia/Tokyo"));
    let schedule = setup.schedule.unwrap();
    let next = schedule.next(ts("2016-05-19T00:00:00Z"), &jiff::tz::TimeZone::UTC);
    assert_eq!(next, Some(ts("2016-05-20T00:00:00Z")));
    // A bad zone leaves the schedule raw (the gate reports the zone).
    let setup = ScheduleSetup::new("0 9 * * *", Some("Nowhere/Land"));
    assert!(setup.schedule.is_ok());
    assert!(matches!(setup.time_zone, Some(Err(_))));
    // An empty spec.timeZone is UTC.
    let setup = ScheduleSetup::new("0 9 * * *", Some(""));
    assert!(matches!(setup.time_zone, Some(Ok(_))));
}

#[test]
fn event_texts() {
    let t = ts("2016-05-19T10:00:00.5Z");
    let cases = [
        (
            Event::miss_schedule(t),
            EventType::Warning,
            "MissSchedule",
            "Missed scheduled time to start a job: Thu, 19 May 2016 10:00:00 +0000",
        ),
        (
            Event::too_many_missed_times(),
            EventType::Warning,
            "TooManyMissedTimes",
            "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew",
        ),
        (
            Event::job_already_active(),
            EventType::Normal,
            "JobAlreadyActive",
            "Not starting job because prior execution is running and concurrency policy is Forbid",
        ),
        (
            Event::successful_create("a-1"),
            EventType::Normal,
            "SuccessfulCreate",
            "Created job a-1",
        ),
        (
            Event::successful_delete("a-1"),
            EventType::Normal,
            "SuccessfulDelete",
            "Deleted job a-1",
        ),
        (
            Event::saw_completed_job("a-1", "Failed"),
            EventType::Normal,
            "SawCompletedJob",
            "Saw completed job: a-1, condition: Failed",
        ),
        (
            Event::failed_get("x"),
            EventType::Warning,
            "FailedGet",
            "Get job: x",
        ),
        (
            Event::unparseable_cronjob_schedule("* *"),
            EventType::Warning,
            "UnParseableCronJobSchedule",
            "unparseable schedule for cronjob: * *",
        ),
    ];
    for (event, kind, reason, message) in cases {
        assert_eq!(event.event_type, kind, "{reason}");
        assert_eq!(event.reason.as_str(), reason);
        assert_eq!(event.message, message);
    }
}

#[test]
fn go_quoting() {
    assert_eq!(go_quote("a \"b\"\t\\"), "\"a \\\"b\\\"\\t\\\\\"");
    assert_eq!(go_quote("\u{1}é"), "\"\\x01é\"");
}
