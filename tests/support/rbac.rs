//! What a client may do, as the API server's authorizer says
//! (SelfSubjectAccessReview): `kubectl auth can-i` for the tests.

use super::cluster::Cluster;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::path::PathBuf;

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

/// A ServiceAccount `account` of `namespace`, granted there what `role`
/// says: `Grant::Rules`, a Role of these rules; `Grant::ClusterRole`, a
/// binding to that ClusterRole (say, the built-in `view`). Returns a
/// kubeconfig of its token (a temporary file).
pub async fn account_kubeconfig(
    admin: &Client,
    cluster: &Cluster,
    namespace: &str,
    account: &str,
    grant: Grant,
) -> PathBuf {
    let role_ref = match grant {
        Grant::Rules(rules) => {
            let role: Role =
                serde_json::from_value(json!({"metadata": {"name": account}, "rules": rules}))
                    .expect("a Role");
            Api::<Role>::namespaced(admin.clone(), namespace)
                .create(&PostParams::default(), &role)
                .await
                .expect("create the Role");
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account})
        }
        Grant::ClusterRole(name) => {
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name})
        }
    };
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": account},
        "roleRef": role_ref,
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

/// What [`account_kubeconfig`] grants.
pub enum Grant {
    Rules(Value),
    ClusterRole(&'static str),
}

/// A token of ServiceAccount `namespace/account` (made if missing) meant
/// for `audiences` (none: the API server's own), valid for an hour.
pub async fn token(admin: &Client, namespace: &str, account: &str, audiences: &[&str]) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts = Api::<ServiceAccount>::namespaced(admin.clone(), namespace);
    let made: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": account}})).expect("a ServiceAccount");
    match accounts.create(&PostParams::default(), &made).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create {namespace}/{account}: {e}"),
    }
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: (!audiences.is_empty())
                .then(|| audiences.iter().map(|a| a.to_string()).collect()),
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    accounts
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .expect("a token")
        .status
        .expect("its status")
        .token
        .expect("its token")
}
