use super::*;
use crate::reconcile::FailureReason;
use crate::reconcile::slot_history::{MAX_SLOT_ENTRIES, MAX_SLOT_HISTORY_BYTES, MAX_TEXT_BYTES};

fn at(s: &str) -> Timestamp {
    s.parse().expect("a time")
}

fn minute(m: i64) -> Timestamp {
    at("2026-11-28T10:00:00Z") + jiff::SignedDuration::from_mins(m)
}

fn job(name: &str, start: i64, end: Option<(i64, Finished)>) -> JobSummary {
    JobSummary {
        name: name.into(),
        uid: format!("uid-{name}"),
        start_time: Some(minute(start)),
        completion_time: end
            .filter(|(_, f)| *f == Finished::Complete)
            .map(|(m, _)| minute(m)),
        finished: end.map(|(_, f)| f),
        failed_at: end
            .filter(|(_, f)| *f == Finished::Failed)
            .map(|(m, _)| minute(m)),
        failure_reason: end
            .filter(|(_, f)| *f == Finished::Failed)
            .map(|_| FailureReason::BackoffLimitExceeded),
        succeeded: end.is_some_and(|(_, f)| f == Finished::Complete),
        scheduled: Some(minute(start)),
        deleting: false,
        held: false,
    }
}

/// The slots `first..due` (minutely) as a decision at `due` finds them.
fn unstarted(first: i64, due: i64) -> SlotFacts {
    SlotFacts {
        unstarted: Unstarted::between(Some(minute(first)), minute(due), |t| {
            Some(t + jiff::SignedDuration::from_mins(1))
        }),
    }
}

fn update(
    current: Option<&SlotHistory>,
    policy: ConcurrencyPolicy,
    suspended: bool,
    children: &[JobSummary],
    decisions: &[Decision],
    facts: SlotFacts,
    now: i64,
) -> Option<SlotHistory> {
    slot_history_update(
        current,
        &policy,
        suspended,
        children,
        decisions,
        facts,
        minute(now),
    )
}

#[test]
fn a_slot_that_ran_and_succeeded_writes_nothing() {
    let ok = [job("a-1", 1, Some((2, Finished::Complete)))];
    let start = [Decision::Start {
        slot: minute(2),
        job: "a-2".into(),
    }];
    let facts = SlotFacts::default();
    assert_eq!(
        update(None, ConcurrencyPolicy::Allow, false, &ok, &start, facts, 2),
        None
    );
    // Nor with a history already written: nothing changes.
    let history =
        update(None, ConcurrencyPolicy::Allow, true, &[], &[], facts, 0).expect("a suspension");
    let resumed = update(
        Some(&history),
        ConcurrencyPolicy::Allow,
        false,
        &[],
        &[],
        facts,
        1,
    )
    .expect("the resume");
    assert_eq!(
        update(
            Some(&resumed),
            ConcurrencyPolicy::Allow,
            false,
            &ok,
            &start,
            facts,
            2
        ),
        None
    );
}

#[test]
fn a_forbid_slot_that_never_started_names_the_job_that_held_it_once() {
    // a-1 runs from minute 1 to 3 (and on); minute 2 was held, minute 3 is
    // decided: minute 2 never ran.
    let children = [job("a-1", 1, None)];
    let held = [Decision::ForbidWhileActive {
        slot: minute(3),
        running: vec!["a-1".into()],
    }];
    let history = update(
        None,
        ConcurrencyPolicy::Forbid,
        false,
        &children,
        &held,
        unstarted(2, 3),
        3,
    )
    .expect("a skipped slot");
    assert_eq!(
        history.slots,
        [SlotEntry {
            slot: minute(2),
            fate: Fate::Skipped {
                why: SkipWhy::Forbid,
                count: 1
            },
            job: "a-1".into(),
        }]
    );
    assert_eq!(history.skipped.forbid, 1);
    // The same decision again (a replayed event, another owner): no write.
    assert_eq!(
        update(
            Some(&history),
            ConcurrencyPolicy::Forbid,
            false,
            &children,
            &held,
            unstarted(2, 3),
            3
        ),
        None
    );
    // Minute 3 starts late when a-1 ends: a wait, nothing to write.
    let done = [job("a-1", 1, Some((3, Finished::Complete)))];
    let start = [Decision::Start {
        slot: minute(3),
        job: "a-3".into(),
    }];
    assert_eq!(
        update(
            Some(&history),
            ConcurrencyPolicy::Forbid,
            false,
            &done,
            &start,
            SlotFacts::default(),
            3
        ),
        None
    );
}

#[test]
fn skipped_slots_say_why() {
    let none: [JobSummary; 0] = [];
    let why = |history: Option<SlotHistory>| match history.expect("an entry").slots[0].fate {
        Fate::Skipped { why, count } => (why, count),
        ref other => panic!("{other:?}"),
    };
    // All replicas down for minutes 2..5: missed, as a run.
    assert_eq!(
        why(update(
            None,
            ConcurrencyPolicy::Allow,
            false,
            &none,
            &[],
            unstarted(2, 6),
            6
        )),
        (SkipWhy::Missed, 4)
    );
    // More than 100.
    assert_eq!(
        why(update(
            None,
            ConcurrencyPolicy::Allow,
            false,
            &none,
            &[],
            unstarted(0, 500),
            500
        )),
        (SkipWhy::TooManyMissed, 101)
    );
    // Past the starting deadline.
    let late = [Decision::TooLate { slot: minute(4) }];
    assert_eq!(
        why(update(
            None,
            ConcurrencyPolicy::Allow,
            false,
            &none,
            &late,
            SlotFacts::default(),
            6
        )),
        (SkipWhy::Deadline, 1)
    );
    // Suspended at minute 1, resumed at minute 6: minutes 2..5 skipped.
    let suspended = update(
        None,
        ConcurrencyPolicy::Allow,
        true,
        &none,
        &[Decision::Suspended],
        SlotFacts::default(),
        1,
    )
    .expect("the suspension is written");
    assert_eq!(suspended.suspended.map(|s| s.since), Some(minute(1)));
    let resumed = update(
        Some(&suspended),
        ConcurrencyPolicy::Allow,
        false,
        &none,
        &[],
        unstarted(2, 6),
        6,
    );
    assert_eq!(resumed.as_ref().and_then(|h| h.suspended), None);
    assert_eq!(why(resumed), (SkipWhy::Suspended, 4));
    // Paused after failures.
    let pause = [Decision::PausedAfterFailures {
        jobs: vec!["a-1".into()],
    }];
    let paused = update(
        None,
        ConcurrencyPolicy::Allow,
        false,
        &none,
        &pause,
        SlotFacts::default(),
        1,
    )
    .expect("the pause is written");
    assert_eq!(
        why(update(
            Some(&paused),
            ConcurrencyPolicy::Allow,
            false,
            &none,
            &[],
            unstarted(2, 3),
            3
        )),
        (SkipWhy::Paused, 1)
    );
}

#[test]
fn failures_are_recorded_once_with_their_reason_and_the_last_is_kept() {
    let children = [
        job("a-1", 1, Some((2, Finished::Failed))),
        job("a-2", 2, Some((3, Finished::Complete))),
        job("a-3", 3, Some((4, Finished::Failed))),
    ];
    let history = update(
        None,
        ConcurrencyPolicy::Allow,
        false,
        &children,
        &[],
        SlotFacts::default(),
        4,
    )
    .expect("two failures");
    assert_eq!(history.failed, 2);
    assert_eq!(
        history.last_failure,
        Some(LastFailure {
            job: "a-3".into(),
            at: minute(4),
            reason: "BackoffLimitExceeded".into()
        })
    );
    assert_eq!(history.slots[0].job, "a-3");
    assert_eq!(history.slots[1].job, "a-1");
    assert_eq!(
        update(
            Some(&history),
            ConcurrencyPolicy::Allow,
            false,
            &children,
            &[],
            SlotFacts::default(),
            5
        ),
        None
    );
    // a-1 deleted by the history limit, then seen again from a stale list:
    // still not twice.
    let stale = [job("a-1", 1, Some((2, Finished::Failed)))];
    assert_eq!(
        update(
            Some(&history),
            ConcurrencyPolicy::Allow,
            false,
            &stale,
            &[],
            SlotFacts::default(),
            5
        ),
        None
    );
}

#[test]
fn a_replaced_job_is_recorded_with_its_slot() {
    let children = [job("a-1", 1, None)];
    let replace = [
        Decision::Replace { job: "a-1".into() },
        Decision::Start {
            slot: minute(2),
            job: "a-2".into(),
        },
    ];
    let history = update(
        None,
        ConcurrencyPolicy::Replace,
        false,
        &children,
        &replace,
        SlotFacts::default(),
        2,
    )
    .expect("a replacement");
    assert_eq!(
        history.slots,
        [SlotEntry {
            slot: minute(1),
            fate: Fate::Replaced,
            job: "a-1".into()
        }]
    );
    assert_eq!(history.replaced, 1);
}

#[test]
fn the_history_is_bounded_and_reads_back() {
    let mut history: Option<SlotHistory> = None;
    for m in 0..200 {
        let children = [job(&format!("a-{m}"), m, Some((m, Finished::Failed)))];
        if let Some(next) = update(
            history.as_ref(),
            ConcurrencyPolicy::Allow,
            false,
            &children,
            &[],
            SlotFacts::default(),
            m,
        ) {
            history = Some(next);
        }
    }
    let history = history.expect("a history");
    assert_eq!(history.slots.len(), MAX_SLOT_ENTRIES);
    assert_eq!(history.failed, 200);
    let json = history.to_json();
    assert!(
        json.len() < MAX_SLOT_HISTORY_BYTES / 2,
        "{} bytes",
        json.len()
    );
    assert_eq!(SlotHistory::parse(&json), Some(history.clone()));
    // The summary first: what `kubectl describe` shows of it.
    assert!(
        json.starts_with("{\"lastFailure\":{\"job\":\"a-199\""),
        "{json}"
    );
}

#[test]
fn a_newer_releases_history_is_kept_and_release_zeros_reads() {
    use crate::reconcile::slot_history::{FORMAT, Parsed};
    let zero = r#"{"failed":0,"since":"2026-11-28T10:00:00Z","recordedTo":"2026-11-28T10:00:00Z"}"#;
    let Parsed::Read(read) = SlotHistory::parse_versioned(zero) else {
        panic!("release zero's history reads");
    };
    assert_eq!(read.format, FORMAT);
    assert!(read.to_json().ends_with(&format!(",\"v\":{FORMAT}}}")));
    // A newer format, whatever its shape, is left as it is.
    for newer in [
        r#"{"v":2,"since":"2026-11-28T10:00:00Z","recordedTo":"2026-11-28T10:00:00Z"}"#,
        r#"{"v":2,"entirely":"different"}"#,
    ] {
        assert_eq!(SlotHistory::parse_versioned(newer), Parsed::Newer(2));
        assert_eq!(SlotHistory::parse(newer), None);
    }
    assert_eq!(
        SlotHistory::parse_versioned(r#"{"v":"two"}"#),
        Parsed::Unreadable
    );
}

#[test]
fn a_tenants_edit_that_does_not_read_or_is_too_long_is_not_parsed() {
    assert_eq!(SlotHistory::parse("not json"), None);
    assert_eq!(SlotHistory::parse("{\"since\": 3}"), None);
    let long = format!(
        "{{\"since\":\"2026-11-28T10:00:00Z\",\"recordedTo\":\"2026-11-28T10:00:00Z\",\"pad\":\"{}\"}}",
        "x".repeat(MAX_SLOT_HISTORY_BYTES)
    );
    assert_eq!(SlotHistory::parse(&long), None);
    // Long texts and too many entries written by hand are cut.
    let entry = format!(
        "{{\"slot\":\"2026-11-28T10:00:00Z\",\"fate\":\"replaced\",\"job\":\"{}\"}}",
        "j".repeat(200)
    );
    let many = format!(
        "{{\"since\":\"2026-11-28T10:00:00Z\",\"recordedTo\":\"2026-11-28T10:00:00Z\",\"slots\":[{}]}}",
        vec![entry; 30].join(",")
    );
    let parsed = SlotHistory::parse(&many).expect("it reads");
    assert_eq!(parsed.slots.len(), MAX_SLOT_ENTRIES);
    assert_eq!(parsed.slots[0].job.len(), MAX_TEXT_BYTES);
}

#[test]
fn the_metrics_name_the_failure_reasons_as_the_core_does() {
    let names: Vec<&str> = FailureReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        names,
        crate::telemetry::cronjob_series::FAILURE_REASONS[1..]
    );
    assert_eq!(
        FailureReason::of("BackoffLimitExceeded"),
        FailureReason::BackoffLimitExceeded
    );
    assert_eq!(FailureReason::of("SomethingNew"), FailureReason::Other);
}
