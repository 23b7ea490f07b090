//! A batch/v1 Job as the Job watch and the bulk loads decode it: only what
//! the controller reads of it.
//!
//! Every replica decodes every Job event in the cluster, most of them for
//! CronJobs it does not own, and a Job on the wire is mostly what the
//! controller never reads: `spec` (a whole pod template) and
//! `metadata.managedFields` (a JSON tree of every field set). Decoded into
//! k8s-openapi's `Job`, each event builds and frees all of it. [`LeanJob`]
//! names the few fields a decision needs (name, namespace, UID,
//! resourceVersion, the controller reference, the bucket label, the
//! scheduled-timestamp annotation, the deletion timestamp and whether the
//! slot finalizer is there, start and completion times, the conditions'
//! type and status)
//! and the deserializer skips the rest without building it (serde ignores
//! unknown fields). `benches/decode.rs` measures the difference.
//!
//! It is a [`kube::Resource`] of its own (the same URL as batch/v1 Jobs), so
//! kube-runtime's watcher and `Api::list` decode into it directly.

use crate::reconcile::{
    FailureReason, JobSummary, LiveJob, SCHEDULED_TIMESTAMP_ANNOTATION, SLOT_FINALIZER,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

/// A Job with only the fields the controller reads. `metadata` holds name,
/// namespace, uid, resourceVersion, ownerReferences, deletionTimestamp, of
/// the labels only the bucket, of the annotations only the scheduled
/// timestamp, and of the finalizers only the slot's; every other field is
/// `None`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct LeanJob {
    #[serde(default, deserialize_with = "lean_metadata")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub status: Option<LeanJobStatus>,
}

/// `status` of a Job: when it started and finished, and its conditions.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanJobStatus {
    #[serde(default)]
    pub start_time: Option<Time>,
    #[serde(default)]
    pub completion_time: Option<Time>,
    #[serde(default)]
    pub conditions: Option<Vec<LeanJobCondition>>,
}

/// A Job condition's type, status (`"True"`, `"False"`, `"Unknown"`) and
/// when it last changed.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanJobCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default)]
    pub last_transition_time: Option<Time>,
    /// Read as one of the reasons kept, not as text.
    #[serde(default)]
    pub reason: Option<FailureReason>,
}

impl k8s_openapi::Resource for LeanJob {
    const API_VERSION: &'static str = "batch/v1";
    const GROUP: &'static str = "batch";
    const KIND: &'static str = "Job";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "jobs";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for LeanJob {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<&LeanJob> for LiveJob {
    fn from(job: &LeanJob) -> Self {
        LiveJob::of(&job.metadata)
    }
}

impl From<&LeanJob> for JobSummary {
    fn from(job: &LeanJob) -> Self {
        let status = job.status.as_ref();
        let conditions = status
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default();
        JobSummary::new(
            &job.metadata,
            status.and_then(|s| s.start_time.as_ref()).map(|t| t.0),
            status.and_then(|s| s.completion_time.as_ref()).map(|t| t.0),
            conditions.iter().map(|c| {
                (
                    c.type_.as_str(),
                    c.status.as_str(),
                    c.last_transition_time.as_ref().map(|t| t.0),
                    c.reason,
                )
            }),
        )
    }
}

/// The metadata fields kept; the others (managedFields, the other labels,
/// ...) are skipped by the deserializer.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LeanMetadata {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
    #[serde(default)]
    labels: Option<OneEntry<BucketLabel>>,
    #[serde(default)]
    annotations: Option<OneEntry<ScheduledAnnotation>>,
    #[serde(default)]
    deletion_timestamp: Option<Time>,
    #[serde(default)]
    finalizers: Option<SlotFinalizer>,
}

/// Of the finalizers, only whether [`SLOT_FINALIZER`] is among them.
struct SlotFinalizer(bool);

impl<'de> Deserialize<'de> for SlotFinalizer {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Finalizers;
        impl<'de> Visitor<'de> for Finalizers {
            type Value = SlotFinalizer;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of finalizers")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut held = false;
                while let Some(finalizer) = seq.next_element::<Cow<'de, str>>()? {
                    held |= finalizer == SLOT_FINALIZER;
                }
                Ok(SlotFinalizer(held))
            }
        }
        deserializer.deserialize_seq(Finalizers)
    }
}

/// The one key of a map that is kept.
trait KeptKey {
    const KEY: &'static str;
}

/// Of the labels, only the bucket.
struct BucketLabel;

impl KeptKey for BucketLabel {
    const KEY: &'static str = crate::bucket::LABEL;
}

/// Of the annotations, only the scheduled timestamp.
struct ScheduledAnnotation;

impl KeptKey for ScheduledAnnotation {
    const KEY: &'static str = SCHEDULED_TIMESTAMP_ANNOTATION;
}

/// Of a string map, only the value of `K::KEY`.
struct OneEntry<K>(Option<String>, PhantomData<K>);

impl<K: KeptKey> OneEntry<K> {
    fn into_map(self) -> Option<BTreeMap<String, String>> {
        self.0
            .map(|value| BTreeMap::from([(K::KEY.to_owned(), value)]))
    }
}

impl<'de, K: KeptKey> Deserialize<'de> for OneEntry<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries<K>(PhantomData<K>);
        impl<'de, K: KeptKey> Visitor<'de> for Entries<K> {
            type Value = OneEntry<K>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a string map (for its key {})", K::KEY)
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut kept = None;
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    if key == K::KEY {
                        kept = Some(map.next_value::<String>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(OneEntry(kept, PhantomData))
            }
        }
        deserializer.deserialize_map(Entries(PhantomData))
    }
}

fn lean_metadata<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    let Some(lean) = Option::<LeanMetadata>::deserialize(deserializer)? else {
        return Ok(ObjectMeta::default());
    };
    Ok(ObjectMeta {
        name: lean.name,
        namespace: lean.namespace,
        uid: lean.uid,
        resource_version: lean.resource_version,
        owner_references: lean.owner_references,
        labels: lean.labels.and_then(OneEntry::into_map),
        annotations: lean.annotations.and_then(OneEntry::into_map),
        deletion_timestamp: lean.deletion_timestamp,
        finalizers: lean
            .finalizers
            .is_some_and(|SlotFinalizer(held)| held)
            .then(|| vec![SLOT_FINALIZER.to_owned()]),
        ..ObjectMeta::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::Job;
    use serde_json::{Value, json};

    /// A Job as the API server sends it: a pod template, managed fields,
    /// labels and several annotations.
    fn wire_job(status: Value) -> Value {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {
                "name": "report-28488120", "namespace": "team-a", "uid": "job-uid",
                "resourceVersion": "4711", "generation": 1,
                "creationTimestamp": "2024-03-01T10:00:01Z",
                "labels": {"app": "report", "batch.kubernetes.io/job-name": "report-28488120",
                           "shardcron.io/bucket": "17"},
                "annotations": {
                    "batch.kubernetes.io/cronjob-scheduled-timestamp": "2024-03-01T11:00:00+01:00",
                    "example.com/owner": "team-a",
                    "example.com/nested-json": "{\"a\": [1, 2, {\"b\": null}]}"
                },
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "report",
                                     "uid": "cronjob-uid", "controller": true,
                                     "blockOwnerDeletion": true}],
                "managedFields": [{"manager": "shardcron", "operation": "Update",
                                   "apiVersion": "batch/v1", "time": "2024-03-01T10:00:01Z",
                                   "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]
            },
            "spec": {
                "backoffLimit": 6, "completions": 1, "parallelism": 1,
                "template": {"metadata": {"labels": {"app": "report"}},
                    "spec": {"restartPolicy": "OnFailure",
                        "containers": [{"name": "main", "image": "busybox",
                                        "command": ["sh", "-c", "date"],
                                        "resources": {"requests": {"cpu": "100m"}}}]}}
            },
            "status": status
        })
    }

    fn both(status: Value) -> (LeanJob, Job) {
        let wire = wire_job(status);
        let lean = serde_json::from_value(wire.clone()).expect("a lean Job");
        let full = serde_json::from_value(wire).expect("a Job");
        (lean, full)
    }

    #[test]
    fn a_lean_job_summarizes_as_the_full_job_does() {
        for status in [
            Value::Null,
            json!({}),
            json!({"startTime": "2024-03-01T10:00:02Z", "active": 1}),
            json!({"startTime": "2024-03-01T10:00:02Z", "completionTime": "2024-03-01T10:01:00Z",
                   "succeeded": 1,
                   "conditions": [{"type": "SuccessCriteriaMet", "status": "True"},
                                  {"type": "Complete", "status": "True",
                                   "lastTransitionTime": "2024-03-01T10:01:00Z"}]}),
            json!({"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"},
                                  {"type": "Complete", "status": "True"}]}),
            json!({"conditions": [{"type": "Complete", "status": "False"}]}),
        ] {
            let (lean, full) = both(status.clone());
            assert_eq!(JobSummary::from(&lean), JobSummary::from(&full), "{status}");
            if status.to_string().contains("BackoffLimitExceeded") {
                assert_eq!(
                    JobSummary::from(&lean).failure_reason,
                    Some(crate::reconcile::FailureReason::BackoffLimitExceeded)
                );
            }
            assert_eq!(
                crate::reconcile::controller_in(&lean.metadata),
                crate::reconcile::controller_in(&full.metadata),
            );
        }
    }

    #[test]
    fn a_held_job_being_deleted_reads_as_such_and_other_finalizers_are_dropped() {
        for (finalizers, held) in [
            (json!(["foregroundDeletion", SLOT_FINALIZER]), true),
            (json!(["foregroundDeletion"]), false),
            (json!([]), false),
        ] {
            let mut wire = wire_job(Value::Null);
            wire["metadata"]["finalizers"] = finalizers.clone();
            wire["metadata"]["deletionTimestamp"] = json!("2024-03-01T10:02:00Z");
            let lean: LeanJob = serde_json::from_value(wire.clone()).expect("a lean Job");
            let full: Job = serde_json::from_value(wire).expect("a Job");
            let summary = JobSummary::from(&lean);
            assert_eq!(summary, JobSummary::from(&full), "{finalizers}");
            assert!(summary.deleting);
            assert_eq!(summary.held, held, "{finalizers}");
            let expected = held.then(|| vec![SLOT_FINALIZER.to_owned()]);
            assert_eq!(lean.metadata.finalizers, expected);
        }
    }

    #[test]
    fn keeps_only_the_fields_the_controller_reads() {
        let (lean, _) = both(Value::Null);
        let meta = &lean.metadata;
        assert_eq!(meta.name.as_deref(), Some("report-28488120"));
        assert_eq!(meta.namespace.as_deref(), Some("team-a"));
        assert_eq!(meta.uid.as_deref(), Some("job-uid"));
        assert_eq!(meta.resource_version.as_deref(), Some("4711"));
        assert_eq!(meta.owner_references.as_ref().map(Vec::len), Some(1));
        assert_eq!(
            meta.annotations,
            Some(BTreeMap::from([(
                SCHEDULED_TIMESTAMP_ANNOTATION.to_owned(),
                "2024-03-01T11:00:00+01:00".to_owned()
            )]))
        );
        assert_eq!(
            meta.labels,
            Some(BTreeMap::from([(
                crate::bucket::LABEL.to_owned(),
                "17".to_owned()
            )]))
        );
        assert!(meta.managed_fields.is_none());
        assert!(meta.creation_timestamp.is_none() && meta.generation.is_none());
    }

    #[test]
    fn absent_and_null_fields_decode_as_none() {
        for wire in [
            json!({}),
            json!({"metadata": null, "status": null}),
            json!({"metadata": {"annotations": null, "ownerReferences": null},
                   "status": {"conditions": null, "startTime": null}}),
            json!({"metadata": {"annotations": {"other": "x"}, "labels": {"other": "x"}}}),
        ] {
            let lean: LeanJob = serde_json::from_value(wire.clone()).expect("decodes");
            assert!(lean.metadata.annotations.is_none(), "{wire}");
            assert!(lean.metadata.labels.is_none(), "{wire}");
            assert!(lean.metadata.owner_references.is_none(), "{wire}");
            assert!(
                lean.status
                    .as_ref()
                    .and_then(|s| s.start_time.as_ref())
                    .is_none(),
                "{wire}"
            );
        }
    }

    #[test]
    fn a_wrongly_typed_field_is_an_error_not_a_panic() {
        for wire in [
            json!({"metadata": {"annotations": ["not", "a", "map"]}}),
            json!({"metadata": {"annotations": {SCHEDULED_TIMESTAMP_ANNOTATION: 7}}}),
            json!({"status": {"conditions": [{"type": "Complete"}]}}),
            json!({"status": {"startTime": "yesterday"}}),
        ] {
            assert!(
                serde_json::from_value::<LeanJob>(wire.clone()).is_err(),
                "{wire}"
            );
        }
    }
}
