//! The decision core: ns per decision for a typical CronJob with 5 child Jobs
//! (3 succeeded, 1 failed, 1 running and in status.active), between slots
//! (nothing to do, the common case) and when a slot is due (one create).
//! Beside the due decision, what the admin API's journal adds to it: the
//! decision's record (its steps and events as text) pushed into a full
//! journal (`journal/record-and-publish`).

use criterion::{Criterion, criterion_group, criterion_main};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use serde_json::json;
use shardcron::actor::feed::{DecisionFeed, DecisionRecord, JOURNAL_CAPACITY};
use shardcron::reconcile::{CronJobView, Input, JobSummary, LiveAnswers, Step, reconcile};
use std::hint::black_box;

const UID: &str = "6f1c1a3e-0000-4000-8000-000000000001";

fn cronjob() -> CronJob {
    serde_json::from_value(json!({
        "metadata": {"name": "report", "namespace": "team-a", "uid": UID,
                     "creationTimestamp": "2024-03-01T00:00:00Z"},
        "spec": {
            "schedule": "*/30 * * * *", "concurrencyPolicy": "Allow", "suspend": false,
            "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
            "jobTemplate": {"metadata": {"labels": {"app": "report"}},
                "spec": {"template": {"spec": {"restartPolicy": "OnFailure",
                    "containers": [{"name": "main", "image": "busybox"}]}}}}
        },
        "status": {
            "lastScheduleTime": "2024-03-01T10:00:00Z",
            "lastSuccessfulTime": "2024-03-01T09:35:00Z",
            "active": [{"apiVersion": "batch/v1", "kind": "Job", "name": "report-28488120",
                        "namespace": "team-a", "uid": "job-5"}]
        }
    }))
    .unwrap()
}

fn child(n: u32, start: &str, outcome: Option<(&str, &str)>) -> Job {
    let conditions = outcome.map(|(kind, _)| json!([{"type": kind, "status": "True"}]));
    let completion = outcome.and_then(|(kind, at)| (kind == "Complete").then_some(at));
    serde_json::from_value(json!({
        "metadata": {"name": format!("report-{}", 28488000 + 30 * (n - 1)), "namespace": "team-a",
                     "uid": format!("job-{n}"),
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "report",
                                          "uid": UID, "controller": true}]},
        "status": {"startTime": start, "completionTime": completion, "conditions": conditions}
    }))
    .unwrap()
}

fn children() -> Vec<JobSummary> {
    [
        child(
            1,
            "2024-03-01T08:00:01Z",
            Some(("Complete", "2024-03-01T08:05:00Z")),
        ),
        child(
            2,
            "2024-03-01T08:30:01Z",
            Some(("Complete", "2024-03-01T08:35:00Z")),
        ),
        child(3, "2024-03-01T09:00:01Z", Some(("Failed", ""))),
        child(
            4,
            "2024-03-01T09:30:01Z",
            Some(("Complete", "2024-03-01T09:35:00Z")),
        ),
        child(5, "2024-03-01T10:00:01Z", None),
    ]
    .iter()
    .map(JobSummary::from)
    .collect()
}

fn bench(c: &mut Criterion) {
    let view = CronJobView::from_api(&cronjob()).unwrap();
    let kids = children();
    let utc = TimeZone::UTC;
    for (name, now) in [
        ("reconcile/idle", "2024-03-01T10:12:00Z"),
        ("reconcile/due", "2024-03-01T10:30:00.2Z"),
    ] {
        let now: Timestamp = now.parse().unwrap();
        let input = Input {
            cronjob: &view,
            children: &kids,
            known_slot: None,
            now,
            default_zone: &utc,
        };
        let live = LiveAnswers::new();
        let Step::Plan(plan) = reconcile(&input, &live) else {
            panic!("{name}: no lookups expected");
        };
        assert_eq!(plan.create.is_some(), name.ends_with("due"), "{name}");
        c.bench_function(name, |b| {
            b.iter(|| black_box(reconcile(black_box(&input), &live)))
        });
        if name.ends_with("due") {
            let feed = DecisionFeed::default();
            let record = |key: String| {
                DecisionRecord::of(
                    key,
                    now,
                    &plan,
                    &plan.expected.events,
                    None,
                    Some("report-28488150".into()),
                )
            };
            for i in 0..JOURNAL_CAPACITY {
                feed.publish(record(format!("team-a/c{i}")));
            }
            c.bench_function("journal/record-and-publish", |b| {
                b.iter(|| feed.publish(record(black_box("team-a/report".to_owned()))))
            });
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
