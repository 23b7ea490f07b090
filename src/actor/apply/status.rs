//! A decision's status write: how urgently it goes out, and how it went.

use crate::apiserver::failure::ApiFailure;
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::requests::{JobRequests, StatusFor};
use crate::reconcile::{self, ApiError, CronJobView, JobSummary, StatusView};
use k8s_openapi::api::batch::v1::CronJobStatus;

/// How a status write went.
#[derive(Debug)]
pub enum StatusWrite {
    /// On the server now, at this resourceVersion.
    Written(Option<String>),
    /// Someone else changed the CronJob (`conflict`): here it is as re-read,
    /// to decide again from what is there, never overwrite it.
    Reread {
        fresh: Box<LeanCronJob>,
        conflict: ApiError,
    },
    /// The CronJob or its namespace is gone: nothing to retry.
    Gone,
    /// Never sent: one of the CronJob's Jobs ended while it waited for its
    /// turn, and the next decision writes this status with that Job's end
    /// (see [`super::Snapshot::job_ended`]).
    GaveWay,
    /// Retry the decision with backoff (upstream drops the requeue too); a
    /// conflict whose re-read failed is this re-read's error.
    Failed(ApiError),
}

/// How urgently a status write goes out. One that records a slot waits
/// behind a herd's creates only while a Job that shows the slot exists and
/// cannot vanish before the slot is recorded (`slot_shown_by_lasting_job`:
/// see [`created_job_lasts`]), and no successor waits for it (not
/// `stopping`). Otherwise the write is the slot's only lasting record: a
/// lapse while it waited (minutes, behind a herd at the default QPS) would
/// let the next owner start the slot again once the Job was gone, and a
/// hand-off would wait for the queue.
pub fn status_class(
    records_a_slot: bool,
    stopping: bool,
    slot_shown_by_lasting_job: bool,
) -> StatusFor {
    if records_a_slot && (stopping || !slot_shown_by_lasting_job) {
        StatusFor::RecordSlot
    } else {
        StatusFor::Routine
    }
}

/// The Job `plan` creates lasts until its slot is recorded: it has no
/// `ttlSecondsAfterFinished`, or the slot finalizer holds it.
pub fn created_job_lasts(plan: &reconcile::Plan) -> bool {
    plan.create
        .as_ref()
        .and_then(|create| create.job.as_ref())
        .is_some_and(|job| {
            reconcile::is_held(&job.metadata) || job.ttl_seconds_after_finished.is_none()
        })
}

/// One of `children`, not being deleted, was made for the slot `status`
/// records (a Job of an unwritten status's slot is kept until the slot is
/// recorded).
pub fn shows_slot(children: &[JobSummary], status: &StatusView) -> bool {
    let slot = status.last_schedule_time.get();
    slot.is_some() && children.iter().any(|c| !c.deleting && c.scheduled == slot)
}

/// Writes `status` with `version` (the decision's snapshot's) as
/// precondition.
pub async fn write_status<R: JobRequests>(
    requests: &R,
    cronjob: &CronJobView,
    version: Option<&str>,
    status: &CronJobStatus,
    why: StatusFor,
) -> StatusWrite {
    let (kind, namespace, name) = (cronjob.kind, cronjob.namespace(), cronjob.name());
    match requests
        .write_status(kind, namespace, name, version, status, why)
        .await
    {
        Ok(written) => StatusWrite::Written(written.metadata.resource_version),
        Err(error) if error.is_conflict() => {
            match requests.get_cronjob(kind, namespace, name).await {
                Ok(fresh) => StatusWrite::Reread {
                    fresh: Box::new(fresh),
                    conflict: error.to_api_error(),
                },
                Err(get_error) => StatusWrite::Failed(get_error.to_api_error()),
            }
        }
        Err(ApiFailure::GaveWay) => StatusWrite::GaveWay,
        Err(error) if error.is_not_found() || error.is_namespace_gone() => StatusWrite::Gone,
        Err(error) => StatusWrite::Failed(error.to_api_error()),
    }
}
