//! A decision's status write, the stage after the start: whether it goes
//! out, how urgently, and how it went.

use super::snapshot::Snapshot;
use crate::apiserver::failure::ApiFailure;
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::requests::{JobRequests, StatusFor};
use crate::reconcile::{self, ApiError, CronJobView, JobSummary, Outcome, StatusView};
use crate::telemetry::Metrics;
use k8s_openapi::api::batch::v1::CronJobStatus;

/// The status stage's result, for the stages after it and the aftermath.
#[derive(Debug)]
pub enum StatusStage {
    /// Nothing to write, or a write that records no slot while the actor
    /// stops (the next owner decides it again).
    NotSent,
    Sent {
        write: StatusWrite,
        /// What was (or was meant to be) written.
        view: StatusView,
        /// It records a slot: the Jobs that show the slot stay until it
        /// lands.
        records_a_slot: bool,
    },
}

impl StatusStage {
    /// On the server now.
    pub fn landed(&self) -> bool {
        matches!(
            self,
            Self::Sent {
                write: StatusWrite::Written(_),
                ..
            }
        )
    }

    /// A slot's record did not land: the Jobs that show the slot stay for
    /// the next try.
    pub fn keeps_evidence(&self) -> bool {
        matches!(
            self,
            Self::Sent {
                records_a_slot: true,
                ..
            }
        ) && !self.landed()
    }

    /// The write met a newer CronJob or gave way: the next decision,
    /// from the re-read CronJob or with the unwritten status, decides
    /// everything after it again.
    pub fn decided_again(&self) -> bool {
        matches!(
            self,
            Self::Sent {
                write: StatusWrite::Reread { .. } | StatusWrite::GaveWay,
                ..
            }
        )
    }

    pub fn gone(&self) -> bool {
        matches!(
            self,
            Self::Sent {
                write: StatusWrite::Gone,
                ..
            }
        )
    }

    /// The resourceVersion the write produced, when it landed.
    pub fn written_version(&self) -> Option<Option<&str>> {
        match self {
            Self::Sent {
                write: StatusWrite::Written(version),
                ..
            } => Some(version.as_deref()),
            _ => None,
        }
    }

    /// The failure to retry with backoff (a conflict's, or its re-read's).
    pub fn failure(&self) -> Option<&ApiError> {
        match self {
            Self::Sent {
                write:
                    StatusWrite::Reread {
                        conflict: error, ..
                    }
                    | StatusWrite::Failed(error),
                ..
            } => Some(error),
            _ => None,
        }
    }
}

/// Writes the status `recorded` asks for (or the one an earlier decision
/// left unwritten, `snapshot.status_unwritten`). `created`: this decision
/// created a Job. A write that records a slot (that Job, a
/// `lastScheduleTime` moved forward, an unwritten status) goes out even if
/// the actor is stopping: the next owner must see the slot taken, even
/// after the Job itself is gone (history limit 0, ttlSecondsAfterFinished).
pub async fn record_status<R: JobRequests + Clone>(
    requests: &R,
    metrics: &Metrics,
    snapshot: &Snapshot,
    plan: &reconcile::Plan,
    recorded: &Outcome,
    created: bool,
) -> StatusStage {
    let unwritten = snapshot.status_unwritten;
    let Some(status) = recorded
        .status_update()
        .or_else(|| unwritten.then(|| recorded.status.to_api()))
    else {
        return StatusStage::NotSent;
    };
    let moves_last_schedule =
        recorded.status.last_schedule_time > snapshot.cronjob.status.last_schedule_time;
    let records_a_slot = created || moves_last_schedule || unwritten;
    let stopping = snapshot.stop.is_cancelled();
    if stopping && !records_a_slot {
        return StatusStage::NotSent;
    }
    // A Job this decision created shows its slot only if it lasts; an
    // unwritten status's slot, if its Job is still listed.
    let slot_shown_by_lasting_job =
        created_job_lasts(plan) || (unwritten && shows_slot(&snapshot.children, &recorded.status));
    let why = status_class(records_a_slot, stopping, slot_shown_by_lasting_job);
    let writer = if records_a_slot {
        requests.unabandoned()
    } else {
        requests.clone()
    };
    let writer = if why == StatusFor::Routine && records_a_slot && !unwritten {
        writer.giving_way_to(snapshot.job_ended.clone())
    } else {
        writer
    };
    let version = snapshot.resource_version.as_deref();
    let write = write_status(&writer, &snapshot.cronjob, version, &status, why).await;
    if matches!(write, StatusWrite::GaveWay) {
        metrics.status_writes_given_way.inc();
    }
    StatusStage::Sent {
        write,
        view: recorded.status.clone(),
        records_a_slot,
    }
}

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
