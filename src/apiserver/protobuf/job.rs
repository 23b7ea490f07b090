//! A Job to create, as the body of its POST, in the encoding its template
//! came in: the template's spec sent back as it came (JSON or protobuf),
//! the metadata this controller built encoded around it. Either way the server decodes the same Job:
//! `tests/suites/controller_e2e.rs` creates both from one template and
//! compares what the server stored.

use crate::k8s_proto;
use crate::reconcile::{EncodedSpec, NewJob};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use prost::Message as _;

/// A create's body and its `Content-Type`.
pub struct JobBody {
    pub content_type: &'static str,
    pub bytes: Vec<u8>,
}

impl JobBody {
    pub fn of(job: NewJob) -> Result<Self, serde_json::Error> {
        match job.spec {
            EncodedSpec::Json(spec) => {
                let mut bytes = serde_json::to_vec(&Job {
                    metadata: job.metadata,
                    spec: None,
                    status: None,
                })?;
                // `{"apiVersion":..,"kind":..,"metadata":{..}}`: the spec's
                // bytes go in before its closing brace, as they came.
                if let Some(spec) = spec {
                    bytes.pop();
                    bytes.extend_from_slice(b",\"spec\":");
                    bytes.extend_from_slice(spec.as_bytes());
                    bytes.push(b'}');
                }
                Ok(Self {
                    content_type: "application/json",
                    bytes,
                })
            }
            EncodedSpec::Protobuf(message) => {
                let job = k8s_proto::Job {
                    metadata: Some(metadata(job.metadata)),
                    spec: Some(message),
                };
                Ok(Self {
                    content_type: super::CONTENT_TYPE,
                    bytes: k8s_proto::envelope("batch/v1", "Job", job.encode_to_vec()),
                })
            }
        }
    }
}

/// The metadata a decision builds for a Job (name, labels, annotations,
/// creation time, owner, finalizers: `reconcile::build_job` sets no other
/// field, nor does the create that adds the bucket label and annotations).
fn metadata(meta: ObjectMeta) -> k8s_proto::ObjectMeta {
    k8s_proto::ObjectMeta {
        name: meta.name,
        namespace: meta.namespace,
        labels: meta.labels.unwrap_or_default(),
        annotations: meta.annotations.unwrap_or_default(),
        creation_timestamp: meta.creation_timestamp.map(|t| k8s_proto::Time::of(t.0)),
        owner_references: meta
            .owner_references
            .unwrap_or_default()
            .into_iter()
            .map(|owner| k8s_proto::OwnerReference {
                kind: Some(owner.kind),
                name: Some(owner.name),
                uid: Some(owner.uid),
                api_version: Some(owner.api_version),
                controller: owner.controller,
                block_owner_deletion: owner.block_owner_deletion,
            })
            .collect(),
        finalizers: meta.finalizers.unwrap_or_default(),
        ..k8s_proto::ObjectMeta::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::Timestamp;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use std::collections::BTreeMap;

    #[test]
    fn a_protobuf_spec_is_sent_back_as_it_came_with_the_metadata_built() {
        let spec = k8s_proto::JobSpecTtl {
            ttl_seconds_after_finished: Some(60),
        }
        .encode_to_vec();
        let job = NewJob {
            metadata: ObjectMeta {
                name: Some("nightly-29000000".into()),
                labels: Some(BTreeMap::from([("app".into(), "nightly".into())])),
                annotations: Some(BTreeMap::from([("a".into(), "b".into())])),
                creation_timestamp: Some(Time(Timestamp::from_second(1_740_000_000).unwrap())),
                owner_references: Some(vec![OwnerReference {
                    api_version: "batch/v1".into(),
                    kind: "CronJob".into(),
                    name: "nightly".into(),
                    uid: "u-1".into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]),
                finalizers: Some(vec!["shardcron.io/slot-record".into()]),
                ..ObjectMeta::default()
            },
            spec: EncodedSpec::Protobuf(spec.clone()),
            ttl_seconds_after_finished: Some(60),
        };
        let body = JobBody::of(job).unwrap();
        assert_eq!(body.content_type, "application/vnd.kubernetes.protobuf");
        let (kind, raw) = k8s_proto::open_envelope(&body.bytes).unwrap();
        assert_eq!(kind, "Job");
        let sent = k8s_proto::Job::decode(raw.as_slice()).unwrap();
        assert_eq!(sent.spec, Some(spec));
        let meta = sent.metadata.unwrap();
        assert_eq!(meta.name.as_deref(), Some("nightly-29000000"));
        assert_eq!(meta.labels["app"], "nightly");
        assert_eq!(meta.annotations["a"], "b");
        assert_eq!(meta.finalizers, ["shardcron.io/slot-record"]);
        assert_eq!(
            meta.creation_timestamp.and_then(|t| t.timestamp()),
            Some(Timestamp::from_second(1_740_000_000).unwrap())
        );
        let owner = &meta.owner_references[0];
        assert_eq!(owner.uid.as_deref(), Some("u-1"));
        assert_eq!(owner.controller, Some(true));
    }

    #[test]
    fn a_typed_spec_is_sent_as_json() {
        let job = NewJob {
            metadata: ObjectMeta {
                name: Some("j".into()),
                ..ObjectMeta::default()
            },
            spec: EncodedSpec::Json(None),
            ttl_seconds_after_finished: None,
        };
        let body = JobBody::of(job).unwrap();
        assert_eq!(body.content_type, "application/json");
        let sent: Job = serde_json::from_slice(&body.bytes).unwrap();
        assert_eq!(sent.metadata.name.as_deref(), Some("j"));
    }
}
