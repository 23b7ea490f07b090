//! Properties over random CronJobs, children and instants: at most one
//! create, for a due slot, under its slot's name; nothing started while
//! suspended or deleting; the plan is what the follow-up gives when every
//! write succeeds; a second sync right after the first creates nothing.

use super::fixtures::*;
use crate::reconcile::*;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;

const SCHEDULES: &[&str] = &[
    "* * * * *",
    "*/5 * * * *",
    "0 * * * *",
    "30 10,11,12 * * 1-5",
    "0 0 29 2 *",
    "59 23 31 2 *",
    "@every 90s",
    "@every 1h",
    "TZ=Europe/Berlin 30 2 * * *",
    "bad schedule",
];
const POLICIES: &[&str] = &["Allow", "Forbid", "Replace", ""];

#[derive(Debug, Clone)]
struct ChildSpec {
    minutes_before_now: i64,
    /// 0 running, 1 complete, 2 failed
    state: u8,
    in_active: bool,
    listed: bool,
    with_start: bool,
}

#[derive(Debug, Clone)]
struct World {
    schedule: &'static str,
    time_zone: Option<&'static str>,
    policy: &'static str,
    suspend: bool,
    deleting: bool,
    deadline: Option<i64>,
    limits: (Option<i32>, Option<i32>),
    created_minutes_before: i64,
    last_scheduled_minutes_before: Option<i64>,
    now_offset_secs: i64,
    children: Vec<ChildSpec>,
}

fn world() -> impl Strategy<Value = World> {
    let child = (
        0i64..600,
        0u8..3,
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(minutes_before_now, state, in_active, listed, with_start)| ChildSpec {
                minutes_before_now,
                state,
                in_active,
                listed,
                with_start,
            },
        );
    (
        (
            prop::sample::select(SCHEDULES),
            prop::option::of(prop::sample::select(
                &["America/New_York", "UTC", "Nowhere/Zone"][..],
            )),
            prop::sample::select(POLICIES),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.1),
            prop::option::of(0i64..20_000),
        ),
        (
            (prop::option::of(0i32..4), prop::option::of(0i32..3)),
            1i64..20_000,
            prop::option::of(0i64..20_000),
            0i64..400_000_000,
            prop::collection::vec(child, 0..6),
        ),
    )
        .prop_map(
            |(
                (schedule, time_zone, policy, suspend, deleting, deadline),
                (limits, created_minutes_before, last, now_offset_secs, children),
            )| World {
                schedule,
                time_zone,
                policy,
                suspend,
                deleting,
                deadline,
                limits,
                created_minutes_before,
                last_scheduled_minutes_before: last,
                now_offset_secs,
                children,
            },
        )
}

fn build(w: &World) -> (Timestamp, CronJob, Vec<Job>, Vec<Job>) {
    let now = ts("2016-01-01T00:00:00Z") + SignedDuration::from_secs(w.now_offset_secs);
    let mut cj = cron_job();
    cj.spec.schedule = w.schedule.into();
    cj.spec.time_zone = w.time_zone.map(Into::into);
    cj.spec.concurrency_policy = Some(w.policy.into());
    cj.spec.suspend = Some(w.suspend);
    cj.spec.starting_deadline_seconds = w.deadline;
    cj.spec.successful_jobs_history_limit = w.limits.0;
    cj.spec.failed_jobs_history_limit = w.limits.1;
    cj.metadata.creation_timestamp = Some(Time(now - mins(w.created_minutes_before)));
    if w.deleting {
        cj.metadata.deletion_timestamp = Some(Time(now));
    }
    let status = cj.status.get_or_insert_with(Default::default);
    status.last_schedule_time = w
        .last_scheduled_minutes_before
        .map(|m| Time(now - mins(m.min(w.created_minutes_before))));
    let mut all = Vec::new();
    let mut listed = Vec::new();
    let mut active = Vec::new();
    for (i, c) in w.children.iter().enumerate() {
        let at = now - mins(c.minutes_before_now);
        // Children are made from a template without the (maybe bad) zone.
        let mut plain = cj.clone();
        plain.spec.time_zone = None;
        let mut job = job_from_template(&plain, at, &format!("uid-{i}"));
        // Distinct names even when two children share a minute.
        job.metadata.name = Some(format!("child-{i}"));
        if c.with_start {
            job.status.get_or_insert_with(Default::default).start_time = Some(Time(at));
        }
        match c.state {
            1 => finish(&mut job, "Complete", Some(at + secs(30))),
            2 => finish(&mut job, "Failed", Some(at + secs(30))),
            _ => {}
        }
        if c.in_active {
            active.push(reference_of(&job));
        }
        if c.listed {
            listed.push(job.clone());
        }
        all.push(job);
    }
    cj.status.get_or_insert_with(Default::default).active = Some(active);
    (now, cj, listed, all)
}

/// Answers every lookup from the world: the CronJob as read, each Job if it
/// exists at all (listed or not).
fn answer_all(lookups: &[Lookup], cj: &CronJob, all: &[Job], live: &mut LiveAnswers) {
    for lookup in lookups {
        match lookup {
            Lookup::CronJob { .. } => live.set_cronjob(Ok(view(cj))),
            Lookup::JobTemplate { .. } => {
                live.set_template(Ok(JobTemplate::from(&cj.spec.job_template)))
            }
            Lookup::Job { namespace, name } => {
                let answer = all
                    .iter()
                    .find(|j| j.metadata.name.as_deref() == Some(name.as_str()))
                    .map_or(JobLookup::NotFound, |j| JobLookup::Found(LiveJob::from(j)));
                live.set_job(namespace, name, answer);
            }
        }
    }
}

fn plan_for(inp: &Input, cj: &CronJob, all: &[Job]) -> (Plan, LiveAnswers) {
    let mut live = LiveAnswers::new();
    for _ in 0..4 {
        match reconcile(inp, &live) {
            Step::Plan(plan) => return (*plan, live),
            Step::Lookup(lookups) => answer_all(&lookups, cj, all, &mut live),
        }
    }
    panic!("more than three lookup rounds");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn decisions_are_safe(w in world()) {
        let (now, cj_api, listed, all) = build(&w);
        let cj = view(&cj_api);
        let children = summaries(&listed);
        let inp = input(&cj, &children, now);
        let (plan, live) = plan_for(&inp, &cj_api, &all);

        if let Some(create) = &plan.create {
            // Only for a due slot, under that slot's name, as the one create.
            prop_assert!(create.scheduled_time <= now);
            prop_assert_eq!(&create.name, &job_name("mycronjob", create.scheduled_time));
            let job = create.job.as_ref().unwrap();
            prop_assert_eq!(job.metadata.name.as_ref(), Some(&create.name));
            prop_assert!(!w.suspend && !w.deleting);
            prop_assert_eq!(plan.expected.status.last_schedule_time.get(), Some(create.scheduled_time));
        }
        if w.suspend || w.deleting {
            prop_assert!(plan.create.is_none());
            prop_assert!(plan.deletes.iter().all(|d| !d.blocks_create()));
        }
        // Every history delete is a finished, listed child.
        for deletion in plan.deletes.iter().filter(|d| !d.blocks_create()) {
            prop_assert!(children.iter().any(|c| c.uid == deletion.uid && c.finished.is_some()));
        }

        // The follow-up with every write successful is the plan.
        let mut results = EffectResults::new();
        if let Some(create) = &plan.create {
            results.set_create(CreateResult::Created(LiveJob {
                namespace: "snazzycats".into(),
                name: create.name.clone(),
                uid: String::new(),
                resource_version: None,
                controller_uid: Some("1a2b3c".into()),
            }));
        }
        let outcome = follow_up(&inp, &live, &results);
        prop_assert_eq!(&outcome, &plan.expected);

        // Applying the outcome and syncing again at the same instant starts
        // nothing new (the slot is recorded).
        if let Some(create) = &plan.create {
            let mut after = cj_api.clone();
            after.status = Some(outcome.status.to_api());
            let mut job = create.job.clone().unwrap().typed().unwrap();
            job.metadata.uid = Some("uid-new".into());
            job.metadata.namespace = Some("snazzycats".into());
            let status = after.status.get_or_insert_with(Default::default);
            let active = status.active.get_or_insert_with(Vec::new);
            if let Some(last) = active.last_mut() {
                last.uid = Some("uid-new".into());
            }
            let mut listed = listed.clone();
            listed.retain(|j| !plan.deletes.iter().any(|d| Some(&d.name) == j.metadata.name.as_ref()));
            listed.push(job.clone());
            let mut all = all.clone();
            all.push(job);
            let cj2 = view(&after);
            let children2 = summaries(&listed);
            let (again, _) = plan_for(&input(&cj2, &children2, now), &after, &all);
            prop_assert!(again.create.is_none(), "second create: {:?}", again.decisions);
        }
    }

    #[test]
    fn names_are_unique_per_slot_for_cron_schedules(a in 0i64..10_000_000, b in 0i64..10_000_000) {
        // Cron slots fall on whole minutes: distinct slots, distinct names.
        let (ta, tb) = (Timestamp::from_second(a * 60).unwrap(), Timestamp::from_second(b * 60).unwrap());
        prop_assert_eq!(a == b, job_name("c", ta) == job_name("c", tb));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Whatever the writes answer, the follow-up's own writes are among the
    /// plan's: an actor that carried out the plan never misses one.
    #[test]
    fn follow_up_never_needs_an_unplanned_write(
        w in world(),
        failing in prop::collection::vec(any::<bool>(), 6),
        create in 0u8..5,
    ) {
        let (now, cj_api, listed, all) = build(&w);
        let cj = view(&cj_api);
        let children = summaries(&listed);
        let inp = input(&cj, &children, now);
        let (plan, live) = plan_for(&inp, &cj_api, &all);
        let mut results = EffectResults::new();
        for (deletion, fail) in plan.deletes.iter().zip(&failing) {
            if *fail {
                results.delete_failed(&deletion.name, ApiError::new("nope"));
            }
        }
        if let Some(planned) = &plan.create {
            let mine = LiveJob {
                namespace: "snazzycats".into(),
                name: planned.name.clone(),
                uid: "u".into(),
                resource_version: None,
                controller_uid: Some("1a2b3c".into()),
            };
            results.set_create(match create {
                0 => CreateResult::Created(mine),
                1 => CreateResult::AlreadyExists(Ok(mine)),
                2 => CreateResult::AlreadyExists(Err(ApiError::new("x"))),
                3 => CreateResult::NamespaceTerminating(ApiError::new("x")),
                _ => CreateResult::Failed(ApiError::new("x")),
            });
        }
        // The actor's shortcut (no create, no delete: the expected outcome)
        // is the follow-up's answer.
        prop_assert_eq!(plan.outcome(&inp, &live, &results), follow_up(&inp, &live, &results));
        let run = crate::reconcile::sync::run(&inp, &live, Some(&results)).expect("no new lookups");
        prop_assert!(run.deletes.iter().all(|d| plan.deletes.contains(d)));
        prop_assert!(run.create.is_none() || plan.create.as_ref().map(|c| &c.name) == run.create.as_ref().map(|c| &c.name));
        // A failed Replace delete cancels the create.
        let replace_failed = plan.deletes.iter().zip(&failing).any(|(d, f)| *f && d.blocks_create());
        if replace_failed {
            prop_assert!(run.create.is_none());
            prop_assert!(matches!(run.requeue, Requeue::Backoff(_)));
        }
        // Each failed delete that was made is reported once.
        let failed_deletes = run
            .deletes
            .iter()
            .filter(|d| results.delete_failures.contains_key(&d.name))
            .count();
        let reported = run.events.iter().filter(|e| e.reason == Reason::FailedDelete).count();
        prop_assert_eq!(failed_deletes, reported);
    }
}
