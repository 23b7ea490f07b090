//! CronJobs of either kind through one typed face: the tests write and read
//! batch/v1's `CronJob` type, and this sends it as a batch/v1 or a
//! shardcron.io CronJob (the same spec and status, another apiVersion), so
//! one scenario runs against both.

use super::crd::api_resource;
use k8s_openapi::api::batch::v1::CronJob;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde_json::Value;
use shardcron::reconcile::CronJobKind;

#[derive(Clone)]
pub struct CronJobs {
    api: Api<DynamicObject>,
    pub kind: CronJobKind,
}

impl CronJobs {
    pub fn namespaced(client: Client, namespace: &str, kind: CronJobKind) -> Self {
        CronJobs {
            api: Api::namespaced_with(client, namespace, &api_resource(kind)),
            kind,
        }
    }

    pub async fn create(&self, params: &PostParams, cronjob: &CronJob) -> kube::Result<CronJob> {
        let mut value = serde_json::to_value(cronjob).map_err(kube::Error::SerdeError)?;
        value["apiVersion"] = self.kind.api_version().into();
        value["kind"] = CronJobKind::KIND.into();
        let object: DynamicObject =
            serde_json::from_value(value).map_err(kube::Error::SerdeError)?;
        as_batch(self.api.create(params, &object).await?)
    }

    pub async fn get(&self, name: &str) -> kube::Result<CronJob> {
        as_batch(self.api.get(name).await?)
    }

    pub async fn get_opt(&self, name: &str) -> kube::Result<Option<CronJob>> {
        self.api.get_opt(name).await?.map(as_batch).transpose()
    }

    pub async fn patch<P: Serialize + std::fmt::Debug>(
        &self,
        name: &str,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> kube::Result<CronJob> {
        as_batch(self.api.patch(name, params, patch).await?)
    }

    pub async fn patch_status<P: Serialize + std::fmt::Debug>(
        &self,
        name: &str,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> kube::Result<CronJob> {
        as_batch(self.api.patch_status(name, params, patch).await?)
    }

    pub async fn delete(&self, name: &str, params: &DeleteParams) -> kube::Result<()> {
        self.api.delete(name, params).await.map(drop)
    }
}

/// A CronJob of either kind as batch/v1's type (whose decoder checks the
/// apiVersion).
fn as_batch(object: DynamicObject) -> kube::Result<CronJob> {
    let mut value: Value = serde_json::to_value(object).map_err(kube::Error::SerdeError)?;
    value["apiVersion"] = CronJobKind::Batch.api_version().into();
    serde_json::from_value(value).map_err(kube::Error::SerdeError)
}
