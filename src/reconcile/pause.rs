//! Pause after repeated failures (`shardcron.io/pause-after-failures: N`):
//! once N Jobs of the CronJob in a row have failed, the controller sets
//! `spec.suspend`, the one write to a CronJob's spec it ever makes.
//!
//! # Where the count lives
//! Not in the children (`failedJobsHistoryLimit` defaults to 1, a TTL
//! removes Jobs, so the history rarely holds N failures) and not in the
//! actor (a hand-off or a restart loses it): on the CronJob itself, in
//! [`FAILED_JOBS_ANNOTATION`], which the owner rewrites when a failure
//! joins the streak or a success ends it. The rule is a function of what
//! the CronJob and its children say, so a replayed watch event, a stale
//! read or a second owner computes the same list, and the patch carries the
//! resourceVersion it was computed from (a stale one gets 409, not a lost
//! failure).
//!
//! # The rule
//! A failure counts when it happened after the later of the last success
//! (`status.lastSuccessfulTime`, or a succeeded child's completion the
//! status does not show yet) and the last pause ([`PAUSED_ANNOTATION`]'s
//! time): "in a row" is by finish time, whatever the concurrency policy. A
//! failure is its Job's `Failed` condition's time. When the streak reaches
//! N, the CronJob is suspended, the pause recorded (its time and the failed
//! Jobs) and the list emptied: after `spec.suspend: false`, counting starts
//! again from the pause, so the failures that caused it never count twice.

use super::view::{CronJobView, Finished, JobSummary};
use super::{Event, Reason};
use jiff::Timestamp;
use std::fmt::Write as _;

pub use super::options::{
    FAILED_JOBS_ANNOTATION, FailedJob, MAX_PAUSE_AFTER_FAILURES, PAUSE_AFTER_FAILURES_ANNOTATION,
    PAUSED_ANNOTATION, PauseState,
};

fn format_failed_jobs(jobs: &[FailedJob]) -> String {
    let mut out = String::new();
    for (i, job) in jobs.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{}@{}", job.name, job.failed_at);
    }
    out
}

/// A write to the CronJob itself (not its status): annotations set
/// (`Some`) or removed (`None`), and `spec.suspend` set to true.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronJobPatch {
    pub annotations: Vec<(&'static str, Option<String>)>,
    pub suspend: bool,
}

/// What a decision changes of the streak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreakUpdate {
    /// The streak now (empty after a pause).
    pub failed_jobs: Vec<FailedJob>,
    /// Set when this decision pauses the CronJob.
    pub pause: Option<Pause>,
}

/// A pause: when, and the failed Jobs that caused it, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pause {
    pub at: Timestamp,
    pub jobs: Vec<String>,
}

impl Pause {
    /// The [`PAUSED_ANNOTATION`] value.
    pub fn record(&self) -> String {
        format!(
            "{} after {} consecutive failed Jobs: {}",
            self.at,
            self.jobs.len(),
            self.jobs.join(", ")
        )
    }

    /// The Warning recorded on the CronJob once the pause is written.
    pub fn event(&self) -> Event {
        Event {
            event_type: Reason::PausedAfterFailures.event_type(),
            reason: Reason::PausedAfterFailures,
            message: format!(
                "Suspended after {} consecutive failed Jobs ({}); set spec.suspend to false to resume",
                self.jobs.len(),
                self.jobs.join(", ")
            ),
        }
    }
}

impl StreakUpdate {
    /// The write that records it.
    pub fn patch(&self) -> CronJobPatch {
        let failed_jobs =
            (!self.failed_jobs.is_empty()).then(|| format_failed_jobs(&self.failed_jobs));
        let mut annotations = vec![(FAILED_JOBS_ANNOTATION, failed_jobs)];
        if let Some(pause) = &self.pause {
            annotations.push((PAUSED_ANNOTATION, Some(pause.record())));
        }
        CronJobPatch {
            annotations,
            suspend: self.pause.is_some(),
        }
    }
}

/// The streak after the children as listed, if it differs from the one
/// written; `None` also for every CronJob without the opt-in (and without a
/// streak left from it: removing the opt-in removes the list).
pub fn streak_update(
    cronjob: &CronJobView,
    children: &[JobSummary],
    now: Timestamp,
) -> Option<StreakUpdate> {
    let state = cronjob.options.pause.as_deref()?;
    if state.threshold == 0 {
        return (!state.counted.is_empty()).then(|| StreakUpdate {
            failed_jobs: Vec::new(),
            pause: None,
        });
    }
    let last_success = children
        .iter()
        .filter(|job| job.succeeded)
        .filter_map(|job| job.completion_time)
        .chain(cronjob.status.last_successful_time.get())
        .max();
    let floor = last_success.max(state.paused_at);
    let mut streak: Vec<FailedJob> = state.counted.clone();
    for job in children {
        if job.finished == Some(Finished::Failed) && !streak.iter().any(|s| s.name == job.name) {
            streak.push(FailedJob {
                name: job.name.clone(),
                // A Failed condition always has its time; a Job without
                // one is counted from when it is first seen.
                failed_at: job.failed_at.or(job.completion_time).unwrap_or(now),
            });
        }
    }
    streak.retain(|job| floor.is_none_or(|floor| job.failed_at > floor));
    streak.sort_by(|a, b| (a.failed_at, &a.name).cmp(&(b.failed_at, &b.name)));
    let threshold = state.threshold as usize;
    if streak.len() >= threshold {
        let caused = streak.split_off(streak.len() - threshold);
        let last = caused.last().map_or(now, |job| job.failed_at);
        return Some(StreakUpdate {
            failed_jobs: Vec::new(),
            pause: Some(Pause {
                // Never before a failure it counts (a Job's clock may run
                // ahead of ours): those must all stay behind the new floor.
                at: now.max(last),
                jobs: caused.into_iter().map(|job| job.name).collect(),
            }),
        });
    }
    (streak != state.counted).then_some(StreakUpdate {
        failed_jobs: streak,
        pause: None,
    })
}
