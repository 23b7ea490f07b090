//! Smoke tests of the local control plane (deploy/local): the API behaviour
//! shardcron relies on, checked against the real kube-apiserver, job
//! controller, garbage collector and kwok.

mod support;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use std::time::Duration;
use support::cluster::Cluster;
use support::eventually;

fn cronjob(name: &str, schedule: &str, time_zone: Option<&str>) -> CronJob {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "schedule": schedule,
            "timeZone": time_zone,
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox"}]
            }}}}
        }
    }))
    .unwrap()
}

fn job(name: &str, pod_annotations: serde_json::Value) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": pod_annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox"}]
                }
            }
        }
    }))
    .unwrap()
}

fn finished_condition(job: &Job) -> Option<String> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find_map(|c| {
            (c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed"))
                .then(|| c.type_.clone())
        })
}

#[tokio::test]
async fn cronjob_defaults_come_from_the_api() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("defaults").await;
    let api = Api::<CronJob>::namespaced(cluster.admin().await, &ns.name);
    let created = api
        .create(
            &PostParams::default(),
            &cronjob("nightly", "0 2 * * *", None),
        )
        .await
        .unwrap();
    let spec = created.spec;
    assert_eq!(spec.concurrency_policy.as_deref(), Some("Allow"));
    assert_eq!(spec.suspend, Some(false));
    assert_eq!(spec.successful_jobs_history_limit, Some(3));
    assert_eq!(spec.failed_jobs_history_limit, Some(1));
    assert_eq!(spec.starting_deadline_seconds, None);
    assert!(
        created
            .status
            .is_none_or(|s| s.active.is_none() && s.last_schedule_time.is_none())
    );
}

#[tokio::test]
async fn api_rejects_bad_schedules_and_zones_as_invalid() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("invalid").await;
    let api = Api::<CronJob>::namespaced(cluster.admin().await, &ns.name);
    for (name, schedule, zone) in [
        ("bad-schedule", "0 0 * * 7", None),
        ("tz-prefix", "TZ=UTC 0 0 * * *", None),
        ("bad-zone", "0 0 * * *", Some("bad-time-zone")),
        ("local-zone", "0 0 * * *", Some("Local")),
    ] {
        match api
            .create(&PostParams::default(), &cronjob(name, schedule, zone))
            .await
        {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{name}: {status:?}");
                assert_eq!(status.reason, "Invalid", "{name}");
            }
            other => panic!("{name}: expected Invalid, got {other:?}"),
        }
    }
    // @every and descriptors are valid, as robfig's ParseStandard accepts them.
    api.create(
        &PostParams::default(),
        &cronjob("every", "@every 90m", None),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn jobs_complete_fail_and_run_for_a_while_on_kwok() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("jobs").await;
    let jobs = Api::<Job>::namespaced(cluster.admin().await, &ns.name);
    let pp = PostParams::default();
    jobs.create(&pp, &job("ok", json!({}))).await.unwrap();
    jobs.create(
        &pp,
        &job("fails", json!({"shardcron.test/outcome": "fail"})),
    )
    .await
    .unwrap();
    // 30 s: beside the suite's other lanes on 2 cores, the quick Jobs were
    // once seen finished only after 8 s.
    jobs.create(&pp, &job("slow", json!({"shardcron.test/run-for": "30s"})))
        .await
        .unwrap();
    let outcome = |name: &'static str| {
        let jobs = jobs.clone();
        async move {
            jobs.get(name)
                .await
                .ok()
                .as_ref()
                .and_then(finished_condition)
        }
    };
    let ok = eventually("job ok to finish", Duration::from_secs(60), || {
        outcome("ok")
    })
    .await;
    assert_eq!(ok, "Complete");
    let fails = eventually("job fails to finish", Duration::from_secs(60), || {
        outcome("fails")
    })
    .await;
    assert_eq!(fails, "Failed");
    // The slow one is still running after the quick ones finished ...
    assert_eq!(outcome("slow").await, None);
    let slow = jobs.get("slow").await.unwrap();
    assert_eq!(slow.status.and_then(|s| s.active), Some(1));
    // ... and completes after its run time.
    let slow = eventually("job slow to finish", Duration::from_secs(90), || {
        outcome("slow")
    })
    .await;
    assert_eq!(slow, "Complete");
}

#[tokio::test]
async fn jobs_of_a_deleted_owner_are_garbage_collected() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("gc").await;
    let client = cluster.admin().await;
    let owners = Api::<ConfigMap>::namespaced(client.clone(), &ns.name);
    let jobs = Api::<Job>::namespaced(client, &ns.name);
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let owner = owners.create(&PostParams::default(), &owner).await.unwrap();
    let mut child = job("child", json!({"shardcron.test/run-for": "1h"}));
    child.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner.metadata.uid.clone().unwrap(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    jobs.create(&PostParams::default(), &child).await.unwrap();
    owners
        .delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    eventually(
        "the child Job to be collected",
        Duration::from_secs(60),
        || {
            let jobs = jobs.clone();
            async move { matches!(jobs.get_opt("child").await, Ok(None)).then_some(()) }
        },
    )
    .await;
}

#[tokio::test]
async fn leases_renew_and_stale_updates_conflict() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("lease").await;
    let leases = Api::<Lease>::namespaced(cluster.admin().await, &ns.name);
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "replica-0", "labels": {"shardcron.io/ring": "test"}},
        "spec": {"holderIdentity": "replica-0", "leaseDurationSeconds": 15}
    }))
    .unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    // Renew: a write carrying the resourceVersion just read succeeds.
    let mut renewed = created.clone();
    renewed.spec.as_mut().unwrap().renew_time = Some(MicroTime(jiff::Timestamp::now()));
    let after = leases
        .replace("replica-0", &PostParams::default(), &renewed)
        .await
        .unwrap();
    assert_ne!(
        after.metadata.resource_version,
        created.metadata.resource_version
    );
    assert!(after.spec.unwrap().renew_time.is_some());
    // A second write with the old resourceVersion loses: 409 Conflict.
    match leases
        .replace("replica-0", &PostParams::default(), &renewed)
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 409, "{status:?}"),
        other => panic!("expected a conflict, got {other:?}"),
    }
}

#[tokio::test]
async fn service_account_clients_are_bound_by_rbac() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("rbac").await;
    let sa = cluster.service_account_client(&ns.name, "controller").await;
    let as_sa = Api::<CronJob>::namespaced(sa, &ns.name);
    match as_sa.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("a ServiceAccount without a Role must be refused, got {other:?}"),
    }
    let admin = cluster.admin().await;
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "read-cronjobs"},
        "rules": [{"apiGroups": ["batch"], "resources": ["cronjobs"], "verbs": ["list"]}]
    }))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), &ns.name)
        .create(&PostParams::default(), &role)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "read-cronjobs"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-cronjobs"},
        "subjects": [{"kind": "ServiceAccount", "name": "controller", "namespace": ns.name}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin, &ns.name)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    eventually(
        "the RoleBinding to take effect",
        Duration::from_secs(30),
        || {
            let as_sa = as_sa.clone();
            async move { as_sa.list(&ListParams::default()).await.ok() }
        },
    )
    .await;
    // Still nothing beyond the Role: creating is refused.
    match as_sa
        .create(&PostParams::default(), &cronjob("x", "@hourly", None))
        .await
    {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403),
        other => panic!("create must be refused, got {other:?}"),
    }
}
