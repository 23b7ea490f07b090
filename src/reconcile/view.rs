//! The compact inputs of a decision: what an actor keeps about its CronJob
//! and the Jobs it controls, built from the API objects once per change.
//!
//! The spec (with the Job template, by far the largest part) lives behind an
//! [`Arc`] and is shared by every decision until the CronJob changes; its
//! schedule and time zone are compiled once, when the view is built. A Job is
//! kept as a [`JobSummary`]: the few fields the controller reads.

use super::compact_time::CompactTime;
use super::kind::CronJobKind;
use super::options::Options;
use super::schedule_setup::ScheduleSetup;
use super::template::CompactTemplate;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use std::sync::Arc;
use thiserror::Error;

/// `spec.concurrencyPolicy`. Upstream compares the string with `Forbid` and
/// `Replace`; everything else, `""` and unknown values included, behaves as
/// `Allow`, and is kept as written.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ConcurrencyPolicy {
    #[default]
    Allow,
    Forbid,
    Replace,
    /// Any other value (API validation rejects them; older objects may have
    /// them). Boxed twice: a thin pointer keeps the enum at 16 bytes (24
    /// with a `String` or a `Box<str>`), which keeps [`SpecView`] within
    /// its allocator size class.
    Other(Box<String>),
}

impl ConcurrencyPolicy {
    pub fn from_api(value: Option<&str>) -> Self {
        match value {
            None | Some("Allow") => Self::Allow,
            Some("Forbid") => Self::Forbid,
            Some("Replace") => Self::Replace,
            Some(other) => Self::Other(Box::new(other.to_owned())),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Allow => "Allow",
            Self::Forbid => "Forbid",
            Self::Replace => "Replace",
            Self::Other(other) => other,
        }
    }
}

/// A CronJob's spec as the controller reads it. Built once per spec change
/// and shared (`Arc`) by every decision: nothing here is copied per call.
#[derive(Debug, Clone)]
/// Its strings are `Box<str>`, not `String` (8 bytes fewer each): the spec
/// with its `Arc`'s counts stays within 192 bytes, one of mimalloc's size
/// classes (a test keeps it there; the next is 224).
pub struct SpecView {
    pub schedule: Box<str>,
    pub time_zone: Option<Box<str>>,
    pub starting_deadline_seconds: Option<i64>,
    pub concurrency_policy: ConcurrencyPolicy,
    pub suspend: bool,
    pub successful_jobs_history_limit: Option<i32>,
    pub failed_jobs_history_limit: Option<i32>,
    pub job_template: CompactTemplate,
    /// The schedule and zone, parsed once (upstream re-parses every sync; the
    /// result only depends on these two strings).
    pub(crate) setup: ScheduleSetup,
}

impl SpecView {
    pub fn new(spec: &k8s_openapi::api::batch::v1::CronJobSpec) -> Self {
        Self::with_template(spec, CompactTemplate::new(&spec.job_template))
    }

    /// The spec `spec` with the Job template `job_template` (its own
    /// `jobTemplate` is not read): for a template that arrived as JSON.
    pub fn with_template(
        spec: &k8s_openapi::api::batch::v1::CronJobSpec,
        job_template: CompactTemplate,
    ) -> Self {
        Self {
            schedule: spec.schedule.as_str().into(),
            time_zone: spec.time_zone.as_deref().map(Box::from),
            starting_deadline_seconds: spec.starting_deadline_seconds,
            concurrency_policy: ConcurrencyPolicy::from_api(spec.concurrency_policy.as_deref()),
            suspend: spec.suspend == Some(true),
            successful_jobs_history_limit: spec.successful_jobs_history_limit,
            failed_jobs_history_limit: spec.failed_jobs_history_limit,
            job_template,
            setup: ScheduleSetup::new(&spec.schedule, spec.time_zone.as_deref()),
        }
    }
}

/// The part of `status` the controller reads and writes (upstream writes
/// nothing else: no conditions, no observedGeneration).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusView {
    /// `status.active`, kept as the API's ObjectReferences so that what is
    /// written back is exactly what was read, plus upstream's changes.
    pub active: Vec<ObjectReference>,
    pub last_schedule_time: CompactTime,
    pub last_successful_time: CompactTime,
}

impl StatusView {
    pub fn from_api(status: Option<&k8s_openapi::api::batch::v1::CronJobStatus>) -> Self {
        let Some(status) = status else {
            return Self::default();
        };
        Self {
            active: status.active.clone().unwrap_or_default(),
            last_schedule_time: status.last_schedule_time.as_ref().map(|t| t.0).into(),
            last_successful_time: status.last_successful_time.as_ref().map(|t| t.0).into(),
        }
    }

    /// Without a `lastScheduleTime` of its own, the one `meta`'s
    /// [`LAST_SCHEDULE_ANNOTATION`] carries, if it parses.
    pub(super) fn seeded(self, meta: &ObjectMeta) -> Self {
        if self.last_schedule_time.is_some() {
            return self;
        }
        let seed = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(LAST_SCHEDULE_ANNOTATION))
            .and_then(|t| t.parse::<Timestamp>().ok());
        Self {
            last_schedule_time: seed.into(),
            ..self
        }
    }

    /// The status as the API object, for the status subresource.
    pub fn to_api(&self) -> k8s_openapi::api::batch::v1::CronJobStatus {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        k8s_openapi::api::batch::v1::CronJobStatus {
            active: (!self.active.is_empty()).then(|| self.active.clone()),
            last_schedule_time: self.last_schedule_time.get().map(Time),
            last_successful_time: self.last_successful_time.get().map(Time),
        }
    }

    /// Whether `slot` is later than `lastScheduleTime` (or there is none):
    /// a slot started there is not recorded yet.
    pub fn does_not_record(&self, slot: Timestamp) -> bool {
        Some(slot) > self.last_schedule_time.get()
    }

    /// Upstream's `inActiveList`: an entry with this UID (a missing UID is `""`).
    pub(crate) fn has_uid(&self, uid: &str) -> bool {
        self.active.iter().any(|r| ref_uid(r) == uid)
    }

    /// Upstream's `deleteFromActiveList`: drops every entry with this UID.
    pub(crate) fn remove_uid(&mut self, uid: &str) {
        self.active.retain(|r| ref_uid(r) != uid);
    }
}

pub(crate) fn ref_uid(r: &ObjectReference) -> &str {
    r.uid.as_deref().unwrap_or("")
}

pub(crate) fn ref_name(r: &ObjectReference) -> &str {
    r.name.as_deref().unwrap_or("")
}

pub(crate) fn ref_namespace(r: &ObjectReference) -> &str {
    r.namespace.as_deref().unwrap_or("")
}

/// A CronJob as the controller sees it: identity, the shared spec, the status.
#[derive(Debug, Clone)]
pub struct CronJobView {
    /// Which API serves it (batch/v1 or the shardcron.io CRD).
    pub kind: CronJobKind,
    /// Its key ([`CronJobKind::key`]: the namespace and name in one
    /// string): with the UID, allocated once per CronJob in a replica and
    /// shared by its actor, the supervisor, the ownership protocol and the
    /// per-CronJob metrics ([`Self::sharing`]); at 10^6 CronJobs each copy
    /// of the two strings costs about 100 bytes a CronJob.
    pub key: Arc<str>,
    pub uid: Arc<str>,
    /// `metadata.creationTimestamp`: the baseline before the first run
    /// ([`Self::created`]).
    pub created: CompactTime,
    /// `metadata.deletionTimestamp` is set: only the status is kept up to date.
    pub deleting: bool,
    pub spec: Arc<SpecView>,
    pub status: StatusView,
    /// The opt-ins its annotations set ([`super::options`]).
    pub options: Options,
}

/// The slot a converted CronJob's original last ran (RFC 3339), written by
/// `shardcron convert` because a new object's status cannot be set on
/// create. A CronJob without `status.lastScheduleTime` starts from it
/// instead of from its creation, so the copy neither runs that slot again
/// nor skips the ones after it; its first status write records it. Any
/// CronJob may carry it: it can only make its own CronJob start later or
/// earlier, as editing its status could.
pub const LAST_SCHEDULE_ANNOTATION: &str = "shardcron.io/last-schedule-time";

/// A CronJob object lacks a field the controller cannot do without.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ViewError {
    #[error("metadata.name is missing")]
    MissingName,
    #[error("metadata.creationTimestamp is missing")]
    MissingCreationTimestamp,
}

impl CronJobView {
    /// Builds the view of a batch/v1 CronJob, compiling the spec.
    pub fn from_api(cronjob: &CronJob) -> Result<Self, ViewError> {
        Self::of_kind(CronJobKind::Batch, cronjob)
    }

    /// Builds the view of `cronjob` served as `kind` (the CRD's objects
    /// have batch/v1's shape), compiling the spec.
    pub fn of_kind(kind: CronJobKind, cronjob: &CronJob) -> Result<Self, ViewError> {
        let spec = Arc::new(SpecView::new(&cronjob.spec));
        Self::from_parts(kind, &cronjob.metadata, cronjob.status.as_ref(), spec)
    }

    /// Its namespace (from its key).
    pub fn namespace(&self) -> &str {
        CronJobKind::parse_key(&self.key).1
    }

    /// Its name (from its key).
    pub fn name(&self) -> &str {
        CronJobKind::parse_key(&self.key).2
    }

    /// Its `metadata.creationTimestamp` (always set: a view is not made
    /// without one).
    pub fn created(&self) -> Timestamp {
        self.created.get().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    /// The same view, holding `key` and `uid` instead of its own copies
    /// where they are equal: the strings already allocated for this
    /// CronJob elsewhere in the replica (or by the view it replaces).
    pub fn sharing(mut self, key: &Arc<str>, uid: &Arc<str>) -> Self {
        if self.key == *key {
            self.key = key.clone();
        }
        if self.uid == *uid {
            self.uid = uid.clone();
        }
        self
    }

    /// The view of a CronJob of `kind` with metadata `meta` and status `status`.
    pub fn from_parts(
        kind: CronJobKind,
        meta: &ObjectMeta,
        status: Option<&k8s_openapi::api::batch::v1::CronJobStatus>,
        spec: Arc<SpecView>,
    ) -> Result<Self, ViewError> {
        let name = meta.name.as_deref().ok_or(ViewError::MissingName)?;
        Ok(Self {
            kind,
            key: kind
                .key(meta.namespace.as_deref().unwrap_or_default(), name)
                .into(),
            uid: meta.uid.as_deref().unwrap_or_default().into(),
            created: meta
                .creation_timestamp
                .as_ref()
                .map(|t| t.0)
                .ok_or(ViewError::MissingCreationTimestamp)?
                .into(),
            deleting: meta.deletion_timestamp.is_some(),
            spec,
            status: StatusView::from_api(status).seeded(meta),
            options: Options::from_annotations(meta.annotations.as_ref()),
        })
    }
}

/// How a Job finished: the type of the first `Complete` or `Failed`
/// condition whose status is `True` (upstream's `FinishedCondition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Finished {
    Complete,
    Failed,
}

impl Finished {
    pub fn as_str(self) -> &'static str {
        match self {
            Finished::Complete => "Complete",
            Finished::Failed => "Failed",
        }
    }
}

/// Why a Job failed: the reasons the Job controller writes on its `Failed`
/// condition (`batchv1.JobReason*`), and any other as `Other`. One byte, not
/// the text: the actor keeps every child's summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureReason {
    BackoffLimitExceeded,
    DeadlineExceeded,
    PodFailurePolicy,
    MaxFailedIndexesExceeded,
    FailedIndexes,
    Other,
}

impl FailureReason {
    pub const ALL: [Self; 6] = [
        Self::BackoffLimitExceeded,
        Self::DeadlineExceeded,
        Self::PodFailurePolicy,
        Self::MaxFailedIndexesExceeded,
        Self::FailedIndexes,
        Self::Other,
    ];

    /// The reason a condition gives.
    pub fn of(reason: &str) -> Self {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == reason)
            .unwrap_or(Self::Other)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::BackoffLimitExceeded => "BackoffLimitExceeded",
            Self::DeadlineExceeded => "DeadlineExceeded",
            Self::PodFailurePolicy => "PodFailurePolicy",
            Self::MaxFailedIndexesExceeded => "MaxFailedIndexesExceeded",
            Self::FailedIndexes => "FailedIndexes",
            Self::Other => "Other",
        }
    }
}

impl<'de> serde::Deserialize<'de> for FailureReason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ok(Self::of(&text))
    }
}

/// `batchv1.CronJobScheduledTimestampAnnotation`: the slot a Job was made
/// for, written on it by [`build_job`](super::build_job) and read back into
/// [`JobSummary::scheduled`].
pub const SCHEDULED_TIMESTAMP_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// What the controller reads of one child Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSummary {
    pub name: String,
    pub uid: String,
    pub start_time: Option<Timestamp>,
    pub completion_time: Option<Timestamp>,
    pub finished: Option<Finished>,
    /// When it failed: its `Failed` condition's lastTransitionTime (a
    /// failed Job has no completionTime). For the per-CronJob metrics only.
    pub failed_at: Option<Timestamp>,
    /// Why it failed: its `Failed` condition's reason (the slot history and
    /// the per-CronJob metrics).
    pub failure_reason: Option<FailureReason>,
    /// Some `Complete` condition is `True` (upstream's `IsJobSucceeded`). It
    /// differs from `finished == Some(Complete)` only for a Job that has both
    /// conditions True with `Failed` first, which upstream also tells apart.
    pub succeeded: bool,
    /// The slot it was made for: its scheduled-timestamp annotation, which
    /// every Job made by this controller (and upstream's since 1.28) has.
    /// What a lost status write failed to record (see `sync`'s
    /// `record_known_slot`).
    pub scheduled: Option<Timestamp>,
    /// `metadata.deletionTimestamp` is set: it is going (TTL controller,
    /// garbage collector, a user, a delete of ours) and only finalizers
    /// hold it.
    pub deleting: bool,
    /// It carries [`SLOT_FINALIZER`](super::SLOT_FINALIZER): it cannot
    /// disappear before the status records its slot (see `release`).
    pub held: bool,
}

impl JobSummary {
    /// The summary of a Job with metadata `meta`, the given start and
    /// completion times, and conditions as `(type, status, lastTransitionTime,
    /// reason)`: one reading for the full Job a GET or a create returns and
    /// for the lean one the watches decode.
    pub fn new<'a>(
        meta: &ObjectMeta,
        start_time: Option<Timestamp>,
        completion_time: Option<Timestamp>,
        conditions: impl IntoIterator<
            Item = (&'a str, &'a str, Option<Timestamp>, Option<FailureReason>),
        >,
    ) -> Self {
        let mut finished = None;
        let mut succeeded = false;
        let mut failed_at = None;
        let mut failure_reason = None;
        for (kind, _, changed, reason) in conditions
            .into_iter()
            .filter(|(_, status, _, _)| *status == "True")
        {
            let outcome = match kind {
                "Complete" => Finished::Complete,
                "Failed" => {
                    failed_at = changed;
                    failure_reason = reason;
                    Finished::Failed
                }
                _ => continue,
            };
            // The first True terminal condition says how it finished.
            finished.get_or_insert(outcome);
            succeeded |= outcome == Finished::Complete;
        }
        Self {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            start_time,
            completion_time,
            finished,
            succeeded,
            failed_at,
            failure_reason,
            scheduled: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(SCHEDULED_TIMESTAMP_ANNOTATION))
                .and_then(|stamp| stamp.parse::<Timestamp>().ok()),
            deleting: meta.deletion_timestamp.is_some(),
            held: super::is_held(meta),
        }
    }
}

impl From<&Job> for JobSummary {
    fn from(job: &Job) -> Self {
        let status = job.status.as_ref();
        let conditions = status
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        Self::new(
            &job.metadata,
            status.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
            status.and_then(|s| s.completion_time.as_ref()).map(|t| t.0),
            conditions.iter().map(|c| {
                (
                    c.type_.as_str(),
                    c.status.as_str(),
                    c.last_transition_time.as_ref().map(|t| t.0),
                    c.reason.as_deref().map(FailureReason::of),
                )
            }),
        )
    }
}

/// Upstream's `metav1.GetControllerOf`: the first ownerReference with `controller: true`.
pub fn controller_of(job: &Job) -> Option<&OwnerReference> {
    controller_in(&job.metadata)
}

/// [`controller_of`] a Job with metadata `meta`.
pub fn controller_in(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_deref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// Upstream's `getJobsToBeReconciled` test for one Job: its controller
/// reference names this CronJob. Only the **name** is compared (not the
/// kind, UID or apiVersion), and a Job without a controller reference is
/// never a child: there is no adoption.
///
/// [`reconcile`](super::reconcile) takes whatever children it is given. An
/// actor that routes Jobs by the controller reference's UID gives it a subset
/// of upstream's set: a Job whose controller is a deleted-and-recreated
/// CronJob of the same name is upstream's child (and would be reported as
/// `UnexpectedJob` or counted for history) but not the new CronJob's.
pub fn is_child_by_name(job: &Job, cronjob_name: &str) -> bool {
    controller_of(job).is_some_and(|r| r.name == cronjob_name)
}

#[cfg(test)]
mod tests {
    use super::SpecView;

    /// A spec is one allocation per CronJob (behind its `Arc`, whose counts
    /// take 16 bytes): mimalloc rounds it up to 192 bytes, the next class
    /// is 224. A field that grows it past 192 costs 32 bytes a CronJob.
    #[test]
    fn a_spec_fits_its_allocator_size_class() {
        let allocation = 16 + size_of::<SpecView>();
        assert!(
            allocation <= 192,
            "a spec's allocation is {allocation} bytes"
        );
    }
}
