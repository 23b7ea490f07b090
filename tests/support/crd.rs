//! `cronjobs.shardcron.io` in a test cluster: the definition installed
//! (the one the cluster's own batch/v1 makes, which on the pinned minor is
//! the committed one), the controller granted deploy/crd/rbac.yaml's
//! rights, and the API resource of either kind for dynamic clients.

use super::eventually;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use shardcron::cli::crd;
use shardcron::reconcile::CronJobKind;
use std::time::Duration;

pub const COMMITTED: &str = include_str!("../../deploy/crd/cronjobs.shardcron.io.yaml");
pub const COMMITTED_PATH: &str = "deploy/crd/cronjobs.shardcron.io.yaml";
const RBAC: &str = include_str!("../../deploy/crd/rbac.yaml");

/// The API resource CronJobs of `kind` are served as.
pub fn api_resource(kind: CronJobKind) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(kind.group(), kind.version(), CronJobKind::KIND),
        CronJobKind::PLURAL,
    )
}

/// The cluster's batch/v1 OpenAPI v3 document, which the definition is
/// made from.
pub async fn batch_openapi(client: &Client) -> serde_json::Value {
    let request = http::Request::get(crd::OPENAPI_PATH)
        .header(http::header::ACCEPT, "application/json")
        .body(Vec::new())
        .expect("a GET request");
    let text = client
        .request_text(request)
        .await
        .unwrap_or_else(|e| panic!("GET {}: {e}", crd::OPENAPI_PATH));
    serde_json::from_str(&text).expect("the OpenAPI document is JSON")
}

/// Installs the definition the cluster's own batch/v1 makes, as
/// docs/operations.md tells a cluster of another minor than the pinned
/// one to (`shardcron crd --from-openapi`; on the pinned minor it is the
/// committed one: tests/crd.rs), by server-side apply (idempotent, so
/// every test may call it), and waits until its objects are served.
pub async fn install(client: &Client) -> ApiResource {
    let definition = crd::definition(&batch_openapi(client).await)
        .unwrap_or_else(|e| panic!("making the definition from the server's batch/v1: {e}"));
    let name = definition.metadata.name.clone().unwrap_or_default();
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(
            &name,
            &PatchParams::apply("shardcron-tests").force(),
            &Patch::Apply(&definition),
        )
        .await
        .unwrap_or_else(|e| panic!("applying the definition: {e}"));
    let resource = api_resource(CronJobKind::Shardcron);
    let probe = Api::<DynamicObject>::all_with(client.clone(), &resource);
    eventually("the definition served", Duration::from_secs(30), || {
        let probe = probe.clone();
        async move { probe.list(&Default::default()).await.ok().map(|_| ()) }
    })
    .await;
    resource
}

/// Applies deploy/crd/rbac.yaml: the controller's rights on the CRD's
/// CronJobs (deploy/'s own RBAC is applied when the controller starts).
pub async fn grant_the_controller(client: &Client) {
    for document in serde_yaml_ng::Deserializer::from_str(RBAC) {
        let value = serde_json::to_value(
            <serde_yaml_ng::Value as serde::Deserialize>::deserialize(document)
                .expect("rbac.yaml is YAML"),
        )
        .expect("rbac.yaml is JSON-like");
        let name = value["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let apply = PatchParams::apply("shardcron-tests").force();
        let result = match value["kind"].as_str() {
            Some("ClusterRole") => Api::<ClusterRole>::all(client.clone())
                .patch(&name, &apply, &Patch::Apply(&value))
                .await
                .map(drop),
            Some("ClusterRoleBinding") => Api::<ClusterRoleBinding>::all(client.clone())
                .patch(&name, &apply, &Patch::Apply(&value))
                .await
                .map(drop),
            other => panic!("unexpected kind {other:?} in deploy/crd/rbac.yaml"),
        };
        result.unwrap_or_else(|e| panic!("applying {name}: {e}"));
    }
}
