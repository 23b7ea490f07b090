//! A status write lost after a create (the replica fenced or stopped
//! between the two, the write failed): the slot is known from its Job's
//! scheduled-timestamp annotation or from the actor's memory, and is
//! recorded instead of being started again once the Job is gone.

use super::fixtures::*;
use crate::reconcile::*;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Hourly, no history kept, last recorded run 09:00.
fn hourly_without_history() -> CronJob {
    let mut cj = cron_job();
    cj.spec.schedule = "0 * * * *".into();
    cj.spec.successful_jobs_history_limit = Some(0);
    cj.spec.failed_jobs_history_limit = Some(0);
    cj.metadata.creation_timestamp = Some(Time(just_before_the_prior_hour()));
    cj.status
        .get_or_insert_with(Default::default)
        .last_schedule_time = Some(Time(ts("2016-05-19T09:00:00Z")));
    cj
}

const TEN: &str = "2016-05-19T10:00:00Z";
const TEN_OH_ONE: &str = "2016-05-19T10:01:00Z";

fn decide(cj: &CronJob, children: &[JobSummary], known_slot: Option<Timestamp>, now: &str) -> Plan {
    let view = view(cj);
    let input = Input {
        known_slot,
        ..input(&view, children, ts(now))
    };
    match reconcile(&input, &LiveAnswers::new()) {
        Step::Plan(plan) => *plan,
        Step::Lookup(lookups) => panic!("unexpected lookups {lookups:?}"),
    }
}

fn recorded(plan: &Plan) -> Option<&Decision> {
    plan.decisions
        .iter()
        .find(|d| matches!(d, Decision::RecordedKnownSlot { .. }))
}

#[test]
fn a_finished_job_of_an_unrecorded_slot_is_recorded_and_its_slot_not_started_again() {
    let cj = hourly_without_history();
    let mut job = job_from_template(&cj, ts(TEN), "uid-1000");
    finish(&mut job, "Complete", Some(ts("2016-05-19T10:00:30Z")));
    let plan = decide(&cj, &summaries(&[job]), None, TEN_OH_ONE);

    // Upstream deletes the Job (history limit 0) and, lastScheduleTime
    // being 09:00, creates the 10:00 Job again: the same work twice.
    assert!(plan.create.is_none(), "{:?}", plan.decisions);
    assert_eq!(plan.deletes.len(), 1);
    assert_eq!(
        recorded(&plan),
        Some(&Decision::RecordedKnownSlot { slot: ts(TEN) })
    );
    let status = plan.expected.status_update().expect("a status write");
    assert_eq!(status.last_schedule_time, Some(Time(ts(TEN))));
    assert_eq!(
        status.last_successful_time,
        Some(Time(ts("2016-05-19T10:00:30Z")))
    );
    assert_eq!(
        plan.expected.requeue,
        Requeue::At(ts("2016-05-19T11:00:00Z"))
    );
}

#[test]
fn a_slot_known_only_from_memory_is_recorded_once_its_job_is_gone() {
    let cj = hourly_without_history();
    let plan = decide(&cj, &[], Some(ts(TEN)), TEN_OH_ONE);
    assert!(plan.create.is_none(), "{:?}", plan.decisions);
    assert!(
        plan.expected.events.is_empty(),
        "{:?}",
        plan.expected.events
    );
    let status = plan.expected.status_update().expect("a status write");
    assert_eq!(status.last_schedule_time, Some(Time(ts(TEN))));
    assert_eq!(status.active, None);
    assert_eq!(
        plan.decisions.last(),
        Some(&Decision::WakeAt(ts("2016-05-19T11:00:00Z")))
    );
}

#[test]
fn a_running_job_of_an_unrecorded_slot_takes_upstreams_path() {
    // Upstream GETs the live CronJob first: a stale read (the status write
    // landed, the watch is behind) and a lost write look the same until
    // then, and the create's AlreadyExists records the Job as active.
    let cj = hourly_without_history();
    let job = job_from_template(&cj, ts(TEN), "uid-1000");
    let view = view(&cj);
    let children = summaries(&[job]);
    let input = Input {
        known_slot: Some(ts(TEN)),
        ..input(&view, &children, ts(TEN_OH_ONE))
    };
    match reconcile(&input, &LiveAnswers::new()) {
        Step::Lookup(lookups) => assert!(
            matches!(lookups.as_slice(), [Lookup::CronJob { .. }]),
            "{lookups:?}"
        ),
        Step::Plan(plan) => panic!("a plan before the live GET: {:?}", plan.decisions),
    }
}

#[test]
fn a_known_slot_already_recorded_or_later_than_now_changes_nothing() {
    let cj = hourly_without_history();
    let half_past = "2016-05-19T09:30:00Z";
    for known in [
        ts("2016-05-19T09:00:00Z"),
        ts("2016-05-19T08:00:00Z"),
        ts(TEN),
    ] {
        let plan = decide(&cj, &[], Some(known), half_past);
        assert!(plan.is_noop(), "{known}: {:?}", plan.decisions);
    }
    // A hand-made Job claiming a future slot does not make the CronJob skip
    // the slots before it.
    let mut future = job_from_template(&cj, ts("2016-05-19T12:00:00Z"), "uid-1200");
    finish(&mut future, "Failed", None);
    let plan = decide(&cj, &summaries(&[future]), None, TEN_OH_ONE);
    assert_eq!(plan.create.map(|c| c.scheduled_time), Some(ts(TEN)));
}

#[test]
fn a_cronjob_with_no_recorded_run_records_a_known_slot_too() {
    let mut cj = hourly_without_history();
    cj.status = None;
    let plan = decide(&cj, &[], Some(ts(TEN)), TEN_OH_ONE);
    assert!(plan.create.is_none(), "{:?}", plan.decisions);
    let status = plan.expected.status_update().expect("a status write");
    assert_eq!(status.last_schedule_time, Some(Time(ts(TEN))));
}

// ---- held Jobs (`SLOT_FINALIZER`) ----------------------------------------

/// The 10:00 Job, held by the slot finalizer and being deleted (the TTL
/// controller, or a user), finished or not.
fn held_going(cj: &CronJob, finished: bool) -> JobSummary {
    let mut job = job_from_template(cj, ts(TEN), "uid-1000");
    if finished {
        finish(&mut job, "Complete", Some(ts("2016-05-19T10:00:30Z")));
    }
    let mut summary = JobSummary::from(&job);
    summary.held = true;
    summary.deleting = true;
    summary
}

fn release(after_status_write: bool, running: bool) -> Release {
    Release {
        namespace: "snazzycats".into(),
        name: job_name("mycronjob", ts(TEN)),
        uid: "uid-1000".into(),
        running,
        after_status_write,
    }
}

#[test]
fn a_held_job_of_an_unrecorded_slot_is_released_after_the_write_that_records_it() {
    let cj = hourly_without_history();
    let plan = decide(&cj, &[held_going(&cj, true)], None, TEN_OH_ONE);
    assert!(plan.create.is_none(), "{:?}", plan.decisions);
    assert_eq!(
        recorded(&plan),
        Some(&Decision::RecordedKnownSlot { slot: ts(TEN) })
    );
    assert_eq!(plan.releases, [release(true, false)]);
}

#[test]
fn a_held_job_of_a_recorded_slot_is_released_at_once() {
    let mut cj = hourly_without_history();
    cj.status
        .get_or_insert_with(Default::default)
        .last_schedule_time = Some(Time(ts(TEN)));
    let plan = decide(&cj, &[held_going(&cj, true)], None, TEN_OH_ONE);
    assert_eq!(plan.releases, [release(false, false)]);
    // A held Job that is not going loses its finalizer too: it protects
    // nothing once the slot is recorded.
    let mut staying = held_going(&cj, true);
    staying.deleting = false;
    let plan = decide(&cj, &[staying], None, TEN_OH_ONE);
    assert_eq!(plan.releases, [release(false, false)]);
}

#[test]
fn a_held_job_of_an_unrecorded_slot_keeps_its_finalizer_until_a_write_records_it() {
    let cj = hourly_without_history();
    let mut staying = held_going(&cj, true);
    staying.deleting = false;
    let plan = decide(&cj, &[staying], None, TEN_OH_ONE);
    assert_eq!(
        recorded(&plan),
        Some(&Decision::RecordedKnownSlot { slot: ts(TEN) })
    );
    assert_eq!(plan.releases, [release(true, false)]);
}

#[test]
fn a_held_job_deleted_while_running_has_its_slot_recorded_and_is_not_adopted() {
    // A user (or Replace) deletes the running 10:00 Job, whose status
    // write was lost: going, it is neither `UnexpectedJob` (no live GET,
    // no entry in status.active) nor a slot to start again.
    let cj = hourly_without_history();
    let plan = decide(&cj, &[held_going(&cj, false)], None, TEN_OH_ONE);
    assert!(plan.create.is_none(), "{:?}", plan.decisions);
    let status = plan.expected.status_update().expect("a status write");
    assert_eq!(status.last_schedule_time, Some(Time(ts(TEN))));
    assert_eq!(status.active, None);
    assert_eq!(plan.releases, [release(true, true)]);
}

#[test]
fn every_held_job_of_a_cronjob_being_deleted_is_released() {
    let mut cj = hourly_without_history();
    cj.metadata.deletion_timestamp = Some(Time(ts(TEN)));
    let plan = decide(&cj, &[held_going(&cj, true)], None, TEN_OH_ONE);
    assert_eq!(plan.releases, [release(false, false)]);
}

#[test]
fn only_a_job_template_with_a_ttl_makes_held_jobs() {
    let mut cj = hourly_without_history();
    let built = |cj: &CronJob| {
        build_job(&view(cj), &jiff::tz::TimeZone::UTC, ts(TEN))
            .expect("a Job")
            .metadata
            .finalizers
    };
    assert_eq!(built(&cj), None);
    if let Some(spec) = cj.spec.job_template.spec.as_mut() {
        spec.ttl_seconds_after_finished = Some(0);
    }
    assert_eq!(built(&cj), Some(vec![SLOT_FINALIZER.to_owned()]));
}
