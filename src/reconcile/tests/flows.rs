//! The lookup and follow-up flows, the gates, and upstream's quirks, one
//! behaviour per test.

use super::fixtures::*;
use crate::reconcile::*;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// `mycronjob`, hourly, created 08:59, last run 09:00 (Job `mycronjob-<09:00>`).
fn hourly(policy: &str) -> CronJob {
    let mut cj = cron_job();
    cj.spec.schedule = "0 * * * *".into();
    cj.spec.concurrency_policy = Some(policy.into());
    cj.metadata.creation_timestamp = Some(Time(just_before_the_prior_hour()));
    cj.status
        .get_or_insert_with(Default::default)
        .last_schedule_time = Some(Time(ts("2016-05-19T09:00:00Z")));
    cj
}

fn prior_job(cj: &CronJob) -> Job {
    job_from_template(cj, ts("2016-05-19T09:00:00Z"), "uid-0900")
}

fn set_active(cj: &mut CronJob, jobs: &[&Job]) {
    cj.status.get_or_insert_with(Default::default).active =
        Some(jobs.iter().map(|j| reference_of(j)).collect());
}

fn plan_of(step: Step) -> Plan {
    match step {
        Step::Plan(plan) => *plan,
        Step::Lookup(lookups) => panic!("unexpected lookups {lookups:?}"),
    }
}

fn lookups_of(step: Step) -> Vec<Lookup> {
    match step {
        Step::Lookup(lookups) => lookups,
        Step::Plan(plan) => panic!("unexpected plan {:?}", plan.decisions),
    }
}

fn job_lookup(name: &str) -> Lookup {
    Lookup::Job {
        namespace: "snazzycats".into(),
        name: name.into(),
    }
}

const AT_TEN_OH_ONE: &str = "2016-05-19T10:01:00Z";

#[test]
fn a_decision_between_slots_is_a_noop_and_a_due_one_is_not() {
    let cj = view(&hourly("Allow"));
    let between = plan_of(reconcile(
        &input(&cj, &[], ts("2016-05-19T09:30:00Z")),
        &LiveAnswers::new(),
    ));
    assert!(between.is_noop(), "{:?}", between.decisions);
    let due = plan_of(reconcile(
        &input(&cj, &[], ts(AT_TEN_OH_ONE)),
        &LiveAnswers::new(),
    ));
    assert!(!due.is_noop());
}

#[test]
fn a_due_slot_needs_no_lookup_and_creates_one_job() {
    let cj = view(&hourly("Allow"));
    let now = ts(AT_TEN_OH_ONE);
    let plan = plan_of(reconcile(&input(&cj, &[], now), &LiveAnswers::new()));
    let create = plan.create.expect("a create");
    assert_eq!(create.name, "mycronjob-24394200");
    assert_eq!(create.scheduled_time, top_of_the_hour());
    assert!(plan.deletes.is_empty());
    assert_eq!(reasons(&plan.expected.events), [Reason::SuccessfulCreate]);
    assert_eq!(
        plan.expected.status.last_schedule_time.get(),
        Some(top_of_the_hour())
    );
    // Deliberate difference: the wake-up is the next slot itself, 11:00,
    // not 11:00:00.1.
    assert_eq!(
        plan.expected.requeue,
        Requeue::At(ts("2016-05-19T11:00:00Z"))
    );
    assert_eq!(
        plan.expected.next_wakeup(),
        Some(ts("2016-05-19T11:00:00Z"))
    );

    // The follow-up puts the created Job's identity into status.active.
    let mut results = EffectResults::new();
    results.set_create(CreateResult::Created(LiveJob {
        namespace: "snazzycats".into(),
        name: create.name.clone(),
        uid: "new-uid".into(),
        resource_version: Some("42".into()),
        controller_uid: Some("1a2b3c".into()),
    }));
    let outcome = follow_up(&input(&cj, &[], now), &LiveAnswers::new(), &results);
    assert_eq!(
        outcome.status.active,
        [active_reference(
            "snazzycats",
            "mycronjob-24394200",
            "new-uid",
            Some("42")
        )]
    );
    let written = outcome.status_update().expect("a status write");
    assert_eq!(written.last_schedule_time, Some(Time(top_of_the_hour())));
}

#[test]
fn an_unexpected_running_job_is_reported_not_adopted() {
    let cj_api = hourly("Allow");
    let stray = prior_job(&cj_api);
    let cj = view(&cj_api);
    let children = summaries(std::slice::from_ref(&stray));
    let now = ts("2016-05-19T09:30:00Z");
    let inp = input(&cj, &children, now);
    assert_eq!(
        lookups_of(reconcile(&inp, &LiveAnswers::new())),
        [Lookup::CronJob {
            namespace: "snazzycats".into(),
            name: "mycronjob".into()
        }]
    );
    let mut live = LiveAnswers::new();
    live.set_cronjob(Ok(cj.clone()));
    let plan = plan_of(reconcile(&inp, &live));
    assert_eq!(reasons(&plan.expected.events), [Reason::UnexpectedJob]);
    assert_eq!(
        plan.expected.events[0].message,
        "Saw a job that the controller did not create or forgot: mycronjob-24394140"
    );
    assert!(plan.expected.status.active.is_empty());
    assert!(!plan.expected.status_changed);
}

#[test]
fn the_live_cronjob_replaces_the_working_copy_but_not_the_written_status() {
    // Upstream quirk: `cronJob = cjCopy` in syncCronJob, while sync() sends
    // its own copy to UpdateStatus.
    let cj_api = hourly("Allow");
    let running = prior_job(&cj_api);
    let mut live_api = cj_api.clone();
    set_active(&mut live_api, &[&running]);
    let cj = view(&cj_api);
    let children = summaries(std::slice::from_ref(&running));
    let inp = input(&cj, &children, ts(AT_TEN_OH_ONE));
    let mut live = LiveAnswers::new();
    live.set_cronjob(Ok(view(&live_api)));
    let plan = plan_of(reconcile(&inp, &live));
    assert!(plan.create.is_some(), "Allow starts the 10:00 Job");
    assert!(plan.expected.status_changed);
    // The create went into the live copy; the status written is the one read.
    assert!(plan.expected.status.active.is_empty());
    assert_eq!(
        plan.expected.status.last_schedule_time.get(),
        Some(ts("2016-05-19T09:00:00Z"))
    );
    assert!(plan.decisions.contains(&Decision::SwitchedToLiveCronJob {
        job: "mycronjob-24394140".into()
    }));
}

#[test]
fn a_failed_cronjob_get_retries_with_backoff_after_history_cleanup() {
    let mut cj_api = hourly("Allow");
    cj_api.spec.successful_jobs_history_limit = Some(0);
    let mut done = job_from_template(&cj_api, ts("2016-05-19T08:00:00Z"), "uid-done");
    finish(&mut done, "Complete", Some(ts("2016-05-19T08:00:10Z")));
    let running = prior_job(&cj_api);
    let cj = view(&cj_api);
    let children = summaries(&[done, running]);
    let mut live = LiveAnswers::new();
    live.set_cronjob(Err(ApiError::new("etcdserver: request timed out")));
    let plan = plan_of(reconcile(&input(&cj, &children, ts(AT_TEN_OH_ONE)), &live));
    assert_eq!(plan.deletes.len(), 1, "history is cleaned first");
    assert!(plan.create.is_none());
    assert_eq!(
        plan.expected.requeue,
        Requeue::Backoff(ApiError::new("etcdserver: request timed out"))
    );
    // The delete and lastSuccessfulTime changed the status: it is written.
    assert!(plan.expected.status_changed);
}

#[test]
fn active_jobs_missing_from_the_lister_are_looked_up() {
    let mut cj_api = hourly("Allow");
    let gone = prior_job(&cj_api);
    set_active(&mut cj_api, &[&gone]);
    let cj = view(&cj_api);
    let now = ts("2016-05-19T09:30:00Z");
    let inp = input(&cj, &[], now);
    assert_eq!(
        lookups_of(reconcile(&inp, &LiveAnswers::new())),
        [job_lookup("mycronjob-24394140")]
    );

    let mut live = LiveAnswers::new();
    live.set_job("snazzycats", "mycronjob-24394140", JobLookup::NotFound);
    let plan = plan_of(reconcile(&inp, &live));
    assert_eq!(reasons(&plan.expected.events), [Reason::MissingJob]);
    assert_eq!(
        plan.expected.events[0].message,
        "Active job went missing: mycronjob-24394140"
    );
    assert!(plan.expected.status.active.is_empty());
    assert!(plan.expected.status_changed);

    let mut live = LiveAnswers::new();
    live.set_job(
        "snazzycats",
        "mycronjob-24394140",
        JobLookup::Found(LiveJob::from(&gone)),
    );
    let plan = plan_of(reconcile(&inp, &live));
    assert!(plan.expected.events.is_empty());
    assert_eq!(
        plan.expected.status.active.len(),
        1,
        "the lister is just slow"
    );

    let mut live = LiveAnswers::new();
    live.set_job(
        "snazzycats",
        "mycronjob-24394140",
        JobLookup::Failed(ApiError::new("boom")),
    );
    let plan = plan_of(reconcile(&inp, &live));
    assert_eq!(
        plan.expected.requeue,
        Requeue::Backoff(ApiError::new("boom"))
    );
}

#[test]
fn replace_gets_then_deletes_then_creates() {
    let mut cj_api = hourly("Replace");
    let running = prior_job(&cj_api);
    set_active(&mut cj_api, &[&running]);
    let cj = view(&cj_api);
    let children = summaries(std::slice::from_ref(&running));
    let inp = input(&cj, &children, ts(AT_TEN_OH_ONE));
    assert_eq!(
        lookups_of(reconcile(&inp, &LiveAnswers::new())),
        [job_lookup("mycronjob-24394140")]
    );
    let mut live = LiveAnswers::new();
    live.set_job(
        "snazzycats",
        "mycronjob-24394140",
        JobLookup::Found(LiveJob::from(&running)),
    );
    let plan = plan_of(reconcile(&inp, &live));
    assert_eq!(
        plan.deletes,
        [Deletion {
            namespace: "snazzycats".into(),
            name: "mycronjob-24394140".into(),
            uid: "uid-0900".into(),
            why: DeleteReason::Replace,
        }]
    );
    assert!(plan.deletes[0].blocks_create());
    assert!(plan.create.is_some());
    assert_eq!(
        reasons(&plan.expected.events),
        [Reason::SuccessfulDelete, Reason::SuccessfulCreate]
    );

    // The delete fails: no create, FailedDelete, backoff; the Job stays active.
    let mut results = EffectResults::new();
    results.delete_failed("mycronjob-24394140", ApiError::new("forbidden"));
    let outcome = follow_up(&inp, &live, &results);
    assert_eq!(reasons(&outcome.events), [Reason::FailedDelete]);
    assert_eq!(outcome.events[0].message, "Deleted job: forbidden");
    assert_eq!(
        outcome.requeue,
        Requeue::Backoff(ApiError::new(
            "could not replace job snazzycats/mycronjob-24394140"
        ))
    );
    assert_eq!(outcome.status.active.len(), 1);
    assert!(!outcome.status_changed);

    // The GET finds nothing: upstream has no NotFound case there.
    let mut live = LiveAnswers::new();
    live.set_job("snazzycats", "mycronjob-24394140", JobLookup::NotFound);
    let plan = plan_of(reconcile(&inp, &live));
    assert_eq!(reasons(&plan.expected.events), [Reason::FailedGet]);
    assert_eq!(
        plan.expected.events[0].message,
        "Get job: jobs.batch \"mycronjob-24394140\" not found"
    );
    assert!(plan.create.is_none());
}

#[test]
fn a_failed_history_delete_leaves_the_job_to_the_active_reconciliation() {
    let mut cj_api = hourly("Allow");
    cj_api.spec.successful_jobs_history_limit = Some(0);
    let mut done = prior_job(&cj_api);
    finish(&mut done, "Complete", Some(ts("2016-05-19T09:00:10Z")));
    set_active(&mut cj_api, &[&done]);
    let cj = view(&cj_api);
    let children = summaries(std::slice::from_ref(&done));
    let inp = input(&cj, &children, ts("2016-05-19T09:30:00Z"));
    let plan = plan_of(reconcile(&inp, &LiveAnswers::new()));
    // Planned: the delete takes it out of status.active, so no SawCompletedJob.
    assert_eq!(reasons(&plan.expected.events), [Reason::SuccessfulDelete]);
    let mut results = EffectResults::new();
    results.delete_failed("mycronjob-24394140", ApiError::new("conflict"));
    let outcome = follow_up(&inp, &LiveAnswers::new(), &results);
    assert_eq!(
        reasons(&outcome.events),
        [Reason::FailedDelete, Reason::SawCompletedJob]
    );
    assert_eq!(
        outcome.events[1].message,
        "Saw completed job: mycronjob-24394140, condition: Complete"
    );
    assert!(outcome.status.active.is_empty());
    assert_eq!(
        outcome.status.last_successful_time.get(),
        Some(ts("2016-05-19T09:00:10Z"))
    );
}

fn create_outcome(result: CreateResult) -> Outcome {
    let cj = view(&hourly("Allow"));
    let inp = input(&cj, &[], ts(AT_TEN_OH_ONE));
    let mut results = EffectResults::new();
    results.set_create(result);
    follow_up(&inp, &LiveAnswers::new(), &results)
}

#[test]
fn create_errors_branch_as_upstream() {
    let outcome = create_outcome(CreateResult::Failed(ApiError::new("quota exceeded")));
    assert_eq!(reasons(&outcome.events), [Reason::FailedCreate]);
    assert_eq!(
        outcome.events[0].message,
        "Error creating job: quota exceeded"
    );
    assert!(matches!(outcome.requeue, Requeue::Backoff(_)));
    assert!(!outcome.status_changed);

    let outcome = create_outcome(CreateResult::NamespaceTerminating(ApiError::new(
        "namespace snazzycats is being terminated",
    )));
    assert!(outcome.events.is_empty());
    assert!(matches!(outcome.requeue, Requeue::Backoff(_)));

    let existing = |controller: Option<&str>, uid: &str| LiveJob {
        namespace: "snazzycats".into(),
        name: "mycronjob-24394200".into(),
        uid: uid.into(),
        resource_version: Some("7".into()),
        controller_uid: controller.map(Into::into),
    };
    // Someone else's Job holds the name: nothing, and (a departure:
    // upstream does not requeue) the next slot as usual.
    let outcome = create_outcome(CreateResult::AlreadyExists(Ok(existing(
        Some("other"),
        "x",
    ))));
    assert_eq!(outcome.requeue, Requeue::At(ts("2016-05-19T11:00:00Z")));
    assert!(!outcome.status_changed);
    // Ours, not yet recorded: recorded as created, without SuccessfulCreate.
    let outcome = create_outcome(CreateResult::AlreadyExists(Ok(existing(
        Some("1a2b3c"),
        "x",
    ))));
    assert!(outcome.events.is_empty());
    assert!(outcome.status_changed);
    assert_eq!(
        outcome.status.active,
        [active_reference(
            "snazzycats",
            "mycronjob-24394200",
            "x",
            Some("7")
        )]
    );
    assert_eq!(outcome.requeue, Requeue::At(ts("2016-05-19T11:00:00Z")));
    // The GET after AlreadyExists failed.
    let outcome = create_outcome(CreateResult::AlreadyExists(Err(ApiError::new("gone"))));
    assert_eq!(outcome.requeue, Requeue::Backoff(ApiError::new("gone")));
}

#[test]
fn already_exists_for_an_active_uid_waits_for_the_next_slot() {
    // Upstream: `if found { return nil, updateStatus, nil }`, no requeue,
    // so the CronJob waits for its next event. A departure: the next slot.
    let mut cj_api = hourly("Allow");
    let mut other = prior_job(&cj_api);
    other.metadata.name = Some("renamed".into());
    set_active(&mut cj_api, &[&other]);
    let cj = view(&cj_api);
    let children = summaries(std::slice::from_ref(&other));
    let inp = input(&cj, &children, ts(AT_TEN_OH_ONE));
    let mut results = EffectResults::new();
    results.set_create(CreateResult::AlreadyExists(Ok(LiveJob {
        namespace: "snazzycats".into(),
        name: "mycronjob-24394200".into(),
        uid: "uid-0900".into(),
        resource_version: None,
        controller_uid: Some("1a2b3c".into()),
    })));
    let outcome = follow_up(&inp, &LiveAnswers::new(), &results);
    assert_eq!(outcome.requeue, Requeue::At(ts("2016-05-19T11:00:00Z")));
}

#[test]
fn a_deleting_cronjob_keeps_its_status_but_schedules_nothing() {
    let mut cj_api = hourly("Allow");
    let mut done = prior_job(&cj_api);
    finish(&mut done, "Complete", Some(ts("2016-05-19T09:00:10Z")));
    set_active(&mut cj_api, &[&done]);
    cj_api.metadata.deletion_timestamp = Some(Time(ts("2016-05-19T09:59:00Z")));
    let cj = view(&cj_api);
    let children = summaries(std::slice::from_ref(&done));
    let plan = plan_of(reconcile(
        &input(&cj, &children, ts(AT_TEN_OH_ONE)),
        &LiveAnswers::new(),
    ));
    assert!(plan.create.is_none());
    assert_eq!(reasons(&plan.expected.events), [Reason::SawCompletedJob]);
    assert!(plan.expected.status_changed);
    assert_eq!(plan.expected.requeue, Requeue::Never);
    assert!(plan.decisions.contains(&Decision::Deleting));
}

#[test]
fn suspended_still_cleans_history_and_reconciles_active() {
    let mut cj_api = hourly("Allow");
    cj_api.spec.suspend = Some(true);
    cj_api.spec.failed_jobs_history_limit = Some(0);
    let mut failed = prior_job(&cj_api);
    finish(&mut failed, "Failed", None);
    set_active(&mut cj_api, &[&failed]);
    let cj = view(&cj_api);
    let children = summaries(std::slice::from_ref(&failed));
    let plan = plan_of(reconcile(
        &input(&cj, &children, ts(AT_TEN_OH_ONE)),
        &LiveAnswers::new(),
    ));
    assert!(plan.create.is_none());
    assert_eq!(plan.deletes.len(), 1);
    assert_eq!(reasons(&plan.expected.events), [Reason::SuccessfulDelete]);
    assert_eq!(plan.expected.requeue, Requeue::Never);
    assert!(plan.decisions.contains(&Decision::Suspended));
}

#[test]
fn gates_record_upstream_warnings() {
    let check = |schedule: &str, time_zone: Option<&str>, want: &[(Reason, &str)]| {
        let mut cj_api = hourly("Allow");
        cj_api.spec.schedule = schedule.into();
        cj_api.spec.time_zone = time_zone.map(Into::into);
        let cj = view(&cj_api);
        let plan = plan_of(reconcile(
            &input(&cj, &[], ts(AT_TEN_OH_ONE)),
            &LiveAnswers::new(),
        ));
        let got: Vec<(Reason, &str)> = plan
            .expected
            .events
            .iter()
            .map(|e| (e.reason, e.message.as_str()))
            .collect();
        assert_eq!(got, want, "{schedule}");
        plan
    };
    let plan = check(
        "59 23 31 2 *",
        None,
        &[(
            Reason::InvalidSchedule,
            "invalid schedule: 59 23 31 2 * : time difference between two schedules is less than 1 second",
        )],
    );
    assert_eq!(plan.expected.requeue, Requeue::Never);
    check(
        "0 * * * *",
        Some("bad timezone"),
        &[(
            Reason::UnknownTimeZone,
            "invalid timeZone: \"bad timezone\": unknown time zone bad timezone",
        )],
    );
    check(
        "obvious error schedule",
        None,
        &[(
            Reason::UnparseableSchedule,
            "unparseable schedule: \"obvious error schedule\" : expected exactly 5 fields, found 3: [obvious error schedule]",
        )],
    );
    // TZ in the schedule: warned on every sync, and the schedule's own zone
    // wins over spec.timeZone (09:30 UTC is due, not 09:30 in Tokyo).
    let plan = check(
        "CRON_TZ=UTC 30 * * * *",
        Some("Asia/Tokyo"),
        &[
            (
                Reason::UnsupportedSchedule,
                "CRON_TZ or TZ used in schedule \"CRON_TZ=UTC 30 * * * *\" is not officially supported, see https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/ for more details",
            ),
            (Reason::SuccessfulCreate, "Created job mycronjob-24394170"),
        ],
    );
    assert_eq!(
        plan.expected.requeue,
        Requeue::At(ts("2016-05-19T10:30:00Z"))
    );
}

#[test]
fn forbid_waits_then_starts_the_most_recent_slot_late() {
    let mut cj_api = hourly("Forbid");
    let mut running = prior_job(&cj_api);
    set_active(&mut cj_api, &[&running]);
    let cj = view(&cj_api);
    let children = summaries(std::slice::from_ref(&running));
    let inp = input(&cj, &children, ts(AT_TEN_OH_ONE));
    let plan = plan_of(reconcile(&inp, &LiveAnswers::new()));
    assert!(plan.create.is_none());
    assert_eq!(reasons(&plan.expected.events), [Reason::JobAlreadyActive]);
    assert!(
        !plan.expected.status_changed,
        "lastScheduleTime is not advanced"
    );
    assert!(plan.decisions.contains(&Decision::ForbidWhileActive {
        slot: top_of_the_hour(),
        running: vec!["mycronjob-24394140".into()],
    }));
    assert_eq!(
        plan.decisions
            .iter()
            .find(|d| matches!(d, Decision::ForbidWhileActive { .. }))
            .unwrap()
            .to_string(),
        "not started (slot 2016-05-19T10:00:00Z): concurrencyPolicy Forbid and job mycronjob-24394140 is still running"
    );

    // It finishes at 10:20: the 10:00 slot starts then.
    finish(&mut running, "Complete", Some(ts("2016-05-19T10:20:00Z")));
    let children = summaries(std::slice::from_ref(&running));
    let plan = plan_of(reconcile(
        &input(&cj, &children, ts("2016-05-19T10:20:05Z")),
        &LiveAnswers::new(),
    ));
    assert_eq!(plan.create.unwrap().scheduled_time, top_of_the_hour());
    assert_eq!(
        reasons(&plan.expected.events),
        [Reason::SawCompletedJob, Reason::SuccessfulCreate]
    );
}

#[test]
fn any_other_policy_behaves_as_allow() {
    for policy in ["", "allow", "Sometimes"] {
        let mut cj_api = hourly(policy);
        let running = prior_job(&cj_api);
        set_active(&mut cj_api, &[&running]);
        let cj = view(&cj_api);
        let children = summaries(std::slice::from_ref(&running));
        let plan = plan_of(reconcile(
            &input(&cj, &children, ts(AT_TEN_OH_ONE)),
            &LiveAnswers::new(),
        ));
        assert!(plan.create.is_some(), "{policy:?}");
        assert_eq!(plan.expected.status.active.len(), 2, "{policy:?}");
    }
}

#[test]
fn history_limits_delete_the_oldest_per_kind() {
    let mut cj_api = hourly("Allow");
    cj_api.spec.successful_jobs_history_limit = Some(1);
    cj_api.spec.failed_jobs_history_limit = Some(1);
    let make = |hour: &str, kind: &str, start: Option<&str>| {
        let mut job = job_from_template(&cj_api, ts(&format!("2016-05-19T{hour}:00:00Z")), hour);
        job.status.get_or_insert_with(Default::default).start_time =
            start.map(|s| Time(ts(&format!("2016-05-19T{s}:00:00Z"))));
        finish(&mut job, kind, None);
        job
    };
    let jobs = [
        make("05", "Complete", None),
        make("06", "Complete", Some("06")),
        make("07", "Complete", Some("07")),
        make("03", "Failed", Some("03")),
        make("04", "Failed", Some("04")),
    ];
    let cj = view(&cj_api);
    let children = summaries(&jobs);
    let plan = plan_of(reconcile(
        &input(&cj, &children, ts("2016-05-19T09:30:00Z")),
        &LiveAnswers::new(),
    ));
    let deleted: Vec<&str> = plan.deletes.iter().map(|d| d.uid.as_str()).collect();
    // Successful first (no startTime sorts last), then failed.
    assert_eq!(deleted, ["06", "07", "03"]);
    assert_eq!(
        plan.deletes[0].why,
        DeleteReason::HistoryLimit {
            finished: Finished::Complete,
            limit: 1
        }
    );
    assert!(!plan.deletes[0].blocks_create());

    // Unset limits: nothing; a negative limit (upstream panics): everything.
    cj_api.spec.successful_jobs_history_limit = None;
    cj_api.spec.failed_jobs_history_limit = None;
    let cj = view(&cj_api);
    let plan = plan_of(reconcile(
        &input(&cj, &children, ts("2016-05-19T09:30:00Z")),
        &LiveAnswers::new(),
    ));
    assert!(plan.deletes.is_empty());
    cj_api.spec.failed_jobs_history_limit = Some(-1);
    let cj = view(&cj_api);
    let plan = plan_of(reconcile(
        &input(&cj, &children, ts("2016-05-19T09:30:00Z")),
        &LiveAnswers::new(),
    ));
    assert_eq!(plan.deletes.len(), 2);
}

#[test]
fn last_successful_time_is_the_latest_completion_and_a_flag_when_missing() {
    let cj_api = hourly("Allow");
    let mut early = job_from_template(&cj_api, ts("2016-05-19T07:00:00Z"), "a");
    finish(&mut early, "Complete", Some(ts("2016-05-19T07:00:10Z")));
    let mut late = job_from_template(&cj_api, ts("2016-05-19T08:00:00Z"), "b");
    finish(&mut late, "Complete", Some(ts("2016-05-19T08:00:10Z")));
    let mut failed = job_from_template(&cj_api, ts("2016-05-19T09:00:00Z"), "c");
    finish(&mut failed, "Failed", Some(ts("2016-05-19T09:00:10Z")));
    let cj = view(&cj_api);
    let children = summaries(&[late, early, failed]);
    let now = ts("2016-05-19T09:30:00Z");
    let plan = plan_of(reconcile(&input(&cj, &children, now), &LiveAnswers::new()));
    assert_eq!(
        plan.expected.status.last_successful_time.get(),
        Some(ts("2016-05-19T08:00:10Z"))
    );
    assert!(plan.expected.status_changed);

    // A succeeded Job without completionTime sets the flag on every sync.
    let mut odd = job_from_template(&cj_api, ts("2016-05-19T07:00:00Z"), "d");
    finish(&mut odd, "Complete", None);
    let children = summaries(&[odd]);
    let plan = plan_of(reconcile(&input(&cj, &children, now), &LiveAnswers::new()));
    assert!(plan.expected.status_changed);
    assert_eq!(plan.expected.status.last_successful_time.get(), None);
}

#[test]
fn every_with_a_short_deadline_never_fires() {
    // Upstream's commented-out case: reproduced, not fixed.
    let mut cj_api = hourly("Allow");
    cj_api.spec.schedule = "@every 1h".into();
    cj_api.spec.starting_deadline_seconds = Some(10);
    let cj = view(&cj_api);
    for now in [
        "2016-05-19T10:00:05Z",
        "2016-05-19T10:30:00Z",
        "2016-05-20T10:00:00Z",
    ] {
        let plan = plan_of(reconcile(&input(&cj, &[], ts(now)), &LiveAnswers::new()));
        assert!(plan.create.is_none(), "{now}");
    }
}

#[test]
fn three_lookup_rounds_at_most() {
    // A running child missing from status.active (CronJob GET), an active
    // Job missing from the children (Job GET), then Replace (Job GET of the
    // child that the live CronJob lists).
    let mut cj_api = hourly("Replace");
    let running = prior_job(&cj_api);
    let mut gone = job_from_template(&cj_api, ts("2016-05-19T08:00:00Z"), "uid-gone");
    gone.metadata.name = Some("gone".into());
    let mut live_api = cj_api.clone();
    set_active(&mut live_api, &[&running, &gone]);
    set_active(&mut cj_api, &[&gone]);
    let cj = view(&cj_api);
    let children = summaries(std::slice::from_ref(&running));
    let fake = FakeApi {
        cronjob: Some(live_api),
        job: Some(running.clone()),
        ..FakeApi::default()
    };
    let applied = fake.sync(&input(&cj, &children, ts(AT_TEN_OH_ONE)));
    assert_eq!(
        applied.rounds, 3,
        "CronJob GET, missing Job GET, Replace GET"
    );
    assert!(applied.outcome.status_changed);
}

#[test]
fn one_job_per_sync_even_after_many_missed_slots() {
    let cj = view(&hourly("Allow"));
    let plan = plan_of(reconcile(
        &input(&cj, &[], week_after_the_hour()),
        &LiveAnswers::new(),
    ));
    assert_eq!(plan.create.unwrap().scheduled_time, week_after_the_hour());
    assert_eq!(
        reasons(&plan.expected.events),
        [Reason::TooManyMissedTimes, Reason::SuccessfulCreate]
    );
}

#[test]
fn decisions_read_as_sentences() {
    let cj = view(&hourly("Allow"));
    let plan = plan_of(reconcile(
        &input(&cj, &[], ts("2016-05-19T09:30:00Z")),
        &LiveAnswers::new(),
    ));
    let lines: Vec<String> = plan.decisions.iter().map(ToString::to_string).collect();
    assert_eq!(
        lines,
        [
            "nothing due: no unstarted slot",
            "next look at 2016-05-19T10:00:00Z"
        ]
    );
    let _: Timestamp = ts("2016-05-19T09:30:00Z");
}

/// An entry of `status.active` pointing at `namespace/name`, as a tenant
/// with `cronjobs/status` rights can write one.
fn forged_reference(namespace: &str, name: &str) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        uid: Some(format!("uid-of-{name}")),
        ..Default::default()
    }
}

fn with_active(
    mut cj: CronJob,
    entries: Vec<k8s_openapi::api::core::v1::ObjectReference>,
) -> CronJob {
    cj.status.get_or_insert_with(Default::default).active = Some(entries);
    cj
}

#[test]
fn an_active_entry_in_another_namespace_is_dropped_unseen_and_never_replaced() {
    let cj = view(&with_active(
        hourly("Replace"),
        vec![forged_reference("kube-system", "coredns-backup")],
    ));
    // No lookup at all: the plan comes at once.
    let plan = plan_of(reconcile(
        &input(&cj, &[], ts(AT_TEN_OH_ONE)),
        &LiveAnswers::new(),
    ));
    assert!(plan.deletes.is_empty(), "{:?}", plan.deletes);
    assert!(plan.create.is_some(), "the slot itself still runs");
    assert!(reasons(&plan.expected.events).contains(&Reason::ForeignActiveJob));
    assert!(
        plan.expected
            .status
            .active
            .iter()
            .all(|r| r.namespace.as_deref() == Some("snazzycats")),
        "{:?}",
        plan.expected.status.active
    );
}

#[test]
fn an_active_entry_naming_a_job_of_another_controller_is_dropped_not_deleted() {
    let cj = view(&with_active(
        hourly("Replace"),
        vec![forged_reference("snazzycats", "someone-elses")],
    ));
    let at = input(&cj, &[], ts(AT_TEN_OH_ONE));
    let asked = lookups_of(reconcile(&at, &LiveAnswers::new()));
    assert_eq!(asked, [job_lookup("someone-elses")]);
    let mut live = LiveAnswers::new();
    live.set_job(
        "snazzycats",
        "someone-elses",
        JobLookup::Found(LiveJob {
            namespace: "snazzycats".into(),
            name: "someone-elses".into(),
            uid: "uid-of-someone-elses".into(),
            resource_version: None,
            controller_uid: Some("another-cronjob".into()),
        }),
    );
    let plan = plan_of(reconcile(&at, &live));
    assert!(plan.deletes.is_empty(), "{:?}", plan.deletes);
    assert!(reasons(&plan.expected.events).contains(&Reason::ForeignActiveJob));
    assert!(
        !plan
            .expected
            .status
            .active
            .iter()
            .any(|r| r.name.as_deref() == Some("someone-elses"))
    );
}

#[test]
fn thousands_of_forged_entries_cost_at_most_ten_lookups_and_one_event() {
    let forged = (0..5_000)
        .map(|n| forged_reference("snazzycats", &format!("forged-{n}")))
        .collect();
    let cj = view(&with_active(hourly("Replace"), forged));
    let at = input(&cj, &[], ts(AT_TEN_OH_ONE));
    let asked = lookups_of(reconcile(&at, &LiveAnswers::new()));
    assert_eq!(asked.len(), MAX_UNLISTED_LOOKUPS);
    let mut live = LiveAnswers::new();
    for lookup in &asked {
        let Lookup::Job { namespace, name } = lookup else {
            panic!("{lookup:?}")
        };
        live.set_job(namespace, name, JobLookup::NotFound);
    }
    let plan = plan_of(reconcile(&at, &live));
    assert!(plan.deletes.is_empty());
    assert!(plan.expected.status.active.len() <= 1, "only the new Job");
    let foreign = reasons(&plan.expected.events)
        .into_iter()
        .filter(|r| *r == Reason::ForeignActiveJob)
        .count();
    assert_eq!(foreign, 1, "one warning for all of them");
}

/// A template too big to keep (`CompactTemplate::Left`): the decision asks
/// for it again before it makes the Job, builds the Job from the answer,
/// and a failed read is a failed lookup (backoff), no Job.
#[test]
fn a_template_too_big_to_keep_is_read_again_for_its_job() {
    let mut cj = hourly("Allow");
    let noise = shardcron_harness::incompressible_text(64 * 1024, 1);
    cj.spec
        .job_template
        .metadata
        .get_or_insert_default()
        .annotations = Some([("noise".to_owned(), noise.clone())].into());
    let held = view(&cj);
    assert!(matches!(
        held.spec.job_template,
        CompactTemplate::Left { .. }
    ));
    let inp = input(&held, &[], ts(AT_TEN_OH_ONE));
    let Step::Lookup(lookups) = reconcile(&inp, &LiveAnswers::new()) else {
        panic!("no lookup for the template");
    };
    assert_eq!(
        lookups,
        [Lookup::JobTemplate {
            namespace: cj.metadata.namespace.clone().unwrap_or_default(),
            name: cj.metadata.name.clone().unwrap_or_default(),
        }]
    );
    let mut live = LiveAnswers::new();
    live.set_template(Ok(JobTemplate::from(&cj.spec.job_template)));
    let plan = plan_of(reconcile(&inp, &live));
    let job = plan
        .create
        .and_then(|create| create.job)
        .expect("a Job to create");
    assert_eq!(
        job.metadata.annotations.unwrap_or_default().get("noise"),
        Some(&noise)
    );
    // The read failed (the CronJob gone or replaced): no Job, a backoff.
    let mut live = LiveAnswers::new();
    live.set_template(Err(ApiError::new("cronjobs.batch \"mycronjob\" not found")));
    let plan = plan_of(reconcile(&inp, &live));
    assert!(plan.create.is_none());
    assert!(matches!(plan.expected.requeue, Requeue::Backoff(_)));
}
