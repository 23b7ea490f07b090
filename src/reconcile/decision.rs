//! The reasons behind a plan, one per step taken, for people (`shardcron
//! explain`, logs and trace attributes). Events say what upstream would tell
//! the user; decisions also say why nothing happened.

use super::view::Finished;
use jiff::Timestamp;
use std::fmt;

/// One step of the decision and its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A finished Job beyond its history limit is deleted.
    HistoryDelete {
        job: String,
        finished: Finished,
        limit: i32,
    },
    /// A delete failed; the Job stays (history) or the slot waits (Replace).
    DeleteFailed {
        job: String,
        error: String,
    },
    /// A Job of this CronJob, no longer running, is known to have been made
    /// for `slot` (it is listed with that scheduled timestamp, or this
    /// replica made or saw it before it was deleted) but `lastScheduleTime`
    /// is older: the status write after its create was lost. The status now
    /// records the slot, so it is never started twice (a departure;
    /// upstream would start it again once the Job is gone).
    RecordedKnownSlot {
        slot: Timestamp,
    },
    /// A finished Job left `status.active`.
    SawCompleted {
        job: String,
        finished: Finished,
    },
    /// `status.lastSuccessfulTime` moved to this Job's completion time.
    LastSuccessful {
        job: String,
        time: Option<Timestamp>,
    },
    /// A running child not in `status.active`, nor in the live CronJob's.
    Unexpected {
        job: String,
    },
    /// A running child absent from `status.active` is in the live CronJob's:
    /// the decision goes on with the live CronJob (upstream's quirk: the
    /// status written is still the one read at first).
    SwitchedToLiveCronJob {
        job: String,
    },
    /// An active Job no longer exists.
    Missing {
        job: String,
    },
    /// An active Job missing from the children exists after all.
    StillExists {
        job: String,
    },
    /// An entry of `status.active` that is not a Job this CronJob controls
    /// in its namespace: dropped, never looked up or deleted (a departure).
    ForeignActive {
        namespace: String,
        job: String,
        why: String,
    },
    /// A live GET failed; the sync stops and is retried with backoff.
    LookupFailed {
        what: String,
        error: String,
    },
    Deleting,
    /// An opt-in annotation was not understood: upstream's behaviour applies.
    InvalidOption {
        error: String,
    },
    UnknownTimeZone {
        time_zone: String,
    },
    Suspended,
    /// The CronJob is suspended now, after these consecutive failed Jobs
    /// (`shardcron.io/pause-after-failures`): nothing starts.
    PausedAfterFailures {
        jobs: Vec<String>,
    },
    TimeZoneInSchedule,
    Unparseable {
        error: String,
    },
    NeverFires {
        error: String,
    },
    NothingDue,
    TooManyMissed {
        slot: Timestamp,
    },
    TooLate {
        slot: Timestamp,
    },
    AlreadyHandled {
        slot: Timestamp,
        job: String,
    },
    ForbidWhileActive {
        slot: Timestamp,
        running: Vec<String>,
    },
    Replace {
        job: String,
    },
    Start {
        slot: Timestamp,
        job: String,
    },
    /// A run-now request (`shardcron.io/run-now`) no Job has served yet:
    /// its Job is started (the `Start` that follows names it).
    RunNow {
        requested: Timestamp,
    },
    /// A run-now request waits: concurrencyPolicy Forbid and these Jobs
    /// still running (at most until it lapses).
    RunNowWaits {
        requested: Timestamp,
        running: Vec<String>,
    },
    /// A run-now request waits: the CronJob's last Job started less than
    /// [`RUN_NOW_MIN_INTERVAL_SECONDS`](super::RUN_NOW_MIN_INTERVAL_SECONDS)
    /// before; it runs at `earliest` (if it has not lapsed by then).
    RunNowTooSoon {
        requested: Timestamp,
        earliest: Timestamp,
    },
    /// A run-now request waits for a slot before it whose (spread) start
    /// is still ahead: that slot starts first, so it is never skipped.
    RunNowAfterSlot {
        requested: Timestamp,
        slot: Timestamp,
    },
    /// A run-now request that will not run.
    RunNowIgnored {
        requested: Timestamp,
        why: &'static str,
    },
    /// The Job of this slot exists but is not this CronJob's.
    ExistsForeign {
        job: String,
    },
    /// The Job of this slot exists and is already in `status.active`.
    ExistsActive {
        job: String,
    },
    /// The Job of this slot exists and is ours: recorded as if just created.
    ExistsRecorded {
        job: String,
    },
    CreateFailed {
        job: String,
        error: String,
    },
    NamespaceTerminating {
        job: String,
    },
    /// The next look at this CronJob.
    WakeAt(Timestamp),
    /// No later slot within the schedule's search horizon.
    NoWakeup,
}

/// Why a slot did not start as scheduled: the per-CronJob metric
/// `shardcron_cronjob_skipped_slots_total`'s `reason` (its names are
/// `telemetry::cronjob_series::SKIP_REASONS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// concurrencyPolicy Forbid and a Job still running.
    Forbid,
    /// Past `startingDeadlineSeconds`.
    Deadline,
    /// More than 100 slots were missed (upstream's `TooManyMissedTimes`):
    /// only the most recent is considered.
    TooManyMissed,
}

impl SkipReason {
    pub const ALL: [Self; 3] = [Self::Forbid, Self::Deadline, Self::TooManyMissed];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Forbid => "forbid",
            Self::Deadline => "deadline",
            Self::TooManyMissed => "too_many_missed",
        }
    }
}

/// The slot a decision skipped (or found more than 100 missed before), and
/// why, if it did.
pub fn skipped_slot(decisions: &[Decision]) -> Option<(SkipReason, Timestamp)> {
    decisions.iter().find_map(|decision| match decision {
        Decision::ForbidWhileActive { slot, .. } => Some((SkipReason::Forbid, *slot)),
        Decision::TooLate { slot } => Some((SkipReason::Deadline, *slot)),
        Decision::TooManyMissed { slot } => Some((SkipReason::TooManyMissed, *slot)),
        _ => None,
    })
}

/// What a decision did about the slot, in a word: the `cronjob.decision`
/// attribute of a firing's trace.
pub fn slot_outcome(decisions: &[Decision]) -> &'static str {
    let mut outcome = "nothing-due";
    for decision in decisions {
        outcome = match decision {
            Decision::Deleting => "deleting",
            Decision::UnknownTimeZone { .. }
            | Decision::TimeZoneInSchedule
            | Decision::Unparseable { .. }
            | Decision::NeverFires { .. } => "invalid-schedule",
            Decision::Suspended => "skipped-suspended",
            Decision::PausedAfterFailures { .. } => "paused-after-failures",
            Decision::TooLate { .. } => "missed-deadline",
            Decision::AlreadyHandled { .. } => "already-handled",
            Decision::ForbidWhileActive { .. } | Decision::RunNowWaits { .. } => "skipped-forbid",
            Decision::Replace { .. } => "replacing",
            Decision::Start { .. } if outcome == "replacing" => "replaced",
            Decision::Start { .. } => "created",
            Decision::LookupFailed { .. } => "lookup-failed",
            _ => continue,
        };
    }
    outcome
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Decision::*;
        match self {
            HistoryDelete {
                job,
                finished,
                limit,
            } => {
                let (kind, field) = match finished {
                    Finished::Complete => ("successful", "successfulJobsHistoryLimit"),
                    Finished::Failed => ("failed", "failedJobsHistoryLimit"),
                };
                write!(
                    f,
                    "delete {job}: more than {limit} {kind} jobs kept (spec.{field}), oldest first"
                )
            }
            DeleteFailed { job, error } => write!(f, "deleting {job} failed: {error}"),
            RecordedKnownSlot { slot } => write!(
                f,
                "a Job was made for slot {slot} but lastScheduleTime is older (a lost status write): recorded"
            ),
            SawCompleted { job, finished } => write!(
                f,
                "{job} finished ({}): removed from status.active",
                finished.as_str()
            ),
            LastSuccessful { job, time } => match time {
                Some(t) => write!(f, "lastSuccessfulTime := {t} (completion of {job})"),
                None => write!(
                    f,
                    "lastSuccessfulTime := none ({job} succeeded without a completionTime)"
                ),
            },
            Unexpected { job } => write!(
                f,
                "{job} is running but not in status.active (nor in the live CronJob's): reported, not adopted"
            ),
            SwitchedToLiveCronJob { job } => write!(
                f,
                "{job} is in the live CronJob's status.active: going on with the live CronJob"
            ),
            Missing { job } => write!(f, "{job} is in status.active but gone: removed"),
            ForeignActive {
                namespace,
                job,
                why,
            } => write!(
                f,
                "{namespace}/{job} is in status.active but {why}: removed, never deleted"
            ),
            StillExists { job } => write!(
                f,
                "{job} is in status.active and not listed, but a live GET found it: kept"
            ),
            LookupFailed { what, error } => {
                write!(f, "GET {what} failed: {error}; retry with backoff")
            }
            Deleting => write!(
                f,
                "not scheduling: the CronJob is being deleted (status is still kept up to date)"
            ),
            UnknownTimeZone { time_zone } => {
                write!(f, "not scheduling: unknown spec.timeZone {time_zone:?}")
            }
            InvalidOption { error } => write!(f, "{error}"),
            Suspended => write!(f, "not started: spec.suspend is true"),
            PausedAfterFailures { jobs } => write!(
                f,
                "not started: {} consecutive failed Jobs ({}) reached shardcron.io/pause-after-failures; spec.suspend is set",
                jobs.len(),
                jobs.join(", ")
            ),
            TimeZoneInSchedule => write!(
                f,
                "the schedule names its own zone (TZ=/CRON_TZ=): it wins over spec.timeZone"
            ),
            Unparseable { error } => write!(f, "not scheduling: unparseable schedule: {error}"),
            NeverFires { error } => write!(f, "not scheduling: invalid schedule: {error}"),
            NothingDue => write!(f, "nothing due: no unstarted slot"),
            TooManyMissed { slot } => write!(
                f,
                "more than 100 slots missed; only the most recent ({slot}) is considered"
            ),
            TooLate { slot } => write!(
                f,
                "not started: slot {slot} is past spec.startingDeadlineSeconds"
            ),
            AlreadyHandled { slot, job } => write!(
                f,
                "slot {slot} already handled ({job} in status.active or lastScheduleTime = slot)"
            ),
            ForbidWhileActive { slot, running } => write!(
                f,
                "not started (slot {slot}): concurrencyPolicy Forbid and job {} {} still running",
                running.join(", "),
                if running.len() == 1 { "is" } else { "are" }
            ),
            Replace { job } => write!(
                f,
                "concurrencyPolicy Replace: delete running job {job} first"
            ),
            Start { slot, job } => write!(f, "start {job} for slot {slot}"),
            RunNow { requested } => write!(
                f,
                "run-now request of {requested}: no Job started since, so one is started now"
            ),
            RunNowWaits { requested, running } => write!(
                f,
                "run-now request of {requested} waits: concurrencyPolicy Forbid and job {} still running",
                running.join(", ")
            ),
            RunNowTooSoon {
                requested,
                earliest,
            } => write!(
                f,
                "run-now request of {requested} waits until {earliest}: at most one run-now Job per {}s after the CronJob's last start",
                super::RUN_NOW_MIN_INTERVAL_SECONDS
            ),
            RunNowAfterSlot { requested, slot } => write!(
                f,
                "run-now request of {requested} waits for slot {slot}, whose spread start is still ahead"
            ),
            RunNowIgnored { requested, why } => {
                write!(f, "run-now request of {requested} not run: {why}")
            }
            ExistsForeign { job } => write!(
                f,
                "{job} already exists and is not controlled by this CronJob: left alone"
            ),
            ExistsActive { job } => write!(f, "{job} already exists and is active"),
            ExistsRecorded { job } => write!(
                f,
                "{job} already exists and is ours: recorded in status.active"
            ),
            CreateFailed { job, error } => {
                write!(f, "creating {job} failed: {error}; retry with backoff")
            }
            NamespaceTerminating { job } => write!(
                f,
                "creating {job} failed: the namespace is being deleted; retry with backoff"
            ),
            WakeAt(t) => write!(f, "next look at {t}"),
            NoWakeup => write!(f, "no further slot: no wake-up"),
        }
    }
}

#[cfg(test)]
mod slot_outcome_tests {
    use super::*;

    #[test]
    fn names_what_happened_to_the_slot() {
        let slot = Timestamp::UNIX_EPOCH;
        let start = Decision::Start {
            slot,
            job: "j".into(),
        };
        assert_eq!(slot_outcome(&[]), "nothing-due");
        assert_eq!(
            slot_outcome(&[Decision::NothingDue, Decision::NoWakeup]),
            "nothing-due"
        );
        assert_eq!(slot_outcome(std::slice::from_ref(&start)), "created");
        assert_eq!(
            slot_outcome(&[Decision::Replace { job: "old".into() }, start]),
            "replaced"
        );
        assert_eq!(
            slot_outcome(&[Decision::ForbidWhileActive {
                slot,
                running: vec![]
            }]),
            "skipped-forbid"
        );
        assert_eq!(
            slot_outcome(&[Decision::TooLate { slot }]),
            "missed-deadline"
        );
    }

    #[test]
    fn the_skip_reasons_are_the_metrics() {
        let names: Vec<&str> = SkipReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names, crate::telemetry::cronjob_series::SKIP_REASONS);
    }

    #[test]
    fn names_the_skipped_slot_and_why() {
        let slot = Timestamp::UNIX_EPOCH;
        assert_eq!(skipped_slot(&[Decision::NothingDue]), None);
        assert_eq!(
            skipped_slot(&[Decision::TooLate { slot }]),
            Some((SkipReason::Deadline, slot))
        );
        assert_eq!(
            skipped_slot(&[Decision::ForbidWhileActive {
                slot,
                running: vec![]
            }]),
            Some((SkipReason::Forbid, slot))
        );
        assert_eq!(
            skipped_slot(&[
                Decision::TooManyMissed { slot },
                Decision::Start {
                    slot,
                    job: "j".into()
                }
            ]),
            Some((SkipReason::TooManyMissed, slot))
        );
    }
}
