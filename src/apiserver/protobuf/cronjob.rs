//! batch/v1 CronJobs read in protobuf, into the same [`LeanCronJob`] their
//! JSON gives: the same fields kept (of the annotations only the converted
//! CronJob's last slot and the opt-ins'), the others skipped unread, the
//! Job template kept as the bytes it came in
//! ([`ReceivedTemplate::Protobuf`]).

use super::{ProtobufError, ReadError, message_of};
use crate::apiserver::lean_cronjob::{LeanCronJob, LeanCronJobSpec, ReceivedTemplate};
use crate::k8s_proto::{self, present};
use crate::reconcile::{CronJobKind, LAST_SCHEDULE_ANNOTATION, options};
use k8s_openapi::api::batch::v1::CronJobStatus;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use prost::Message as _;

/// A CronJob from its message (a whole list's item: not enveloped).
pub fn from_message(message: &[u8]) -> Result<LeanCronJob, ReadError> {
    k8s_proto::CronJob::decode(message)
        .map(lean)
        .map_err(|source| {
            ProtobufError::Decode {
                what: "a CronJob",
                source,
            }
            .into()
        })
}

/// A page of a list: its CronJobs and its continue token (`None`: the last).
pub fn from_list(body: &[u8]) -> Result<(Vec<LeanCronJob>, Option<String>), ReadError> {
    let message = message_of("CronJobList", body)?;
    let list = k8s_proto::CronJobList::decode(message.as_slice()).map_err(|source| {
        ProtobufError::Decode {
            what: "a CronJobList",
            source,
        }
    })?;
    let next = present(list.metadata.and_then(|m| m.continue_));
    Ok((list.items.into_iter().map(lean).collect(), next))
}

fn lean(cronjob: k8s_proto::CronJob) -> LeanCronJob {
    let meta = cronjob.metadata.unwrap_or_default();
    let spec = cronjob.spec.unwrap_or_default();
    let time = |t: Option<k8s_proto::Time>| t.and_then(|t| t.timestamp()).map(Time);
    let annotations: std::collections::BTreeMap<String, String> = meta
        .annotations
        .into_iter()
        .filter(|(key, _)| {
            key == LAST_SCHEDULE_ANNOTATION || options::ANNOTATIONS.contains(&key.as_str())
        })
        .collect();
    LeanCronJob {
        kind: CronJobKind::Batch,
        metadata: ObjectMeta {
            name: present(meta.name),
            namespace: present(meta.namespace),
            uid: present(meta.uid),
            resource_version: present(meta.resource_version),
            generation: meta.generation.filter(|g| *g != 0),
            creation_timestamp: time(meta.creation_timestamp),
            deletion_timestamp: time(meta.deletion_timestamp),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..ObjectMeta::default()
        },
        spec: LeanCronJobSpec {
            schedule: spec.schedule.unwrap_or_default(),
            time_zone: spec.time_zone,
            starting_deadline_seconds: spec.starting_deadline_seconds,
            concurrency_policy: present(spec.concurrency_policy),
            suspend: spec.suspend,
            successful_jobs_history_limit: spec.successful_jobs_history_limit,
            failed_jobs_history_limit: spec.failed_jobs_history_limit,
            job_template: spec.job_template.map(ReceivedTemplate::protobuf),
        },
        status: cronjob.status.map(|status| CronJobStatus {
            active: (!status.active.is_empty())
                .then(|| status.active.into_iter().map(reference).collect()),
            last_schedule_time: time(status.last_schedule_time),
            last_successful_time: time(status.last_successful_time),
        }),
    }
}

fn reference(r: k8s_proto::ObjectReference) -> ObjectReference {
    ObjectReference {
        api_version: present(r.api_version),
        kind: present(r.kind),
        namespace: present(r.namespace),
        name: present(r.name),
        uid: present(r.uid),
        resource_version: present(r.resource_version),
        field_path: present(r.field_path),
    }
}
