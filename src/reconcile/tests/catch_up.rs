//! The opt-in `shardcron.io/catch-up-window` ([`CATCH_UP_ANNOTATION`]):
//! after downtime, every missed slot within the window runs, oldest first,
//! one decision each, where upstream runs only the most recent.

use super::fixtures::*;
use crate::reconcile::*;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Every minute, created long ago, last run at `last`, with the window
/// `window`, if any.
fn every_minute(window: Option<&str>, last: &str) -> CronJob {
    let mut cj = cron_job();
    cj.spec.schedule = "*/1 * * * *".into();
    cj.metadata.creation_timestamp = Some(Time(ts("2016-05-19T09:00:00Z")));
    cj.metadata.annotations = window.map(|w| map(&[(CATCH_UP_ANNOTATION, w)]));
    cj.status = Some(CronJobStatus {
        last_schedule_time: Some(Time(ts(last))),
        ..Default::default()
    });
    cj
}

fn plan(cj: &CronJob, children: &[JobSummary], now: &str) -> Plan {
    let view = view(cj);
    match reconcile(&input(&view, children, ts(now)), &LiveAnswers::new()) {
        Step::Plan(plan) => *plan,
        Step::Lookup(lookups) => panic!("unexpected lookups {lookups:?}"),
    }
}

/// The slot each decision starts, and its wake-up, from `last` on while
/// the controller stays at `now`.
fn run_to_the_end(window: Option<&str>, last: &str, now: &str) -> Vec<(String, Requeue)> {
    let mut last = last.to_owned();
    let mut out = Vec::new();
    for _ in 0..20 {
        let plan = plan(&every_minute(window, &last), &[], now);
        let Some(create) = plan.create else {
            return out;
        };
        last = create.scheduled_time.to_string();
        out.push((last.clone(), plan.expected.requeue));
    }
    panic!("still catching up after 20 decisions: {out:?}");
}

#[test]
fn every_missed_slot_within_the_window_runs_oldest_first_then_upstreams_wake_up() {
    // Down from 10:00:30 to 10:05:30: 10:01 to 10:05 were missed.
    let now = "2016-05-19T10:05:30Z";
    let runs = run_to_the_end(Some("10m"), "2016-05-19T10:00:00Z", now);
    let slots: Vec<&str> = runs.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(
        slots,
        [
            "2016-05-19T10:01:00Z",
            "2016-05-19T10:02:00Z",
            "2016-05-19T10:03:00Z",
            "2016-05-19T10:04:00Z",
            "2016-05-19T10:05:00Z",
        ]
    );
    // Each wakes up at the next missed slot (past: at once), the last at
    // the next slot ahead.
    let wakes: Vec<Requeue> = runs.into_iter().map(|(_, r)| r).collect();
    assert_eq!(wakes[0], Requeue::At(ts("2016-05-19T10:02:00Z")));
    assert_eq!(wakes[4], Requeue::At(ts("2016-05-19T10:06:00Z")));
    // Upstream: the most recent only.
    let upstream = run_to_the_end(None, "2016-05-19T10:00:00Z", now);
    assert_eq!(upstream.len(), 1);
    assert_eq!(upstream[0].0, "2016-05-19T10:05:00Z");
}

#[test]
fn slots_older_than_the_window_or_the_deadline_do_not_run() {
    let now = "2016-05-19T10:05:30Z";
    let first = |cj: &CronJob| plan(cj, &[], now).create.map(|c| c.scheduled_time);
    // A 3-minute window reaches back to 10:02:30.
    assert_eq!(
        first(&every_minute(Some("3m"), "2016-05-19T10:00:00Z")),
        Some(ts("2016-05-19T10:03:00Z"))
    );
    // A slot exactly at the window's start is in it.
    assert_eq!(
        first(&every_minute(Some("150s"), "2016-05-19T10:00:00Z")),
        Some(ts("2016-05-19T10:03:00Z"))
    );
    // The starting deadline (60 s) is shorter than the window: it wins.
    let mut deadline = every_minute(Some("10m"), "2016-05-19T10:00:00Z");
    deadline.spec.starting_deadline_seconds = Some(60);
    assert_eq!(first(&deadline), Some(ts("2016-05-19T10:05:00Z")));
    // Nothing missed: nothing to do, and upstream's wake-up.
    let caught_up = plan(&every_minute(Some("10m"), "2016-05-19T10:05:00Z"), &[], now);
    assert!(caught_up.create.is_none());
    assert_eq!(
        caught_up.expected.requeue,
        Requeue::At(ts("2016-05-19T10:06:00Z"))
    );
}

#[test]
fn under_forbid_the_next_missed_slot_waits_for_the_running_job() {
    let mut cj = every_minute(Some("10m"), "2016-05-19T10:01:00Z");
    cj.spec.concurrency_policy = Some("Forbid".into());
    let running = job_from_template(&cj, ts("2016-05-19T10:01:00Z"), "uid-running");
    if let Some(status) = cj.status.as_mut() {
        status.active = Some(vec![reference_of(&running)]);
    }
    let plan = plan(&cj, &summaries(&[running]), "2016-05-19T10:05:30Z");
    assert!(plan.create.is_none());
    assert!(
        plan.decisions
            .iter()
            .any(|d| matches!(d, Decision::ForbidWhileActive { slot, .. } if *slot == ts("2016-05-19T10:02:00Z")))
    );
    // No wake-up at once (that would spin): upstream's, at the next slot.
    assert_eq!(
        plan.expected.requeue,
        Requeue::At(ts("2016-05-19T10:06:00Z"))
    );
}
