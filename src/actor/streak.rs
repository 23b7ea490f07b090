//! The streak of failed Jobs written on the CronJob, and the pause it may
//! bring (`shardcron.io/pause-after-failures`): the one write a decision
//! makes to the CronJob itself. What to write is decided by
//! `reconcile::streak_update`; this sends it.

use crate::apiserver::failure::ApiFailure;
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::requests::JobRequests;
use crate::reconcile::{ApiError, CronJobView, StreakUpdate};
use k8s_openapi::api::core::v1::ObjectReference;

/// How the write went, for the steps after it.
#[derive(Debug)]
pub(super) struct StreakWrite {
    /// Written (or nothing to write): the failed Jobs it counts may go.
    /// Otherwise (refused, failed, stopping) they stay until a later
    /// decision counts them, so this decision deletes no history.
    pub done: bool,
    /// The CronJob as written, or as re-read after a conflict.
    pub cronjob: Option<LeanCronJob>,
    /// Retry the decision with backoff after this error.
    pub backoff: Option<ApiError>,
}

/// Writes `update` with `version` as precondition (the resourceVersion the
/// decision read, or the one its own status write produced), records the
/// pause's event on `regarding` once the pause is written. A conflict
/// re-reads the CronJob, as a status write's does; any failure retries the
/// decision with backoff. A pausing decision started nothing, so until the
/// pause lands nothing starts.
pub(super) async fn write_streak<R: JobRequests>(
    requests: &R,
    cronjob: &CronJobView,
    version: Option<&str>,
    update: &StreakUpdate,
    regarding: ObjectReference,
) -> StreakWrite {
    let mut outcome = StreakWrite {
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
            &update.patch(),
        )
        .await;
    match result {
        Ok(written) => {
            if let Some(pause) = &update.pause {
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
            tracing::warn!(cronjob = %cronjob.name(), namespace = %cronjob.namespace(), %error, "writing the failed-Job streak failed");
            outcome.backoff = Some(error.to_api_error());
        }
    }
    outcome
}
