//! The requests a CronJob's decision makes, as one small interface. The
//! write gateway serves them for real (`super::gateway::Gateway`); the
//! tests of `actor::apply` answer them from a script (201, 409, 404, 422,
//! 500, abandoned), which a real API server cannot be made to do on cue.

use super::failure::ApiFailure;
use super::queue::Priority;
use crate::reconcile;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use std::future::Future;

pub trait JobRequests {
    fn create_job(
        &self,
        namespace: &str,
        job: Job,
    ) -> impl Future<Output = Result<Job, ApiFailure>>;

    /// Deletes Job `name` if its UID is still `uid` (background propagation).
    fn delete_job(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        priority: Priority,
    ) -> impl Future<Output = Result<(), ApiFailure>>;

    fn get_job(&self, namespace: &str, name: &str)
    -> impl Future<Output = Result<Job, ApiFailure>>;

    fn get_cronjob(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<CronJob, ApiFailure>>;

    /// Writes the CronJob's status, if it is still at `resource_version`.
    fn write_status(
        &self,
        namespace: &str,
        name: &str,
        resource_version: Option<&str>,
        status: &CronJobStatus,
    ) -> impl Future<Output = Result<CronJob, ApiFailure>>;

    /// Records an event (queued, never waited for).
    fn record(&self, regarding: ObjectReference, event: &reconcile::Event);

    /// The same requests, never abandoned when their sender stops (see
    /// `Gateway::abandoning_on`).
    fn unabandoned(&self) -> Self
    where
        Self: Sized;
}
