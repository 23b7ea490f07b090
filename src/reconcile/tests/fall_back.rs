//! The opt-in `shardcron.io/fall-back: once` ([`FALL_BACK_ANNOTATION`]): on
//! Europe/Berlin's fall-back of 2023-10-29 (03:00 CEST back to 02:00 CET,
//! at 01:00 UTC), 02:30 happens at 00:30Z and again at 01:30Z. Upstream
//! runs a daily 02:30 CronJob at both (kubernetes#121594); with the
//! annotation it runs at the first only, and the next day as usual.

use super::fixtures::*;
use crate::reconcile::*;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Daily at 02:30 Berlin time, created the day before, last run at
/// `last`, with the annotation set to `fall_back`, if any.
fn berlin(fall_back: Option<&str>, last: &str) -> CronJob {
    let mut cj = cron_job();
    cj.spec.schedule = "30 2 * * *".into();
    cj.spec.time_zone = Some("Europe/Berlin".into());
    cj.metadata.creation_timestamp = Some(Time(ts("2023-10-28T00:00:00Z")));
    cj.metadata.annotations = fall_back.map(|v| map(&[(FALL_BACK_ANNOTATION, v)]));
    cj.status = Some(k8s_openapi::api::batch::v1::CronJobStatus {
        last_schedule_time: Some(Time(ts(last))),
        ..Default::default()
    });
    cj
}

fn plan(cj: &CronJob, now: &str) -> Plan {
    let view = view(cj);
    match reconcile(&input(&view, &[], ts(now)), &LiveAnswers::new()) {
        Step::Plan(plan) => *plan,
        Step::Lookup(lookups) => panic!("unexpected lookups {lookups:?}"),
    }
}

fn created_slot(cj: &CronJob, now: &str) -> Option<jiff::Timestamp> {
    plan(cj, now).create.map(|create| create.scheduled_time)
}

#[test]
fn upstream_runs_the_repeated_wall_time_twice_once_runs_it_once() {
    let first = "2023-10-29T00:30:00Z"; // 02:30 CEST
    let repeat = "2023-10-29T01:30:00Z"; // 02:30 CET
    for (fall_back, repeat_runs) in [(None, true), (Some("twice"), true), (Some("once"), false)] {
        // The first 02:30 runs in every case.
        let before = berlin(fall_back, "2023-10-28T00:30:00Z");
        assert_eq!(
            created_slot(&before, "2023-10-29T00:30:01Z"),
            Some(ts(first)),
            "{fall_back:?}"
        );
        let after_first = berlin(fall_back, first);
        assert_eq!(
            created_slot(&after_first, "2023-10-29T01:30:01Z"),
            repeat_runs.then(|| ts(repeat)),
            "{fall_back:?}"
        );
        // The next day's 02:30 (CET) runs in every case.
        let last = if repeat_runs { repeat } else { first };
        assert_eq!(
            created_slot(&berlin(fall_back, last), "2023-10-30T01:30:01Z"),
            Some(ts("2023-10-30T01:30:00Z")),
            "{fall_back:?}"
        );
    }
}

#[test]
fn once_wakes_up_past_the_repeat() {
    let plan = plan(
        &berlin(Some("once"), "2023-10-29T00:30:00Z"),
        "2023-10-29T00:30:02Z",
    );
    assert_eq!(
        plan.expected.requeue,
        Requeue::At(ts("2023-10-30T01:30:00Z"))
    );
    let upstream = self::plan(
        &berlin(None, "2023-10-29T00:30:00Z"),
        "2023-10-29T00:30:02Z",
    );
    assert_eq!(
        upstream.expected.requeue,
        Requeue::At(ts("2023-10-29T01:30:00Z"))
    );
}

#[test]
fn a_bad_value_is_a_warning_and_upstreams_behaviour() {
    let cj = berlin(Some("skip"), "2023-10-29T00:30:00Z");
    let plan = plan(&cj, "2023-10-29T01:30:01Z");
    assert_eq!(
        plan.create.map(|c| c.scheduled_time),
        Some(ts("2023-10-29T01:30:00Z"))
    );
    let warning = plan
        .expected
        .events
        .iter()
        .find(|e| e.reason == Reason::InvalidOption)
        .expect("an InvalidOption event");
    assert_eq!(warning.event_type, EventType::Warning);
    assert_eq!(
        warning.message,
        "annotation shardcron.io/fall-back: \"skip\" is not one of: once, twice; upstream's behaviour applies"
    );
}
