//! The decision core: given a CronJob, its child Jobs and the time, what
//! kube-controller-manager's CronJob controller (v2) would do. Pure: no
//! clock, no I/O; `now` and every API answer come in as arguments.
//!
//! # Flow
//!
//! Upstream's sync reads the API server in the middle of its decision and
//! branches on the results of its writes. Here those are explicit steps, so
//! the actor stays a thin loop around pure functions:
//!
//! ```
//! # use shardcron::reconcile::*;
//! # use jiff::tz::TimeZone;
//! # fn demo(cronjob: &CronJobView, children: &[JobSummary], now: jiff::Timestamp) {
//! let input = Input { cronjob, children, known_slot: None, now, default_zone: &TimeZone::UTC };
//! let mut live = LiveAnswers::new();
//! let plan = loop {
//!     match reconcile(&input, &live) {
//!         // Live GETs (CronJob, active Jobs, a template too big to keep):
//!         // at most three rounds.
//!         Step::Lookup(lookups) => for lookup in lookups {
//!             match lookup {
//!                 Lookup::CronJob { .. } => live.set_cronjob(Err(ApiError::new("..."))),
//!                 Lookup::Job { namespace, name } => live.set_job(&namespace, &name, JobLookup::NotFound),
//!                 Lookup::JobTemplate { .. } => live.set_template(Err(ApiError::new("..."))),
//!             }
//!         },
//!         Step::Plan(plan) => break plan,
//!     }
//! };
//! let mut results = EffectResults::new();
//! // Deletes in order: history ones never block; a failed Replace delete
//! // stops the remaining Replace deletes and the create.
//! // ... then `plan.create`, and record what the API server answered:
//! // results.set_create(CreateResult::Created(LiveJob::from(&returned_job)));
//! let outcome = follow_up(&input, &live, &results);
//! // Record outcome.events; if let Some(status) = outcome.status_update(),
//! // write it; then arm the timer from outcome.requeue.
//! # let _ = (plan, outcome);
//! # }
//! ```
//!
//! # Inputs
//!
//! The CronJob is a [`CronJobView`]: identity, status, and an `Arc` of the
//! compiled spec ([`SpecView`], with the Job template), shared by every
//! decision until the spec changes. Children are [`JobSummary`]s, a handful
//! of fields per Job. [`reconcile`] uses exactly the children it is given;
//! upstream's children are the namespace's Jobs whose controller reference
//! has this CronJob's *name* ([`is_child_by_name`]); an actor that routes by
//! UID passes a subset of those (see that function).
//!
//! # Deliberate differences from upstream
//!
//! - The next wake-up is the slot itself; upstream requeues 100 ms after it.
//! - No wake-up when the schedule has no slot within robfig's five-year
//!   horizon (upstream's arithmetic would requeue at once, forever).
//! - A negative history limit (rejected by validation) deletes every
//!   finished Job of that kind; upstream indexes past its list and panics,
//!   which crashes kube-controller-manager.
//! - Unknown-time-zone texts: where Go's `LoadLocation` would report an
//!   I/O error reading zoneinfo, the text is always `unknown time zone X`.
//! - `status.active` is not trusted: an entry in another namespace, past
//!   the first [`MAX_UNLISTED_LOOKUPS`] unknown ones, or naming a Job this
//!   CronJob does not control is dropped with a `ForeignActiveJob` warning,
//!   never looked up without bound and never deleted by Replace.
//! - A slot later than `lastScheduleTime` that a finished child's
//!   scheduled-timestamp annotation or [`Input::known_slot`] shows was
//!   started is recorded, not started again (a status write lost after a
//!   create; upstream runs the work twice once the Job is gone).
//! - An AlreadyExists on create, for a foreign Job or one already active,
//!   requeues at the next slot (upstream: no requeue until the next event).
//!
//! Everything else is upstream's behaviour, quirks included: for example,
//! after a switch to the live CronJob (a running child in the live
//! `status.active` but not in the one read), later changes are made to the
//! live copy while the status written is the one read.

mod compact_time;
mod decision;
mod events;
mod history;
mod job;
mod kind;
mod lateness;
mod live;
mod next_look;
pub mod options;
mod pause;
mod raw_json;
mod release;
mod schedule_setup;
mod slot_fates;
mod slot_history;
mod sync;
mod template;
mod update;
mod view;

#[cfg(test)]
mod tests;

pub use compact_time::CompactTime;
pub use decision::{Decision, SkipReason, skipped_slot, slot_outcome};
pub use events::{Event, EventType, MAX_NOTE_BYTES, Reason, cut_text, regarding, rfc1123z_utc};
pub use history::{OverHistoryLimit, by_start_time, over_limit};
pub use job::{
    NewJob, SLOT_FINALIZER, active_reference, build_job, controller_reference, is_held, job_name,
    run_now_job_name,
};
pub use kind::{CronJobKind, CronJobKinds};
pub use lateness::{PolicyWait, Readiness, readiness};
pub use live::{ApiError, CreateResult, EffectResults, JobLookup, LiveAnswers, LiveJob, Lookup};
pub use next_look::{LookInput, next_look};
pub use options::{
    CATCH_UP_ANNOTATION, FALL_BACK_ANNOTATION, FallBack, InvalidOption, Options,
    RUN_NOW_ANNOTATION, RUN_NOW_MIN_INTERVAL_SECONDS, SPREAD_ANNOTATION,
};
pub use pause::{
    CronJobPatch, FAILED_JOBS_ANNOTATION, FailedJob, MAX_PAUSE_AFTER_FAILURES,
    PAUSE_AFTER_FAILURES_ANNOTATION, PAUSED_ANNOTATION, Pause, PauseState, StreakUpdate,
    streak_update,
};
pub use raw_json::RawJson;
pub use release::{Release, releases};
pub use slot_history::{
    Fate, LastFailure, MAX_SLOT_ENTRIES, MAX_SLOT_HISTORY_BYTES, SLOT_HISTORY_ANNOTATION,
    SkipCounts, SkipWhy, SlotEntry, SlotHistory, Suspension,
};
pub use sync::MAX_UNLISTED_LOOKUPS;
pub use template::{CompactTemplate, EncodedSpec, JobTemplate, KEPT_TEMPLATE_BYTES};
pub use update::{AfterUpdate, after_update};
pub use view::{
    ConcurrencyPolicy, CronJobView, FailureReason, Finished, JobSummary, LAST_SCHEDULE_ANNOTATION,
    SCHEDULED_TIMESTAMP_ANNOTATION, SpecView, StatusView, ViewError, controller_in, controller_of,
    is_child_by_name,
};

use jiff::Timestamp;
use jiff::tz::TimeZone;

/// Everything one decision depends on.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub cronjob: &'a CronJobView,
    /// The Jobs this CronJob controls, as listed (the watch cache).
    pub children: &'a [JobSummary],
    /// The latest slot this controller knows a Job of this CronJob was made
    /// for, whether or not that Job still exists (the actor remembers the
    /// Jobs it created and saw). A status write lost after a create leaves
    /// `lastScheduleTime` behind it; see [`Decision::RecordedKnownSlot`].
    pub known_slot: Option<Timestamp>,
    pub now: Timestamp,
    /// The zone of schedules without `spec.timeZone` (upstream: the
    /// kube-controller-manager process zone; UTC unless configured).
    pub default_zone: &'a TimeZone,
}

/// What the decision needs next.
#[derive(Debug, Clone)]
pub enum Step {
    /// Answer these GETs in [`LiveAnswers`] and call [`reconcile`] again.
    Lookup(Vec<Lookup>),
    /// The plan (boxed: it is much larger than a list of lookups).
    Plan(Box<Plan>),
}

/// Why a Job is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteReason {
    /// A finished Job beyond `spec.successfulJobsHistoryLimit` /
    /// `spec.failedJobsHistoryLimit`. A failure does not block anything.
    HistoryLimit { finished: Finished, limit: i32 },
    /// `concurrencyPolicy: Replace`: a running Job makes way for the new one.
    /// A failure stops the remaining Replace deletes and the create.
    Replace,
}

/// A Job to delete (Background propagation, as upstream).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub why: DeleteReason,
}

impl Deletion {
    /// Whether a failure of this delete cancels the create.
    pub fn blocks_create(&self) -> bool {
        self.why == DeleteReason::Replace
    }
}

/// The Job to create for a slot (in the CronJob's namespace).
#[derive(Debug, Clone, PartialEq)]
pub struct JobToCreate {
    pub name: String,
    pub scheduled_time: Timestamp,
    /// When it was due to start: the slot, or later by the CronJob's
    /// spread offset.
    pub start_at: Timestamp,
    /// When it could first start: `start_at`, or later by a wait its spec
    /// asked for (the skew metric counts from here; see [`readiness`]).
    pub ready: Readiness,
    /// The object to send. Present in a [`Plan`]; the follow-up does not
    /// rebuild it.
    pub job: Option<NewJob>,
}

/// When to run the next decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requeue {
    /// At this instant (the slot itself).
    At(Timestamp),
    /// After a rate-limited backoff: the sync failed with this error
    /// (upstream's `AddRateLimited`).
    Backoff(ApiError),
    /// Not until something changes (a watch event): suspended, deleting,
    /// bad schedule or zone, a foreign Job holding the name, no later slot.
    Never,
}

/// The end result of a decision: what to record, write and arm.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The status upstream would send to UpdateStatus.
    pub status: StatusView,
    /// Upstream's `updateStatus` flag (cleanup's or sync's): write `status`
    /// when set. It is a flag, not a diff: for instance, a succeeded Job
    /// without completionTime sets it on every sync.
    pub status_changed: bool,
    /// The Events to record, in order.
    pub events: Vec<Event>,
    /// The next decision. If the status write fails, upstream retries with
    /// backoff instead (the requeue is dropped).
    pub requeue: Requeue,
}

impl Outcome {
    /// The status subresource to write, if upstream would write one.
    pub fn status_update(&self) -> Option<k8s_openapi::api::batch::v1::CronJobStatus> {
        self.status_changed.then(|| self.status.to_api())
    }

    /// The instant of the next decision, when it is a time.
    pub fn next_wakeup(&self) -> Option<Timestamp> {
        match self.requeue {
            Requeue::At(t) => Some(t),
            _ => None,
        }
    }
}

/// The writes to perform, and what follows if all of them succeed.
#[derive(Debug, Clone)]
pub struct Plan {
    /// In upstream's order: history (successful then failed, oldest first),
    /// then Replace.
    pub deletes: Vec<Deletion>,
    /// At most one Job, for the most recent due slot.
    pub create: Option<JobToCreate>,
    /// The outcome if every delete and the create succeed.
    pub expected: Outcome,
    /// The steps taken and their reasons, for people.
    pub decisions: Vec<Decision>,
    /// Held Jobs that are going and whose slot is (or is about to be)
    /// recorded: their [`SLOT_FINALIZER`] is removed last.
    pub releases: Vec<Release>,
    /// The streak of failed Jobs to write on the CronJob, and a pause
    /// (`shardcron.io/pause-after-failures`, see [`streak_update`]). A
    /// pausing plan starts nothing, as a suspended CronJob's.
    pub streak: Option<StreakUpdate>,
    /// The slot history to write on the CronJob, when this decision adds
    /// to it ([`SlotHistory`]).
    pub slot_history: Option<SlotHistory>,
}

impl Plan {
    /// Nothing to write and nothing to record: no delete, no create, no
    /// status change, no event.
    pub fn is_noop(&self) -> bool {
        self.deletes.is_empty()
            && self.create.is_none()
            && self.releases.is_empty()
            && !self.expected.status_changed
            && self.expected.events.is_empty()
            && self.streak.is_none()
            && self.slot_history.is_none()
    }

    /// The outcome once the plan's writes were made, from their results
    /// ([`follow_up`]). A plan that neither creates nor deletes has no
    /// result the decision reads: the follow-up would take the same steps
    /// to its expected outcome, so that is returned without running them
    /// again (an idle actor's decisions, most of them, run once, not
    /// three times).
    pub fn outcome(&self, input: &Input, live: &LiveAnswers, results: &EffectResults) -> Outcome {
        if self.deletes.is_empty() && self.create.is_none() {
            return self.expected.clone();
        }
        follow_up(input, live, results)
    }

    /// The write to the CronJob itself (not its status), if any: the
    /// streak (and a pause) and, `with_history`, the slot history, in one
    /// merge patch.
    pub fn cronjob_patch(&self, with_history: bool) -> Option<CronJobPatch> {
        let history = self.slot_history.as_ref().filter(|_| with_history);
        let mut patch = match &self.streak {
            Some(streak) => streak.patch(),
            None if history.is_some() => CronJobPatch {
                annotations: Vec::new(),
                suspend: false,
            },
            None => return None,
        };
        if let Some(history) = history {
            patch
                .annotations
                .push((SLOT_HISTORY_ANNOTATION, Some(history.to_json())));
        }
        Some(patch)
    }
}

/// Decides, or says which live GETs it needs first.
pub fn reconcile(input: &Input, live: &LiveAnswers) -> Step {
    match sync::run(input, live, None) {
        Err(lookups) => Step::Lookup(lookups),
        Ok(run) => Step::Plan(Box::new(Plan {
            releases: releases(
                input.cronjob,
                &run.status,
                run.status_changed,
                input.children,
            ),
            deletes: run.deletes,
            create: run.create,
            decisions: run.decisions,
            streak: run.streak,
            slot_history: run.slot_history,
            expected: Outcome {
                status: run.status,
                status_changed: run.status_changed,
                events: run.events,
                requeue: run.requeue,
            },
        })),
    }
}

/// The outcome once the plan's writes were made, from their results. Pass
/// the same input and answers the plan was made from.
///
/// The decision is re-run with the real results, so every consequence of a
/// failure is upstream's: a failed history delete leaves its Job in
/// `status.active` (and `SawCompletedJob` follows); a failed Replace delete
/// means no create and a backoff; AlreadyExists, NamespaceTerminating and
/// other create errors branch as upstream's `syncCronJob` does.
pub fn follow_up(input: &Input, live: &LiveAnswers, results: &EffectResults) -> Outcome {
    match sync::run(input, live, Some(results)) {
        Ok(run) => Outcome {
            status: run.status,
            status_changed: run.status_changed,
            events: run.events,
            requeue: run.requeue,
        },
        // The lookups were all answered when the plan was made; a caller that
        // changed them gets a retry rather than a guess.
        Err(_) => Outcome {
            status: input.cronjob.status.clone(),
            status_changed: false,
            events: Vec::new(),
            requeue: Requeue::Backoff(ApiError::new(
                "follow_up called with answers that do not match the plan",
            )),
        },
    }
}
