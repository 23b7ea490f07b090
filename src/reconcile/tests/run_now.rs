//! The opt-in `shardcron.io/run-now` ([`RUN_NOW_ANNOTATION`]): a request
//! (its time) starts one Job, named from it, subject to
//! `concurrencyPolicy`, and is served once a Job was started at or after
//! its time (`lastScheduleTime`, which its own start moves there). No other
//! write marks it done, so a replay, a hand-off or a restart cannot start a
//! second Job for it.

use super::fixtures::*;
use crate::reconcile::*;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

const REQUESTED: &str = "2016-05-19T09:30:00Z";

/// Hourly, created at 08:00, last run at 09:00, with the request `value`.
fn requested(value: Option<&str>) -> CronJob {
    let mut cj = cron_job();
    cj.spec.schedule = "0 * * * *".into();
    cj.metadata.creation_timestamp = Some(Time(ts("2016-05-19T08:00:00Z")));
    cj.metadata.annotations = value.map(|v| map(&[(RUN_NOW_ANNOTATION, v)]));
    cj.status = Some(CronJobStatus {
        last_schedule_time: Some(Time(ts("2016-05-19T09:00:00Z"))),
        ..Default::default()
    });
    cj
}

fn plan(cj: &CronJob, children: &[k8s_openapi::api::batch::v1::Job], now: &str) -> Plan {
    let view = view(cj);
    let children = summaries(children);
    match reconcile(&input(&view, &children, ts(now)), &LiveAnswers::new()) {
        Step::Plan(plan) => *plan,
        Step::Lookup(lookups) => panic!("unexpected lookups {lookups:?}"),
    }
}

fn reasons(plan: &Plan) -> Vec<Reason> {
    plan.expected.events.iter().map(|e| e.reason).collect()
}

#[test]
fn a_request_starts_one_job_named_from_it_and_its_start_serves_it() {
    let cj = requested(Some(REQUESTED));
    let first = plan(&cj, &[], "2016-05-19T09:30:02Z");
    let create = first.create.clone().expect("the request's Job");
    assert_eq!(create.name, run_now_job_name("mycronjob", ts(REQUESTED)));
    assert_eq!(create.name, "mycronjob-ro7f3q0");
    assert_eq!(create.scheduled_time, ts(REQUESTED));
    let job = create.job.expect("the Job object");
    let annotations = job.metadata.annotations.expect("annotations");
    assert_eq!(annotations[RUN_NOW_ANNOTATION], REQUESTED);
    assert_eq!(annotations[SCHEDULED_TIMESTAMP_ANNOTATION], REQUESTED);
    assert_eq!(
        first.expected.status.last_schedule_time.get(),
        Some(ts(REQUESTED))
    );
    assert_eq!(first.expected.status.active.len(), 1);
    assert_eq!(reasons(&first), [Reason::SuccessfulCreate]);
    // The schedule's own wake-up is unchanged.
    assert_eq!(
        first.expected.requeue,
        Requeue::At(ts("2016-05-19T10:00:00Z"))
    );
    // Its Job since finished and deleted by the history limit, the
    // request replayed on another replica: served, nothing more.
    let mut served = cj;
    if let Some(status) = served.status.as_mut() {
        status.last_schedule_time = Some(Time(ts(REQUESTED)));
    }
    let replay = plan(&served, &[], "2016-05-19T09:30:09Z");
    assert!(replay.create.is_none());
    assert!(
        !replay
            .decisions
            .iter()
            .any(|d| matches!(d, Decision::RunNow { .. }))
    );
    // Without the annotation: nothing due at 09:30.
    assert!(
        plan(&requested(None), &[], "2016-05-19T09:30:02Z")
            .create
            .is_none()
    );
}

/// A request written by hand with a fraction of a second is its whole
/// second: the start the API records (to the second) serves it.
#[test]
fn a_request_with_a_fraction_of_a_second_is_served_by_its_start() {
    let cj = requested(Some("2016-05-19T09:30:00.75Z"));
    let first = plan(&cj, &[], "2016-05-19T09:30:02Z");
    let create = first.create.expect("the request's Job");
    assert_eq!(create.scheduled_time, ts(REQUESTED));
    let mut served = cj;
    if let Some(status) = served.status.as_mut() {
        status.last_schedule_time = Some(Time(ts(REQUESTED)));
    }
    assert!(plan(&served, &[], "2016-05-19T09:30:09Z").create.is_none());
}

#[test]
fn a_due_slot_goes_first_and_serves_a_request_made_before_it() {
    // Made at 09:59, seen at 10:00:05 (the controller was away): the 10:00
    // slot's Job, started after the request, serves it.
    let early = plan(
        &requested(Some("2016-05-19T09:59:00Z")),
        &[],
        "2016-05-19T10:00:05Z",
    );
    assert_eq!(
        early.create.as_ref().map(|c| c.name.clone()),
        Some(job_name("mycronjob", ts("2016-05-19T10:00:00Z")))
    );
    assert_eq!(
        early.expected.requeue,
        Requeue::At(ts("2016-05-19T11:00:00Z"))
    );
    // Made at 10:00:03, after the slot: the slot's Job first, then the
    // request's, once the minimum interval after the slot's start is over.
    let cj = requested(Some("2016-05-19T10:00:03Z"));
    let slot = plan(&cj, &[], "2016-05-19T10:00:05Z");
    let slot_job = slot.create.clone().expect("the slot's Job");
    assert_eq!(slot_job.scheduled_time, ts("2016-05-19T10:00:00Z"));
    assert_eq!(
        slot.expected.requeue,
        Requeue::At(ts("2016-05-19T10:00:05Z"))
    );
    let running = job_from_template(&cj, ts("2016-05-19T10:00:00Z"), "uid-slot");
    let mut cj = cj;
    cj.status = Some(CronJobStatus {
        last_schedule_time: Some(Time(ts("2016-05-19T10:00:00Z"))),
        active: Some(vec![reference_of(&running)]),
        ..Default::default()
    });
    let next = plan(&cj, std::slice::from_ref(&running), "2016-05-19T10:00:05Z");
    assert!(next.create.is_none());
    assert_eq!(
        next.expected.requeue,
        Requeue::At(ts("2016-05-19T10:00:10Z"))
    );
    let next = plan(&cj, &[running], "2016-05-19T10:00:10Z");
    assert_eq!(
        next.create.map(|c| c.scheduled_time),
        Some(ts("2016-05-19T10:00:03Z"))
    );
}

#[test]
fn forbid_makes_it_wait_for_the_running_job_and_replace_replaces_it() {
    let mut cj = requested(Some(REQUESTED));
    cj.spec.concurrency_policy = Some("Forbid".into());
    let running = job_from_template(&cj, ts("2016-05-19T09:00:00Z"), "uid-running");
    if let Some(status) = cj.status.as_mut() {
        status.active = Some(vec![reference_of(&running)]);
    }
    let forbid = plan(&cj, std::slice::from_ref(&running), "2016-05-19T09:30:02Z");
    assert!(forbid.create.is_none());
    assert_eq!(reasons(&forbid), [Reason::JobAlreadyActive]);
    assert!(
        forbid
            .decisions
            .iter()
            .any(|d| matches!(d, Decision::RunNowWaits { .. }))
    );
    // No busy wait: the running Job's end brings the next decision.
    assert_eq!(
        forbid.expected.requeue,
        Requeue::At(ts("2016-05-19T10:00:00Z"))
    );
    cj.spec.concurrency_policy = Some("Replace".into());
    let view = view(&cj);
    let children = summaries(std::slice::from_ref(&running));
    let mut live = LiveAnswers::new();
    let name = running.metadata.name.clone().unwrap_or_default();
    live.set_job(
        "snazzycats",
        &name,
        JobLookup::Found(LiveJob::from(&running)),
    );
    let Step::Plan(replace) =
        reconcile(&input(&view, &children, ts("2016-05-19T09:30:02Z")), &live)
    else {
        panic!("a plan");
    };
    assert_eq!(replace.deletes.len(), 1);
    assert_eq!(
        replace.create.map(|c| c.scheduled_time),
        Some(ts(REQUESTED))
    );
}

#[test]
fn it_runs_while_suspended() {
    let mut cj = requested(Some(REQUESTED));
    cj.spec.suspend = Some(true);
    let suspended = plan(&cj, &[], "2016-05-19T09:30:02Z");
    assert!(suspended.create.is_some());
    assert_eq!(suspended.expected.requeue, Requeue::Never);
}

#[test]
fn a_lapsed_an_older_or_a_far_ahead_request_does_not_run() {
    let not_run = |value: &str, now: &str| {
        let plan = plan(&requested(Some(value)), &[], now);
        assert!(plan.create.is_none(), "{value} at {now}");
        plan
    };
    // Five minutes without a start: lapsed (a manifest re-applied later).
    let lapsed = not_run(REQUESTED, "2016-05-19T09:35:01Z");
    assert!(
        lapsed
            .decisions
            .iter()
            .any(|d| matches!(d, Decision::RunNowIgnored { why, .. } if why.contains("lapsed")))
    );
    assert!(reasons(&lapsed).is_empty());
    // Older than the CronJob.
    not_run("2016-05-19T07:59:59Z", "2016-05-19T08:00:30Z");
    // Two minutes ahead of the controller's clock: a Warning.
    let ahead = not_run("2016-05-19T09:32:02Z", "2016-05-19T09:30:02Z");
    assert_eq!(reasons(&ahead), [Reason::InvalidOption]);
    // Thirty seconds ahead: at its time.
    let soon = not_run("2016-05-19T09:30:32Z", "2016-05-19T09:30:02Z");
    assert_eq!(
        soon.expected.requeue,
        Requeue::At(ts("2016-05-19T09:30:32Z"))
    );
    // Not an instant: a Warning, and upstream's behaviour.
    let bad = not_run("now", "2016-05-19T09:30:02Z");
    assert_eq!(reasons(&bad), [Reason::InvalidOption]);
}

#[test]
fn job_names_stay_apart_from_slots_and_within_63_characters() {
    let longest = "x".repeat(52);
    let name = run_now_job_name(&longest, Timestamp::MAX);
    assert!(name.len() <= 63, "{name}");
    assert!(name.starts_with(&format!("{longest}-r")));
    assert_eq!(run_now_job_name("a", Timestamp::UNIX_EPOCH), "a-r0");
}

#[test]
fn under_a_spread_a_request_after_a_slot_waits_for_its_delayed_start() {
    // snazzycats/mycronjob's offset in a 10-minute window: 517 s, so the
    // 10:00 slot starts at 10:08:37. A request at 10:02 must not record
    // 10:02 before that slot starts, or the slot would be skipped.
    let mut cj = requested(Some("2016-05-19T10:02:00Z"));
    if let Some(annotations) = cj.metadata.annotations.as_mut() {
        annotations.insert(SPREAD_ANNOTATION.into(), "10m".into());
    }
    let early = plan(&cj, &[], "2016-05-19T10:02:05Z");
    assert!(early.create.is_none());
    assert!(
        early
            .decisions
            .iter()
            .any(|d| matches!(d, Decision::RunNowAfterSlot { .. }))
    );
    assert_eq!(
        early.expected.requeue,
        Requeue::At(ts("2016-05-19T10:08:37Z"))
    );
    // At the slot's start: the slot, then at once the request.
    let slot = plan(&cj, &[], "2016-05-19T10:08:37Z");
    assert_eq!(
        slot.create.map(|c| c.scheduled_time),
        Some(ts("2016-05-19T10:00:00Z"))
    );
    assert_eq!(
        slot.expected.requeue,
        Requeue::At(ts("2016-05-19T10:08:37Z"))
    );
    if let Some(status) = cj.status.as_mut() {
        status.last_schedule_time = Some(Time(ts("2016-05-19T10:00:00Z")));
    }
    let request = plan(&cj, &[], "2016-05-19T10:08:38Z");
    assert_eq!(
        request.create.map(|c| c.scheduled_time),
        Some(ts("2016-05-19T10:02:00Z"))
    );
}

/// A tenant that rewrites the request every second gets one Job per
/// [`RUN_NOW_MIN_INTERVAL_SECONDS`]: a request within that time of the
/// last start waits for its end (woken then), and runs then.
#[test]
fn a_request_soon_after_the_last_start_waits_for_the_minimum_interval() {
    let mut cj = requested(Some("2016-05-19T09:30:05Z"));
    if let Some(status) = cj.status.as_mut() {
        // The previous request's Job started at 09:30:00.
        status.last_schedule_time = Some(Time(ts(REQUESTED)));
    }
    let early = plan(&cj, &[], "2016-05-19T09:30:06Z");
    assert!(early.create.is_none());
    let earliest = ts(REQUESTED) + jiff::SignedDuration::from_secs(RUN_NOW_MIN_INTERVAL_SECONDS);
    assert!(
        early.decisions.contains(&Decision::RunNowTooSoon {
            requested: ts("2016-05-19T09:30:05Z"),
            earliest
        }),
        "{:?}",
        early.decisions
    );
    assert_eq!(early.expected.requeue, Requeue::At(earliest));
    let later = plan(&cj, &[], "2016-05-19T09:30:10Z");
    let create = later
        .create
        .expect("the request's Job, once the interval is over");
    assert_eq!(create.scheduled_time, ts("2016-05-19T09:30:05Z"));
}
