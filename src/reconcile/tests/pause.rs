//! The opt-in `shardcron.io/pause-after-failures` ([`streak_update`]):
//! the streak of failed Jobs kept on the CronJob, reset by a success or a
//! pause, and the pause once it reaches N.

use super::fixtures::*;
use crate::reconcile::*;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const NOW: &str = "2016-05-19T10:10:00Z";

/// Every minute, created at 08:00, with these annotations.
fn cronjob(annotations: &[(&str, &str)], last_successful: Option<&str>) -> CronJob {
    let mut cj = cron_job();
    cj.spec.schedule = "* * * * *".into();
    cj.metadata.creation_timestamp = Some(Time(ts("2016-05-19T08:00:00Z")));
    cj.metadata.annotations = Some(map(annotations));
    cj.status = Some(CronJobStatus {
        last_schedule_time: Some(Time(ts("2016-05-19T10:09:00Z"))),
        last_successful_time: last_successful.map(|t| Time(ts(t))),
        ..Default::default()
    });
    cj
}

/// A finished child: `failed` or succeeded at `at`.
fn finished(name: &str, failed: bool, at: &str) -> JobSummary {
    JobSummary {
        name: name.into(),
        uid: format!("uid-{name}"),
        start_time: Some(ts("2016-05-19T10:00:00Z")),
        completion_time: (!failed).then(|| ts(at)),
        finished: Some(if failed {
            Finished::Failed
        } else {
            Finished::Complete
        }),
        failed_at: failed.then(|| ts(at)),
        failure_reason: None,
        succeeded: !failed,
        scheduled: None,
        deleting: false,
        held: false,
    }
}

fn failed(name: &str, at: &str) -> JobSummary {
    finished(name, true, at)
}

fn jobs(entries: &[(&str, &str)]) -> Vec<FailedJob> {
    entries
        .iter()
        .map(|(name, at)| FailedJob {
            name: (*name).into(),
            failed_at: ts(at),
        })
        .collect()
}

fn update(cj: &CronJob, children: &[JobSummary]) -> Option<StreakUpdate> {
    streak_update(&view(cj), children, ts(NOW))
}

const N3: (&str, &str) = (PAUSE_AFTER_FAILURES_ANNOTATION, "3");

#[test]
fn the_streak_grows_by_each_failure_and_is_written_only_when_it_changes() {
    struct Case {
        name: &'static str,
        annotations: Vec<(&'static str, &'static str)>,
        last_successful: Option<&'static str>,
        children: Vec<JobSummary>,
        expect: Option<Vec<(&'static str, &'static str)>>,
    }
    let cases = [
        Case {
            name: "no opt-in: nothing, ever",
            annotations: vec![],
            last_successful: None,
            children: vec![failed("a", "2016-05-19T10:01:05Z")],
            expect: None,
        },
        Case {
            name: "a first failure",
            annotations: vec![N3],
            last_successful: None,
            children: vec![failed("a", "2016-05-19T10:01:05Z")],
            expect: Some(vec![("a", "2016-05-19T10:01:05Z")]),
        },
        Case {
            name: "already counted: no write",
            annotations: vec![N3, (FAILED_JOBS_ANNOTATION, "a@2016-05-19T10:01:05Z")],
            last_successful: None,
            children: vec![failed("a", "2016-05-19T10:01:05Z")],
            expect: None,
        },
        Case {
            name: "the counted Job deleted since (history limit): still counted",
            annotations: vec![N3, (FAILED_JOBS_ANNOTATION, "a@2016-05-19T10:01:05Z")],
            last_successful: None,
            children: vec![failed("b", "2016-05-19T10:02:05Z")],
            expect: Some(vec![
                ("a", "2016-05-19T10:01:05Z"),
                ("b", "2016-05-19T10:02:05Z"),
            ]),
        },
        Case {
            name: "ordered by failure time, not by the order seen",
            annotations: vec![N3, (FAILED_JOBS_ANNOTATION, "b@2016-05-19T10:02:05Z")],
            last_successful: None,
            children: vec![failed("a", "2016-05-19T10:01:05Z")],
            expect: Some(vec![
                ("a", "2016-05-19T10:01:05Z"),
                ("b", "2016-05-19T10:02:05Z"),
            ]),
        },
        Case {
            name: "a success after them ends the streak (a child not yet in status)",
            annotations: vec![N3, (FAILED_JOBS_ANNOTATION, "a@2016-05-19T10:01:05Z")],
            last_successful: None,
            children: vec![finished("b", false, "2016-05-19T10:02:05Z")],
            expect: Some(vec![]),
        },
        Case {
            name: "a success in status.lastSuccessfulTime ends it too",
            annotations: vec![N3, (FAILED_JOBS_ANNOTATION, "a@2016-05-19T10:01:05Z")],
            last_successful: Some("2016-05-19T10:02:05Z"),
            children: vec![],
            expect: Some(vec![]),
        },
        Case {
            name: "a failure before the last success is not in the streak",
            annotations: vec![N3],
            last_successful: Some("2016-05-19T10:02:05Z"),
            children: vec![
                failed("a", "2016-05-19T10:01:05Z"),
                failed("c", "2016-05-19T10:03:05Z"),
            ],
            expect: Some(vec![("c", "2016-05-19T10:03:05Z")]),
        },
        Case {
            name: "failures before the last pause never count again (resumed)",
            annotations: vec![
                N3,
                (
                    PAUSED_ANNOTATION,
                    "2016-05-19T10:04:00Z after 3 consecutive failed Jobs: a, b, c",
                ),
            ],
            last_successful: None,
            children: vec![failed("c", "2016-05-19T10:03:05Z")],
            expect: None,
        },
        Case {
            name: "the opt-in removed: its streak is removed",
            annotations: vec![(FAILED_JOBS_ANNOTATION, "a@2016-05-19T10:01:05Z")],
            last_successful: None,
            children: vec![failed("b", "2016-05-19T10:02:05Z")],
            expect: Some(vec![]),
        },
        Case {
            name: "an unreadable entry is dropped, the rest kept",
            annotations: vec![
                N3,
                (
                    FAILED_JOBS_ANNOTATION,
                    "a@yesterday, @2016-05-19T10:00:00Z, b",
                ),
            ],
            last_successful: None,
            children: vec![failed("c", "2016-05-19T10:03:05Z")],
            expect: Some(vec![("c", "2016-05-19T10:03:05Z")]),
        },
    ];
    for case in cases {
        let cj = cronjob(&case.annotations, case.last_successful);
        let got = update(&cj, &case.children);
        let expect = case.expect.map(|entries| StreakUpdate {
            failed_jobs: jobs(&entries),
            pause: None,
        });
        assert_eq!(got, expect, "{}", case.name);
    }
}

#[test]
fn the_nth_failure_in_a_row_pauses_and_records_the_jobs() {
    let cj = cronjob(
        &[
            N3,
            (
                FAILED_JOBS_ANNOTATION,
                "a@2016-05-19T10:01:05Z, b@2016-05-19T10:02:05Z",
            ),
        ],
        Some("2016-05-19T09:00:30Z"),
    );
    let pausing = update(&cj, &[failed("c", "2016-05-19T10:03:05Z")]).expect("a pause");
    let pause = pausing.pause.clone().expect("a pause");
    assert_eq!(pause.jobs, ["a", "b", "c"]);
    assert_eq!(pause.at, ts(NOW));
    assert!(pausing.failed_jobs.is_empty());
    assert_eq!(
        pausing.patch(),
        CronJobPatch {
            annotations: vec![
                (FAILED_JOBS_ANNOTATION, None),
                (
                    PAUSED_ANNOTATION,
                    Some("2016-05-19T10:10:00Z after 3 consecutive failed Jobs: a, b, c".into())
                ),
            ],
            suspend: true,
        }
    );
    let event = pause.event();
    assert_eq!(event.reason, Reason::PausedAfterFailures);
    assert_eq!(event.event_type, EventType::Warning);
    assert_eq!(
        event.message,
        "Suspended after 3 consecutive failed Jobs (a, b, c); set spec.suspend to false to resume"
    );

    // The record read back: the pause's time is the new floor.
    let paused = cronjob(
        &[N3, (PAUSED_ANNOTATION, &pause.record())],
        Some("2016-05-19T09:00:30Z"),
    );
    assert_eq!(
        view(&paused)
            .options
            .pause
            .as_ref()
            .and_then(|p| p.paused_at),
        Some(ts(NOW))
    );
    assert_eq!(
        update(&paused, &[failed("c", "2016-05-19T10:03:05Z")]),
        None
    );
}

#[test]
fn a_pause_is_never_timed_before_a_failure_it_counts_and_names_only_the_last_n() {
    // A streak longer than N (written by hand): the last N cause the pause.
    // The Job controller's clock ahead of ours: the pause takes its time.
    let cj = cronjob(
        &[
            (PAUSE_AFTER_FAILURES_ANNOTATION, "2"),
            (
                FAILED_JOBS_ANNOTATION,
                "a@2016-05-19T10:01:05Z, b@2016-05-19T10:02:05Z, c@2016-05-19T10:03:05Z",
            ),
        ],
        None,
    );
    let pause = update(&cj, &[failed("d", "2016-05-19T10:10:02Z")])
        .and_then(|u| u.pause)
        .expect("a pause");
    assert_eq!(pause.jobs, ["c", "d"]);
    assert_eq!(pause.at, ts("2016-05-19T10:10:02Z"));
}

#[test]
fn a_count_that_is_not_one_to_a_hundred_is_an_invalid_option_and_pauses_nothing() {
    for value in ["0", "101", "three", "-1", ""] {
        let cj = cronjob(&[(PAUSE_AFTER_FAILURES_ANNOTATION, value)], None);
        let view = view(&cj);
        assert_eq!(view.options.pause_after_failures(), None, "{value:?}");
        let invalid = view.options.invalid.as_ref().expect("invalid");
        assert_eq!(invalid.annotation, PAUSE_AFTER_FAILURES_ANNOTATION);
        assert_eq!(
            update(&cj, &[failed("a", "2016-05-19T10:01:05Z")]),
            None,
            "{value:?}"
        );
    }
    let one = cronjob(&[(PAUSE_AFTER_FAILURES_ANNOTATION, "1")], None);
    assert_eq!(view(&one).options.pause_after_failures(), Some(1));
}

fn plan(cj: &CronJob, children: &[JobSummary], now: Timestamp) -> Plan {
    let view = view(cj);
    match reconcile(&input(&view, children, now), &LiveAnswers::new()) {
        Step::Plan(plan) => *plan,
        Step::Lookup(lookups) => panic!("unexpected lookups {lookups:?}"),
    }
}

#[test]
fn a_pausing_decision_starts_nothing_even_with_a_slot_due() {
    let cj = cronjob(
        &[
            N3,
            (
                FAILED_JOBS_ANNOTATION,
                "a@2016-05-19T10:07:05Z, b@2016-05-19T10:08:05Z",
            ),
        ],
        None,
    );
    // 10:10 is due; the third failure is seen in the same decision.
    let paused = plan(&cj, &[failed("c", "2016-05-19T10:09:05Z")], ts(NOW));
    assert!(paused.create.is_none());
    assert_eq!(
        paused.decisions.first(),
        Some(&Decision::PausedAfterFailures {
            jobs: vec!["a".into(), "b".into(), "c".into()]
        })
    );
    assert_eq!(slot_outcome(&paused.decisions), "paused-after-failures");
    assert_eq!(paused.expected.requeue, Requeue::Never);
    assert!(paused.streak.as_ref().is_some_and(|s| s.pause.is_some()));
    assert!(!paused.is_noop());

    // Two failures: the slot starts, and the streak is written with it.
    let counting = plan(&cj, &[], ts(NOW));
    assert!(counting.create.is_some());
    assert!(counting.streak.is_none());
    let grows = cronjob(&[N3], None);
    let grown = plan(&grows, &[failed("c", "2016-05-19T10:09:05Z")], ts(NOW));
    assert!(grown.create.is_some());
    assert_eq!(
        grown.streak.map(|s| s.failed_jobs),
        Some(jobs(&[("c", "2016-05-19T10:09:05Z")]))
    );
}

#[test]
fn without_the_annotation_a_plan_carries_no_streak() {
    let cj = cron_job();
    let children = [failed("a", "2016-05-19T10:01:05Z")];
    let plain = plan(&cj, &children, ts(NOW));
    assert!(plain.streak.is_none());
    assert!(
        !plain
            .decisions
            .iter()
            .any(|d| matches!(d, Decision::PausedAfterFailures { .. }))
    );
}
