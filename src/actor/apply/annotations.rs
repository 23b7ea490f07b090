//! The controller's own annotations on the CronJob: the streak of failed
//! Jobs and the pause it may bring (`shardcron.io/pause-after-failures`),
//! and the slot history (`shardcron.io/slot-history`), in the one write a
//! decision makes to the CronJob itself. What to write is decided by
//! `reconcile` (`streak_update`, the slot history's rule,
//! `Plan::cronjob_patch`); this sends it.

use crate::apiserver::failure::ApiFailure;
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::requests::JobRequests;
use crate::reconcile::{ApiError, CronJobPatch, CronJobView, Pause};
use k8s_openapi::api::core::v1::ObjectReference;

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
