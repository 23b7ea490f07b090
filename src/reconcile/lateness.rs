//! When a slot's Job could first be made: the instant the creation-skew
//! metric counts from, so that it measures the controller and the API
//! server, not a wait the CronJob's own spec asked for.
//!
//! A slot is ready at its start (its time, plus a spread offset), or later:
//! - under `concurrencyPolicy: Forbid`, when the Job that held it back
//!   finished (upstream starts the held slot as soon as the running Job
//!   ends, up to a period late);
//! - for a catch-up run (`shardcron.io/catch-up`), at the decision that
//!   starts it: a missed slot is late by design.
//!
//! The difference is a policy wait, reported apart
//! (`shardcron_job_policy_wait_seconds`). A slot started when its CronJob
//! is unsuspended is not told apart: nothing the controller reads says
//! when `spec.suspend` changed (docs/parity.md, "Metrics").

use super::view::{ConcurrencyPolicy, JobSummary};
use jiff::Timestamp;

/// A wait the CronJob's own spec asked for before a slot could start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyWait {
    /// `concurrencyPolicy: Forbid` held it behind a running Job.
    Forbid,
    /// A catch-up run of a missed slot.
    CatchUp,
}

impl PolicyWait {
    pub const ALL: [Self; 2] = [Self::Forbid, Self::CatchUp];

    /// The `policy` label of `shardcron_job_policy_wait_seconds`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Forbid => "forbid",
            Self::CatchUp => "catch_up",
        }
    }
}

/// When a slot became ready to start, and the wait before, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Readiness {
    pub at: Timestamp,
    pub waited: Option<PolicyWait>,
}

/// When the slot starting at `start_at` became ready, decided at `now`:
/// `catch_up` when it is a catch-up run (a later slot has started too), the
/// CronJob's policy and its children as listed.
pub fn readiness(
    start_at: Timestamp,
    now: Timestamp,
    catch_up: bool,
    policy: &ConcurrencyPolicy,
    children: &[JobSummary],
) -> Readiness {
    let on_time = Readiness {
        at: start_at,
        waited: None,
    };
    if now <= start_at {
        return on_time;
    }
    if catch_up {
        return Readiness {
            at: now,
            waited: Some(PolicyWait::CatchUp),
        };
    }
    if *policy != ConcurrencyPolicy::Forbid {
        return on_time;
    }
    // Under Forbid, a child that finished after the slot's start was
    // running at it (no other Job starts while one runs): the slot waited
    // for the last of them. A finish after `now` (another clock) counts as
    // `now`.
    children
        .iter()
        .filter_map(finished_at)
        .filter(|finished| *finished > start_at)
        .max()
        .map_or(on_time, |finished| Readiness {
            at: finished.min(now),
            waited: Some(PolicyWait::Forbid),
        })
}

/// When a Job finished: its completion, or its `Failed` condition's time.
fn finished_at(job: &JobSummary) -> Option<Timestamp> {
    job.finished?;
    job.completion_time.or(job.failed_at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::Finished;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn job(finished: Option<(&str, Finished)>) -> JobSummary {
        JobSummary {
            name: "j".into(),
            uid: "u".into(),
            start_time: None,
            completion_time: finished
                .filter(|(_, f)| *f == Finished::Complete)
                .map(|(t, _)| at(t)),
            finished: finished.map(|(_, f)| f),
            failed_at: finished
                .filter(|(_, f)| *f == Finished::Failed)
                .map(|(t, _)| at(t)),
            failure_reason: None,
            succeeded: finished.is_some_and(|(_, f)| f == Finished::Complete),
            scheduled: None,
            deleting: false,
            held: false,
        }
    }

    #[test]
    fn a_slot_is_ready_at_its_start_unless_its_policy_made_it_wait() {
        use ConcurrencyPolicy::*;
        use Finished::*;
        let start = "2026-01-01T10:01:00Z";
        let now = "2026-01-01T10:01:40Z";
        // (policy, catch-up, children's ends, ready at, waited)
        let cases: &[(_, _, &[_], _, _)] = &[
            (Allow, false, &[], start, None),
            (Forbid, false, &[], start, None),
            // Ended before the slot: it held nothing back.
            (
                Forbid,
                false,
                &[("2026-01-01T10:00:30Z", Complete)],
                start,
                None,
            ),
            // Ended after it: the slot waited for it.
            (
                Forbid,
                false,
                &[
                    ("2026-01-01T10:01:30Z", Complete),
                    ("2026-01-01T10:00:10Z", Complete),
                ],
                "2026-01-01T10:01:30Z",
                Some(PolicyWait::Forbid),
            ),
            (
                Forbid,
                false,
                &[("2026-01-01T10:01:20Z", Failed)],
                "2026-01-01T10:01:20Z",
                Some(PolicyWait::Forbid),
            ),
            // A finish told by a clock ahead of ours counts as now.
            (
                Forbid,
                false,
                &[("2026-01-01T10:05:00Z", Complete)],
                now,
                Some(PolicyWait::Forbid),
            ),
            // Allow and Replace never wait for a Job.
            (
                Allow,
                false,
                &[("2026-01-01T10:01:30Z", Complete)],
                start,
                None,
            ),
            (
                Replace,
                false,
                &[("2026-01-01T10:01:30Z", Complete)],
                start,
                None,
            ),
            (Allow, true, &[], now, Some(PolicyWait::CatchUp)),
            (
                Forbid,
                true,
                &[("2026-01-01T10:01:30Z", Complete)],
                now,
                Some(PolicyWait::CatchUp),
            ),
        ];
        for (policy, catch_up, ends, ready, waited) in cases {
            let children: Vec<_> = ends.iter().map(|&end| job(Some(end))).collect();
            let got = readiness(at(start), at(now), *catch_up, policy, &children);
            assert_eq!(
                got,
                Readiness {
                    at: at(ready),
                    waited: *waited
                },
                "{policy:?} catch-up {catch_up} {ends:?}"
            );
        }
    }

    #[test]
    fn a_running_child_or_a_decision_before_the_start_waits_for_nothing() {
        let start = at("2026-01-01T10:01:00Z");
        let running = [job(None)];
        let ready = readiness(
            start,
            at("2026-01-01T10:01:05Z"),
            false,
            &ConcurrencyPolicy::Forbid,
            &running,
        );
        assert_eq!(ready.waited, None);
        let early = readiness(
            start,
            at("2026-01-01T10:00:59Z"),
            true,
            &ConcurrencyPolicy::Forbid,
            &running,
        );
        assert_eq!(ready.at, start);
        assert_eq!(early.waited, None);
    }
}
