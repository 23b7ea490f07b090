//! Upstream's smaller tables: `TestGetJobFromTemplate2`, `TestByJobStartTime`,
//! `TestControllerV2CleanupFinishedJobs`,
//! `TestControllerV2JobAlreadyExistsButNotInActiveStatus`,
//! `TestControllerV2JobAlreadyExistsButDifferentOwner`,
//! `TestControllerV2GetJobsToBeReconciled` and `TestControllerV2UpdateCronJob`.

use super::fixtures::*;
use crate::reconcile::*;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::{CronJob, Job, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use std::cmp::Ordering;
use std::sync::Arc;

#[test]
fn upstream_get_job_from_template2() {
    let scheduled = top_of_the_hour();
    let mut cj = cron_job();
    cj.metadata.creation_timestamp = Some(Time(scheduled));
    let template = cj.spec.job_template.spec.as_mut().unwrap();
    template.active_deadline_seconds = Some(1);
    template.manual_selector = Some(false);
    for (name, time_zone, annotations, want_count, want_stamp) in [
        (
            "UTC timezone and one annotation",
            Some("UTC"),
            map(&[("x", "y")]),
            2,
            "2016-05-19T10:00:00Z",
        ),
        (
            "nil timezone and one annotation",
            None,
            map(&[("x", "y")]),
            2,
            "2016-05-19T10:00:00Z",
        ),
        (
            "correct timezone and multiple annotation",
            Some("Europe/Rome"),
            map(&[("x", "y"), ("z", "x")]),
            3,
            "2016-05-19T12:00:00+02:00",
        ),
    ] {
        cj.spec.job_template.metadata.as_mut().unwrap().annotations = Some(annotations);
        cj.spec.time_zone = time_zone.map(Into::into);
        let job = build_job(&view(&cj), &TimeZone::UTC, scheduled).expect(name);
        let meta = &job.metadata;
        assert!(
            meta.name.as_deref().unwrap().starts_with("mycronjob-"),
            "{name}"
        );
        assert_eq!(meta.name.as_deref(), Some("mycronjob-24394200"), "{name}");
        assert_eq!(meta.labels.as_ref().unwrap().len(), 1, "{name}");
        let annotations = meta.annotations.as_ref().unwrap();
        assert_eq!(annotations.len(), want_count, "{name}");
        assert_eq!(
            annotations[SCHEDULED_TIMESTAMP_ANNOTATION], want_stamp,
            "{name}"
        );
        // Beyond upstream's checks: the rest of the object.
        assert_eq!(meta.creation_timestamp, Some(Time(scheduled)), "{name}");
        assert_eq!(meta.namespace, None, "{name}");
        assert_eq!(
            meta.owner_references.as_deref(),
            Some(
                &[OwnerReference {
                    api_version: "batch/v1".into(),
                    kind: "CronJob".into(),
                    name: "mycronjob".into(),
                    uid: "1a2b3c".into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }][..]
            ),
            "{name}"
        );
        assert_eq!(
            job.clone().typed().and_then(|job| job.spec),
            cj.spec.job_template.spec.clone(),
            "{name}"
        );
    }
}

#[test]
fn job_from_template_fails_only_on_an_unknown_zone() {
    let mut cj = cron_job();
    cj.spec.time_zone = Some("Mars/Olympus".into());
    assert_eq!(
        build_job(&view(&cj), &TimeZone::UTC, top_of_the_hour()),
        Err("unknown time zone Mars/Olympus".to_owned())
    );
    // `Local` is the controller's own zone.
    cj.spec.time_zone = Some("Local".into());
    let tokyo = jiff::tz::TimeZone::get("Asia/Tokyo").unwrap();
    let job = build_job(&view(&cj), &tokyo, top_of_the_hour()).unwrap();
    assert_eq!(
        job.metadata.annotations.unwrap()[SCHEDULED_TIMESTAMP_ANNOTATION],
        "2016-05-19T19:00:00+09:00"
    );
}

#[test]
fn job_names_count_minutes_since_the_epoch() {
    assert_eq!(job_name("x", ts("2016-05-19T10:00:00Z")), "x-24394200");
    assert_eq!(job_name("x", ts("2016-05-19T10:00:59Z")), "x-24394200");
    // Before 1970 Go's division truncates toward zero, as Rust's does.
    // (a floor would give -1 and -2).
    assert_eq!(job_name("x", ts("1969-12-31T23:59:30Z")), "x-0");
    assert_eq!(job_name("x", ts("1969-12-31T23:58:30Z")), "x--1");
}

fn summary(name: &str, start: Option<&str>) -> JobSummary {
    JobSummary {
        name: name.into(),
        uid: name.into(),
        start_time: start.map(ts),
        completion_time: None,
        finished: Some(Finished::Complete),
        failed_at: None,
        failure_reason: None,
        succeeded: true,
        scheduled: None,
        deleting: false,
        held: false,
    }
}

#[test]
fn upstream_by_job_start_time() {
    let now = "2018-01-01T02:03:04.000000005Z";
    let later = "2019-01-01T02:03:04.000000005Z";
    let a_nil = summary("a", None);
    let b_nil = summary("b", None);
    let a_set = summary("a", Some(now));
    let b_set = summary("b", Some(now));
    let a_set_later = summary("a", Some(later));
    for (name, input, expected) in [
        (
            "both have nil start times",
            [&b_nil, &a_nil],
            [&a_nil, &b_nil],
        ),
        (
            "only the first has a nil start time",
            [&a_nil, &b_set],
            [&b_set, &a_nil],
        ),
        (
            "only the second has a nil start time",
            [&a_set, &b_nil],
            [&a_set, &b_nil],
        ),
        (
            "both have non-nil, equal start time",
            [&b_set, &a_set],
            [&a_set, &b_set],
        ),
        (
            "both have non-nil, different start time",
            [&a_set_later, &b_set],
            [&b_set, &a_set_later],
        ),
    ] {
        let mut sorted = input;
        sorted.sort_by(|x, y| by_start_time(x, y));
        assert_eq!(sorted, expected, "{name}");
    }
    assert_eq!(by_start_time(&a_nil, &a_nil), Ordering::Equal);
}

fn owned_by(name: &str, owner: &str, start: Option<jiff::Timestamp>) -> Job {
    Job {
        metadata: ObjectMeta {
            namespace: Some("foo-ns".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            owner_references: Some(vec![OwnerReference {
                name: owner.into(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        status: Some(JobStatus {
            start_time: start.map(Time),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn fooer(limit: i32) -> CronJob {
    let mut cj = CronJob {
        metadata: ObjectMeta {
            namespace: Some("foo-ns".into()),
            name: Some("fooer".into()),
            creation_timestamp: Some(Time(just_before_the_prior_hour())),
            ..Default::default()
        },
        ..Default::default()
    };
    cj.spec.schedule = "0 * * * ?".into();
    cj.spec.successful_jobs_history_limit = Some(limit);
    cj.spec.job_template.metadata = Some(ObjectMeta {
        labels: Some(map(&[("key", "value")])),
        ..Default::default()
    });
    cj.status = Some(k8s_openapi::api::batch::v1::CronJobStatus {
        last_schedule_time: Some(Time(just_after_the_prior_hour())),
        ..Default::default()
    });
    cj
}

#[test]
fn upstream_cleanup_finished_jobs() {
    // Jobs are deleted even when the create fails on a Job quota (no deadlock).
    let mut jobs = vec![
        owned_by(
            "finished-job-started-hour-ago",
            "fooer",
            Some(just_before_the_prior_hour()),
        ),
        owned_by(
            "finished-job-started-minute-ago",
            "fooer",
            Some(just_before_the_hour()),
        ),
    ];
    for job in &mut jobs {
        finish(job, "Complete", None);
    }
    let cj = view(&fooer(1));
    let children = summaries(&jobs);
    let fake = FakeApi {
        create_err: Some(CreateError::Other(ApiError::new(
            "Internal error occurred: quota for # of jobs reached",
        ))),
        ..FakeApi::default()
    };
    let applied = fake.sync(&input(&cj, &children, just_after_the_hour()));
    assert_eq!(applied.deleted, ["finished-job-started-hour-ago"]);
    assert!(applied.plan.create.is_some(), "the create was attempted");
    assert!(matches!(applied.outcome.requeue, Requeue::Backoff(_)));
    assert_eq!(
        reasons(&applied.outcome.events),
        [Reason::SuccessfulDelete, Reason::FailedCreate]
    );

    // Nothing is deleted below the limit.
    let cj = view(&fooer(2));
    let children = summaries(&jobs[..1]);
    let applied = FakeApi::default().sync(&input(&cj, &children, just_before_the_hour()));
    assert!(applied.deleted.is_empty());
}

/// The Job upstream's AlreadyExists tests find: made for an earlier slot,
/// absent from the lister, answered by every GET.
fn already_exists_setup(owned: bool) -> (CronJob, FakeApi) {
    let mut cj = cron_job();
    cj.spec.concurrency_policy = Some("Forbid".into());
    cj.spec.schedule = "@every 1h".into();
    cj.status = Some(k8s_openapi::api::batch::v1::CronJobStatus {
        last_schedule_time: Some(Time(just_before_the_prior_hour())),
        active: Some(vec![]),
        ..Default::default()
    });
    let mut job = job_from_template(&cj, just_after_the_prior_hour(), "1234");
    if !owned {
        job.metadata.owner_references = Some(vec![]);
    }
    let fake = FakeApi {
        cronjob: Some(cj.clone()),
        job: Some(job),
        create_err: Some(CreateError::AlreadyExists),
        ..FakeApi::default()
    };
    (cj, fake)
}

#[test]
fn upstream_job_already_exists_but_not_in_active_status() {
    let (cj, fake) = already_exists_setup(true);
    let cronjob = view(&cj);
    let applied = fake.sync(&input(&cronjob, &[], just_before_the_hour()));
    let outcome = &applied.outcome;
    assert!(outcome.status_changed);
    assert_eq!(
        outcome.status.active,
        [reference_of(fake.job.as_ref().unwrap())]
    );
    // Recorded as created, without SuccessfulCreate.
    assert!(outcome.events.is_empty());
    assert_eq!(
        outcome.status.last_schedule_time.get(),
        Some(just_before_the_hour())
    );
}

#[test]
fn upstream_job_already_exists_but_different_owner() {
    let (cj, fake) = already_exists_setup(false);
    let cronjob = view(&cj);
    let applied = fake.sync(&input(&cronjob, &[], just_before_the_hour()));
    assert!(!applied.outcome.status_changed);
    // Upstream: no requeue. A departure (docs/parity.md): the next slot as usual.
    assert!(matches!(applied.outcome.requeue, Requeue::At(_)));
}

#[test]
fn upstream_get_jobs_to_be_reconciled() {
    let plain = |name: &str, ns: &str| Job {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let children = |jobs: &[Job]| -> Vec<String> {
        jobs.iter()
            .filter(|j| j.metadata.namespace.as_deref() == Some("foo-ns"))
            .filter(|j| is_child_by_name(j, "fooer"))
            .map(|j| j.metadata.name.clone().unwrap())
            .collect()
    };
    // Without a controller reference.
    let jobs = [
        plain("foo", "foo-ns"),
        plain("foo1", "foo-ns"),
        plain("foo2", "foo-ns"),
    ];
    assert!(children(&jobs).is_empty());
    // With one.
    let jobs = [
        plain("foo", "foo-ns"),
        owned_by("foo1", "fooer", None),
        plain("foo2", "foo-ns"),
    ];
    assert_eq!(children(&jobs), ["foo1"]);
    // In other namespaces (the lister is per namespace).
    let jobs = [
        plain("foo", "bar-ns"),
        plain("foo1", "bar-ns"),
        plain("foo2", "bar-ns"),
    ];
    assert!(children(&jobs).is_empty());
    // Labels do not matter; the controller's name does.
    let jobs = [
        owned_by("foo-fooer-owner-ref", "fooer", None),
        owned_by("foo-other-owner-ref", "another-cronjob", None),
    ];
    assert_eq!(children(&jobs), ["foo-fooer-owner-ref"]);
    // Only the name is compared: a reference that is not a controller one
    // does not count, and neither kind nor UID is checked.
    let mut not_controller = owned_by("x", "fooer", None);
    not_controller.metadata.owner_references.as_mut().unwrap()[0].controller = None;
    assert!(!is_child_by_name(&not_controller, "fooer"));
    let mut other_kind = owned_by("y", "fooer", None);
    other_kind.metadata.owner_references.as_mut().unwrap()[0].kind = "ReplicaSet".into();
    assert!(is_child_by_name(&other_kind, "fooer"));
}

#[test]
fn upstream_update_cron_job() {
    let now = just_a_second_before_the_hour();
    let spec = |schedule: &str, time_zone: Option<&str>, label: &str| {
        let mut spec = k8s_openapi::api::batch::v1::CronJobSpec {
            schedule: schedule.into(),
            time_zone: time_zone.map(Into::into),
            ..Default::default()
        };
        spec.job_template.metadata = Some(ObjectMeta {
            labels: Some(map(&[("a", label)])),
            annotations: Some(map(&[("x", "y")])),
            ..Default::default()
        });
        spec.job_template.spec = Some(job_spec());
        SpecView::new(&spec)
    };
    let cronjob = |spec: SpecView, last: Option<jiff::Timestamp>| CronJobView {
        kind: CronJobKind::Batch,
        key: "/".into(),
        uid: "".into(),
        // Upstream's objects have no creationTimestamp: Go's zero time.
        created: jiff::Timestamp::from_second(-62_135_596_800)
            .unwrap()
            .into(),
        deleting: false,
        spec: Arc::new(spec),
        status: StatusView {
            last_schedule_time: last.into(),
            ..StatusView::default()
        },
        options: Default::default(),
    };
    let lst = Some(just_before_the_hour());
    let cases = [
        (
            "spec.template changed",
            spec("", None, "b"),
            cronjob(spec("", None, "foo"), None),
            AfterUpdate::Now,
        ),
        (
            "spec.schedule changed",
            spec("30 * * * *", None, "b"),
            cronjob(spec("*/1 * * * *", None, "foo"), lst),
            AfterUpdate::At(now + secs(1)),
        ),
        (
            "spec.schedule with @every changed - cadence decrease",
            spec("@every 1m", None, "b"),
            cronjob(spec("@every 3m", None, "foo"), lst),
            AfterUpdate::At(now + mins(2) + secs(1)),
        ),
        (
            "spec.schedule with @every changed - cadence increase",
            spec("@every 3m", None, "b"),
            cronjob(spec("@every 1m", None, "foo"), lst),
            AfterUpdate::At(now + secs(1)),
        ),
        (
            "spec.timeZone not changed",
            spec("", Some("America/New_York"), "b"),
            cronjob(spec("", Some("America/New_York"), "foo"), None),
            AfterUpdate::Now,
        ),
        (
            // Upstream expects a delay of 0 s: the empty schedule does not
            // parse, so nothing is queued and its fake queue keeps 0.
            "spec.timeZone changed",
            spec("", Some("America/New_York"), "b"),
            cronjob(spec("", None, "foo"), None),
            AfterUpdate::Unparseable(Event {
                event_type: EventType::Warning,
                reason: Reason::UnParseableCronJobSchedule,
                message: "unparseable schedule for cronjob: ".into(),
            }),
        ),
    ];
    for (name, old, new, want) in cases {
        assert_eq!(
            after_update(&old, &new, now, &TimeZone::UTC),
            want,
            "{name}"
        );
    }
}
