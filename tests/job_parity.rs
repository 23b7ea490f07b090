//! Jobs identical to upstream's: the same Job template, fired by
//! kube-controller-manager's own CronJob controller and by shardcron, gives
//! Jobs whose metadata (less what the server assigns and the documented
//! departures of docs/parity.md) and spec are equal field for field, as the
//! API server stores them. Run beside kube-controller-manager's CronJob
//! controller (a managed control plane's set-up), on whatever minor the
//! plane runs (`cargo suite` runs it on the newest with the alpha gates of
//! two of its fields on): the template carries the fields newer than this
//! build's Kubernetes types (1.36) that the server keeps (`NEWER_FIELDS`,
//! asked of the server by a dry run), so a field this build does not know
//! must still reach the Job.
//!
//! Upstream's twin fires on its schedule in a namespace of its own;
//! shardcron's is suspended (kube-controller-manager leaves it alone) and
//! run once through `shardcron.io/run-now`, which builds its Job as a
//! slot's. Its template reaches the replica in JSON (a watch, the CRD) or in
//! protobuf (`--api-protobuf`: the first load).

mod support;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use shardcron::reconcile::CronJobKind;
use std::time::Duration;
use support::cluster::Cluster;
use support::controller::Controller;
use support::eventually;

/// A Job template with most of what templates hold.
fn template() -> Value {
    let mut template = json!({
        "metadata": {"labels": {"app": "report", "tier": "batch"},
                     "annotations": {"team": "a", "example.com/cost-centre": "42"}},
        "spec": {
            "backoffLimit": 2,
            "activeDeadlineSeconds": 3600,
            "ttlSecondsAfterFinished": 600,
            "completions": 1,
            "parallelism": 1,
            "podFailurePolicy": {"rules": [{"action": "FailJob",
                "onExitCodes": {"operator": "In", "values": [42]}}]},
            "template": {
                "metadata": {"labels": {"app": "report"}, "annotations": {"a": "b"}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 5,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 1000,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "tolerations": [{"key": "batch", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{
                        "name": "main", "image": "busybox:1.36",
                        "command": ["/bin/sh", "-c", "echo report"],
                        "env": [{"name": "TENANT", "value": "a"},
                                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                                      "limits": {"memory": "128Mi"}},
                        "securityContext": {"allowPrivilegeEscalation": false,
                                            "capabilities": {"drop": ["ALL"]}},
                        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080},
                                          "periodSeconds": 30},
                        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]
                    }],
                    "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "1Gi"}}]
                }
            }
        }
    });
    for (pointer, value, _) in NEWER_FIELDS {
        set(
            &mut template,
            pointer,
            serde_json::from_str(value).expect("JSON"),
        );
    }
    template
}

/// Fields of the pod template newer than the Kubernetes types this build
/// compiles against (k8s-openapi's v1_36), as JSON pointers into the
/// template, with a value and the kube-apiserver feature gate that keeps
/// them (1.37: each alpha; a server without the field or the gate drops
/// it, as it would from upstream's Job).
const NEWER_FIELDS: &[(&str, &str, &str)] = &[
    (
        "/spec/template/spec/volumes/0/emptyDir/mode",
        "493",
        "EmptyDirVolumeMode",
    ),
    (
        "/spec/template/spec/containers/0/livenessProbe/httpGet/protocol",
        "\"HTTP2\"",
        "H2CContainerProbe",
    ),
];

/// Sets the member `pointer` names (its parent must exist).
fn set(value: &mut Value, pointer: &str, member: Value) {
    let (parent, key) = pointer.rsplit_once('/').expect("a pointer");
    value
        .pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("{parent} is an object of the template"))
        .insert(key.to_owned(), member);
}

/// Which of [`NEWER_FIELDS`] the server keeps: a dry-run create of a Job
/// of `template` in `namespace`, read back. Where this lane's own plane
/// was started with a field's gate (`KUBE_APISERVER_EXTRA_ARGS`), that
/// field must be kept: the run then proves it reaches the Job.
async fn fields_kept(client: &Client, namespace: &str, template: &Value) -> Vec<&'static str> {
    let jobs = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::erase::<k8s_openapi::api::batch::v1::Job>(&()),
    );
    let job: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "probe"}, "spec": template["spec"]
    }))
    .expect("a Job");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let answer = jobs.create(&dry_run, &job).await.expect("a dry-run Job");
    let answer = serde_json::to_value(answer).expect("JSON");
    let gates = std::env::var("KUBE_APISERVER_EXTRA_ARGS").unwrap_or_default();
    let mut kept = Vec::new();
    for (pointer, value, gate) in NEWER_FIELDS {
        let sent: Value = serde_json::from_str(value).expect("JSON");
        if answer.pointer(pointer) == Some(&sent) {
            kept.push(*pointer);
        } else {
            assert!(
                !gates.contains(&format!("{gate}=true")),
                "{pointer} was dropped though {gate} is on: {answer}"
            );
        }
    }
    kept
}

/// `job` as it can be compared with its twin: what the server assigns
/// (identity, times, the controller-uid labels and selector), the owner's
/// identity (another CronJob of the same template), the status, and
/// shardcron's documented additions (docs/parity.md: the bucket label, the
/// created-by, traceparent and run-now annotations, the slot finalizer)
/// taken out; the scheduled time checked and replaced by a placeholder.
fn comparable(job: &Value) -> Value {
    let mut job = job.clone();
    let object = job.as_object_mut().expect("a Job object");
    object.remove("status");
    let meta = object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .expect("metadata");
    for assigned in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "managedFields",
        "name",
        "namespace",
        "selfLink",
    ] {
        meta.remove(assigned);
    }
    for owner in meta
        .get_mut("ownerReferences")
        .and_then(Value::as_array_mut)
        .expect("an owner")
    {
        let owner = owner.as_object_mut().expect("an owner reference");
        for identity in ["uid", "name", "apiVersion"] {
            owner.remove(identity);
        }
    }
    let without = |map: Option<&mut Value>, keys: &[&str]| {
        if let Some(map) = map.and_then(Value::as_object_mut) {
            for key in keys {
                map.remove(*key);
            }
        }
    };
    const SERVER_LABELS: &[&str] = &[
        "controller-uid",
        "batch.kubernetes.io/controller-uid",
        "job-name",
        "batch.kubernetes.io/job-name",
    ];
    let mut labels: Vec<&str> = SERVER_LABELS.to_vec();
    labels.push("shardcron.io/bucket");
    without(meta.get_mut("labels"), &labels);
    let annotations = meta
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
        .expect("annotations");
    let scheduled = annotations
        .get("batch.kubernetes.io/cronjob-scheduled-timestamp")
        .and_then(Value::as_str)
        .expect("the scheduled-timestamp annotation");
    assert!(
        scheduled.parse::<jiff::Timestamp>().is_ok(),
        "the scheduled time {scheduled} is RFC 3339"
    );
    annotations.insert(
        "batch.kubernetes.io/cronjob-scheduled-timestamp".into(),
        "<slot>".into(),
    );
    for added in [
        "shardcron.io/created-by",
        "shardcron.io/traceparent",
        "shardcron.io/run-now",
    ] {
        annotations.remove(added);
    }
    if let Some(finalizers) = meta.get_mut("finalizers").and_then(Value::as_array_mut) {
        finalizers.retain(|f| f != "shardcron.io/slot-record");
        if finalizers.is_empty() {
            meta.remove("finalizers");
        }
    }
    let spec = &mut job["spec"];
    without(spec["selector"].get_mut("matchLabels"), SERVER_LABELS);
    without(
        spec["template"]["metadata"].get_mut("labels"),
        SERVER_LABELS,
    );
    job
}

/// The one Job in `namespace`, once there is one.
async fn the_job(client: &Client, namespace: &str, what: &str) -> Value {
    let jobs = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::erase::<k8s_openapi::api::batch::v1::Job>(&()),
    );
    let job = eventually(what, Duration::from_secs(150), || {
        let jobs = jobs.clone();
        async move { jobs.list(&Default::default()).await.ok()?.items.pop() }
    })
    .await;
    serde_json::to_value(job).expect("a Job as JSON")
}

fn cronjob(api_version: &str, suspend: bool, template: &Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": api_version, "kind": "CronJob",
        "metadata": {"name": "twin"},
        "spec": {"schedule": "*/1 * * * *", "suspend": suspend, "jobTemplate": template}
    }))
    .expect("a CronJob")
}

/// Upstream's Job and shardcron's for one template, shardcron's read as
/// `kind`, with `replica_args`.
async fn differential(test: &str, kind: CronJobKind, replica_args: &[&str]) {
    let cluster = Cluster::shared_beside_upstream();
    assert!(
        cluster.runs_upstream_cronjob(),
        "the differential needs kube-controller-manager's CronJob controller"
    );
    let client = cluster.admin().await;
    let template = template();
    let batch = ApiResource::erase::<k8s_openapi::api::batch::v1::CronJob>(&());

    let upstream_ns = cluster.namespace(&format!("{test}-upstream")).await;
    let kept = fields_kept(&client, &upstream_ns.name, &template).await;
    eprintln!("fields newer than this build's types that the server keeps: {kept:?}");
    Api::<DynamicObject>::namespaced_with(client.clone(), &upstream_ns.name, &batch)
        .create(
            &PostParams::default(),
            &cronjob("batch/v1", false, &template),
        )
        .await
        .expect("create upstream's twin");

    let ours_ns = cluster.namespace(&format!("{test}-shardcron")).await;
    let resource = match kind {
        CronJobKind::Batch => batch.clone(),
        CronJobKind::Shardcron => {
            let resource = support::crd::install(&client).await;
            support::crd::grant_the_controller(&client).await;
            resource
        }
    };
    let ours = Api::<DynamicObject>::namespaced_with(client.clone(), &ours_ns.name, &resource);
    ours.create(
        &PostParams::default(),
        &cronjob(kind.api_version(), true, &template),
    )
    .await
    .expect("create shardcron's twin");
    let kinds = format!("--cronjob-kinds={kind}");
    let mut args = vec![kinds.as_str()];
    args.extend_from_slice(replica_args);
    let mut controller = Controller::start_with(cluster, &ours_ns.name, &args).await;
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .expect("a time");
    ours.patch(
        "twin",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"shardcron.io/run-now": now.to_string()}}}),
        ),
    )
    .await
    .expect("ask for a run");

    let theirs = the_job(&client, &upstream_ns.name, "upstream's Job").await;
    let mine = the_job(&client, &ours_ns.name, "shardcron's Job").await;
    controller.stop().await;
    let owner = |job: &Value| job["metadata"]["ownerReferences"][0]["apiVersion"].clone();
    assert_eq!(owner(&theirs), "batch/v1");
    assert_eq!(owner(&mine), kind.api_version());
    let (theirs, mine) = (comparable(&theirs), comparable(&mine));
    assert!(
        theirs == mine,
        "shardcron's Job differs from upstream's:\nupstream's:  {}\nshardcron's: {}",
        serde_json::to_string_pretty(&theirs).unwrap_or_default(),
        serde_json::to_string_pretty(&mine).unwrap_or_default()
    );
    for pointer in kept {
        assert_eq!(
            mine.pointer(pointer),
            template.pointer(pointer),
            "{pointer} reached shardcron's Job"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_v1_template_watched_in_json_makes_upstreams_job() {
    differential("parity-json", CronJobKind::Batch, &["--api-protobuf=false"]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_v1_template_loaded_in_protobuf_makes_upstreams_job() {
    differential(
        "parity-protobuf",
        CronJobKind::Batch,
        &["--api-protobuf=true"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shardcron_io_template_makes_upstreams_job_for_batch_v1() {
    differential("parity-crd", CronJobKind::Shardcron, &[]).await;
}
