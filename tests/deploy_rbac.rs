//! deploy/kubernetes/rbac.yaml, deploy/batch/rbac.yaml and flowschema.yaml
//! on the real API server:
//! the controller's ServiceAccount can do exactly what the controller needs,
//! and no more; its Lease traffic is served at leader-election priority.

mod support;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, PostParams};
use kube::{Client, Resource};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use support::cluster::Cluster;
use support::rbac::allowed;

/// What `kubectl apply -k deploy/` gives the controller: the rights of any
/// ring, and those of a batch/v1 ring.
const MANIFESTS: [&str; 2] = [
    include_str!("../deploy/kubernetes/rbac.yaml"),
    include_str!("../deploy/batch/rbac.yaml"),
];
const FLOW_SCHEMA: &str = include_str!("../deploy/kubernetes/flowschema.yaml");
const NAMESPACE: &str = "shardcron-system";

/// Creates `object` through `api`, tolerating one left by an earlier run.
async fn apply<K>(api: Api<K>, object: &K)
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    ignore_exists(api.create(&PostParams::default(), object).await);
}

fn parse<K: DeserializeOwned>(doc: serde_yaml_ng::Value) -> K {
    serde_yaml_ng::from_value(doc).expect("manifest document")
}

fn ignore_exists<T>(result: kube::Result<T>) {
    match result {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("applying the RBAC manifests: {e}"),
    }
}

async fn apply_manifest(client: &Client) {
    for doc in MANIFESTS
        .into_iter()
        .flat_map(serde_yaml_ng::Deserializer::from_str)
    {
        let doc = serde_yaml_ng::Value::deserialize(doc).expect("manifest is YAML");
        let kind = doc["kind"].as_str().expect("kind").to_owned();
        let c = client.clone();
        match kind.as_str() {
            "Namespace" => apply(Api::<Namespace>::all(c), &parse(doc)).await,
            "ClusterRole" => apply(Api::<ClusterRole>::all(c), &parse(doc)).await,
            "ClusterRoleBinding" => apply(Api::<ClusterRoleBinding>::all(c), &parse(doc)).await,
            "ServiceAccount" => {
                apply(Api::<ServiceAccount>::namespaced(c, NAMESPACE), &parse(doc)).await
            }
            "Role" => apply(Api::<Role>::namespaced(c, NAMESPACE), &parse(doc)).await,
            "RoleBinding" => apply(Api::<RoleBinding>::namespaced(c, NAMESPACE), &parse(doc)).await,
            other => panic!("unexpected kind {other} in rbac.yaml"),
        }
    }
}

#[tokio::test]
async fn controller_service_account_has_least_privilege() {
    let cluster = Cluster::shared();
    let ns = cluster.namespace("rbac-manifest").await;
    apply_manifest(&cluster.admin().await).await;
    let sa = cluster.service_account_client(NAMESPACE, "shardcron").await;
    let tenant = Some(ns.name.as_str());
    let own = Some(NAMESPACE);
    let granted = [
        ("list", "batch", "cronjobs", None),
        ("watch", "batch", "cronjobs", None),
        // shardcron.io/pause-after-failures: the streak and spec.suspend.
        ("patch", "batch", "cronjobs", tenant),
        ("update", "batch", "cronjobs/status", tenant),
        ("patch", "batch", "cronjobs/status", tenant),
        ("watch", "batch", "jobs", None),
        ("create", "batch", "jobs", tenant),
        ("delete", "batch", "jobs", tenant),
        // To remove the slot finalizer (a departure: upstream sets none).
        ("patch", "batch", "jobs", tenant),
        // What upstream's system:controller:cronjob-controller role has for
        // OwnerReferencesPermissionEnforcement: a Job's ownerReference with
        // blockOwnerDeletion needs it.
        ("update", "batch", "cronjobs/finalizers", tenant),
        ("create", "", "events", tenant),
        ("create", "events.k8s.io", "events", tenant),
        // The namespaces' deletions, as they begin (their metadata only).
        ("list", "", "namespaces", None),
        ("watch", "", "namespaces", None),
        // The admin API's callers, checked with the API server.
        ("create", "authentication.k8s.io", "tokenreviews", None),
        (
            "create",
            "authorization.k8s.io",
            "subjectaccessreviews",
            None,
        ),
        ("create", "coordination.k8s.io", "leases", own),
        ("update", "coordination.k8s.io", "leases", own),
        ("watch", "coordination.k8s.io", "leases", own),
    ];
    let refused = [
        ("create", "batch", "cronjobs", tenant),
        ("update", "batch", "cronjobs", tenant),
        ("delete", "batch", "cronjobs", tenant),
        ("update", "batch", "jobs", tenant),
        ("create", "coordination.k8s.io", "leases", tenant),
        ("list", "coordination.k8s.io", "leases", None),
        ("delete", "coordination.k8s.io", "leases", own),
        ("patch", "coordination.k8s.io", "leases", own),
        ("list", "", "pods", tenant),
        ("get", "", "secrets", own),
        ("create", "", "pods", tenant),
        ("delete", "", "namespaces", None),
        ("update", "", "namespaces", None),
    ];
    // RBAC caches can lag a new binding by a moment.
    for _ in 0..50 {
        if allowed(&sa, "list", "batch", "cronjobs", None).await {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    for (verb, group, resource, namespace) in granted {
        assert!(
            allowed(&sa, verb, group, resource, namespace).await,
            "{verb} {group}/{resource} in {namespace:?} must be allowed"
        );
    }
    for (verb, group, resource, namespace) in refused {
        assert!(
            !allowed(&sa, verb, group, resource, namespace).await,
            "{verb} {group}/{resource} in {namespace:?} must be refused"
        );
    }
    // And for real: a Job in a tenant namespace, controlled by a CronJob as
    // the controller's Jobs are (blockOwnerDeletion, which deploy/local's
    // OwnerReferencesPermissionEnforcement checks), is allowed; a Lease
    // there is not.
    let cronjob: CronJob = serde_json::from_value(json!({
        "metadata": {"name": "owner"},
        "spec": {"schedule": "@yearly", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}}}}
    }))
    .unwrap();
    let cronjob = Api::<CronJob>::namespaced(cluster.admin().await, &ns.name)
        .create(&PostParams::default(), &cronjob)
        .await
        .expect("create the owner CronJob as admin");
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "made-by-sa", "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "CronJob", "name": "owner",
            "uid": cronjob.metadata.uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}]}}}
    }))
    .unwrap();
    Api::<Job>::namespaced(sa.clone(), &ns.name)
        .create(&PostParams::default(), &job)
        .await
        .expect("create a CronJob's Job as the controller");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "stray"}})).unwrap();
    match Api::<Lease>::namespaced(sa, &ns.name)
        .create(&PostParams::default(), &lease)
        .await
    {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403),
        other => panic!("a Lease outside shardcron-system must be refused, got {other:?}"),
    }
}

/// The UIDs of the FlowSchema and the priority level that kube-apiserver's
/// APF filter says served a GET of `path` by `client` (response headers).
async fn classified_as(client: &Client, path: &str) -> (String, String) {
    let request = http::Request::get(path)
        .body(Vec::new().into())
        .expect("request");
    let response = client.send(request).await.expect("GET as the controller");
    assert!(
        response.status().is_success(),
        "GET {path}: {}",
        response.status()
    );
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    (
        header("X-Kubernetes-PF-FlowSchema-UID"),
        header("X-Kubernetes-PF-PriorityLevel-UID"),
    )
}

#[tokio::test]
async fn lease_traffic_is_served_at_leader_election_priority() {
    let cluster = Cluster::shared();
    let admin = cluster.admin().await;
    apply_manifest(&admin).await;
    let schema: FlowSchema = serde_yaml_ng::from_str(FLOW_SCHEMA).expect("flowschema.yaml");
    let schemas = Api::<FlowSchema>::all(admin.clone());
    ignore_exists(schemas.create(&PostParams::default(), &schema).await);
    let name = schema.metadata.name.as_deref().expect("named");
    let schema_uid = schemas.get(name).await.expect("FlowSchema").metadata.uid;
    let level = schema
        .spec
        .as_ref()
        .expect("spec")
        .priority_level_configuration
        .name
        .clone();
    assert_eq!(
        level, "leader-election",
        "kube-controller-manager's own level"
    );
    let level_uid = Api::<PriorityLevelConfiguration>::all(admin)
        .get(&level)
        .await
        .unwrap_or_else(|e| panic!("the built-in priority level {level}: {e}"))
        .metadata
        .uid;
    let sa = cluster.service_account_client(NAMESPACE, "shardcron").await;
    let leases = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases");
    // APF picks a new FlowSchema up from its informer: allow it a moment.
    let mut seen = Default::default();
    for _ in 0..50 {
        seen = classified_as(&sa, &leases).await;
        if Some(&seen.0) == schema_uid.as_ref() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(
        Some(&seen.0),
        schema_uid.as_ref(),
        "Lease requests must match {name}"
    );
    assert_eq!(Some(&seen.1), level_uid.as_ref(), "and run at {level}");
    let (other_schema, other_level) = classified_as(&sa, "/apis/batch/v1/jobs?limit=1").await;
    assert_ne!(
        Some(&other_schema),
        schema_uid.as_ref(),
        "Jobs stay where they were"
    );
    assert_ne!(Some(&other_level), level_uid.as_ref());
}

/// deploy/ registers no aggregated API (deploy/admin-api is opt-in,
/// docs/admin-api.md): applied as an operator would, with every replica
/// down (none runs here), discovery has no admin.shardcron.io group and a
/// namespace is deleted at once. With the overlay, replicas that all crash
/// hold every namespace deletion (tests/aggregated.rs).
#[tokio::test]
async fn deploy_alone_serves_no_aggregated_api_and_holds_no_namespace_deletion() {
    let cluster = Cluster::shared();
    let dir = cluster.dir().join(format!("deploy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory");
    cluster
        .controller_kubeconfig(&dir.join("controller.kubeconfig"))
        .await
        .expect("kubectl apply -k deploy/, the StatefulSet at 0 replicas");
    let admin = cluster.admin().await;
    let groups: serde_json::Value = admin
        .request(
            http::Request::get("/apis")
                .body(Vec::new())
                .expect("a request"),
        )
        .await
        .expect("discovery");
    let names: Vec<&str> = groups["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|group| group["name"].as_str())
        .collect();
    assert!(names.contains(&"batch"), "{names:?}");
    assert!(!names.contains(&"admin.shardcron.io"), "{names:?}");
    let gone = cluster.namespace("deploy-alone").await;
    let mut delete = cluster.kubectl().expect("kubectl");
    delete.args(["delete", "namespace", &gone.name, "--timeout=60s"]);
    let output = delete.output().expect("kubectl delete namespace");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
