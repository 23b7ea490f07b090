//! What a decision needs from the API server, and what the API server said.
//!
//! Upstream reads the API server directly at four points of a sync (a GET
//! of the CronJob before `UnexpectedJob`, a GET of a Job before `MissingJob`
//! and before each Replace delete, a GET after AlreadyExists) and branches on
//! the results of its deletes and its create. Here those answers are data:
//!
//! 1. [`reconcile`](super::reconcile) returns [`Step::Lookup`](super::Step)
//!    with the GETs it needs; the caller performs them, records the answers
//!    in [`LiveAnswers`] and calls again (at most three rounds; usually none).
//! 2. [`Step::Plan`](super::Step) lists the deletes and the create; the caller
//!    performs them and records each result in [`EffectResults`].
//! 3. [`follow_up`](super::follow_up) gives the final status, events and
//!    requeue from those results.

use super::template::JobTemplate;
use super::view::{CronJobView, controller_in};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::{HashMap, HashSet};
use std::fmt;

/// An error answer from the API server. `message` is the error text as
/// client-go prints it (`jobs.batch "x" not found`): it goes into events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub message: String,
}

impl ApiError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// client-go's text for a Job that does not exist.
    pub fn job_not_found(name: &str) -> Self {
        Self::new(format!("jobs.batch \"{name}\" not found"))
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A GET the decision needs before it can go on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Lookup {
    /// GET the CronJob itself (upstream does this before reporting an
    /// `UnexpectedJob`: the watch cache may lag behind its own status write).
    CronJob { namespace: String, name: String },
    /// GET a Job named in `status.active` (before `MissingJob`, before a
    /// Replace delete).
    Job { namespace: String, name: String },
    /// GET the CronJob for its Job template, which was too big to keep
    /// ([`CompactTemplate::Left`](super::CompactTemplate::Left)), before
    /// its Job is made. Not upstream's: its informer keeps every template.
    JobTemplate { namespace: String, name: String },
}

/// A Job as a live GET returned it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveJob {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub resource_version: Option<String>,
    /// The UID in its controller ownerReference, if it has one.
    pub controller_uid: Option<String>,
}

impl LiveJob {
    /// The Job whose metadata is `meta`.
    pub fn of(meta: &ObjectMeta) -> Self {
        Self {
            namespace: meta.namespace.clone().unwrap_or_default(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone(),
            controller_uid: controller_in(meta).map(|r| r.uid.clone()),
        }
    }
}

impl From<&Job> for LiveJob {
    fn from(job: &Job) -> Self {
        Self::of(&job.metadata)
    }
}

/// The answer to a [`Lookup::Job`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobLookup {
    Found(LiveJob),
    NotFound,
    Failed(ApiError),
}

/// The answers gathered so far. Answers are keyed by what was asked, so the
/// same GET is never asked twice in one decision.
#[derive(Debug, Clone, Default)]
pub struct LiveAnswers {
    cronjob: Option<Result<CronJobView, ApiError>>,
    jobs: HashMap<(String, String), JobLookup>,
    template: Option<Result<JobTemplate, ApiError>>,
}

impl LiveAnswers {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the answer to [`Lookup::CronJob`] (any error, NotFound
    /// included, is an error here, as upstream).
    pub fn set_cronjob(&mut self, answer: Result<CronJobView, ApiError>) {
        self.cronjob = Some(answer);
    }

    /// Records the answer to [`Lookup::Job`].
    pub fn set_job(&mut self, namespace: &str, name: &str, answer: JobLookup) {
        self.jobs
            .insert((namespace.to_owned(), name.to_owned()), answer);
    }

    /// Records the answer to [`Lookup::JobTemplate`]: the template of the
    /// CronJob read again, or why not (an error, the CronJob gone or
    /// replaced by another of its name).
    pub fn set_template(&mut self, answer: Result<JobTemplate, ApiError>) {
        self.template = Some(answer);
    }

    pub(crate) fn template(&self) -> Option<&Result<JobTemplate, ApiError>> {
        self.template.as_ref()
    }

    pub(crate) fn cronjob(&self) -> Option<&Result<CronJobView, ApiError>> {
        self.cronjob.as_ref()
    }

    pub(crate) fn job(&self, namespace: &str, name: &str) -> Option<&JobLookup> {
        // A HashMap keyed by owned pairs cannot be probed with borrowed ones
        // without allocating; the map is tiny (the active list), so scan it.
        self.jobs
            .iter()
            .find(|((ns, n), _)| ns == namespace && n == name)
            .map(|(_, answer)| answer)
    }
}

/// What the create call returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateResult {
    /// Created; the Job as the API server returned it.
    Created(LiveJob),
    /// AlreadyExists. Upstream then GETs the Job by name: record that GET's
    /// answer here (a NotFound is an error like any other).
    AlreadyExists(Result<LiveJob, ApiError>),
    /// The namespace is being deleted (a `NamespaceTerminating` status cause).
    NamespaceTerminating(ApiError),
    /// Any other error.
    Failed(ApiError),
}

/// The results of a plan's writes. A write whose result is not recorded is
/// taken as successful, so a caller that records only failures is correct.
#[derive(Debug, Clone, Default)]
pub struct EffectResults {
    pub(crate) delete_failures: HashMap<String, ApiError>,
    pub(crate) deletes_not_sent: HashSet<String>,
    pub(crate) create: Option<CreateResult>,
}

impl EffectResults {
    pub fn new() -> Self {
        Self::default()
    }

    /// The delete of `job` (by name, as in [`Deletion::name`](super::Deletion)) failed.
    pub fn delete_failed(&mut self, job: &str, error: ApiError) {
        self.delete_failures.insert(job.to_owned(), error);
    }

    /// The delete of `job` was never sent (the decision stopped first): no
    /// event, and its Job stays where it was.
    pub fn delete_not_sent(&mut self, job: &str) {
        self.deletes_not_sent.insert(job.to_owned());
    }

    pub fn set_create(&mut self, result: CreateResult) {
        self.create = Some(result);
    }
}
