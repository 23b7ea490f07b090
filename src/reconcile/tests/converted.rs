//! A CronJob copied by `shardcron convert`: no status of its own yet, its
//! original's last slot in [`LAST_SCHEDULE_ANNOTATION`]. It must neither run
//! that slot again nor skip the ones after it.

use super::fixtures::*;
use crate::reconcile::*;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Hourly, created at 10:30 (the copy), carrying `seed`.
fn copy(seed: Option<&str>) -> CronJob {
    let mut cj = cron_job();
    cj.spec.schedule = "0 * * * *".into();
    cj.metadata.creation_timestamp = Some(Time(ts("2016-05-19T10:30:00Z")));
    cj.metadata.annotations = seed.map(|s| map(&[(LAST_SCHEDULE_ANNOTATION, s)]));
    cj.status = None;
    cj
}

fn created_slot(cj: &CronJob, now: &str) -> Option<jiff::Timestamp> {
    let view = view(cj);
    match reconcile(&input(&view, &[], ts(now)), &LiveAnswers::new()) {
        Step::Plan(plan) => plan.create.map(|create| create.scheduled_time),
        Step::Lookup(lookups) => panic!("unexpected lookups {lookups:?}"),
    }
}

#[test]
fn the_carried_slot_is_the_baseline_and_the_slots_after_it_still_run() {
    // The original ran 09:00, was suspended and copied at 10:30: the 10:00
    // slot was missed during the move and runs now, as it would have.
    let cj = copy(Some("2016-05-19T09:00:00Z"));
    assert_eq!(
        view(&cj).status.last_schedule_time.get(),
        Some(ts("2016-05-19T09:00:00Z"))
    );
    assert_eq!(
        created_slot(&cj, "2016-05-19T10:30:05Z"),
        Some(ts("2016-05-19T10:00:00Z"))
    );
    // Without the carried slot the copy starts from its creation: 10:00 is skipped.
    assert_eq!(created_slot(&copy(None), "2016-05-19T10:30:05Z"), None);
}

#[test]
fn the_carried_slot_is_never_run_again() {
    let cj = copy(Some("2016-05-19T10:00:00Z"));
    assert_eq!(created_slot(&cj, "2016-05-19T10:30:05Z"), None);
    assert_eq!(
        created_slot(&cj, "2016-05-19T11:00:00Z"),
        Some(ts("2016-05-19T11:00:00Z"))
    );
}

#[test]
fn the_status_wins_and_a_bad_annotation_is_ignored() {
    let mut recorded = copy(Some("2016-05-19T08:00:00Z"));
    recorded.status = Some(k8s_openapi::api::batch::v1::CronJobStatus {
        last_schedule_time: Some(Time(ts("2016-05-19T10:00:00Z"))),
        ..Default::default()
    });
    assert_eq!(
        view(&recorded).status.last_schedule_time.get(),
        Some(ts("2016-05-19T10:00:00Z"))
    );
    assert_eq!(
        view(&copy(Some("yesterday")))
            .status
            .last_schedule_time
            .get(),
        None
    );
}
