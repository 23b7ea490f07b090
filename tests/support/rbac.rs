//! What a client may do, as the API server's authorizer says
//! (SelfSubjectAccessReview): `kubectl auth can-i` for the tests.

use super::cluster::Cluster;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use std::path::PathBuf;

/// Where the ring's Leases are (the controller's namespace).
const LEASE_NAMESPACE: &str = "shardcron-system";

/// Whether `client` may `verb` `group`/`resource` (`resource/subresource`
/// names a subresource) in `namespace` (None: every namespace).
pub async fn allowed(
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

/// A ServiceAccount `account` of `namespace`, granted `rules` there by a
/// Role, and a kubeconfig of its token (a temporary file).
pub async fn account_kubeconfig(
    admin: &Client,
    cluster: &Cluster,
    namespace: &str,
    account: &str,
    rules: Value,
) -> PathBuf {
    let role: Role = serde_json::from_value(json!({"metadata": {"name": account}, "rules": rules}))
        .expect("a Role");
    Api::<Role>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &role)
        .await
        .expect("create the Role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": account},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
    }))
    .expect("a RoleBinding");
    Api::<RoleBinding>::namespaced(admin.clone(), namespace)
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind it");
    let yaml = cluster
        .service_account_kubeconfig(namespace, account)
        .await
        .expect("a kubeconfig");
    let path = std::env::temp_dir().join(format!("{namespace}-{account}.kubeconfig"));
    std::fs::write(&path, yaml).expect("write the kubeconfig");
    path
}

/// Lets the ServiceAccounts `accounts` of `namespace` list the ring's
/// Leases (as `shardcron status` does, for the replicas' certificates and
/// addresses); returns the name of the Role and binding, for
/// [`forget_lease_readers`].
pub async fn let_read_leases(admin: &Client, namespace: &str, accounts: &[&str]) -> String {
    let name = format!("{namespace}-lease-readers");
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]}]
    }))
    .expect("a Role");
    Api::<Role>::namespaced(admin.clone(), LEASE_NAMESPACE)
        .create(&PostParams::default(), &role)
        .await
        .expect("create the Role");
    let subjects: Vec<Value> = accounts
        .iter()
        .map(|a| json!({"kind": "ServiceAccount", "name": a, "namespace": namespace}))
        .collect();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": subjects
    }))
    .expect("a RoleBinding");
    Api::<RoleBinding>::namespaced(admin.clone(), LEASE_NAMESPACE)
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind it");
    name
}

/// Removes what [`let_read_leases`] granted.
pub async fn forget_lease_readers(admin: &Client, name: &str) {
    let _ = Api::<Role>::namespaced(admin.clone(), LEASE_NAMESPACE)
        .delete(name, &DeleteParams::default())
        .await;
    let _ = Api::<RoleBinding>::namespaced(admin.clone(), LEASE_NAMESPACE)
        .delete(name, &DeleteParams::default())
        .await;
}
