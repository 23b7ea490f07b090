//! The opt-in `shardcron.io/spread` ([`SPREAD_ANNOTATION`]): every slot of
//! the CronJob starts late by its own fixed offset within the window; the
//! Job's name and `lastScheduleTime` stay the nominal slot's, and the
//! starting deadline counts from the delayed start.

use super::fixtures::*;
use crate::reconcile::options::spread_offset;
use crate::reconcile::update::{AfterUpdate, after_update};
use crate::reconcile::*;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// `snazzycats/mycronjob`'s offset in a 10-minute window: FNV-1a 64 of
/// the name, modulo 600 (computed apart, in the docs' recipe).
const OFFSET: i64 = 517;

/// Hourly, last run at 09:00, spread over `window`, if any.
fn hourly(window: Option<&str>, deadline: Option<i64>) -> CronJob {
    let mut cj = cron_job();
    cj.spec.schedule = "0 * * * *".into();
    cj.spec.starting_deadline_seconds = deadline;
    cj.metadata.creation_timestamp = Some(Time(ts("2016-05-19T08:00:00Z")));
    cj.metadata.annotations = window.map(|w| map(&[(SPREAD_ANNOTATION, w)]));
    cj.status = Some(CronJobStatus {
        last_schedule_time: Some(Time(ts("2016-05-19T09:00:00Z"))),
        ..Default::default()
    });
    cj
}

fn plan(cj: &CronJob, now: Timestamp) -> Plan {
    let view = view(cj);
    match reconcile(&input(&view, &[], now), &LiveAnswers::new()) {
        Step::Plan(plan) => *plan,
        Step::Lookup(lookups) => panic!("unexpected lookups {lookups:?}"),
    }
}

fn at(slot: &str, seconds: i64) -> Timestamp {
    ts(slot) + SignedDuration::from_secs(seconds)
}

#[test]
fn the_offset_is_the_identitys_hash_within_the_window() {
    assert_eq!(spread_offset("snazzycats", "mycronjob", 600), OFFSET);
}

#[test]
fn every_slot_starts_late_by_the_offset_under_its_nominal_name() {
    let cj = hourly(Some("10m"), None);
    // At the slot, nothing yet: the wake-up is the delayed start.
    let early = plan(&cj, at("2016-05-19T10:00:00Z", 0));
    assert!(early.create.is_none());
    assert_eq!(
        early.expected.requeue,
        Requeue::At(at("2016-05-19T10:00:00Z", OFFSET))
    );
    assert!(
        plan(&cj, at("2016-05-19T10:00:00Z", OFFSET - 1))
            .create
            .is_none()
    );
    // At the delayed start: the 10:00 slot's Job, named and recorded as
    // 10:00; the next wake-up is 11:00 plus the same offset.
    let due = plan(&cj, at("2016-05-19T10:00:00Z", OFFSET));
    let create = due.create.expect("a Job at the delayed start");
    assert_eq!(create.scheduled_time, ts("2016-05-19T10:00:00Z"));
    assert_eq!(
        create.name,
        job_name("mycronjob", ts("2016-05-19T10:00:00Z"))
    );
    assert_eq!(create.start_at, at("2016-05-19T10:00:00Z", OFFSET));
    assert_eq!(
        due.expected.status.last_schedule_time.get(),
        Some(ts("2016-05-19T10:00:00Z"))
    );
    assert_eq!(
        due.expected.requeue,
        Requeue::At(at("2016-05-19T11:00:00Z", OFFSET))
    );
    // Without the annotation: upstream's, at the slot.
    let upstream = plan(&hourly(None, None), at("2016-05-19T10:00:00Z", 0));
    assert_eq!(
        upstream.create.map(|c| c.start_at),
        Some(ts("2016-05-19T10:00:00Z"))
    );
}

#[test]
fn the_starting_deadline_counts_from_the_delayed_start() {
    let cj = hourly(Some("10m"), Some(60));
    // 30 s after the delayed start (547 s after the slot): within 60 s.
    assert!(
        plan(&cj, at("2016-05-19T10:00:00Z", OFFSET + 30))
            .create
            .is_some()
    );
    // 90 s after it: too late, as upstream 90 s after an unspread slot.
    let late = plan(&cj, at("2016-05-19T10:00:00Z", OFFSET + 90));
    assert!(late.create.is_none());
    assert_eq!(
        late.expected.requeue,
        Requeue::At(at("2016-05-19T11:00:00Z", OFFSET))
    );
}

#[test]
fn a_schedule_change_wakes_up_at_the_new_schedules_delayed_start() {
    let old = view(&hourly(Some("10m"), None)).spec;
    let mut cj = hourly(Some("10m"), None);
    cj.spec.schedule = "30 * * * *".into();
    let new = view(&cj);
    assert_eq!(
        after_update(
            &old,
            &new,
            ts("2016-05-19T10:10:00Z"),
            &jiff::tz::TimeZone::UTC
        ),
        AfterUpdate::At(at("2016-05-19T10:30:00Z", OFFSET))
    );
}
