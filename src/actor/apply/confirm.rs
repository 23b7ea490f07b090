//! A slot another replica may have run: the CronJob is read again before
//! its Job is created.
//!
//! A key that moves off a live peer (a join, a leave) starts here from a
//! copy read before that peer stopped running it. The peer's last writes
//! (its last slot's `lastScheduleTime`) come through the CronJob watch,
//! which is not ordered with the Lease watch whose news let the key start:
//! a watch that lags, or sits silent on a connection a cut left behind,
//! still shows the slot unrun. With no Job history
//! (`successfulJobsHistoryLimit: 0`, `ttlSecondsAfterFinished: 0`) the
//! slot's Job may be gone by then, and its deterministic name no longer
//! refuses a second create: the churn test found a slot run twice so,
//! created 5 s apart by the old and the new owner.
//!
//! One GET settles it. A slot's Job is removed only once the status
//! records the slot (history deletes wait for the status write; the slot
//! finalizer holds a Job with a TTL until then), so either the CronJob read
//! now shows the slot, or the slot's Job still exists and the create meets
//! it (AlreadyExists, answered as upstream does). Only a slot that fell due
//! before the actor started needs it: the previous owner stopped before
//! this start, and no later slot was due while it ran. So a hand-off costs
//! one read per moved CronJob with a slot due as it moved, not one per
//! moved CronJob.

use super::aftermath::DecisionAftermath;
use crate::apiserver::failure::ApiFailure;
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::requests::JobRequests;
use crate::reconcile::{ApiError, CronJobView, JobToCreate, Plan};
use crate::telemetry::Metrics;
use crate::telemetry::metrics::{HandoffRereadLabel, HandoffRereadLabels};
use jiff::Timestamp;

/// Before `plan`'s create: whether `cronjob` (held at version `held`) was
/// read again and found unchanged (`Ok(true)`; `Ok(false)`: no read was
/// needed), or what the decision ends with instead of its plan.
/// `due_before_start`: see [`needed`].
pub async fn before_create<R: JobRequests>(
    requests: &R,
    metrics: &Metrics,
    (cronjob, held): (&CronJobView, Option<&str>),
    due_before_start: Option<Timestamp>,
    plan: &Plan,
    now: Timestamp,
) -> Result<bool, DecisionAftermath> {
    let Some(create) = plan.create.as_ref() else {
        return Ok(false);
    };
    if !needed(create, due_before_start) {
        return Ok(false);
    }
    let found = |found| {
        metrics
            .handoff_rereads
            .get_or_create(&HandoffRereadLabels { found })
            .inc();
    };
    match read_again(requests, cronjob, held).await {
        Confirmation::Unchanged => {
            found(HandoffRereadLabel::unchanged);
            Ok(true)
        }
        Confirmation::Changed(fresh) => {
            found(HandoffRereadLabel::newer);
            Err(DecisionAftermath::decide_again(*fresh, now))
        }
        Confirmation::Gone => Err(DecisionAftermath::gone()),
        Confirmation::Abandoned => Err(DecisionAftermath::abandoned(Vec::new())),
        Confirmation::Failed(error) => Err(DecisionAftermath::failed(error)),
    }
}

/// Whether creating `create` waits for a fresh read of its CronJob: its
/// slot fell due at or before `due_before_start` (the start of an actor
/// whose key may have run elsewhere, see
/// [`crate::actor::Update::Start`]).
fn needed(create: &JobToCreate, due_before_start: Option<Timestamp>) -> bool {
    create.job.is_some() && due_before_start.is_some_and(|start| create.scheduled_time <= start)
}

/// What the read found.
#[derive(Debug)]
enum Confirmation {
    /// The CronJob as held: nobody wrote it since; create.
    Unchanged,
    /// A newer version (another replica's last status write, or any
    /// change): decide again from it.
    Changed(Box<LeanCronJob>),
    /// The CronJob or its namespace is gone.
    Gone,
    /// The actor is stopping: the request was not sent.
    Abandoned,
    /// Retry the decision with backoff.
    Failed(ApiError),
}

/// Reads `cronjob` again (a GET: a quorum read) and compares its version
/// with `held`, the version the decision started from.
async fn read_again<R: JobRequests>(
    requests: &R,
    cronjob: &CronJobView,
    held: Option<&str>,
) -> Confirmation {
    let (kind, namespace, name) = (cronjob.kind, cronjob.namespace(), cronjob.name());
    match requests.get_cronjob(kind, namespace, name).await {
        Ok(fresh) if fresh.metadata.resource_version.as_deref() == held => Confirmation::Unchanged,
        Ok(fresh) => {
            tracing::info!(
                cronjob = %cronjob.key,
                held = held.unwrap_or_default(),
                fresh = fresh.metadata.resource_version.as_deref().unwrap_or_default(),
                "a slot due before this CronJob's hand-off: its copy was not the latest, deciding again from the one read now"
            );
            Confirmation::Changed(Box::new(fresh))
        }
        Err(ApiFailure::Abandoned) => Confirmation::Abandoned,
        Err(error) if error.is_not_found() || error.is_namespace_gone() => Confirmation::Gone,
        Err(error) => Confirmation::Failed(error.to_api_error()),
    }
}
