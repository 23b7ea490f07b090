use super::*;
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::reconcile::{EncodedSpec, LAST_SCHEDULE_ANNOTATION};
use k8s_openapi::api::batch::v1::JobTemplateSpec;
use serde_json::json;
use std::collections::BTreeMap;

/// kube-apiserver's answer when its watch cache is behind (as a
/// `curl -H 'Accept: application/vnd.kubernetes.protobuf'` showed it).
fn too_large_resource_version() -> Vec<u8> {
    let status = k8s_proto::Status {
        status: Some("Failure".into()),
        message: Some("Timeout: Too large resource version: 9, current: 8".into()),
        reason: Some("Timeout".into()),
        details: Some(k8s_proto::StatusDetails {
            causes: vec![k8s_proto::StatusCause {
                reason: Some("ResourceVersionTooLarge".into()),
                message: Some("Too large resource version".into()),
                field: Some(String::new()),
            }],
            retry_after_seconds: Some(1),
            ..Default::default()
        }),
        code: Some(504),
    };
    k8s_proto::envelope("v1", "Status", status.encode_to_vec())
}

#[test]
fn an_error_answer_is_read_in_either_encoding() {
    let status = error_status(
        http::StatusCode::GATEWAY_TIMEOUT,
        &too_large_resource_version(),
    );
    assert_eq!(status.code, 504);
    assert_eq!(status.reason, "Timeout");
    let causes = &status.details.as_ref().unwrap().causes;
    assert_eq!(causes[0].reason, "ResourceVersionTooLarge");

    let json = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                      "message": "gone", "reason": "Expired", "code": 410});
    let status = error_status(http::StatusCode::GONE, json.to_string().as_bytes());
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));

    let status = error_status(http::StatusCode::BAD_GATEWAY, b"upstream connect error");
    assert_eq!(status.code, 502);
    assert_eq!(status.message, "upstream connect error");
}

#[test]
fn a_status_where_a_cronjob_list_was_expected_is_the_error_it_tells() {
    match cronjob::from_list(&too_large_resource_version()) {
        Err(ReadError::Status(status)) => assert_eq!(status.code, 504),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        cronjob::from_list(b"{\"kind\":\"CronJobList\"}"),
        Err(ReadError::Protobuf(ProtobufError::NoMagic))
    ));
    let jobs = k8s_proto::envelope("batch/v1", "JobList", Vec::new());
    assert!(matches!(
        cronjob::from_list(&jobs),
        Err(ReadError::Protobuf(ProtobufError::Kind { .. }))
    ));
}

/// The same CronJob as kube-apiserver sends it in protobuf: Go writes every
/// non-pointer field, empty ones included, and `managedFields` (17).
fn protobuf_cronjob() -> Vec<u8> {
    let time = |s| {
        Some(k8s_proto::Time::of(
            jiff::Timestamp::from_second(s).unwrap(),
        ))
    };
    let template = k8s_proto::JobTemplateSpec {
        metadata: Some(k8s_proto::ObjectMeta {
            labels: BTreeMap::from([("app".into(), "report".into())]),
            creation_timestamp: Some(k8s_proto::Time::default()),
            ..Default::default()
        }),
        spec: Some(
            k8s_proto::JobSpecTtl {
                ttl_seconds_after_finished: Some(600),
            }
            .encode_to_vec(),
        ),
    };
    let cronjob = k8s_proto::CronJob {
        metadata: Some(k8s_proto::ObjectMeta {
            name: Some("report".into()),
            namespace: Some("team-a".into()),
            uid: Some("u-1".into()),
            resource_version: Some("4711".into()),
            generation: Some(3),
            creation_timestamp: time(1_709_251_200),
            deletion_timestamp: Some(k8s_proto::Time::default()),
            labels: BTreeMap::from([("team".into(), "a".into())]),
            annotations: BTreeMap::from([
                ("noise".into(), "x".repeat(100)),
                (
                    LAST_SCHEDULE_ANNOTATION.into(),
                    "2024-03-01T01:00:00Z".into(),
                ),
            ]),
            ..Default::default()
        }),
        spec: Some(k8s_proto::CronJobSpec {
            schedule: Some("30 1 * * *".into()),
            concurrency_policy: Some("Forbid".into()),
            suspend: Some(false),
            job_template: Some(template.encode_to_vec()),
            successful_jobs_history_limit: Some(3),
            failed_jobs_history_limit: Some(1),
            starting_deadline_seconds: None,
            time_zone: None,
        }),
        status: Some(k8s_proto::CronJobStatus {
            active: vec![k8s_proto::ObjectReference {
                kind: Some("Job".into()),
                namespace: Some("team-a".into()),
                name: Some("report-1".into()),
                uid: Some("j-1".into()),
                api_version: Some("batch/v1".into()),
                resource_version: Some(String::new()),
                field_path: Some(String::new()),
            }],
            last_schedule_time: time(1_709_256_600),
            last_successful_time: None,
        }),
    };
    // managedFields (ObjectMeta's 17) inside the metadata: prost must skip it.
    let mut meta = cronjob.metadata.clone().unwrap().encode_to_vec();
    let managed = br#"{"f:spec":{}}"#;
    meta.extend([0x8a, 0x01, managed.len() as u8]);
    meta.extend(managed);
    let mut message = Vec::new();
    prost::encoding::bytes::encode(1, &meta, &mut message);
    let without_meta = k8s_proto::CronJob {
        metadata: None,
        ..cronjob
    };
    message.extend(without_meta.encode_to_vec());
    k8s_proto::envelope("batch/v1", "CronJob", message)
}

/// The same CronJob as its JSON.
fn json_cronjob() -> serde_json::Value {
    json!({
        "metadata": {
            "name": "report", "namespace": "team-a", "uid": "u-1",
            "resourceVersion": "4711", "generation": 3,
            "creationTimestamp": "2024-03-01T00:00:00Z",
            "labels": {"team": "a"},
            "annotations": {"noise": "x".repeat(100),
                            LAST_SCHEDULE_ANNOTATION: "2024-03-01T01:00:00Z"},
            "managedFields": [{"fieldsV1": {"f:spec": {}}}]
        },
        "spec": {
            "schedule": "30 1 * * *", "concurrencyPolicy": "Forbid", "suspend": false,
            "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
            "jobTemplate": {"metadata": {"labels": {"app": "report"}, "creationTimestamp": null},
                            "spec": {"ttlSecondsAfterFinished": 600}}
        },
        "status": {
            "active": [{"kind": "Job", "namespace": "team-a", "name": "report-1",
                        "uid": "j-1", "apiVersion": "batch/v1"}],
            "lastScheduleTime": "2024-03-01T01:30:00Z"
        }
    })
}

#[test]
fn a_cronjob_reads_the_same_in_protobuf_as_in_json() {
    // As a whole list's item: the message, without its envelope.
    let (_, message) = k8s_proto::open_envelope(&protobuf_cronjob()).expect("enveloped");
    let from_protobuf = cronjob::from_message(&message).expect("a CronJob");
    let from_json: LeanCronJob = serde_json::from_value(json_cronjob()).expect("a CronJob");
    assert_eq!(from_protobuf.metadata, from_json.metadata);
    assert_eq!(from_protobuf.status, from_json.status);
    assert_eq!(from_protobuf.key(), from_json.key());
    let (protobuf_view, json_view) = (from_protobuf.spec_view(), from_json.spec_view());
    assert_eq!(
        format!("{:?}", SpecWithoutTemplate(&protobuf_view)),
        format!("{:?}", SpecWithoutTemplate(&json_view))
    );
    // The template: typed from JSON, as it came from protobuf; the same
    // labels and TTL either way.
    let typed: JobTemplateSpec = json_view.job_template.decode().unwrap().typed().unwrap();
    let template = protobuf_view.job_template.decode().expect("kept");
    assert!(matches!(template.spec, EncodedSpec::Protobuf(_)));
    assert_eq!(Some(template.labels), typed.metadata.unwrap().labels);
    assert_eq!(
        template.ttl_seconds_after_finished,
        typed.spec.unwrap().ttl_seconds_after_finished
    );
}

/// A spec's scalars (the template's two encodings differ on purpose).
struct SpecWithoutTemplate<'a>(&'a crate::reconcile::SpecView);

impl std::fmt::Debug for SpecWithoutTemplate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let spec = self.0;
        f.debug_struct("Spec")
            .field("schedule", &spec.schedule)
            .field("time_zone", &spec.time_zone)
            .field("starting_deadline_seconds", &spec.starting_deadline_seconds)
            .field("concurrency_policy", &spec.concurrency_policy)
            .field("suspend", &spec.suspend)
            .field("successful", &spec.successful_jobs_history_limit)
            .field("failed", &spec.failed_jobs_history_limit)
            .finish()
    }
}

#[test]
fn a_list_page_and_its_continue_token() {
    let list = k8s_proto::CronJobList {
        metadata: Some(k8s_proto::ListMeta {
            resource_version: Some("9".into()),
            continue_: Some("next".into()),
        }),
        items: vec![k8s_proto::CronJob::default(); 2],
    };
    let body = k8s_proto::envelope("batch/v1", "CronJobList", list.encode_to_vec());
    let (items, next) = cronjob::from_list(&body).unwrap();
    assert_eq!((items.len(), next.as_deref()), (2, Some("next")));
    let last = k8s_proto::CronJobList {
        metadata: Some(k8s_proto::ListMeta {
            resource_version: Some("9".into()),
            continue_: Some(String::new()),
        }),
        items: Vec::new(),
    };
    let body = k8s_proto::envelope("batch/v1", "CronJobList", last.encode_to_vec());
    assert_eq!(cronjob::from_list(&body).unwrap().1, None);
}
