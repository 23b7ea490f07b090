//! The Job a CronJob starts for a slot, built as upstream's
//! `getJobFromTemplate2` builds it.
//!
//! The name `<cronjob>-<scheduled Unix minutes>` is deterministic: a second
//! create for the same slot fails with AlreadyExists instead of running the
//! work twice. That is the last line of defence against duplicates, for
//! upstream and for shardcron's shards alike.

use super::kind::CronJobKind;
use super::raw_json::RawJson;
use super::schedule_setup::NamedZone;
use super::template::{EncodedSpec, JobTemplate};
use super::view::{CronJobView, SCHEDULED_TIMESTAMP_ANNOTATION};
use crate::schedule::format_rfc3339;
use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

/// Held by every Job made for a slot whose template sets
/// `ttlSecondsAfterFinished`, until the CronJob's status records that slot.
///
/// The Job's name is the slot's lock only while the Job exists. The TTL
/// controller deletes a finished Job on its own clock; if the status write
/// that followed the create was lost (the replica fenced behind a silent
/// partition, or stopped), the next owner would find neither the Job nor
/// the slot in the status and start the slot again. Held, the Job stays
/// visible (with a deletionTimestamp) until an owner has recorded its
/// slot, then the finalizer is removed (see `release`). A departure from
/// upstream, which sets no finalizer; Jobs without a TTL need none, as
/// only this controller deletes them and it records first.
pub const SLOT_FINALIZER: &str = "shardcron.io/slot-record";

/// Whether an object with metadata `meta` carries [`SLOT_FINALIZER`].
pub fn is_held(meta: &ObjectMeta) -> bool {
    meta.finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == SLOT_FINALIZER))
}

/// Upstream's `getJobName`: `<cronjob>-<scheduled.Unix()/60>` (Go's division
/// truncates toward zero, so does Rust's).
pub fn job_name(cronjob_name: &str, scheduled: Timestamp) -> String {
    format!("{cronjob_name}-{}", scheduled.as_second() / 60)
}

/// The Job of a run-now request made at `requested`:
/// `<cronjob>-r<requested Unix seconds in base 36>`. The request's own
/// time names it, so a replayed request meets its own Job (AlreadyExists);
/// the `r` keeps it apart from every slot's all-digit suffix; at most 8
/// characters follow the dash (7 base-36 digits last until the year 4400),
/// within the 11 a CronJob's 52-character name leaves for a Job's 63.
pub fn run_now_job_name(cronjob_name: &str, requested: Timestamp) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut seconds = requested.as_second().max(0) as u64;
    let mut suffix = Vec::new();
    loop {
        suffix.push(DIGITS[(seconds % 36) as usize]);
        seconds /= 36;
        if seconds == 0 {
            break;
        }
    }
    suffix.reverse();
    format!("{cronjob_name}-r{}", String::from_utf8_lossy(&suffix))
}

/// The Job a decision creates: its metadata built here; its spec the
/// template's, in the encoding it came in (JSON or protobuf), never
/// decoded into this build's types: sent back so, it keeps every field the
/// API server knows.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJob {
    pub metadata: ObjectMeta,
    pub spec: EncodedSpec,
    pub ttl_seconds_after_finished: Option<i32>,
}

impl NewJob {
    /// The Job typed, if its spec is JSON (tests: fields this build's
    /// types do not know are dropped here).
    pub fn typed(self) -> Option<Job> {
        let EncodedSpec::Json(spec) = self.spec else {
            return None;
        };
        Some(Job {
            metadata: self.metadata,
            spec: spec.and_then(|spec| serde_json::from_slice(spec.as_bytes()).ok()),
            status: None,
        })
    }
}

/// A typed Job to create as it is (tests).
impl From<Job> for NewJob {
    fn from(job: Job) -> Self {
        let spec = job.spec.as_ref().map(|spec| {
            // Serializing an API object cannot fail (every map key is a string).
            RawJson::from(&serde_json::to_value(spec).unwrap_or_default())
        });
        Self {
            metadata: job.metadata,
            spec: EncodedSpec::Json(spec),
            ttl_seconds_after_finished: job.spec.and_then(|s| s.ttl_seconds_after_finished),
        }
    }
}

/// Upstream's `getJobFromTemplate2`: the Job to create for `scheduled`. It
/// fails, as upstream's, when `spec.timeZone` does not load (the text is
/// Go's `LoadLocation` error), and when the template is not kept
/// ([`CompactTemplate::Left`](super::CompactTemplate::Left): the decision
/// reads it again instead).
pub fn build_job(
    cronjob: &CronJobView,
    default_zone: &TimeZone,
    scheduled: Timestamp,
) -> Result<NewJob, String> {
    let zone = cronjob
        .spec
        .setup
        .annotation_zone()
        .map_err(str::to_owned)?;
    let template = cronjob
        .spec
        .job_template
        .decode()
        .ok_or_else(|| "the Job template is too big to be kept".to_owned())?;
    let name = job_name(cronjob.name(), scheduled);
    Ok(build_job_in(
        cronjob,
        template,
        zone,
        default_zone,
        scheduled,
        name,
    ))
}

/// The Job object `name` to create for `scheduled` (the namespace travels
/// with the create call, as upstream leaves it unset on the object). Labels and annotations are the
/// template's, plus the scheduled-timestamp annotation rendered in
/// `spec.timeZone` (UTC when unset; the controller's zone for `Local`).
pub(crate) fn build_job_in(
    cronjob: &CronJobView,
    template: JobTemplate,
    annotation_zone: &NamedZone,
    default_zone: &TimeZone,
    scheduled: Timestamp,
    name: String,
) -> NewJob {
    let JobTemplate {
        labels,
        mut annotations,
        spec,
        ttl_seconds_after_finished,
    } = template;
    annotations.insert(
        SCHEDULED_TIMESTAMP_ANNOTATION.to_owned(),
        format_rfc3339(scheduled, annotation_zone.resolve(default_zone)),
    );
    NewJob {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(labels),
            annotations: Some(annotations),
            // The API server overrides it; upstream sets it, so do we.
            creation_timestamp: Some(Time(scheduled)),
            owner_references: Some(vec![controller_reference(cronjob)]),
            finalizers: ttl_seconds_after_finished.map(|_| vec![SLOT_FINALIZER.to_owned()]),
            ..ObjectMeta::default()
        },
        spec,
        ttl_seconds_after_finished,
    }
}

/// `metav1.NewControllerRef(cj, batch/v1 CronJob)`, with the CronJob's own
/// API version (the shardcron.io CRD's Jobs are owned by it).
pub fn controller_reference(cronjob: &CronJobView) -> OwnerReference {
    OwnerReference {
        api_version: cronjob.kind.api_version().to_owned(),
        kind: CronJobKind::KIND.to_owned(),
        name: cronjob.name().to_owned(),
        uid: cronjob.uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Upstream's `ref.GetReference` of a Job, as appended to `status.active`.
pub fn active_reference(
    namespace: &str,
    name: &str,
    uid: &str,
    resource_version: Option<&str>,
) -> ObjectReference {
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    ObjectReference {
        api_version: Some("batch/v1".to_owned()),
        kind: Some("Job".to_owned()),
        namespace: non_empty(namespace),
        name: non_empty(name),
        uid: non_empty(uid),
        resource_version: resource_version.and_then(non_empty),
        field_path: None,
    }
}
