//! History clean-up: which finished Jobs to delete, as upstream's
//! `cleanupFinishedJobs` / `removeOldestJobs` / `byJobStartTime` choose them.
//!
//! Runs before anything else in a sync, so history is kept in check even
//! when creating the next Job fails (for example on a Job quota).

use super::view::{Finished, JobSummary, SpecView};
use std::cmp::Ordering;

/// Why a finished Job is deleted: its kind of history is over its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverHistoryLimit {
    pub finished: Finished,
    pub limit: i32,
}

/// The finished children to delete, in upstream's order: successful ones
/// (oldest first), then failed ones (oldest first).
///
/// Both limits unset means nothing is deleted (the API defaults them to 3
/// and 1, so that only happens for objects that bypassed defaulting). A
/// negative limit, which validation rejects, makes upstream index past the
/// end of its list and panic; here it deletes the whole list instead.
pub fn over_limit<'a>(
    spec: &SpecView,
    children: &'a [JobSummary],
) -> Vec<(&'a JobSummary, OverHistoryLimit)> {
    let mut out = Vec::new();
    if spec.successful_jobs_history_limit.is_none() && spec.failed_jobs_history_limit.is_none() {
        return out;
    }
    for (finished, limit) in [
        (Finished::Complete, spec.successful_jobs_history_limit),
        (Finished::Failed, spec.failed_jobs_history_limit),
    ] {
        let Some(limit) = limit else { continue };
        let mut jobs: Vec<&JobSummary> = children
            .iter()
            .filter(|j| j.finished == Some(finished))
            .collect();
        let excess = jobs.len() as i64 - i64::from(limit);
        if excess <= 0 {
            continue;
        }
        jobs.sort_by(|a, b| by_start_time(a, b));
        let reason = OverHistoryLimit { finished, limit };
        out.extend(
            jobs.into_iter()
                .take(usize::try_from(excess).unwrap_or(usize::MAX))
                .map(|job| (job, reason)),
        );
    }
    out
}

/// Upstream's `byJobStartTime`: by `status.startTime` ascending, Jobs
/// without one last, equal times (or both missing) by name.
pub fn by_start_time(a: &JobSummary, b: &JobSummary) -> Ordering {
    match (a.start_time, b.start_time) {
        (None, Some(_)) => Ordering::Greater,
        (Some(_), None) => Ordering::Less,
        (x, y) if x == y => a.name.cmp(&b.name),
        (x, y) => x.cmp(&y),
    }
}
