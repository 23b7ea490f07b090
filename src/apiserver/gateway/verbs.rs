//! The requests a decision makes ([`JobRequests`]), as the gateway sends
//! them: each through [`Gateway::request`] under its [`Verb`]'s terms.

use super::handle::Gateway;
use crate::apiserver::client::traced;
use crate::apiserver::failure::ApiFailure;
use crate::apiserver::lean_cronjob::{CronJobWithTemplate, LeanCronJob};
use crate::apiserver::lean_job::LeanJob;
use crate::apiserver::protobuf::job::JobBody;
use crate::apiserver::requests::{DeleteFor, JobRequests, StatusFor, Verb};
use crate::reconcile::{self, CronJobKind, NewJob};
use k8s_openapi::api::batch::v1::{CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{
    DeleteParams, GetParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

impl JobRequests for Gateway {
    /// The answer (the whole Job, its pod template and managed fields
    /// included) is decoded as a [`LeanJob`]: the decision reads its UID
    /// and resourceVersion.
    /// In protobuf when its spec came so ([`JobBody`]); the answer is JSON.
    async fn create_job(&self, namespace: &str, job: NewJob) -> Result<LeanJob, ApiFailure> {
        let body = JobBody::of(job)
            .map_err(|e| ApiFailure::Transport(format!("encoding the Job: {e}")))?;
        let content_type = http::HeaderValue::from_static(body.content_type);
        let bytes: Arc<[u8]> = body.bytes.into();
        self.request(Verb::CreateJob, namespace, |client| {
            let request = jobs_url(namespace)
                .create(&PostParams::default(), bytes.to_vec())
                .map(|mut request| {
                    request
                        .headers_mut()
                        .insert(http::header::CONTENT_TYPE, content_type.clone());
                    request
                });
            async move { client.request::<LeanJob>(traced(request)?).await }
        })
        .await
    }

    /// Deletes a Job with background propagation (upstream's policy), only
    /// if it is still the object with `uid` (a precondition: a namesake
    /// created since is left alone, with 409 Conflict).
    async fn delete_job(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        why: DeleteFor,
    ) -> Result<(), ApiFailure> {
        self.request(why.verb(), namespace, |client| {
            let params = DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                preconditions: (!uid.is_empty()).then(|| Preconditions {
                    uid: Some(uid.to_owned()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            let request = jobs_url(namespace).delete(name, &params);
            async move {
                // The answer (the Job, or a Status) is not read.
                client.request_text(traced(request)?).await.map(drop)
            }
        })
        .await
    }

    /// A strategic merge patch that deletes the one finalizer from the
    /// list, whatever else is in it (idempotent), with the UID as a
    /// precondition (the API server refuses the patch if it differs).
    async fn release_job(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        running: bool,
    ) -> Result<(), ApiFailure> {
        let verb = if running {
            Verb::ReleaseRunning
        } else {
            Verb::ReleaseFinished
        };
        let patch = Arc::new(release_patch(uid));
        self.request(verb, namespace, |client| {
            let request = jobs_url(namespace).patch(
                name,
                &PatchParams::default(),
                &Patch::Strategic(&*patch),
            );
            async move {
                // The answer (the patched Job) is not read.
                client.request_text(traced(request)?).await.map(drop)
            }
        })
        .await
    }

    async fn get_job(&self, namespace: &str, name: &str) -> Result<Job, ApiFailure> {
        self.request(Verb::GetJob, namespace, |client| {
            let request = jobs_url(namespace).get(name, &GetParams::default());
            async move { client.request::<Job>(traced(request)?).await }
        })
        .await
    }

    async fn get_job_template(
        &self,
        kind: CronJobKind,
        namespace: &str,
        name: &str,
    ) -> Result<CronJobWithTemplate, ApiFailure> {
        self.request(Verb::GetCronJob, namespace, |client| {
            let request = cronjobs_url(kind, namespace).get(name, &GetParams::default());
            async move {
                let got: CronJobWithTemplate = client.request(traced(request)?).await?;
                Ok(LeanCronJob { kind, ..got })
            }
        })
        .await
    }

    async fn get_cronjob(
        &self,
        kind: CronJobKind,
        namespace: &str,
        name: &str,
    ) -> Result<LeanCronJob, ApiFailure> {
        self.request(Verb::GetCronJob, namespace, |client| {
            let request = cronjobs_url(kind, namespace).get(name, &GetParams::default());
            async move {
                let got: LeanCronJob = client.request(traced(request)?).await?;
                Ok(LeanCronJob { kind, ..got })
            }
        })
        .await
    }

    /// Writes the whole controller-owned status through the status
    /// subresource, as upstream's `UpdateStatus` does, with the
    /// resourceVersion as precondition: a concurrent change gives 409
    /// Conflict rather than being overwritten.
    async fn write_status(
        &self,
        kind: CronJobKind,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
        status: &CronJobStatus,
        why: StatusFor,
    ) -> Result<LeanCronJob, ApiFailure> {
        let patch = Arc::new(status_patch(resource_version, status));
        self.request(why.verb(), namespace, |client| {
            // The answer is read for its resourceVersion only.
            let request = cronjobs_url(kind, namespace).patch_subresource(
                "status",
                name,
                &PatchParams::default(),
                &Patch::Merge(&*patch),
            );
            async move {
                let written: LeanCronJob = client.request(traced(request)?).await?;
                Ok(LeanCronJob { kind, ..written })
            }
        })
        .await
    }

    /// A JSON merge patch of the CronJob's annotations and `spec.suspend`,
    /// with the resourceVersion as precondition: a streak computed from a
    /// stale read gets 409 Conflict, never overwrites a newer one.
    async fn patch_cronjob(
        &self,
        kind: CronJobKind,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
        patch: &reconcile::CronJobPatch,
    ) -> Result<LeanCronJob, ApiFailure> {
        let patch = Arc::new(cronjob_patch(resource_version, patch));
        self.request(Verb::PatchCronJob, namespace, |client| {
            let request = cronjobs_url(kind, namespace).patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&*patch),
            );
            async move {
                let written: LeanCronJob = client.request(traced(request)?).await?;
                Ok(LeanCronJob { kind, ..written })
            }
        })
        .await
    }

    /// Records an Event on a CronJob, without making the caller wait: the
    /// event joins the bounded backlog ([`crate::apiserver::gateway::events`]), whose
    /// workers send it at the lowest class; a failure is logged, not
    /// returned.
    fn record(&self, regarding: ObjectReference, event: &reconcile::Event) {
        self.queue_event(regarding, event);
    }

    /// For the one write that must go out even when its sender stops:
    /// never abandoned, and hurried to the most urgent class by the stop.
    fn unabandoned(&self) -> Gateway {
        self.hurrying_on_stop()
    }

    /// A stop's rule wins over a newer decision's: a request hurried by
    /// its sender's stop no longer gives way (see `Gateway::turn`); one
    /// already granted its turn goes out.
    fn giving_way_to(&self, newer: CancellationToken) -> Gateway {
        Gateway {
            give_way: Some(newer),
            ..self.clone()
        }
    }
}

/// A merge patch that sets all three status fields (absent ones as `null`,
/// so they are cleared) with the resourceVersion as a precondition.
fn status_patch(resource_version: Option<&str>, status: &CronJobStatus) -> serde_json::Value {
    serde_json::json!({
        "metadata": { "resourceVersion": resource_version },
        "status": {
            "active": status.active,
            "lastScheduleTime": status.last_schedule_time,
            "lastSuccessfulTime": status.last_successful_time,
        }
    })
}

/// The merge patch of a [`reconcile::CronJobPatch`]: each annotation set
/// or removed (`null`), `spec.suspend: true` for a pause, nothing else.
fn cronjob_patch(
    resource_version: Option<&str>,
    patch: &reconcile::CronJobPatch,
) -> serde_json::Value {
    let annotations: serde_json::Map<String, serde_json::Value> = patch
        .annotations
        .iter()
        .map(|(key, value)| ((*key).to_owned(), serde_json::json!(value)))
        .collect();
    let mut body = serde_json::json!({
        "metadata": { "resourceVersion": resource_version, "annotations": annotations },
    });
    if patch.suspend {
        body["spec"] = serde_json::json!({ "suspend": true });
    }
    body
}

/// Removes [`reconcile::SLOT_FINALIZER`] from a Job's finalizers, if the
/// Job is still the object with `uid`.
fn release_patch(uid: &str) -> serde_json::Value {
    serde_json::json!({
        "metadata": {
            "uid": uid,
            "$deleteFromPrimitiveList/finalizers": [reconcile::SLOT_FINALIZER],
        }
    })
}

/// Requests on the Jobs of `namespace`, built by hand where the answer is
/// decoded as less than a whole `Job` (or not at all).
fn cronjobs_url(kind: CronJobKind, namespace: &str) -> kube::core::Request {
    kube::core::Request::new(<LeanCronJob as kube::Resource>::url_path(
        &kind,
        Some(namespace),
    ))
}

fn jobs_url(namespace: &str) -> kube::core::Request {
    kube::core::Request::new(<Job as kube::Resource>::url_path(&(), Some(namespace)))
}
