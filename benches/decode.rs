//! Decoding the watches' events: ns per event, and heap bytes allocated
//! per event, for the same bytes decoded as k8s-openapi's `Job` and
//! `CronJob` (what the controller did for every event) and as `LeanJob`
//! and `LeanCronJob` (only the fields the controller reads; the CronJob's
//! Job template kept as JSON bytes).
//!
//! Workload: a watch event as the API server sends it for a finished Job
//! made by a CronJob: the controller's labels and annotations, one
//! managedFields entry per writer (controller, job-controller), a pod
//! template with one container (command, env, resources, security context)
//! and a complete status; and the event of its CronJob's status write (the
//! same pod template, two managedFields entries, a status with one active
//! Job), which every firing brings. `cargo bench --bench decode`.

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::core::WatchEvent;
use serde::de::DeserializeOwned;
use serde_json::json;
use shardcron::apiserver::lean_cronjob::LeanCronJob;
use shardcron::apiserver::lean_job::LeanJob;
use shardcron::reconcile::JobSummary;
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting the bytes it hands out.
struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A finished Job made by a CronJob, as the API server sends it.
fn job() -> serde_json::Value {
    let fields = |manager: &str, fields: serde_json::Value| {
        json!({"manager": manager, "operation": "Update", "apiVersion": "batch/v1",
               "time": "2024-03-01T10:01:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields})
    };
    let job = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {
            "name": "report-28488120", "namespace": "team-a",
            "uid": "5b0f6a53-9d0e-4c3c-a6e4-0c1e8f4a2b7d", "resourceVersion": "48151623",
            "generation": 1, "creationTimestamp": "2024-03-01T10:00:01Z",
            "labels": {"app.kubernetes.io/name": "report", "app.kubernetes.io/instance": "team-a",
                       "batch.kubernetes.io/controller-uid": "5b0f6a53-9d0e-4c3c-a6e4-0c1e8f4a2b7d",
                       "batch.kubernetes.io/job-name": "report-28488120",
                       "controller-uid": "5b0f6a53-9d0e-4c3c-a6e4-0c1e8f4a2b7d",
                       "job-name": "report-28488120"},
            "annotations": {"batch.kubernetes.io/cronjob-scheduled-timestamp": "2024-03-01T10:00:00Z",
                            "batch.kubernetes.io/job-tracking": ""},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": "report",
                                 "uid": "6f1c1a3e-0000-4000-8000-000000000001",
                                 "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                fields("shardcron", json!({"f:metadata": {"f:annotations": {".": {},
                    "f:batch.kubernetes.io/cronjob-scheduled-timestamp": {}},
                    "f:labels": {".": {}, "f:app.kubernetes.io/name": {}, "f:app.kubernetes.io/instance": {}},
                    "f:ownerReferences": {".": {}, "k:{\"uid\":\"6f1c1a3e-0000-4000-8000-000000000001\"}": {}}},
                    "f:spec": {"f:backoffLimit": {}, "f:completionMode": {}, "f:parallelism": {},
                        "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {".": {},
                            "f:command": {}, "f:env": {}, "f:image": {}, "f:name": {}, "f:resources": {}}},
                            "f:restartPolicy": {}}}}})),
                fields("kube-controller-manager", json!({"f:status": {"f:completionTime": {},
                    "f:conditions": {}, "f:ready": {}, "f:startTime": {}, "f:succeeded": {},
                    "f:terminating": {}, "f:uncountedTerminatedPods": {}}})),
            ]
        },
        "spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 2, "completionMode": "NonIndexed",
            "suspend": false, "podReplacementPolicy": "TerminatingOrFailed",
            "manualSelector": false,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "5b0f6a53-9d0e-4c3c-a6e4-0c1e8f4a2b7d"}},
            "template": {
                "metadata": {"creationTimestamp": null,
                             "labels": {"app.kubernetes.io/name": "report",
                                        "batch.kubernetes.io/job-name": "report-28488120",
                                        "job-name": "report-28488120"}},
                "spec": {
                    "restartPolicy": "OnFailure", "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "main", "image": "registry.example.com/reports/nightly:1.4.2",
                        "command": ["/bin/report", "--tenant=team-a", "--since=1h"],
                        "env": [{"name": "TENANT", "value": "team-a"},
                                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "report", "key": "token"}}}],
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                      "limits": {"memory": "256Mi"}},
                        "securityContext": {"allowPrivilegeEscalation": false,
                                            "readOnlyRootFilesystem": true,
                                            "capabilities": {"drop": ["ALL"]}},
                        "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"
                    }]
                }
            }
        },
        "status": {
            "startTime": "2024-03-01T10:00:01Z", "completionTime": "2024-03-01T10:01:00Z",
            "succeeded": 1, "ready": 0, "terminating": 0, "uncountedTerminatedPods": {},
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "lastProbeTime": "2024-03-01T10:01:00Z",
                 "lastTransitionTime": "2024-03-01T10:01:00Z", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods"},
                {"type": "Complete", "status": "True", "lastProbeTime": "2024-03-01T10:01:00Z",
                 "lastTransitionTime": "2024-03-01T10:01:00Z", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods"}
            ]
        }
    });
    job
}

/// The CronJob that made [`job`], as its status write's watch event shows it.
fn cronjob() -> serde_json::Value {
    let job = job();
    let fields = |manager: &str, subresource: Option<&str>, fields: serde_json::Value| {
        json!({"manager": manager, "operation": "Update", "apiVersion": "batch/v1",
               "time": "2024-03-01T10:00:01Z", "fieldsType": "FieldsV1", "fieldsV1": fields,
               "subresource": subresource})
    };
    json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {
            "name": "report", "namespace": "team-a",
            "uid": "6f1c1a3e-0000-4000-8000-000000000001", "resourceVersion": "48151601",
            "generation": 1, "creationTimestamp": "2024-02-01T09:12:44Z",
            "labels": {"app.kubernetes.io/name": "report", "app.kubernetes.io/instance": "team-a"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
            "managedFields": [
                fields("kubectl-client-side-apply", None, json!({"f:metadata": {"f:labels": {}},
                    "f:spec": {"f:concurrencyPolicy": {}, "f:jobTemplate": {"f:spec": {"f:template": {}}},
                               "f:schedule": {}, "f:timeZone": {}}})),
                fields("shardcron", Some("status"), json!({"f:status": {"f:active": {},
                    "f:lastScheduleTime": {}, "f:lastSuccessfulTime": {}}})),
            ]
        },
        "spec": {
            "schedule": "0 * * * *", "timeZone": "Europe/Berlin", "concurrencyPolicy": "Forbid",
            "suspend": false, "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
            "jobTemplate": {"metadata": {"creationTimestamp": null,
                                         "labels": {"app.kubernetes.io/name": "report"}},
                            "spec": job["spec"]}
        },
        "status": {
            "active": [{"kind": "Job", "namespace": "team-a", "name": "report-28488120",
                        "uid": "5b0f6a53-9d0e-4c3c-a6e4-0c1e8f4a2b7d", "apiVersion": "batch/v1",
                        "resourceVersion": "48151600"}],
            "lastScheduleTime": "2024-03-01T10:00:00Z",
            "lastSuccessfulTime": "2024-03-01T09:01:00Z"
        }
    })
}

/// A MODIFIED event of `object` as the API server writes it: the type
/// first. (A `json!` map would sort "object" first, and serde would buffer
/// the object before decoding it.)
fn event(object: &serde_json::Value) -> Vec<u8> {
    [
        br#"{"type":"MODIFIED","object":"#.as_slice(),
        &serde_json::to_vec(object).unwrap(),
        b"}",
    ]
    .concat()
}

fn decode<K: DeserializeOwned>(bytes: &[u8]) -> K {
    match serde_json::from_slice::<WatchEvent<K>>(bytes).unwrap() {
        WatchEvent::Modified(object) => object,
        _ => panic!("a MODIFIED event"),
    }
}

/// Heap bytes allocated by one call of `f` (the bench runs single-threaded).
fn allocated_by<T>(f: impl Fn() -> T) -> usize {
    let before = ALLOCATED.load(Ordering::Relaxed);
    black_box(f());
    ALLOCATED.load(Ordering::Relaxed) - before
}

/// Prints the heap each decoding of `bytes` allocates, and benches both:
/// `decode/<kind>/full` (k8s-openapi's type) and `decode/<kind>/lean`.
fn full_against_lean<Full: DeserializeOwned, Lean: DeserializeOwned>(
    c: &mut Criterion,
    kind: &str,
    bytes: &[u8],
) {
    println!(
        "decode/{kind}: {} bytes on the wire; heap allocated per event: full {} B, lean {} B",
        bytes.len(),
        allocated_by(|| decode::<Full>(bytes)),
        allocated_by(|| decode::<Lean>(bytes)),
    );
    c.bench_function(&format!("decode/{kind}/full"), |b| {
        b.iter(|| black_box(decode::<Full>(black_box(bytes))))
    });
    c.bench_function(&format!("decode/{kind}/lean"), |b| {
        b.iter(|| black_box(decode::<Lean>(black_box(bytes))))
    });
}

fn bench(c: &mut Criterion) {
    let bytes = event(&job());
    let full: Job = decode(&bytes);
    let lean: LeanJob = decode(&bytes);
    assert_eq!(JobSummary::from(&lean), JobSummary::from(&full));
    full_against_lean::<Job, LeanJob>(c, "job", &bytes);

    let bytes = event(&cronjob());
    let lean: LeanCronJob = decode(&bytes);
    assert!(lean.spec.job_template.is_some());
    full_against_lean::<CronJob, LeanCronJob>(c, "cronjob", &bytes);
}

criterion_group!(benches, bench);
criterion_main!(benches);
