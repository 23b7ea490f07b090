//! Kubernetes' protobuf messages, those the controller reads and writes,
//! each with only the fields it uses: prost skips every other field by its
//! length (a CronJob's `managedFields` included) without decoding it.
//! Field numbers and types are upstream's `generated.proto` (k8s.io/api and
//! apimachinery v0.36); every scalar is proto2 `optional`, so presence is
//! kept. Go's generated marshallers write every non-pointer field, empty or
//! not: readers take an empty string or an empty time as absent, as JSON
//! (`omitempty`) would leave it out.
//!
//! An object travels enveloped: `k8s\0`, then a `runtime.Unknown` whose
//! `raw` is the object's message ([`envelope`], [`open_envelope`]).
//!
//! kube-rs speaks JSON only (k8s-pb's types are not usable from it yet), so
//! the few messages needed are declared here. Pure: no I/O.

use prost::Message as _;
use std::collections::BTreeMap;

/// What an object in protobuf starts with (and a JSON document never does).
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// `object`'s message `raw` of `api_version` and `kind`, enveloped.
pub fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.to_owned()),
            kind: Some(kind.to_owned()),
        }),
        raw,
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut bytes = Vec::with_capacity(MAGIC.len() + unknown.encoded_len());
    bytes.extend_from_slice(MAGIC);
    unknown.encode(&mut bytes).expect("a Vec grows as needed");
    bytes
}

/// The kind and message of an enveloped object; `None` if `bytes` is not
/// one.
pub fn open_envelope(bytes: &[u8]) -> Option<(String, Vec<u8>)> {
    let unknown = Unknown::decode(bytes.strip_prefix(MAGIC)?).ok()?;
    let kind = unknown.type_meta.and_then(|t| t.kind).unwrap_or_default();
    Some((kind, unknown.raw))
}

/// `Some(value)` unless it is empty (Go wrote a zero value).
pub fn present(value: Option<String>) -> Option<String> {
    value.filter(|v| !v.is_empty())
}

impl Time {
    /// The instant, if one was written (an empty message is Go's zero time,
    /// which JSON writes as `null`).
    pub fn timestamp(&self) -> Option<jiff::Timestamp> {
        if self.seconds.is_none() && self.nanos.is_none() {
            return None;
        }
        jiff::Timestamp::new(
            self.seconds.unwrap_or_default(),
            self.nanos.unwrap_or_default(),
        )
        .ok()
    }

    pub fn of(timestamp: jiff::Timestamp) -> Self {
        Self {
            seconds: Some(timestamp.as_second()),
            nanos: Some(timestamp.subsec_nanosecond()),
        }
    }
}

/// `runtime.Unknown`: the envelope of every object.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Unknown {
    #[prost(message, optional, tag = "1")]
    pub type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", tag = "2")]
    pub raw: Vec<u8>,
    #[prost(string, optional, tag = "3")]
    pub content_encoding: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub content_type: Option<String>,
}

/// `runtime.TypeMeta`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub kind: Option<String>,
}

/// `meta.v1.Time` (`Timestamp` on the wire): an empty message is Go's zero
/// time, which JSON writes as `null`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Time {
    #[prost(int64, optional, tag = "1")]
    pub seconds: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    pub nanos: Option<i32>,
}

/// `meta.v1.ListMeta`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListMeta {
    #[prost(string, optional, tag = "2")]
    pub resource_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub continue_: Option<String>,
}

/// `meta.v1.ObjectMeta`: what a CronJob's and a Job template's are read for
/// (`labels` and `ownerReferences` only where written), `managedFields`
/// (17) never.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    #[prost(int64, optional, tag = "7")]
    pub generation: Option<i64>,
    #[prost(message, optional, tag = "8")]
    pub creation_timestamp: Option<Time>,
    #[prost(message, optional, tag = "9")]
    pub deletion_timestamp: Option<Time>,
    #[prost(btree_map = "string, string", tag = "11")]
    pub labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    pub annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    pub owner_references: Vec<OwnerReference>,
    #[prost(string, repeated, tag = "14")]
    pub finalizers: Vec<String>,
}

/// `meta.v1.OwnerReference`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OwnerReference {
    #[prost(string, optional, tag = "1")]
    pub kind: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub api_version: Option<String>,
    #[prost(bool, optional, tag = "6")]
    pub controller: Option<bool>,
    #[prost(bool, optional, tag = "7")]
    pub block_owner_deletion: Option<bool>,
}

/// `batch.v1.CronJobList`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CronJobList {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ListMeta>,
    #[prost(message, repeated, tag = "2")]
    pub items: Vec<CronJob>,
}

/// `batch.v1.CronJob`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CronJob {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<CronJobSpec>,
    #[prost(message, optional, tag = "3")]
    pub status: Option<CronJobStatus>,
}

/// `batch.v1.CronJobSpec`, its `jobTemplate` (a `JobTemplateSpec`) kept as
/// the bytes it was sent in.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CronJobSpec {
    #[prost(string, optional, tag = "1")]
    pub schedule: Option<String>,
    #[prost(int64, optional, tag = "2")]
    pub starting_deadline_seconds: Option<i64>,
    #[prost(string, optional, tag = "3")]
    pub concurrency_policy: Option<String>,
    #[prost(bool, optional, tag = "4")]
    pub suspend: Option<bool>,
    #[prost(bytes = "vec", optional, tag = "5")]
    pub job_template: Option<Vec<u8>>,
    #[prost(int32, optional, tag = "6")]
    pub successful_jobs_history_limit: Option<i32>,
    #[prost(int32, optional, tag = "7")]
    pub failed_jobs_history_limit: Option<i32>,
    #[prost(string, optional, tag = "8")]
    pub time_zone: Option<String>,
}

/// `batch.v1.CronJobStatus`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CronJobStatus {
    #[prost(message, repeated, tag = "1")]
    pub active: Vec<ObjectReference>,
    #[prost(message, optional, tag = "4")]
    pub last_schedule_time: Option<Time>,
    #[prost(message, optional, tag = "5")]
    pub last_successful_time: Option<Time>,
}

/// `core.v1.ObjectReference`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ObjectReference {
    #[prost(string, optional, tag = "1")]
    pub kind: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub uid: Option<String>,
    #[prost(string, optional, tag = "5")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub field_path: Option<String>,
}

/// `batch.v1.JobTemplateSpec`, its spec (a `JobSpec`) kept as bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct JobTemplateSpec {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub spec: Option<Vec<u8>>,
}

/// `batch.v1.JobSpec`: only what decides the slot's finalizer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct JobSpecTtl {
    #[prost(int32, optional, tag = "8")]
    pub ttl_seconds_after_finished: Option<i32>,
}

/// `batch.v1.Job`, its spec the template's bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Job {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub spec: Option<Vec<u8>>,
}

/// `meta.v1.Status`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    #[prost(string, optional, tag = "2")]
    pub status: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub message: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub reason: Option<String>,
    #[prost(message, optional, tag = "5")]
    pub details: Option<StatusDetails>,
    #[prost(int32, optional, tag = "6")]
    pub code: Option<i32>,
}

/// `meta.v1.StatusDetails`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusDetails {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub group: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub kind: Option<String>,
    #[prost(message, repeated, tag = "4")]
    pub causes: Vec<StatusCause>,
    #[prost(int32, optional, tag = "5")]
    pub retry_after_seconds: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub uid: Option<String>,
}

/// `meta.v1.StatusCause`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusCause {
    #[prost(string, optional, tag = "1")]
    pub reason: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub message: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub field: Option<String>,
}

impl From<Status> for kube::core::Status {
    fn from(status: Status) -> Self {
        use kube::core::response::{StatusCause as Cause, StatusDetails as Details, StatusSummary};
        let details = status.details.map(|d| Details {
            name: d.name.unwrap_or_default(),
            group: d.group.unwrap_or_default(),
            kind: d.kind.unwrap_or_default(),
            uid: d.uid.unwrap_or_default(),
            causes: d
                .causes
                .into_iter()
                .map(|c| Cause {
                    reason: c.reason.unwrap_or_default(),
                    message: c.message.unwrap_or_default(),
                    field: c.field.unwrap_or_default(),
                })
                .collect(),
            retry_after_seconds: d.retry_after_seconds.unwrap_or_default().max(0) as u32,
        });
        Self {
            status: match status.status.as_deref() {
                Some("Success") => Some(StatusSummary::Success),
                Some("Failure") => Some(StatusSummary::Failure),
                _ => None,
            },
            code: status
                .code
                .unwrap_or_default()
                .clamp(0, i32::from(u16::MAX)) as u16,
            message: status.message.unwrap_or_default(),
            metadata: None,
            reason: status.reason.unwrap_or_default(),
            details,
        }
    }
}
