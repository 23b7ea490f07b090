//! deploy/kubernetes/rbac.yaml on the real API server: the controller's
//! ServiceAccount can do exactly what the controller needs, and no more.

mod support;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, PostParams};
use kube::{Client, Resource};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use support::cluster::Cluster;

const MANIFEST: &str = include_str!("../deploy/kubernetes/rbac.yaml");
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
        Err(e) => panic!("applying deploy/kubernetes/rbac.yaml: {e}"),
    }
}

async fn apply_manifest(client: &Client) {
    for doc in serde_yaml_ng::Deserializer::from_str(MANIFEST) {
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

async fn allowed(
    client: &Client,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
) -> bool {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_owned())),
        None => (resource, None),
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource,
                namespace: namespace.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("self subject access review")
        .status
        .is_some_and(|s| s.allowed)
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
        ("update", "batch", "cronjobs/status", tenant),
        ("patch", "batch", "cronjobs/status", tenant),
        ("watch", "batch", "jobs", None),
        ("create", "batch", "jobs", tenant),
        ("delete", "batch", "jobs", tenant),
        ("create", "", "events", tenant),
        ("create", "events.k8s.io", "events", tenant),
        ("create", "coordination.k8s.io", "leases", own),
        ("update", "coordination.k8s.io", "leases", own),
        ("watch", "coordination.k8s.io", "leases", own),
    ];
    let refused = [
        ("create", "batch", "cronjobs", tenant),
        ("update", "batch", "cronjobs", tenant),
        ("delete", "batch", "cronjobs", tenant),
        ("update", "batch", "jobs", tenant),
        ("patch", "batch", "jobs", tenant),
        ("create", "coordination.k8s.io", "leases", tenant),
        ("list", "coordination.k8s.io", "leases", None),
        ("delete", "coordination.k8s.io", "leases", own),
        ("patch", "coordination.k8s.io", "leases", own),
        ("list", "", "pods", tenant),
        ("get", "", "secrets", own),
        ("create", "", "pods", tenant),
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
    // And for real: a Job in a tenant namespace is allowed, a Lease there is not.
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "made-by-sa"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}]}}}
    }))
    .unwrap();
    Api::<Job>::namespaced(sa.clone(), &ns.name)
        .create(&PostParams::default(), &job)
        .await
        .expect("create Job as the controller");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "stray"}})).unwrap();
    match Api::<Lease>::namespaced(sa, &ns.name)
        .create(&PostParams::default(), &lease)
        .await
    {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403),
        other => panic!("a Lease outside shardcron-system must be refused, got {other:?}"),
    }
}
