//! The streak of failed Jobs written on the CronJob, and the pause it may
//! bring (`shardcron.io/pause-after-failures`): the one write a decision
//! makes to the CronJob itself. What to write is decided by
//! `reconcile::streak_update`; this sends it.

use super::apply::{Applied, Snapshot, object_reference};
use crate::kube::failure::ApiFailure;
use crate::kube::requests::JobRequests;
use crate::reconcile::{Requeue, StreakUpdate};

/// How the write went, for the steps after it.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum StreakWritten {
    /// Written, or nothing to write.
    Done,
    /// Not written (refused, failed, or the actor is stopping): the failed
    /// Jobs it would have counted must stay until a later decision counts
    /// them, so this decision deletes no history.
    Pending,
}

/// Writes `update` with the resourceVersion the decision read (or the one
/// its own status write produced), records the pause's event once the pause
/// is written, and hands the CronJob written back to the actor. A conflict
/// re-reads the CronJob, as a status write's does; any failure retries the
/// decision with backoff. A pausing decision started nothing, so until the
/// pause lands nothing starts.
pub(super) async fn write_streak<R: JobRequests>(
    requests: &R,
    snapshot: &Snapshot,
    update: Option<&StreakUpdate>,
    applied: &mut Applied,
) -> StreakWritten {
    let Some(update) = update else {
        return StreakWritten::Done;
    };
    // After a status conflict the decision is retried from the re-read
    // CronJob; the streak is recomputed then.
    if applied.reread.is_some() {
        return StreakWritten::Pending;
    }
    let cronjob = &snapshot.cronjob;
    let version = match &applied.written_status {
        Some((_, version)) => version.as_deref(),
        None => snapshot.resource_version.as_deref(),
    };
    let result = requests
        .patch_cronjob(
            cronjob.kind,
            &cronjob.namespace,
            &cronjob.name,
            version,
            &update.patch(),
        )
        .await;
    match result {
        Ok(written) => {
            if let Some(pause) = &update.pause {
                tracing::info!(cronjob = %cronjob.name, namespace = %cronjob.namespace, jobs = ?pause.jobs, "paused after consecutive failed Jobs");
                requests.record(object_reference(cronjob), &pause.event());
            }
            applied.reread = Some(written);
            StreakWritten::Done
        }
        Err(ApiFailure::Abandoned) => StreakWritten::Pending,
        Err(error) if error.is_conflict() => {
            applied.requeue = Requeue::Backoff(error.to_api_error());
            match requests
                .get_cronjob(cronjob.kind, &cronjob.namespace, &cronjob.name)
                .await
            {
                Ok(fresh) => applied.reread = Some(fresh),
                Err(get_error) => applied.requeue = Requeue::Backoff(get_error.to_api_error()),
            }
            StreakWritten::Pending
        }
        Err(error) => {
            tracing::warn!(cronjob = %cronjob.name, namespace = %cronjob.namespace, %error, "writing the failed-Job streak failed");
            applied.requeue = Requeue::Backoff(error.to_api_error());
            StreakWritten::Pending
        }
    }
}
