//! Upstream's `TestControllerV2SyncCronJob`, every case, with `now` passed in.
//!
//! Upstream calls `syncCronJob` alone; here each case runs the whole sync
//! (history clean-up, lookups, writes against a fake with upstream's fake's
//! behaviour, follow-up). Only one case sets a history limit that bites, and
//! its expectations say so. Upstream's requeue durations include its 100 ms
//! margin; here the wake-up is the instant `now + duration - 100ms`.

use super::fixtures::*;
use crate::reconcile::*;
use jiff::{SignedDuration, Timestamp};

const SHORT_DEAD: i64 = 10;
const MEDIUM_DEAD: i64 = 2 * 60 * 60;
const LONG_DEAD: i64 = 1_000_000;
const NO_DEAD: i64 = -12345;

const ERROR_SCHEDULE: &str = "obvious error schedule";
const ON_THE_HOUR: &str = "0 * * * ?";
const EVERY_HOUR: &str = "@every 1h";
const ERROR_TIME_ZONE: &str = "bad timezone";
const NEW_YORK: &str = "America/New_York";

/// Go's zero `time.Time`, which the cases that leave `now` unset run at.
fn zero() -> Timestamp {
    Timestamp::from_second(-62_135_596_800).unwrap()
}

#[derive(Clone)]
struct Case {
    name: &'static str,
    // cj spec
    concurrency_policy: &'static str,
    suspend: bool,
    schedule: &'static str,
    time_zone: Option<&'static str>,
    deadline: i64,
    successful_jobs_history_limit: Option<i32>,
    // cj status
    ran_previously: bool,
    still_active: bool,
    // environment
    cronjob_creation_time: Option<Timestamp>,
    job_creation_time: Timestamp,
    last_schedule_time: Option<Timestamp>,
    now: Timestamp,
    job_create_error: Option<CreateError>,
    job_get_err: Option<ApiError>,
    // expectations
    expect_create: bool,
    expect_delete: bool,
    expect_completed: bool,
    expect_active: usize,
    expected_warnings: usize,
    expect_err: bool,
    /// Upstream's `expectedRequeueDuration` less its 100 ms margin.
    expected_requeue: Option<SignedDuration>,
    expect_update_status: bool,
    job_still_not_found_in_lister: bool,
    job_present_in_cj_active_status: bool,
}

fn case(name: &'static str) -> Case {
    Case {
        name,
        concurrency_policy: "",
        suspend: false,
        schedule: "",
        time_zone: None,
        deadline: 0,
        successful_jobs_history_limit: None,
        ran_previously: false,
        still_active: false,
        cronjob_creation_time: None,
        job_creation_time: zero(),
        last_schedule_time: None,
        now: zero(),
        job_create_error: None,
        job_get_err: None,
        expect_create: false,
        expect_delete: false,
        expect_completed: false,
        expect_active: 0,
        expected_warnings: 0,
        expect_err: false,
        expected_requeue: None,
        expect_update_status: false,
        job_still_not_found_in_lister: false,
        job_present_in_cj_active_status: false,
    }
}

fn after(t: Timestamp, d: SignedDuration) -> Timestamp {
    t + d
}

fn ms(n: i64) -> SignedDuration {
    SignedDuration::from_millis(n)
}

fn already_exists() -> Option<CreateError> {
    Some(CreateError::AlreadyExists)
}

#[rustfmt::skip]
fn cases() -> Vec<Case> {
    let a = |name| Case { concurrency_policy: "Allow", schedule: ON_THE_HOUR, deadline: NO_DEAD, job_creation_time: just_after_the_prior_hour(), job_present_in_cj_active_status: true, ..case(name) };
    let f = |name| Case { concurrency_policy: "Forbid", ..a(name) };
    let r = |name| Case { concurrency_policy: "Replace", ..a(name) };
    let with = |c: Case, policy: &'static str| Case { concurrency_policy: policy, ..c };
    let mut v = vec![
        Case { schedule: ERROR_SCHEDULE, now: just_before_the_hour(), expected_warnings: 1, ..a("never ran, not valid schedule, A") },
        Case { schedule: ERROR_SCHEDULE, now: just_before_the_hour(), expected_warnings: 1, ..f("never ran, not valid schedule, F") },
        // Upstream's "R" case uses Forbid too.
        Case { schedule: ERROR_SCHEDULE, now: just_before_the_hour(), expected_warnings: 1, ..f("never ran, not valid schedule, R") },
        Case { time_zone: Some(ERROR_TIME_ZONE), now: just_before_the_hour(), expected_warnings: 1, ..a("never ran, not valid time zone") },
    ];
    for (policy, name) in [("Allow", "never ran, not time, A"), ("Forbid", "never ran, not time, F"), ("Replace", "never ran, not time, R")] {
        v.push(Case { now: just_before_the_hour(), expected_requeue: Some(mins(1)), ..with(a(name), policy) });
    }
    v.push(Case { time_zone: Some(NEW_YORK), now: just_before_the_hour(), expected_requeue: Some(mins(1)), ..a("never ran, not time in zone") });
    for (policy, name) in [("Allow", "never ran, is time, A"), ("Forbid", "never ran, is time, F"), ("Replace", "never ran, is time, R")] {
        v.push(Case { now: just_after_the_hour(), expect_create: true, expect_active: 1, expected_requeue: Some(hours(1) - mins(1)), expect_update_status: true, ..with(a(name), policy) });
    }
    v.extend([
        Case { time_zone: Some(NEW_YORK), now: just_after_the_hour(), expect_create: true, expect_active: 1, expected_requeue: Some(hours(1) - mins(1)), expect_update_status: true, ..a("never ran, is time in zone, but time zone disabled") },
        Case { time_zone: Some(NEW_YORK), now: just_after_the_hour(), expect_create: true, expect_active: 1, expected_requeue: Some(hours(1) - mins(1)), expect_update_status: true, ..a("never ran, is time in zone") },
        // Upstream leaves expectActive at 0 in this case and the two
        // AlreadyExists cases below, and sets 1 in "@every ... long overdue,
        // past deadline": its check never runs for syncCronJob alone. The
        // counts here are the real ones.
        Case { schedule: "TZ=UTC 0 * * * ?", time_zone: Some(NEW_YORK), now: just_after_the_hour(), expect_create: true, expect_active: 1, expected_warnings: 1, expected_requeue: Some(hours(1) - mins(1)), expect_update_status: true, ..a("never ran, is time in zone, but TZ is also set in schedule") },
        Case { suspend: true, now: just_after_the_hour(), ..a("never ran, is time, suspended") },
        Case { deadline: SHORT_DEAD, now: after(just_after_the_hour(), mins(SHORT_DEAD + 1)), expected_requeue: Some(hours(1) - mins(1) - mins(SHORT_DEAD + 1)), ..a("never ran, is time, past deadline") },
        Case { deadline: LONG_DEAD, now: just_after_the_hour(), expect_create: true, expect_active: 1, expected_requeue: Some(hours(1) - mins(1)), expect_update_status: true, ..a("never ran, is time, not past deadline") },
    ]);
    let done = |c: Case| Case { ran_previously: true, expect_completed: true, expect_update_status: true, ..c };
    for (policy, name) in [("Allow", "prev ran but done, not time, A"), ("Forbid", "prev ran but done, not time, F"), ("Replace", "prev ran but done, not time, R")] {
        v.push(Case { now: just_before_the_hour(), expected_requeue: Some(mins(1)), ..done(with(a(name), policy)) });
    }
    v.extend([
        Case { now: just_after_the_hour(), expect_create: true, expect_active: 1, expected_requeue: Some(hours(1) - mins(1)), ..done(a("prev ran but done, is time, A")) },
        Case { now: just_after_the_hour(), job_create_error: already_exists(), expect_active: 1, ..done(a("prev ran but done, is time, create job failed, A")) },
        Case { now: just_after_the_hour(), job_create_error: already_exists(), expect_active: 1, expect_completed: false, job_present_in_cj_active_status: false, ..done(a("prev ran but done, is time, job not present in CJ active status, create job failed, A")) },
        Case { now: just_after_the_hour(), expect_create: true, expect_active: 1, expected_requeue: Some(hours(1) - mins(1)), ..done(f("prev ran but done, is time, F")) },
        Case { now: just_after_the_hour(), expect_create: true, expect_active: 1, expected_requeue: Some(hours(1) - mins(1)), ..done(r("prev ran but done, is time, R")) },
        Case { suspend: true, now: just_after_the_hour(), ..done(a("prev ran but done, is time, suspended")) },
        Case { deadline: SHORT_DEAD, now: just_after_the_hour(), expected_requeue: Some(hours(1) - mins(1)), ..done(a("prev ran but done, is time, past deadline")) },
        Case { deadline: LONG_DEAD, now: just_after_the_hour(), expect_create: true, expect_active: 1, expected_requeue: Some(hours(1) - mins(1)), ..done(a("prev ran but done, is time, not past deadline")) },
    ]);
    let active = |c: Case| Case { ran_previously: true, still_active: true, expect_active: 1, ..c };
    for (policy, name) in [("Allow", "still active, not time, A"), ("Forbid", "still active, not time, F"), ("Replace", "still active, not time, R")] {
        v.push(Case { now: just_before_the_hour(), expected_requeue: Some(mins(1)), ..active(with(a(name), policy)) });
    }
    v.extend([
        Case { now: just_after_the_hour(), expect_create: true, expect_active: 2, expected_requeue: Some(hours(1) - mins(1)), expect_update_status: true, ..active(a("still active, is time, A")) },
        Case { now: just_after_the_hour(), expected_requeue: Some(hours(1) - mins(1)), ..active(f("still active, is time, F")) },
        Case { now: just_after_the_hour(), expect_create: true, expect_delete: true, expected_requeue: Some(hours(1) - mins(1)), expect_update_status: true, ..active(r("still active, is time, R")) },
        Case { now: just_after_the_hour(), job_get_err: Some(ApiError::new("request is invalid")), expected_warnings: 1, ..active(r("still active, is time, get job failed, R")) },
        Case { suspend: true, now: just_after_the_hour(), ..active(a("still active, is time, suspended")) },
        Case { deadline: SHORT_DEAD, now: just_after_the_hour(), expected_requeue: Some(hours(1) - mins(1)), ..active(a("still active, is time, past deadline")) },
        Case { deadline: LONG_DEAD, now: just_after_the_hour(), expect_create: true, expect_active: 2, expected_requeue: Some(hours(1) - mins(1)), expect_update_status: true, ..active(a("still active, is time, not past deadline")) },
    ]);
    // Long overdue: more than 100 missed slots.
    for (deadline, warnings, label) in [(LONG_DEAD, 1, "not past deadline"), (NO_DEAD, 1, "no deadline"), (MEDIUM_DEAD, 0, "past medium deadline"), (SHORT_DEAD, 0, "past short deadline")] {
        for (policy, letter) in [("Allow", "A"), ("Replace", "R"), ("Forbid", "F")] {
            let name: &'static str = Box::leak(format!("prev ran but done, long overdue, {label}, {letter}").into_boxed_str());
            v.push(Case { deadline, now: week_after_the_hour(), expect_create: true, expect_active: 1, expected_warnings: warnings, expected_requeue: Some(hours(1)), ..done(with(a(name), policy)) });
        }
    }
    let slow = |c: Case| Case { deadline: LONG_DEAD, job_creation_time: after(top_of_the_hour(), ms(100)), now: after(just_after_the_hour(), ms(100)), expected_requeue: Some(hours(1) - mins(1) - ms(100)), ..active(c) };
    v.extend([
        // Time skew: the controller sees the job was created, takes no action.
        Case { job_creation_time: just_after_the_hour(), now: just_before_the_hour(), job_create_error: already_exists(), expected_requeue: Some(mins(1)), expect_update_status: true, expect_completed: false, job_present_in_cj_active_status: false, ..done(f("this ran but done, time drifted back, F")) },
        // Slow job lister.
        Case { job_still_not_found_in_lister: true, ..slow(a("this started but went missing, not past deadline, A")) },
        Case { job_still_not_found_in_lister: true, ..slow(f("this started but went missing, not past deadline, f")) },
        Case { job_still_not_found_in_lister: true, ..slow(r("this started but went missing, not past deadline, R")) },
        // Slow CronJob lister.
        Case { job_present_in_cj_active_status: false, ..slow(a("this started but is not present in cronjob active list, not past deadline, A")) },
        Case { job_present_in_cj_active_status: false, ..slow(f("this started but is not present in cronjob active list, not past deadline, f")) },
        Case { job_present_in_cj_active_status: false, ..slow(r("this started but is not present in cronjob active list, not past deadline, R")) },
    ]);
    // @every schedules.
    let e = |name| Case { schedule: EVERY_HOUR, cronjob_creation_time: Some(just_before_the_prior_hour()), job_creation_time: just_before_the_prior_hour(), ..a(name) };
    v.extend([
        Case { cronjob_creation_time: Some(just_before_the_hour()), job_creation_time: just_before_the_hour(), now: top_of_the_hour(), expected_requeue: Some(hours(1) - mins(1)), ..e("with @every schedule, never ran, not time") },
        Case { now: just_before_the_hour(), expected_requeue: Some(hours(1)), expect_create: true, expect_active: 1, expect_update_status: true, ..e("with @every schedule, never ran, is time") },
        Case { deadline: SHORT_DEAD, now: after(just_before_the_hour(), secs(SHORT_DEAD + 1)), expected_requeue: Some(hours(1) - secs(SHORT_DEAD + 1)), ..e("with @every schedule, never ran, is time, past deadline") },
        Case { deadline: LONG_DEAD, now: after(just_before_the_hour(), secs(SHORT_DEAD - 1)), expect_create: true, expect_active: 1, expected_requeue: Some(hours(1) - secs(SHORT_DEAD - 1)), expect_update_status: true, ..e("with @every schedule, never ran, is time, not past deadline") },
        Case { last_schedule_time: Some(just_before_the_hour()), now: top_of_the_hour(), expected_requeue: Some(hours(1) - mins(1)), ..done(e("with @every schedule, prev ran but done, not time")) },
        Case { last_schedule_time: Some(just_before_the_hour()), now: after(top_of_the_hour(), hours(1)), expect_create: true, expect_active: 1, expected_requeue: Some(hours(1) - mins(1)), ..done(e("with @every schedule, prev ran but done, is time")) },
        Case { deadline: SHORT_DEAD, last_schedule_time: Some(just_before_the_hour()), now: after(just_before_the_next_hour(), secs(SHORT_DEAD + 1)), expected_requeue: Some(hours(1) - secs(SHORT_DEAD + 1)), ..done(e("with @every schedule, prev ran but done, is time, past deadline")) },
        Case { job_creation_time: just_before_the_hour(), last_schedule_time: Some(just_before_the_hour()), now: top_of_the_hour(), expected_requeue: Some(hours(1) - mins(1)), ..active(e("with @every schedule, still active, not time")) },
        Case { last_schedule_time: Some(just_before_the_prior_hour()), now: just_after_the_hour(), expect_create: true, expect_active: 2, expected_requeue: Some(hours(1) - mins(2)), expect_update_status: true, ..active(e("with @every schedule, still active, is time")) },
        Case { deadline: SHORT_DEAD, job_creation_time: just_before_the_hour(), last_schedule_time: Some(just_before_the_hour()), now: after(just_before_the_next_hour(), secs(SHORT_DEAD + 1)), expected_requeue: Some(hours(1) - secs(SHORT_DEAD + 1)), ..active(e("with @every schedule, still active, is time, past deadline")) },
        Case { deadline: LONG_DEAD, job_creation_time: just_before_the_hour(), last_schedule_time: Some(just_before_the_hour()), now: after(just_before_the_next_hour(), secs(SHORT_DEAD - 1)), expect_create: true, expect_active: 2, expected_requeue: Some(hours(1) - secs(SHORT_DEAD - 1)), expect_update_status: true, ..active(e("with @every schedule, still active, is time, not past deadline")) },
        Case { cronjob_creation_time: Some(just_after_the_prior_hour()), last_schedule_time: Some(just_after_the_hour()), job_creation_time: just_after_the_prior_hour(), now: week_after_the_hour(), expect_create: true, expect_active: 1, expected_warnings: 1, expected_requeue: Some(mins(1)), ..done(e("with @every schedule, prev ran but done, long overdue, no deadline")) },
        Case { deadline: SHORT_DEAD, cronjob_creation_time: Some(just_after_the_prior_hour()), last_schedule_time: Some(just_after_the_hour()), job_creation_time: just_after_the_prior_hour(), now: after(after(week_after_the_hour(), mins(1)), secs(SHORT_DEAD + 1)), expect_active: 0, expected_requeue: Some(hours(1) - secs(SHORT_DEAD + 1)), ..done(e("with @every schedule, prev ran but done, long overdue, past deadline")) },
        Case { job_create_error: Some(CreateError::NamespaceTerminating), now: just_after_the_hour(), expect_active: 0, expect_err: true, job_present_in_cj_active_status: false, ..active(a("do nothing if the namespace is terminating")) },
        // Upstream calls syncCronJob alone, without the history clean-up;
        // in the whole sync a limit of 0 deletes the finished Job first, so
        // its entry leaves status.active by the delete, not as "completed".
        Case { successful_jobs_history_limit: Some(0), schedule: ON_THE_HOUR, expect_delete: true, expect_completed: false, job_present_in_cj_active_status: true, ..done(case("set lastsuccessfultime if successfulJobHistoryLimit is zero")) },
        Case { successful_jobs_history_limit: Some(10), schedule: ON_THE_HOUR, job_present_in_cj_active_status: true, ..done(case("set lastsuccessfultime if successfulJobHistoryLimit is ten")) },
        Case { schedule: ON_THE_HOUR, job_present_in_cj_active_status: true, ..done(case("set lastsuccessfultime if successfulJobHistoryLimit is nil")) },
    ]);
    v
}

#[test]
fn upstream_sync_cron_job_table() {
    let cases = cases();
    assert_eq!(cases.len(), 74, "every upstream case is here");
    let mut failures = Vec::new();
    for tc in &cases {
        if let Err(why) = run_case(tc) {
            failures.push(format!("{}: {why}", tc.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn run_case(tc: &Case) -> Result<(), String> {
    let mut cj = cron_job();
    cj.spec.concurrency_policy = Some(tc.concurrency_policy.into());
    cj.spec.suspend = Some(tc.suspend);
    cj.spec.schedule = tc.schedule.into();
    cj.spec.time_zone = tc.time_zone.map(Into::into);
    cj.spec.successful_jobs_history_limit = tc.successful_jobs_history_limit;
    if tc.deadline != NO_DEAD {
        cj.spec.starting_deadline_seconds = Some(tc.deadline);
    }
    let mut jobs = Vec::new();
    let mut real_cj = cj.clone();
    let mut job = None;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    if tc.ran_previously {
        cj.metadata.creation_timestamp = Some(Time(
            tc.cronjob_creation_time
                .unwrap_or(just_before_the_prior_hour()),
        ));
        let lst = tc.last_schedule_time.unwrap_or(just_after_the_prior_hour());
        cj.status
            .get_or_insert_with(Default::default)
            .last_schedule_time = Some(Time(lst));
        let mut j = job_from_template(&cj, tc.job_creation_time, "1234");
        let reference = reference_of(&j);
        if tc.job_present_in_cj_active_status {
            cj.status.get_or_insert_with(Default::default).active = Some(vec![reference.clone()]);
        }
        if tc.still_active {
            real_cj.status.get_or_insert_with(Default::default).active = Some(vec![reference]);
        } else {
            finish(&mut j, "Complete", Some(tc.job_creation_time + secs(10)));
        }
        if !tc.job_still_not_found_in_lister {
            jobs.push(j.clone());
        }
        job = Some(j);
    } else {
        cj.metadata.creation_timestamp = Some(Time(
            tc.cronjob_creation_time.unwrap_or(just_before_the_hour()),
        ));
    }
    let fake = FakeApi {
        cronjob: Some(real_cj),
        job,
        job_err: tc.job_get_err.clone(),
        create_err: tc.job_create_error.clone(),
    };
    let cronjob = view(&cj);
    let children = summaries(&jobs);
    let applied = fake.sync(&input(&cronjob, &children, tc.now));
    let outcome = &applied.outcome;

    let mut problems = Vec::new();
    if tc.expect_err && !matches!(outcome.requeue, Requeue::Backoff(_)) {
        problems.push(format!("expected an error, got {:?}", outcome.requeue));
    }
    if let Some(d) = tc.expected_requeue {
        let want = Requeue::At(tc.now + d);
        if outcome.requeue != want {
            problems.push(format!("requeue {:?}, want {want:?}", outcome.requeue));
        }
    }
    if outcome.status_changed != tc.expect_update_status {
        problems.push(format!(
            "statusChanged {}, want {}",
            outcome.status_changed, tc.expect_update_status
        ));
    }
    if tc.ran_previously && !tc.still_active {
        let want = tc.job_creation_time + secs(10);
        if outcome.status.last_successful_time.get() != Some(want) {
            problems.push(format!(
                "lastSuccessfulTime {:?}, want {want}",
                outcome.status.last_successful_time
            ));
        }
    }
    if applied.created.len() != usize::from(tc.expect_create) {
        problems.push(format!(
            "{} jobs created, want {}",
            applied.created.len(),
            u8::from(tc.expect_create)
        ));
    }
    for job in &applied.created {
        let owner = controller_of(job).ok_or("created job has no controller reference")?;
        let ok = owner.api_version == "batch/v1"
            && owner.kind == "CronJob"
            && owner.name == "mycronjob"
            && owner.uid == "1a2b3c"
            && owner.controller == Some(true);
        if !ok {
            problems.push(format!("bad controller reference {owner:?}"));
        }
    }
    if applied.deleted.len() != usize::from(tc.expect_delete) {
        problems.push(format!(
            "{} jobs deleted, want {}",
            applied.deleted.len(),
            u8::from(tc.expect_delete)
        ));
    }
    let mut expected_events = usize::from(tc.expect_create)
        + usize::from(tc.expect_delete)
        + usize::from(tc.expect_completed)
        + tc.expected_warnings;
    if tc.name == "still active, is time, F" {
        expected_events += 1;
    }
    if outcome.events.len() != expected_events {
        problems.push(format!(
            "events {:?}, want {expected_events}",
            reasons(&outcome.events)
        ));
    }
    let warnings = outcome
        .events
        .iter()
        .filter(|e| e.event_type == EventType::Warning)
        .count();
    if warnings != tc.expected_warnings {
        problems.push(format!(
            "{warnings} warnings, want {}",
            tc.expected_warnings
        ));
    }
    // Upstream's active-count check only runs when its fake saw status
    // updates, which syncCronJob alone never makes; check the written status.
    if outcome.status_changed && outcome.status.active.len() != tc.expect_active {
        problems.push(format!(
            "{} active, want {}",
            outcome.status.active.len(),
            tc.expect_active
        ));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}
