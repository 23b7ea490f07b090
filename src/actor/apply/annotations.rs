//! The controller's own annotations on the CronJob: the streak of failed
//! Jobs and the pause it may bring (`shardcron.io/pause-after-failures`),
//! and the slot history (`shardcron.io/slot-history`), in the one write a
//! decision makes to the CronJob itself. What to write is decided by
//! `reconcile` (`streak_update`, the slot history's rule,
//! `Plan::cronjob_patch`); this sends it.

use super::snapshot::Snapshot;
use super::status::StatusStage;
use crate::apiserver::failure::ApiFailure;
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::requests::JobRequests;
use crate::reconcile::{ApiError, CronJobPatch, CronJobView, Pause, Plan};
use k8s_openapi::api::core::v1::ObjectReference;

/// The annotations stage's result, for the history deletes and the
/// aftermath.
#[derive(Debug)]
pub enum AnnotationsStage {
    /// Nothing to write, or the CronJob is gone.
    NotNeeded,
    /// Not sent: the status write met a newer CronJob or gave way, and the
    /// next decision decides the annotations again (it recomputes the
    /// streak and the slot history).
    DecidedAgain,
    Sent {
        /// Boxed: it may hold the CronJob as written.
        write: Box<AnnotationsWrite>,
        /// The slot history alone: best effort. A write refused (an
        /// admission policy from before it) or failed never holds a slot,
        /// nor the history deletes, back; what it would have told of the
        /// failed Jobs still there is told by the next write.
        best_effort: bool,
    },
}

impl AnnotationsStage {
    /// Still to be written: the failed Jobs it counts stay.
    pub fn pending(&self) -> bool {
        match self {
            Self::NotNeeded => false,
            Self::DecidedAgain => true,
            Self::Sent { write, best_effort } => match write.backoff {
                // A best-effort write that failed is not tried again here.
                Some(_) if *best_effort => false,
                _ => !write.done,
            },
        }
    }

    /// The failure to retry with backoff.
    pub fn failure(&self) -> Option<&ApiError> {
        match self {
            Self::Sent {
                write,
                best_effort: false,
            } => write.backoff.as_ref(),
            _ => None,
        }
    }

    /// The CronJob as written or re-read.
    pub fn into_cronjob(self) -> Option<LeanCronJob> {
        match self {
            Self::Sent { write, .. } => write.cronjob,
            _ => None,
        }
    }
}

/// Writes `plan`'s own annotations (the slot history only
/// `with_history`), after the status stage: on the version its write
/// produced, and not at all if it met a newer CronJob, gave way, or found
/// the CronJob gone.
pub async fn annotate<R: JobRequests>(
    requests: &R,
    snapshot: &Snapshot,
    plan: &Plan,
    with_history: bool,
    status: &StatusStage,
) -> AnnotationsStage {
    let Some(patch) = plan.cronjob_patch(with_history) else {
        return AnnotationsStage::NotNeeded;
    };
    if status.decided_again() {
        return AnnotationsStage::DecidedAgain;
    }
    if status.gone() {
        return AnnotationsStage::NotNeeded;
    }
    let version = status
        .written_version()
        .unwrap_or(snapshot.resource_version.as_deref());
    let pause = plan
        .streak
        .as_ref()
        .and_then(|streak| streak.pause.as_ref());
    let cronjob = &snapshot.cronjob;
    let write = write_own_annotations(
        requests,
        cronjob,
        version,
        &patch,
        pause,
        crate::reconcile::regarding(cronjob),
    )
    .await;
    AnnotationsStage::Sent {
        best_effort: plan.streak.is_none() && write.cronjob.is_none(),
        write: Box::new(write),
    }
}

/// How the write went, for the steps after it.
#[derive(Debug)]
pub struct AnnotationsWrite {
    /// Written (or nothing to write): the failed Jobs it counts may go.
    /// Otherwise (refused, failed, stopping) they stay until a later
    /// decision counts them, so this decision deletes no history.
    pub done: bool,
    /// The CronJob as written, or as re-read after a conflict.
    pub cronjob: Option<LeanCronJob>,
    /// Retry the decision with backoff after this error.
    pub backoff: Option<ApiError>,
}

/// Writes `patch` with `version` as precondition (the resourceVersion the
/// decision read, or the one its own status write produced), records the
/// `pause`'s event on `regarding` once it is written. A conflict
/// re-reads the CronJob, as a status write's does; any failure retries the
/// decision with backoff. A pausing decision started nothing, so until the
/// pause lands nothing starts.
pub async fn write_own_annotations<R: JobRequests>(
    requests: &R,
    cronjob: &CronJobView,
    version: Option<&str>,
    patch: &CronJobPatch,
    pause: Option<&Pause>,
    regarding: ObjectReference,
) -> AnnotationsWrite {
    let mut outcome = AnnotationsWrite {
        done: false,
        cronjob: None,
        backoff: None,
    };
    let result = requests
        .patch_cronjob(
            cronjob.kind,
            cronjob.namespace(),
            cronjob.name(),
            version,
            patch,
        )
        .await;
    match result {
        Ok(written) => {
            if let Some(pause) = pause {
                tracing::info!(cronjob = %cronjob.name(), namespace = %cronjob.namespace(), jobs = ?pause.jobs, "paused after consecutive failed Jobs");
                requests.record(regarding, &pause.event());
            }
            outcome.done = true;
            outcome.cronjob = Some(written);
        }
        Err(ApiFailure::Abandoned) => {}
        Err(error) if error.is_conflict() => {
            outcome.backoff = Some(error.to_api_error());
            match requests
                .get_cronjob(cronjob.kind, cronjob.namespace(), cronjob.name())
                .await
            {
                Ok(fresh) => outcome.cronjob = Some(fresh),
                Err(get_error) => outcome.backoff = Some(get_error.to_api_error()),
            }
        }
        Err(error) => {
            tracing::warn!(cronjob = %cronjob.name(), namespace = %cronjob.namespace(), %error, "writing the CronJob's own annotations (failed-Job streak, slot history) failed");
            outcome.backoff = Some(error.to_api_error());
        }
    }
    outcome
}
