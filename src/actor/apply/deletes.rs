//! A decision's deletes: Replace's, before its create, and the history
//! deletes, last and within a bound. Each says how it went; the decision
//! records it.

use crate::apiserver::failure::ApiFailure;
use crate::apiserver::requests::{DeleteFor, JobRequests};
use crate::reconcile::{ApiError, DeleteReason, Deletion, Requeue};
use crate::telemetry::Metrics;
use crate::telemetry::metrics::{DeleteLabels, DeleteReasonLabel, OkLabel};
use jiff::Timestamp;
use std::time::Duration;

/// How one delete went.
#[derive(Debug)]
pub enum Deleted {
    Done,
    Failed(ApiError),
    /// Not sent: the actor is stopping.
    Abandoned,
}

/// One delete of a plan, counted.
pub async fn delete<R: JobRequests>(
    requests: &R,
    metrics: &Metrics,
    deletion: &Deletion,
) -> Deleted {
    let (why, reason) = match deletion.why {
        DeleteReason::Replace => (DeleteFor::Replace, DeleteReasonLabel::replace),
        DeleteReason::HistoryLimit { .. } => (DeleteFor::History, DeleteReasonLabel::history),
    };
    let result = requests
        .delete_job(&deletion.namespace, &deletion.name, &deletion.uid, why)
        .await;
    if matches!(result, Err(ApiFailure::Abandoned)) {
        return Deleted::Abandoned;
    }
    metrics
        .jobs_deleted
        .get_or_create(&DeleteLabels {
            reason,
            result: if result.is_ok() {
                OkLabel::ok
            } else {
                OkLabel::failed
            },
        })
        .inc();
    match result {
        Ok(()) => Deleted::Done,
        Err(error) => Deleted::Failed(error.to_api_error()),
    }
}

/// What the history deletes came to: how each one sent went (in order; those
/// after the last were not sent), and the next decision's time if they ran
/// out of it.
#[derive(Debug)]
pub struct HistoryDeletes {
    pub sent: Vec<Deleted>,
    /// Out of time (a herd's backlog in the namespace): the next decision,
    /// which sends those left, comes by then, and the next slot is not held
    /// back for them.
    pub left: Option<Requeue>,
}

/// The history deletes, after the slot is recorded, within
/// [`history_wait`] of `now` for a decision whose next one is `requeue`.
pub async fn delete_history<R: JobRequests>(
    requests: &R,
    metrics: &Metrics,
    history: &[&Deletion],
    requeue: &Requeue,
    now: Timestamp,
) -> HistoryDeletes {
    let mut sent = Vec::new();
    let (wait, retry_at) = history_wait(requeue, now);
    let deletes = async {
        for deletion in history {
            let deleted = delete(requests, metrics, deletion).await;
            if matches!(deleted, Deleted::Abandoned) {
                break;
            }
            sent.push(deleted);
        }
    };
    let in_time = tokio::time::timeout(wait, deletes).await.is_ok();
    HistoryDeletes {
        sent,
        left: (!in_time).then_some(retry_at),
    }
}

/// The longest a decision waits for its history deletes, however far its
/// next slot: they are the lowest write class, and a decision that waits
/// holds its CronJob's next one back.
pub const HISTORY_DELETES_MAX_WAIT: Duration = Duration::from_secs(30);

/// How long the history deletes may take, given the decision's `requeue`
/// at `now`: until the next slot is due (so it starts at its time) and at
/// most [`HISTORY_DELETES_MAX_WAIT`]; and the requeue to use when they run
/// out of time (the slot, or the end of that wait if sooner).
pub fn history_wait(requeue: &Requeue, now: Timestamp) -> (Duration, Requeue) {
    let cap = jiff::SignedDuration::try_from(HISTORY_DELETES_MAX_WAIT).unwrap_or_default();
    let latest = now.saturating_add(cap).unwrap_or(now);
    match requeue {
        Requeue::At(slot) if *slot <= latest => {
            let until = slot.duration_since(now);
            (
                Duration::try_from(until).unwrap_or_default(),
                requeue.clone(),
            )
        }
        Requeue::Backoff(_) => (HISTORY_DELETES_MAX_WAIT, requeue.clone()),
        Requeue::At(_) | Requeue::Never => (HISTORY_DELETES_MAX_WAIT, Requeue::At(latest)),
    }
}
