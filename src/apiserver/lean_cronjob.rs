//! A CronJob (batch/v1, or the shardcron.io CRD: the same spec and status)
//! as the CronJob watch, the bulk loads and the status
//! write's answer decode it: the spec's scalar fields and the status typed,
//! the Job template kept as JSON bytes (re-emitted compact, never built).
//!
//! Every CronJob event carries the whole object, and most of its bytes are
//! the Job template (a pod template) and `metadata.managedFields`. The
//! controller reads the template only when its generation changes (the
//! actor then compresses it, [`crate::reconcile::CompactTemplate`]) and
//! decodes it only to create a Job; every status write of every firing
//! comes back as a CronJob event with the same template. Decoded into
//! k8s-openapi's `CronJob`, each of those events built the whole pod
//! template and freed it. Here the deserializer re-emits the template's
//! JSON as bytes without building it, and skips managedFields, labels and
//! annotations (all but the one a converted CronJob's last slot travels
//! in and the opt-ins'). `benches/decode.rs` measures the difference.

pub use crate::reconcile::RawJson;
use crate::reconcile::options;
use crate::reconcile::{
    CompactTemplate, CronJobKind, CronJobView, LAST_SCHEDULE_ANNOTATION, SpecView, ViewError,
};
use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, CronJobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Deserializer};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A CronJob with only what the controller reads. `metadata` holds name,
/// namespace, uid, resourceVersion, generation, creationTimestamp,
/// deletionTimestamp and, of the annotations, only
/// [`LAST_SCHEDULE_ANNOTATION`] and the opt-ins' ([`options::ANNOTATIONS`]);
/// every other field is `None`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct LeanCronJob<Spec = LeanCronJobSpec> {
    /// Which API it came from: set by whoever read it (list items carry no
    /// apiVersion of their own).
    #[serde(skip)]
    pub kind: CronJobKind,
    #[serde(deserialize_with = "lean_metadata")]
    pub metadata: ObjectMeta,
    pub spec: Spec,
    pub status: Option<CronJobStatus>,
}

/// A CronJob read again for its Job template, as JSON: one too big to keep
/// ([`CompactTemplate::Left`]) is read so when its Job is made.
pub type CronJobWithTemplate = LeanCronJob<TemplateSpec>;

/// `spec.jobTemplate` alone, as the JSON it came in.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct TemplateSpec {
    pub job_template: RawJson,
}

/// `spec`, its Job template undecoded.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct LeanCronJobSpec {
    pub schedule: String,
    pub time_zone: Option<String>,
    pub starting_deadline_seconds: Option<i64>,
    pub concurrency_policy: Option<String>,
    pub suspend: Option<bool>,
    pub successful_jobs_history_limit: Option<i32>,
    pub failed_jobs_history_limit: Option<i32>,
    /// `jobTemplate` as received (`None` when absent: an empty template).
    pub job_template: Option<ReceivedTemplate>,
}

/// A template past this (its JSON, or its protobuf message) is compressed
/// as it is read (or left, if it compresses to more than
/// [`crate::reconcile::KEPT_TEMPLATE_BYTES`]): a list's page or a watch
/// event holds no more of a tenant's big template than an actor would.
/// Below it (every realistic template) the bytes are kept as read, and
/// compressed only when the spec changes.
pub const RECEIVED_TEMPLATE_BYTES: usize = 64 * 1024;

/// `jobTemplate` as the decoder keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReceivedTemplate {
    /// Its JSON, re-emitted compact: at most [`RECEIVED_TEMPLATE_BYTES`].
    Json(RawJson),
    /// Its protobuf message (a protobuf load's), as received: at most
    /// [`RECEIVED_TEMPLATE_BYTES`].
    Protobuf(Box<[u8]>),
    /// A bigger one, compressed (or left) as it was read.
    Compact(CompactTemplate),
}

impl<'de> Deserialize<'de> for ReceivedTemplate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let json = RawJson::deserialize(deserializer)?;
        Ok(Self::bounded(
            json.0,
            |json| Self::Json(RawJson(json)),
            CompactTemplate::from_json,
        ))
    }
}

impl ReceivedTemplate {
    /// A template received in protobuf.
    pub fn protobuf(message: Vec<u8>) -> Self {
        Self::bounded(
            message.into(),
            Self::Protobuf,
            CompactTemplate::from_protobuf,
        )
    }

    /// The bytes kept as received up to [`RECEIVED_TEMPLATE_BYTES`], and
    /// compressed at once past it, whatever their encoding.
    fn bounded(
        received: Box<[u8]>,
        keep: impl FnOnce(Box<[u8]>) -> Self,
        compress: impl FnOnce(&[u8]) -> CompactTemplate,
    ) -> Self {
        if received.len() > RECEIVED_TEMPLATE_BYTES {
            Self::Compact(compress(&received))
        } else {
            keep(received)
        }
    }

    /// The template as an actor keeps it.
    fn compact(&self) -> CompactTemplate {
        match self {
            Self::Json(json) => CompactTemplate::from_json(json.as_bytes()),
            Self::Protobuf(message) => CompactTemplate::from_protobuf(message),
            Self::Compact(compact) => compact.clone(),
        }
    }
}

/// The URL a CronJob is read at depends on its kind (batch/v1 or the
/// shardcron.io CRD): `Api::<LeanCronJob>::namespaced_with(client, ns, &kind)`;
/// `Api::namespaced` is batch/v1's.
impl<Spec> kube::Resource for LeanCronJob<Spec> {
    type DynamicType = CronJobKind;
    // kube's name for "namespaced, known at run time": what `namespaced_with` takes.
    type Scope = kube::core::DynamicResourceScope;

    fn kind(_: &CronJobKind) -> Cow<'_, str> {
        Cow::Borrowed(CronJobKind::KIND)
    }

    fn group(kind: &CronJobKind) -> Cow<'_, str> {
        Cow::Borrowed(kind.group())
    }

    fn version(kind: &CronJobKind) -> Cow<'_, str> {
        Cow::Borrowed(kind.version())
    }

    fn api_version(kind: &CronJobKind) -> Cow<'_, str> {
        Cow::Borrowed(kind.api_version())
    }

    fn plural(_: &CronJobKind) -> Cow<'_, str> {
        Cow::Borrowed(CronJobKind::PLURAL)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl LeanCronJob {
    /// Its key in the ring ([`CronJobKind::key`]: kind-qualified, so that
    /// namesakes of the two kinds stay apart).
    pub fn key(&self) -> String {
        self.kind.key(
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default(),
        )
    }

    /// The compiled spec, its template compressed from the bytes received.
    pub fn spec_view(&self) -> SpecView {
        let spec = &self.spec;
        let scalars = CronJobSpec {
            schedule: spec.schedule.clone(),
            time_zone: spec.time_zone.clone(),
            starting_deadline_seconds: spec.starting_deadline_seconds,
            concurrency_policy: spec.concurrency_policy.clone(),
            suspend: spec.suspend,
            successful_jobs_history_limit: spec.successful_jobs_history_limit,
            failed_jobs_history_limit: spec.failed_jobs_history_limit,
            job_template: Default::default(),
        };
        let template = match &spec.job_template {
            Some(received) => received.compact(),
            None => CompactTemplate::from_json(b"{}"),
        };
        SpecView::with_template(&scalars, template)
    }

    /// The view of this version around `spec` (this version's spec, or an
    /// unchanged one kept from an earlier version).
    pub fn view(&self, spec: Arc<SpecView>) -> Result<CronJobView, ViewError> {
        CronJobView::from_parts(self.kind, &self.metadata, self.status.as_ref(), spec)
    }
}

/// A full CronJob (a GET's answer, a test's object) in the lean form.
impl From<&CronJob> for LeanCronJob {
    fn from(cronjob: &CronJob) -> Self {
        let meta = &cronjob.metadata;
        let spec = &cronjob.spec;
        Self {
            kind: CronJobKind::Batch,
            metadata: kept(meta.clone()),
            spec: LeanCronJobSpec {
                schedule: spec.schedule.clone(),
                time_zone: spec.time_zone.clone(),
                starting_deadline_seconds: spec.starting_deadline_seconds,
                concurrency_policy: spec.concurrency_policy.clone(),
                suspend: spec.suspend,
                successful_jobs_history_limit: spec.successful_jobs_history_limit,
                failed_jobs_history_limit: spec.failed_jobs_history_limit,
                // Serializing an API object cannot fail.
                job_template: serde_json::to_vec(&spec.job_template)
                    .ok()
                    .map(|json| ReceivedTemplate::Json(RawJson(json.into()))),
            },
            status: cronjob.status.clone(),
        }
    }
}

/// The metadata fields kept; the others (managedFields, labels,
/// annotations, ...) are skipped by the deserializer.
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct LeanMetadata {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
    creation_timestamp: Option<Time>,
    deletion_timestamp: Option<Time>,
    /// Only [`LAST_SCHEDULE_ANNOTATION`] and the opt-ins'
    /// ([`options::ANNOTATIONS`]): the others are skipped as read.
    #[serde(deserialize_with = "seed_annotation")]
    annotations: Option<BTreeMap<String, String>>,
}

/// `metadata.annotations`, of which only the converted CronJob's last slot
/// and the opt-ins are kept (every other value is skipped, not built).
fn seed_annotation<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Seed;
    impl<'de> serde::de::Visitor<'de> for Seed {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of annotations")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut kept: Option<BTreeMap<String, String>> = None;
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if key == LAST_SCHEDULE_ANNOTATION || options::ANNOTATIONS.contains(&&*key) {
                    let value: String = map.next_value()?;
                    kept.get_or_insert_default().insert(key.into_owned(), value);
                } else {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
            Ok(kept)
        }
    }
    deserializer.deserialize_option(Seed)
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
        generation: lean.generation,
        creation_timestamp: lean.creation_timestamp,
        deletion_timestamp: lean.deletion_timestamp,
        annotations: lean.annotations,
        ..ObjectMeta::default()
    })
}

/// The fields of `meta` that [`lean_metadata`] keeps.
fn kept(meta: ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        uid: meta.uid,
        resource_version: meta.resource_version,
        generation: meta.generation,
        creation_timestamp: meta.creation_timestamp,
        deletion_timestamp: meta.deletion_timestamp,
        annotations: meta.annotations.and_then(|mut all| {
            let seed = all.remove_entry(LAST_SCHEDULE_ANNOTATION)?;
            Some(BTreeMap::from([seed]))
        }),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::JobTemplate;
    use jiff::tz::TimeZone;
    use kube::core::{ObjectList, WatchEvent};
    use serde_json::{Value, json};

    /// A CronJob as the API server sends it: managed fields, labels,
    /// annotations, a pod template with what templates usually hold.
    fn wire() -> Value {
        json!({
            "apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {
                "name": "report", "namespace": "team-a", "uid": "cj-uid",
                "resourceVersion": "4711", "generation": 3,
                "creationTimestamp": "2024-03-01T08:00:00Z",
                "deletionTimestamp": "2024-03-02T08:00:00Z",
                "labels": {"app": "report"},
                "annotations": {"example.com/owner": "team-a"},
                "managedFields": [{"manager": "kubectl", "operation": "Update",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
            },
            "spec": {
                "schedule": "30 2 * * *", "timeZone": "Europe/Berlin",
                "startingDeadlineSeconds": 200, "concurrencyPolicy": "Forbid",
                "suspend": false, "successfulJobsHistoryLimit": 2, "failedJobsHistoryLimit": 4,
                "jobTemplate": {
                    "metadata": {"labels": {"app": "report"}, "annotations": {"a": "b"}},
                    "spec": {"backoffLimit": 2, "ttlSecondsAfterFinished": 60,
                        "template": {"metadata": {"labels": {"app": "report"}},
                            "spec": {"restartPolicy": "OnFailure",
                                "containers": [{"name": "main", "image": "busybox",
                                    "command": ["sh", "-c", "date"],
                                    "env": [{"name": "A", "value": "1"}],
                                    "resources": {"requests": {"cpu": "100m"}}}]}}}
                }
            },
            "status": {"lastScheduleTime": "2024-03-01T01:30:00Z",
                       "active": [{"kind": "Job", "namespace": "team-a", "name": "report-1",
                                   "uid": "j-1", "apiVersion": "batch/v1"}]}
        })
    }

    /// A field a newer API server knows and this build's types do not, in
    /// the Job's spec and in its pod template, reaches the Job's body as it
    /// came, whether the template was kept or read again (too big to keep),
    /// as upstream's controller of that release copies it.
    #[test]
    fn fields_this_build_does_not_know_reach_the_job_as_they_came() {
        let mut cronjob = wire();
        let spec = &mut cronjob["spec"]["jobTemplate"]["spec"];
        spec["fieldOfANewerRelease"] = json!({"mode": "Gang", "members": [1, 2]});
        spec["template"]["spec"]["containers"][0]["newerContainerField"] = json!(true);
        let sent = cronjob["spec"]["jobTemplate"]["spec"].clone();
        let lean: LeanCronJob = serde_json::from_value(cronjob.clone()).expect("a lean CronJob");
        let view = lean.view(Arc::new(lean.spec_view())).expect("a view");
        let slot = "2024-03-01T01:30:00Z".parse().expect("a time");
        let job = crate::reconcile::build_job(&view, &TimeZone::UTC, slot).expect("a Job");
        assert_eq!(job.ttl_seconds_after_finished, Some(60));
        let body = crate::apiserver::protobuf::job::JobBody::of(job).expect("a body");
        assert_eq!(body.content_type, "application/json");
        let body: Value = serde_json::from_slice(&body.bytes).expect("JSON");
        assert_eq!(body["spec"], sent);
        assert_eq!(body["kind"], "Job");
        assert_eq!(body["metadata"]["labels"]["app"], "report");
        // Read again (a template too big to keep): the same.
        let again: CronJobWithTemplate = serde_json::from_value(cronjob).expect("read again");
        let template = JobTemplate::from_json(again.spec.job_template.as_bytes());
        assert_eq!(Some(template), view.spec.job_template.decode());
    }

    #[test]
    fn decides_as_the_full_cronjob_does() {
        let lean: LeanCronJob = serde_json::from_value(wire()).expect("a lean CronJob");
        let full: CronJob = serde_json::from_value(wire()).expect("a CronJob");
        let from_lean = lean.view(Arc::new(lean.spec_view())).expect("a view");
        let from_full = CronJobView::from_api(&full).expect("a view");
        assert_eq!(
            format!("{from_lean:?}"),
            format!("{from_full:?}").replace(
                &format!("{:?}", from_full.spec.job_template),
                &format!("{:?}", from_lean.spec.job_template),
            )
        );
        assert_eq!(
            from_lean.spec.job_template.decode(),
            from_full.spec.job_template.decode()
        );
        let slot = "2024-03-01T01:30:00Z".parse().expect("a time");
        assert_eq!(
            crate::reconcile::build_job(&from_lean, &TimeZone::UTC, slot),
            crate::reconcile::build_job(&from_full, &TimeZone::UTC, slot)
        );
        // And a full CronJob converted keeps the same.
        let converted = LeanCronJob::from(&full);
        assert_eq!(converted.metadata, lean.metadata);
        assert_eq!(
            converted.spec_view().job_template.decode(),
            from_full.spec.job_template.decode()
        );
    }

    #[test]
    fn a_big_template_is_compressed_or_left_as_it_is_read_and_read_again_whole() {
        let noise = shardcron_harness::incompressible_text(1_000_000, 1);
        let mut big = wire();
        big["spec"]["jobTemplate"]["metadata"] = json!({"annotations": {"noise": noise}});
        let page = serde_json::to_vec(&json!({
            "apiVersion": "batch/v1", "kind": "CronJobList",
            "metadata": {"resourceVersion": "9"}, "items": [big.clone(), wire()]
        }))
        .expect("a page");
        let list: ObjectList<LeanCronJob> = serde_json::from_slice(&page).expect("a list");
        // The page holds the big one's digest, not its megabyte.
        assert!(matches!(
            list.items[0].spec.job_template,
            Some(ReceivedTemplate::Compact(CompactTemplate::Left { .. }))
        ));
        assert!(matches!(
            list.items[1].spec.job_template,
            Some(ReceivedTemplate::Json(_))
        ));
        // The same as an actor would keep of the JSON received.
        let received = serde_json::to_vec(&big["spec"]["jobTemplate"]).expect("JSON");
        assert_eq!(
            list.items[0].spec_view().job_template,
            CompactTemplate::from_json(&received)
        );
        let full: CronJob = serde_json::from_value(big.clone()).expect("a CronJob");
        // Read again for its Job: the template whole.
        let again: CronJobWithTemplate = serde_json::from_value(big).expect("read again");
        assert_eq!(
            JobTemplate::from_json(again.spec.job_template.as_bytes()).typed(),
            Some(full.spec.job_template.clone())
        );
        assert_eq!(again.metadata.uid, full.metadata.uid);
    }

    #[test]
    fn watch_events_and_list_pages_decode_with_the_raw_template() {
        // kube decodes each watch line as a `WatchEvent` (tagged by "type",
        // the object under "object") and each page as an `ObjectList`.
        let line =
            serde_json::to_vec(&json!({"type": "MODIFIED", "object": wire()})).expect("a line");
        match serde_json::from_slice::<WatchEvent<LeanCronJob>>(&line) {
            Ok(WatchEvent::Modified(cronjob)) => {
                assert!(cronjob.spec.job_template.is_some());
                assert_eq!(cronjob.metadata.generation, Some(3));
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
        let page = serde_json::to_vec(&json!({
            "apiVersion": "batch/v1", "kind": "CronJobList",
            "metadata": {"resourceVersion": "9"}, "items": [wire(), wire()]
        }))
        .expect("a page");
        let list: ObjectList<LeanCronJob> = serde_json::from_slice(&page).expect("a list");
        assert_eq!(list.items.len(), 2);
    }

    #[test]
    fn keeps_only_the_metadata_the_controller_reads() {
        let lean: LeanCronJob = serde_json::from_value(wire()).expect("a lean CronJob");
        let meta = &lean.metadata;
        assert!(meta.labels.is_none() && meta.annotations.is_none());
        assert!(meta.managed_fields.is_none());
        assert!(meta.deletion_timestamp.is_some());
        // Without a template, an empty one (the create then fails on the
        // server, as upstream's would).
        let bare: LeanCronJob = serde_json::from_value(
            json!({"metadata": {"name": "x"}, "spec": {"schedule": "* * * * *"}}),
        )
        .expect("a lean CronJob");
        assert_eq!(
            bare.spec_view().job_template.decode(),
            Some(JobTemplate::default())
        );
    }

    #[test]
    fn of_the_annotations_only_a_converted_cronjobs_last_slot_is_kept() {
        let mut converted = wire();
        converted["metadata"]["annotations"][LAST_SCHEDULE_ANNOTATION] =
            json!("2024-03-01T10:00:00Z");
        converted["status"] = json!(null);
        let lean: LeanCronJob = serde_json::from_value(converted.clone()).expect("lean");
        let kept = BTreeMap::from([(
            LAST_SCHEDULE_ANNOTATION.to_owned(),
            "2024-03-01T10:00:00Z".to_owned(),
        )]);
        assert_eq!(lean.metadata.annotations.as_ref(), Some(&kept));
        // The full decode keeps the same, and both views start from the slot.
        let full: CronJob = serde_json::from_value(converted).expect("full");
        assert_eq!(LeanCronJob::from(&full).metadata.annotations, Some(kept));
        let view = lean.view(Arc::new(lean.spec_view())).expect("a view");
        assert_eq!(
            view.status.last_schedule_time.get(),
            Some("2024-03-01T10:00:00Z".parse().unwrap())
        );
        let none: LeanCronJob =
            serde_json::from_value(json!({"metadata": {"name": "x", "annotations": null}}))
                .expect("null annotations");
        assert_eq!(none.metadata.annotations, None);
    }

    /// The controller's own annotations are among those kept: a view
    /// without its slot history would start a new one at every write.
    #[test]
    fn the_slot_history_is_kept_and_read_into_the_view() {
        let mut cronjob = wire();
        let history =
            r#"{"failed":1,"since":"2024-03-01T10:00:00Z","recordedTo":"1970-01-01T00:00:00Z"}"#;
        cronjob["metadata"]["annotations"][crate::reconcile::SLOT_HISTORY_ANNOTATION] =
            json!(history);
        let lean: LeanCronJob = serde_json::from_value(cronjob).expect("lean");
        let view = lean.view(Arc::new(lean.spec_view())).expect("a view");
        assert_eq!(view.options.history.map(|h| h.failed), Some(1));
    }
}
