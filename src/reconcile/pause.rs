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

use super::options::InvalidOption;
use super::view::{CronJobView, Finished, JobSummary};
use super::{Event, Reason};
use jiff::Timestamp;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The opt-in: a count of consecutive failed Jobs, 1 to
/// [`MAX_PAUSE_AFTER_FAILURES`], after which the CronJob is suspended.
pub const PAUSE_AFTER_FAILURES_ANNOTATION: &str = "shardcron.io/pause-after-failures";

/// Written by the controller: the failed Jobs of the current streak, oldest
/// first, each `name@failure time` (`nightly-29400120@2026-11-26T10:02:07Z,
/// nightly-29400180@2026-11-26T10:03:05Z`). Absent when there are none.
pub const FAILED_JOBS_ANNOTATION: &str = "shardcron.io/failed-jobs";

/// Written by the controller when it pauses the CronJob, and left as the
/// record of the last pause: `<time> after N consecutive failed Jobs:
/// a, b, c`. Failures before its time never count again.
pub const PAUSED_ANNOTATION: &str = "shardcron.io/paused";

/// The largest N: the list of failures on the CronJob stays below 10 KB.
pub const MAX_PAUSE_AFTER_FAILURES: u32 = 100;

/// What the CronJob's annotations say about pausing; boxed in
/// [`super::Options`], absent for a CronJob without any of the three.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PauseState {
    /// N; 0: the opt-in is off (absent or invalid).
    pub threshold: u32,
    /// The streak as last written ([`FAILED_JOBS_ANNOTATION`]); entries it
    /// cannot read are dropped (and the next write leaves them out).
    pub counted: Vec<FailedJob>,
    /// The time of the last pause ([`PAUSED_ANNOTATION`]).
    pub paused_at: Option<Timestamp>,
}

/// One failed Job of a streak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedJob {
    pub name: String,
    pub failed_at: Timestamp,
}

impl PauseState {
    /// Reads the three annotations: `None` when none is set; with the
    /// opt-in's error when N is not a count from 1 to the maximum (the
    /// opt-in is then off).
    pub(super) fn from_annotations(
        annotations: &BTreeMap<String, String>,
    ) -> Option<(Self, Option<InvalidOption>)> {
        let threshold = annotations.get(PAUSE_AFTER_FAILURES_ANNOTATION);
        let counted = annotations.get(FAILED_JOBS_ANNOTATION);
        let paused = annotations.get(PAUSED_ANNOTATION);
        if threshold.is_none() && counted.is_none() && paused.is_none() {
            return None;
        }
        let mut invalid = None;
        let threshold = match threshold {
            None => 0,
            Some(value) => match value.trim().parse::<u32>() {
                Ok(n) if (1..=MAX_PAUSE_AFTER_FAILURES).contains(&n) => n,
                _ => {
                    invalid = Some(InvalidOption {
                        annotation: PAUSE_AFTER_FAILURES_ANNOTATION,
                        value: value.clone(),
                        allowed: "a count from 1 to 100, such as 3",
                    });
                    0
                }
            },
        };
        let state = Self {
            threshold,
            counted: counted.map(|v| parse_failed_jobs(v)).unwrap_or_default(),
            paused_at: paused.and_then(|record| {
                record
                    .split_whitespace()
                    .next()
                    .and_then(|t| t.parse().ok())
            }),
        };
        Some((state, invalid))
    }
}

/// The entries of [`FAILED_JOBS_ANNOTATION`] that read as `name@time`.
fn parse_failed_jobs(value: &str) -> Vec<FailedJob> {
    value
        .split(',')
        .filter_map(|entry| {
            let (name, time) = entry.trim().rsplit_once('@')?;
            let failed_at = time.parse().ok()?;
            (!name.is_empty()).then(|| FailedJob {
                name: name.to_owned(),
                failed_at,
            })
        })
        .collect()
}

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
        .chain(cronjob.status.last_successful_time)
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
