//! Upstream's test fixtures (`cronJob()`, `jobSpec()`, the named instants)
//! and a fake API server that answers lookups and writes the way upstream's
//! `fakeCJControl` / `fakeJobControl` do.

use crate::reconcile::*;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, Job, JobCondition, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use std::collections::BTreeMap;

pub fn ts(s: &str) -> Timestamp {
    s.parse().expect("test timestamp")
}

pub fn top_of_the_hour() -> Timestamp {
    ts("2016-05-19T10:00:00Z")
}
pub fn just_a_second_before_the_hour() -> Timestamp {
    ts("2016-05-19T09:59:59Z")
}
pub fn just_after_the_prior_hour() -> Timestamp {
    ts("2016-05-19T09:01:00Z")
}
pub fn just_before_the_prior_hour() -> Timestamp {
    ts("2016-05-19T08:59:00Z")
}
pub fn just_after_the_hour() -> Timestamp {
    ts("2016-05-19T10:01:00Z")
}
pub fn just_before_the_hour() -> Timestamp {
    ts("2016-05-19T09:59:00Z")
}
pub fn just_before_the_next_hour() -> Timestamp {
    ts("2016-05-19T10:59:00Z")
}
pub fn week_after_the_hour() -> Timestamp {
    ts("2016-05-26T10:00:00Z")
}

pub fn secs(n: i64) -> SignedDuration {
    SignedDuration::from_secs(n)
}
pub fn mins(n: i64) -> SignedDuration {
    SignedDuration::from_mins(n)
}
pub fn hours(n: i64) -> SignedDuration {
    SignedDuration::from_hours(n)
}

pub fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Upstream's `jobSpec()`.
pub fn job_spec() -> JobSpec {
    JobSpec {
        parallelism: Some(1),
        completions: Some(1),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(map(&[("foo", "bar")])),
                ..Default::default()
            }),
            spec: Some(PodSpec {
                containers: vec![Container {
                    image: Some("foo/bar".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        },
        ..Default::default()
    }
}

/// Upstream's `cronJob()`.
pub fn cron_job() -> CronJob {
    CronJob {
        metadata: ObjectMeta {
            name: Some("mycronjob".into()),
            namespace: Some("snazzycats".into()),
            uid: Some("1a2b3c".into()),
            creation_timestamp: Some(Time(just_before_the_hour())),
            ..Default::default()
        },
        spec: CronJobSpec {
            schedule: "* * * * ?".into(),
            concurrency_policy: Some("Allow".into()),
            job_template: k8s_openapi::api::batch::v1::JobTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(map(&[("a", "b")])),
                    annotations: Some(map(&[("x", "y")])),
                    ..Default::default()
                }),
                spec: Some(job_spec()),
            },
            ..Default::default()
        },
        status: None,
    }
}

pub fn view(cj: &CronJob) -> CronJobView {
    CronJobView::from_api(cj).expect("fixture view")
}

/// Upstream's `getJobFromTemplate2(cj, t)` with UID and namespace set, as
/// the tests prepare their one Job.
pub fn job_from_template(cj: &CronJob, scheduled: Timestamp, uid: &str) -> Job {
    let mut job = build_job(&view(cj), &jiff::tz::TimeZone::UTC, scheduled)
        .expect("job")
        .typed()
        .expect("a fixture's template is typed");
    job.metadata.uid = Some(uid.into());
    job.metadata.namespace = cj.metadata.namespace.clone();
    job
}

/// Marks a Job finished with a True condition at `completion`.
pub fn finish(job: &mut Job, kind: &str, completion: Option<Timestamp>) {
    let status = job.status.get_or_insert_with(JobStatus::default);
    status.completion_time = completion.map(Time);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(JobCondition {
            type_: kind.into(),
            status: "True".into(),
            ..Default::default()
        });
}

pub fn reference_of(job: &Job) -> k8s_openapi::api::core::v1::ObjectReference {
    active_reference(
        job.metadata.namespace.as_deref().unwrap_or(""),
        job.metadata.name.as_deref().unwrap_or(""),
        job.metadata.uid.as_deref().unwrap_or(""),
        job.metadata.resource_version.as_deref(),
    )
}

/// What upstream's fake API server does for one test.
#[derive(Default, Clone)]
pub struct FakeApi {
    /// `fakeCJControl.CronJob`: answered to every GET of the CronJob.
    pub cronjob: Option<CronJob>,
    /// `fakeJobControl.Job`: answered to every GET of any Job (the fake
    /// ignores the name).
    pub job: Option<Job>,
    /// `fakeJobControl.Err`: fails GETs and deletes.
    pub job_err: Option<ApiError>,
    /// `fakeJobControl.CreateErr`.
    pub create_err: Option<CreateError>,
}

#[derive(Clone, Debug)]
pub enum CreateError {
    AlreadyExists,
    NamespaceTerminating,
    Other(ApiError),
}

/// What happened when a plan was carried out against the fake.
pub struct Applied {
    pub plan: Plan,
    pub outcome: Outcome,
    /// Names of Jobs actually created / deleted (the fake's `Jobs` and
    /// `DeleteJobName`).
    pub created: Vec<Job>,
    pub deleted: Vec<String>,
    pub rounds: usize,
}

impl FakeApi {
    fn answer(&self, lookup: &Lookup, live: &mut LiveAnswers) {
        match lookup {
            Lookup::CronJob { namespace, name } => {
                let answer = match &self.cronjob {
                    Some(cj)
                        if cj.metadata.name.as_deref() == Some(name.as_str())
                            && cj.metadata.namespace.as_deref() == Some(namespace.as_str()) =>
                    {
                        Ok(view(cj))
                    }
                    _ => Err(ApiError::new(format!(
                        "cronjobs.v1beta1 \"{name}\" not found"
                    ))),
                };
                live.set_cronjob(answer);
            }
            Lookup::Job { namespace, name } => {
                let answer = match (&self.job_err, &self.job) {
                    (Some(err), _) => JobLookup::Failed(err.clone()),
                    (None, Some(job)) => JobLookup::Found(LiveJob::from(job)),
                    (None, None) => panic!("the fake has no Job to answer a GET of {name}"),
                };
                live.set_job(namespace, name, answer);
            }
            Lookup::JobTemplate { .. } => live.set_template(
                self.cronjob
                    .as_ref()
                    .map(|cj| JobTemplate::from(&cj.spec.job_template))
                    .ok_or_else(|| ApiError::new("the fake has no CronJob to read again")),
            ),
        }
    }

    /// Runs a whole sync as the actor would: lookups, writes, follow-up.
    pub fn sync(&self, input: &Input) -> Applied {
        let mut live = LiveAnswers::new();
        let mut rounds = 0;
        let plan = loop {
            match reconcile(input, &live) {
                Step::Lookup(lookups) => {
                    rounds += 1;
                    assert!(rounds <= 3, "more than three lookup rounds");
                    for lookup in &lookups {
                        self.answer(lookup, &mut live);
                    }
                }
                Step::Plan(plan) => break *plan,
            }
        };
        let mut results = EffectResults::new();
        let mut deleted = Vec::new();
        let mut created = Vec::new();
        let mut blocked = false;
        for deletion in &plan.deletes {
            if blocked && deletion.blocks_create() {
                continue;
            }
            match &self.job_err {
                Some(err) => {
                    results.delete_failed(&deletion.name, err.clone());
                    blocked |= deletion.blocks_create();
                }
                None => deleted.push(deletion.name.clone()),
            }
        }
        if let Some(create) = plan.create.as_ref().filter(|_| !blocked) {
            let job = create
                .job
                .clone()
                .expect("a planned create carries its Job")
                .typed()
                .expect("a fixture's template is typed");
            let result = match &self.create_err {
                None => {
                    let mut returned = job.clone();
                    returned.metadata.uid = Some("test-uid".into());
                    created.push(job);
                    CreateResult::Created(LiveJob::from(&returned))
                }
                Some(CreateError::AlreadyExists) => {
                    CreateResult::AlreadyExists(match (&self.job_err, &self.job) {
                        (Some(err), _) => Err(err.clone()),
                        (None, Some(job)) => Ok(LiveJob::from(job)),
                        (None, None) => Err(ApiError::job_not_found(&create.name)),
                    })
                }
                Some(CreateError::NamespaceTerminating) => CreateResult::NamespaceTerminating(
                    ApiError::new("namespace default is being terminated"),
                ),
                Some(CreateError::Other(err)) => CreateResult::Failed(err.clone()),
            };
            results.set_create(result);
        }
        let outcome = plan.outcome(input, &live, &results);
        Applied {
            plan,
            outcome,
            created,
            deleted,
            rounds,
        }
    }
}

pub fn input<'a>(
    cronjob: &'a CronJobView,
    children: &'a [JobSummary],
    now: Timestamp,
) -> Input<'a> {
    static UTC: jiff::tz::TimeZone = jiff::tz::TimeZone::UTC;
    Input {
        cronjob,
        children,
        known_slot: None,
        now,
        default_zone: &UTC,
    }
}

pub fn summaries(jobs: &[Job]) -> Vec<JobSummary> {
    jobs.iter().map(JobSummary::from).collect()
}

pub fn reasons(events: &[Event]) -> Vec<Reason> {
    events.iter().map(|e| e.reason).collect()
}
