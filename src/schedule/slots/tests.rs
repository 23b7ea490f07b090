//! Upstream's `TestMostRecentScheduleTime`, `TestNextScheduleTime` and
//! `TestNextScheduleTimeDuration` tables (pkg/controller/cronjob/utils_test.go).

use super::*;
use crate::schedule::parse;
use jiff::SignedDuration;

/// 2016-05-19T10:00:00Z, upstream's `topOfTheHour()`.
fn top() -> Timestamp {
    "2016-05-19T10:00:00Z".parse().unwrap()
}

fn after_top(secs: i64) -> Timestamp {
    top() + SignedDuration::from_secs(secs)
}

const MIN: i64 = 60;
const HOUR: i64 = 3600;
const DAY: i64 = 86_400;

struct Case {
    name: &'static str,
    schedule: &'static str,
    created: Timestamp,
    last: Option<Timestamp>,
    deadline: Option<i64>,
    include_deadline: bool,
    now: Timestamp,
    want: Result<(Timestamp, Option<Timestamp>, Missed), IntervalTooShort>,
}

fn case(name: &'static str, schedule: &'static str, now: Timestamp) -> Case {
    Case {
        name,
        schedule,
        created: top(),
        last: None,
        deadline: None,
        include_deadline: false,
        now,
        want: Err(IntervalTooShort),
    }
}

fn most_recent(c: &Case) -> Result<RecentSlot, IntervalTooShort> {
    let schedule = parse(c.schedule).unwrap();
    Slots {
        schedule: &schedule,
        zone: &TimeZone::UTC,
        created: c.created,
        last_scheduled: c.last,
        starting_deadline_seconds: c.deadline,
        once_per_wall_time: false,
        catch_up_window: None,
        spread_offset: 0,
    }
    .most_recent(c.now, c.include_deadline)
}

#[test]
fn upstream_most_recent_schedule_time_table() {
    let cases = [
        Case {
            want: Ok((top(), None, Missed::None)),
            ..case("now before next schedule", "0 * * * *", after_top(30))
        },
        Case {
            want: Ok((top(), Some(after_top(HOUR)), Missed::None)),
            ..case(
                "now just after next schedule",
                "0 * * * *",
                after_top(61 * MIN),
            )
        },
        Case {
            created: after_top(10),
            want: Ok((after_top(10), Some(after_top(300 * MIN)), Missed::Few)),
            ..case("missed 5 schedules", "0 * * * *", after_top(301 * MIN))
        },
        Case {
            last: Some(after_top(30 * MIN)),
            want: Ok((
                after_top(30 * MIN),
                Some(after_top(DAY + 30 * MIN)),
                Missed::Few,
            )),
            ..case(
                "complex schedule",
                "30 6-16/4 * * 1-5",
                after_top(DAY + 31 * MIN),
            )
        },
        // Upstream's approximation misses the most recent slot here (encoded by its test).
        Case {
            last: Some(after_top(30 * MIN)),
            want: Ok((after_top(30 * MIN), None, Missed::Few)),
            ..case(
                "another complex schedule",
                "30 10,11,12 * * 1-5",
                after_top(30 * HOUR + 30 * MIN),
            )
        },
        Case {
            last: Some(after_top(30 * MIN)),
            want: Ok((
                after_top(30 * MIN),
                Some(after_top(96 * HOUR + 30 * MIN)),
                Missed::Few,
            )),
            ..case(
                "complex schedule with longer diff between executions",
                "30 6-16/4 * * 1-5",
                after_top(96 * HOUR + 31 * MIN),
            )
        },
        Case {
            want: Ok((top(), Some(after_top(DAY + 30 * MIN)), Missed::Few)),
            ..case(
                "complex schedule with shorter diff between executions",
                "30 6-16/4 * * 1-5",
                after_top(DAY + 31 * MIN),
            )
        },
        Case {
            created: after_top(-59 * MIN),
            last: Some(after_top(MIN)),
            deadline: Some(10),
            want: Ok((
                after_top(MIN),
                Some(after_top(6 * DAY + 23 * HOUR + MIN)),
                Missed::Many,
            )),
            ..case("@every schedule", "@every 1h", after_top(7 * DAY))
        },
        Case {
            created: after_top(10),
            ..case("rogue cronjob", "59 23 31 2 *", after_top(HOUR))
        },
        Case {
            last: Some(top()),
            want: Ok((top(), None, Missed::None)),
            ..case(
                "earliestTime being CreationTimestamp and LastScheduleTime",
                "0 * * * *",
                after_top(30),
            )
        },
        Case {
            last: Some(after_top(30 * MIN)),
            want: Ok((after_top(30 * MIN), None, Missed::None)),
            ..case(
                "earliestTime being LastScheduleTime",
                "*/5 * * * *",
                after_top(31 * MIN),
            )
        },
        Case {
            last: Some(after_top(30 * MIN)),
            deadline: Some(60),
            want: Ok((after_top(30 * MIN), None, Missed::None)),
            ..case(
                "earliestTime being LastScheduleTime (within StartingDeadlineSeconds)",
                "*/5 * * * *",
                after_top(31 * MIN),
            )
        },
        Case {
            last: Some(after_top(30 * MIN)),
            deadline: Some(60),
            include_deadline: true,
            want: Ok((after_top(31 * MIN), None, Missed::None)),
            ..case(
                "earliestTime being LastScheduleTime (outside StartingDeadlineSeconds)",
                "*/5 * * * *",
                after_top(32 * MIN),
            )
        },
    ];
    for c in &cases {
        let got = most_recent(c).map(|r| (r.earliest, r.most_recent, r.missed));
        assert_eq!(got, c.want, "{}", c.name);
    }
}

fn slots<'a>(
    schedule: &'a Schedule,
    created: Timestamp,
    last: Option<Timestamp>,
    deadline: Option<i64>,
) -> Slots<'a> {
    static UTC: TimeZone = TimeZone::UTC;
    Slots {
        schedule,
        zone: &UTC,
        created,
        last_scheduled: last,
        starting_deadline_seconds: deadline,
        once_per_wall_time: false,
        catch_up_window: None,
        spread_offset: 0,
    }
}

#[test]
fn upstream_next_schedule_time_cases() {
    let hourly = parse("0 * * * ?").unwrap();
    let t1 = top();
    let t2 = after_top(HOUR);
    let due = |created, last, deadline, now| slots(&hourly, created, last, deadline).due(now);
    // 1: none needed yet.
    assert_eq!(
        due(after_top(-10 * MIN), None, None, after_top(-7 * MIN)),
        Ok(None)
    );
    // 2: one needed.
    assert_eq!(
        due(after_top(-10 * MIN), None, None, after_top(2)),
        Ok(Some((t1, Missed::None)))
    );
    // 3: known last schedule, none needed.
    assert_eq!(
        due(after_top(-10 * MIN), Some(t1), None, after_top(2 * MIN)),
        Ok(None)
    );
    // 4: known last schedule, one needed.
    let four = due(
        after_top(-10 * MIN),
        Some(t1),
        None,
        t2 + SignedDuration::from_mins(5),
    );
    assert_eq!(four.map(|d| d.map(|(t, _)| t)), Ok(Some(t2)));
    // 5: two needed: only the most recent is started.
    let five = due(
        after_top(-2 * HOUR),
        Some(after_top(-HOUR)),
        None,
        t2 + SignedDuration::from_mins(5),
    );
    assert_eq!(five.map(|d| d.map(|(t, _)| t)), Ok(Some(t2)));
    // 6: way behind, no deadline.
    let six = due(
        after_top(-2 * HOUR),
        Some(after_top(-HOUR)),
        None,
        t2 + SignedDuration::from_hours(240),
    );
    assert!(matches!(six, Ok(Some(_))));
    // 7: way behind, short deadline.
    let seven = due(
        after_top(-2 * HOUR),
        Some(after_top(-HOUR)),
        Some(2 * HOUR),
        t2 + SignedDuration::from_hours(240),
    );
    assert!(matches!(seven, Ok(Some(_))));
    // 8: the error reaches the caller.
    let rogue = parse("59 23 31 2 *").unwrap();
    assert_eq!(
        slots(&rogue, after_top(10), None, None).due(after_top(HOUR)),
        Err(IntervalTooShort)
    );
}

#[test]
fn upstream_next_schedule_time_duration_table() {
    // Upstream expects these plus 100 ms; shardcron wakes at the slot itself.
    let cases = [
        (
            "30 6-16/4 * * 1-5",
            Some(after_top(30 * MIN)),
            after_top(DAY + 31 * MIN),
            3 * HOUR + 59 * MIN,
        ),
        (
            "30 10,11,12 * * 1-5",
            Some(after_top(30 * MIN)),
            after_top(30 * HOUR + 30 * MIN),
            66 * HOUR,
        ),
        (
            "0 12 * * 4",
            Some(after_top(2 * HOUR)),
            after_top(19 * DAY + HOUR + 30 * MIN),
            48 * HOUR + 30 * MIN,
        ),
        ("0 12 * * 5", None, after_top(6 * HOUR), 20 * HOUR),
    ];
    for (spec, last, now, want) in cases {
        let schedule = parse(spec).unwrap();
        let wake = slots(&schedule, top(), last, None).next_wakeup(now);
        assert_eq!(wake, Some(now + SignedDuration::from_secs(want)), "{spec}");
    }
}

#[test]
fn every_with_short_deadline_never_fires_like_upstream() {
    let every = parse("@every 1h").unwrap();
    let created: Timestamp = "2024-01-01T10:00:00Z".parse().unwrap();
    let s = slots(&every, created, None, Some(10));
    for now in [
        "2024-01-01T10:59:00.1Z",
        "2024-01-01T10:59:05Z",
        "2024-01-01T11:30:00Z",
        "2024-01-02T11:00:00Z",
    ] {
        assert_eq!(s.due(now.parse().unwrap()), Ok(None), "{now}");
    }
}

#[test]
fn zero_deadline_never_fires_like_upstream() {
    let hourly = parse("0 * * * *").unwrap();
    let s = slots(&hourly, top(), None, Some(0));
    assert_eq!(s.due(after_top(HOUR)), Ok(None));
    assert_eq!(
        s.due(after_top(HOUR) + SignedDuration::from_millis(1)),
        Ok(None)
    );
}

#[test]
fn many_missed_still_starts_the_most_recent() {
    let minutely = parse("* * * * *").unwrap();
    let s = slots(&minutely, top(), Some(top()), None);
    assert_eq!(
        s.due(after_top(DAY + 30)),
        Ok(Some((after_top(DAY), Missed::Many)))
    );
}

#[test]
fn slot_beyond_horizon_neither_errors_nor_spins() {
    // From 2097, the next Feb 29 is in 2104, beyond robfig's horizon: upstream
    // would loop forever here; shardcron reports nothing due and no wake-up.
    let leap = parse("0 0 29 2 *").unwrap();
    let last: Timestamp = "2096-02-29T00:00:00Z".parse().unwrap();
    let s = slots(&leap, last, Some(last), None);
    let now: Timestamp = "2097-06-01T00:00:00Z".parse().unwrap();
    assert_eq!(s.due(now), Ok(None));
    assert_eq!(s.next_wakeup(now), None);
}

proptest::proptest! {
    /// `next_wakeup` reuses the slot `most_recent` found after its baseline;
    /// the answer is upstream's formula's: `next` of the most recent slot,
    /// of the baseline, or of now.
    #[test]
    fn the_wake_up_is_upstreams_formula(
        schedule in proptest::sample::select(vec![
            "*/5 * * * *", "0 * * * *", "30 10,11,12 * * 1-5", "@every 90s",
            "59 23 31 2 *", "0 0 29 2 *", "TZ=Europe/Berlin 30 2 * * *",
        ]),
        created in 0i64..400 * DAY,
        last in proptest::option::of(0i64..400 * DAY),
        deadline in proptest::option::of(0i64..2 * DAY),
        now in 0i64..800 * DAY,
    ) {
        let schedule = parse(schedule).unwrap();
        let slots = Slots {
            schedule: &schedule,
            zone: &TimeZone::UTC,
            created: after_top(created),
            last_scheduled: last.map(after_top),
            starting_deadline_seconds: deadline,
            once_per_wall_time: false,
            catch_up_window: None,
            spread_offset: 0,
        };
        let now = after_top(now);
        let base = match slots.most_recent(now, false) {
            Ok(RecentSlot { most_recent: Some(slot), .. }) => slot,
            Ok(RecentSlot { most_recent: None, missed: Missed::None, earliest }) => earliest,
            _ => now,
        };
        proptest::prop_assert_eq!(slots.next_wakeup(now), slots.next(base));
    }
}
