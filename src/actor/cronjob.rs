//! The actor of one CronJob: its compact state, its one timer, and the loop
//! "something changed or the slot came → decide → apply → re-arm".
//!
//! State is what the decision reads and nothing more: the [`CronJobView`]
//! (with the compiled spec behind an `Arc`, replaced only when the
//! generation changes), the resourceVersion for the status precondition,
//! and a [`JobSummary`] per child. At most one decision runs at a time; a
//! change that arrives meanwhile is folded into one more decision after it
//! (as upstream's work queue does for a key being processed).

use super::apply::{self, DecisionAftermath, Snapshot};
use super::runtime::{CellActor, CellContext};
use super::services::{ActorReport, ActorServices};
use super::timer::{self, MAX_SLEEP, Wake};
use super::wheel::{TimerWheel, WakeKey, Woken};
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::requests::JobRequests as _;
use crate::apiserver::resource_version::is_older;
use crate::reconcile::{
    AfterUpdate, CompactTime, CronJobView, FailureReason, Finished, JobSummary, Requeue,
    SkipReason, SpecView, after_update,
};
use crate::telemetry::cronjob_series::seconds;
use crate::telemetry::metrics::{OkLabel, SyncLabels};
use jiff::Timestamp;
use std::num::{NonZeroI64, NonZeroU32};
use std::sync::Arc;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

/// What the supervisor tells a CronJob's actor.
#[derive(Debug)]
pub enum Update {
    /// The initial lists are complete: decide for the first time.
    /// `ran_elsewhere`: another replica may have run its slots after this
    /// copy was read (the key moved off a live peer), so a slot due by now
    /// is created only after a fresh read of the CronJob (see
    /// `apply::confirm`).
    Start { ran_elsewhere: bool },
    /// The CronJob was added or changed.
    CronJob(Box<LeanCronJob>),
    /// A child Job was added or changed. `relisted`: it came from a re-list,
    /// where an unchanged Job is not news (upstream skips an update whose
    /// resourceVersion did not change).
    Job { job: JobSummary, relisted: bool },
    /// A child Job was deleted (or is no longer this CronJob's).
    JobGone { uid: String },
    /// Stop: the decision in flight, if any, finishes the request it has
    /// sent (and a status write recording a Job it created), abandons the
    /// rest, then the actor stops.
    Stop,
}

/// Everything a CronJob's actor handles.
#[derive(Debug)]
pub enum Mail {
    Update(Update),
    /// Its wake-up came ([`super::wheel`]).
    Woken(Woken),
    /// What it holds now (the admin API's `GetCronJob`).
    Inspect(oneshot::Sender<ActorState>),
    /// Its decision ended: what it did, and the resourceVersion it decided on.
    Decided(Box<(DecisionAftermath, Option<Box<str>>)>),
}

impl From<Update> for Mail {
    fn from(update: Update) -> Self {
        Self::Update(update)
    }
}

impl From<Woken> for Mail {
    fn from(woken: Woken) -> Self {
        Self::Woken(woken)
    }
}

pub struct CronJobActor {
    cronjob: CronJobView,
    /// Boxed, not a `String`: 8 bytes fewer in every actor (see
    /// `runtime::Mail`'s size class).
    resource_version: Option<Box<str>>,
    /// Not an `Option<i64>`: 8 bytes fewer (the server's generations start
    /// at 1; a 0 counts as none, which only compiles the spec again).
    generation: Option<NonZeroI64>,
    children: Vec<JobSummary>,
    /// The latest slot a Job of this CronJob is known to have been made
    /// for: from the Jobs created and seen, kept after they are deleted,
    /// so that a status write lost after a create cannot let the slot be
    /// started again once its Job is gone (see `reconcile::Input::known_slot`).
    known_slot: CompactTime,
    /// Until a fresh read: slots due at or before its start may have been
    /// run elsewhere ([`Update::Start`]). A second of the Unix epoch in 4
    /// bytes (through 2106), not a [`CompactTime`]: 8 bytes more would
    /// move the actor out of its allocator size class (see
    /// `a_cronjob_actor_fits_its_allocator_size_class`).
    confirm_through: Option<NonZeroU32>,
    services: Arc<ActorServices>,
    /// Where it arms its wake-ups: the replica's one wheel (held here, not
    /// in [`ActorServices`], as its type names this actor's).
    wheel: TimerWheel<CronJobActor>,
    life: Life,
    /// Consecutive failed decisions (upstream's per-item exponential
    /// backoff, at its cap long before 65,535): 16 bits, so that the flag
    /// below fits beside it and the cell in its size class.
    failures: u16,
    /// `cronjob.status` is what a decision meant to write and gave way,
    /// not the server's (see [`Snapshot::status_unwritten`]).
    status_unwritten: bool,
}

/// Where an actor is in its life: one of these at a time.
#[derive(Debug)]
enum Life {
    /// Made with its CronJob and children; decides nothing until the
    /// supervisor's first lists are complete ([`Update::Start`]).
    NotStarted,
    /// Between decisions, its wake-up armed on the replica's timer wheel
    /// (none: nothing to wait for until something changes).
    Idle { timer: Option<WakeKey> },
    /// A decision is being carried out. `again`: something changed
    /// meanwhile, so one more decision follows it. `stop` abandons the
    /// requests it has not sent yet (see [`Snapshot::stop`]): made per
    /// decision, so an idle actor holds none (memory). `job_ended`: one of
    /// its Jobs ended meanwhile (see [`Snapshot::job_ended`]). `first`: no
    /// decision has finished yet (its end reports the actor armed:
    /// readiness).
    Deciding {
        stop: CancellationToken,
        job_ended: CancellationToken,
        again: bool,
        first: bool,
    },
    /// Told to stop: ends when the decision in flight (if any) does; takes
    /// no more updates. `next_look`: when it would next have needed its
    /// controller, for its stop report ([`ActorReport::Stopped`]).
    Stopping {
        first: bool,
        next_look: Option<Timestamp>,
    },
}

impl CronJobActor {
    /// `known_slot`: what an earlier actor of this CronJob in this process
    /// knew and the status did not record (see [`ActorReport::Stopped`]).
    pub fn new(
        cronjob: &LeanCronJob,
        children: Vec<JobSummary>,
        known_slot: Option<Timestamp>,
        services: Arc<ActorServices>,
        wheel: TimerWheel<CronJobActor>,
    ) -> Result<Self, crate::reconcile::ViewError> {
        let view = cronjob.view(Arc::new(cronjob.spec_view()))?;
        let listed: Vec<Option<Timestamp>> = children.iter().map(|c| c.scheduled).collect();
        let mut actor = Self {
            cronjob: view,
            resource_version: cronjob.metadata.resource_version.as_deref().map(Box::from),
            generation: cronjob.metadata.generation.and_then(NonZeroI64::new),
            children,
            known_slot: known_slot.into(),
            confirm_through: None,
            services,
            wheel,
            life: Life::NotStarted,
            failures: 0,
            status_unwritten: false,
        };
        for slot in listed {
            actor.know_slot(slot);
        }
        Ok(actor)
    }

    /// The same actor, holding the replica's allocation of its key and UID
    /// instead of its own ([`CronJobView::sharing`]).
    pub fn sharing(mut self, key: &Arc<str>, uid: &Arc<str>) -> Self {
        self.cronjob = self.cronjob.sharing(key, uid);
        self
    }

    /// Its key ([`crate::reconcile::CronJobKind::key`]).
    fn key(&self) -> &Arc<str> {
        &self.cronjob.key
    }

    /// Takes in a new version of the CronJob; returns the spec it replaced.
    /// Our own status write coming back through the watch changes nothing,
    /// and neither does an older version than the one held (a re-list from
    /// a lagging cache must not move the status, `lastScheduleTime` above
    /// all, backwards).
    fn absorb(&mut self, cronjob: &LeanCronJob) -> Option<Arc<SpecView>> {
        let version = &cronjob.metadata.resource_version;
        if version.is_some() && version.as_deref() == self.resource_version.as_deref() {
            return None;
        }
        if let (Some(new), Some(held)) = (version, &self.resource_version)
            && is_older(new, held)
        {
            return None;
        }
        let generation = cronjob.metadata.generation.and_then(NonZeroI64::new);
        let spec = if generation.is_some() && generation == self.generation {
            self.cronjob.spec.clone()
        } else {
            Arc::new(cronjob.spec_view())
        };
        match cronjob.view(spec) {
            Ok(view) => {
                let view = view.sharing(&self.cronjob.key, &self.cronjob.uid);
                // The server's status now: a slot an unwritten status
                // recorded is the known slot's to record.
                self.status_unwritten = false;
                self.resource_version = version.as_deref().map(Box::from);
                self.generation = generation;
                Some(std::mem::replace(&mut self.cronjob, view).spec)
            }
            Err(error) => {
                tracing::warn!(cronjob = %self.key(), %error, "ignoring an unusable CronJob version");
                None
            }
        }
    }

    fn on_cronjob(&mut self, cronjob: &LeanCronJob, ctx: &mut CellContext<'_, Self>) {
        let Some(old_spec) = self.absorb(cronjob) else {
            return;
        };
        if matches!(self.life, Life::NotStarted) {
            return;
        }
        match after_update(
            &old_spec,
            &self.cronjob,
            self.now(),
            &self.services.default_zone,
        ) {
            AfterUpdate::Now => self.decide(ctx, None),
            AfterUpdate::At(at) => self.arm_no_later(at, ctx),
            AfterUpdate::Never => {}
            AfterUpdate::Unparseable(event) => self
                .services
                .gateway
                .record(crate::reconcile::regarding(&self.cronjob), &event),
        }
    }

    fn on_job(&mut self, job: JobSummary, relisted: bool, ctx: &mut CellContext<'_, Self>) {
        self.know_slot(job.scheduled);
        let ended = job.finished.is_some();
        let ended_now = match self.children.iter_mut().find(|c| c.uid == job.uid) {
            Some(known) if relisted && *known == job => return,
            Some(known) => {
                let ended_now = ended && known.finished.is_none();
                *known = job;
                ended_now
            }
            None => {
                self.children.push(job);
                ended
            }
        };
        if ended_now && let Life::Deciding { job_ended, .. } = &self.life {
            job_ended.cancel();
        }
        if !matches!(self.life, Life::NotStarted) {
            self.decide(ctx, None);
        }
    }

    fn on_job_gone(&mut self, uid: &str, ctx: &mut CellContext<'_, Self>) {
        let before = self.children.len();
        self.children.retain(|c| c.uid != uid);
        if !matches!(self.life, Life::NotStarted) && self.children.len() != before {
            self.decide(ctx, None);
        }
    }

    /// Remembers a slot a Job was made for. A slot more than a minute
    /// ahead of this clock is no firing of ours or a peer's (only a
    /// hand-made Job can claim one) and would hide the real ones after it.
    fn know_slot(&mut self, slot: Option<Timestamp>) {
        let horizon = self.now().checked_add(jiff::SignedDuration::from_secs(60));
        let plausible = slot.filter(|slot| horizon.is_ok_and(|h| *slot <= h));
        self.known_slot = self.known_slot.max(plausible.into());
    }

    /// The time on the actor's clock ([`ActorServices::clock`]).
    fn now(&self) -> Timestamp {
        self.services.clock.now()
    }

    /// Runs a decision now, or right after the one in flight. `due`: the
    /// slot the timer fired for: that decision is a firing (`cronjob.fire`),
    /// others are reconciles.
    fn decide(&mut self, ctx: &mut CellContext<'_, Self>, due: Option<Timestamp>) {
        let first = match &mut self.life {
            Life::Deciding { again, .. } => {
                *again = true;
                return;
            }
            Life::Stopping { .. } => return,
            Life::NotStarted => true,
            Life::Idle { .. } => {
                self.disarm();
                false
            }
        };
        let services = self.services.clone();
        let stop = CancellationToken::new();
        let job_ended = CancellationToken::new();
        self.life = Life::Deciding {
            stop: stop.clone(),
            job_ended: job_ended.clone(),
            again: false,
            first,
        };
        let snapshot = Snapshot {
            due,
            cronjob: self.cronjob.clone(),
            resource_version: self.resource_version.clone(),
            children: self.children.clone(),
            known_slot: self.known_slot.get(),
            confirm_through: self
                .confirm_through
                .and_then(|second| Timestamp::from_second(i64::from(second.get())).ok()),
            stop,
            job_ended,
            status_unwritten: self.status_unwritten,
        };
        let decision = async move {
            let applied = apply::decide_and_apply(&services, &snapshot).await;
            Mail::Decided(Box::new((applied, snapshot.resource_version)))
        };
        ctx.spawn(decision);
    }

    fn finish(
        &mut self,
        applied: DecisionAftermath,
        decided_at: Option<Box<str>>,
        ctx: &mut CellContext<'_, Self>,
    ) {
        let (again, first, stopping) =
            match std::mem::replace(&mut self.life, Life::Idle { timer: None }) {
                Life::Deciding { again, first, .. } => (again, first, false),
                Life::Stopping { first, .. } => (false, first, true),
                Life::NotStarted | Life::Idle { .. } => (false, false, false),
            };
        // A CronJob event that came in meanwhile is newer than what we wrote.
        if let Some((status, version)) = applied.written_status
            && self.resource_version == decided_at
        {
            self.cronjob.status = status;
            self.resource_version = version.map(String::into_boxed_str);
            self.status_unwritten = false;
        }
        // Kept for the next decision to write, unless a newer CronJob came
        // meanwhile: that one decides from the server's status and the
        // known slot.
        if let Some(status) = applied.unwritten_status
            && self.resource_version == decided_at
        {
            self.cronjob.status = status;
            self.status_unwritten = true;
        }
        if let Some(fresh) = applied.reread {
            self.absorb(&fresh);
        }
        if applied.confirmed {
            self.confirm_through = None;
        }
        self.children.retain(|c| !applied.deleted.contains(&c.uid));
        if let Some(created) = applied.created {
            self.know_slot(created.scheduled);
            if !self.children.iter().any(|c| c.uid == created.uid) {
                self.children.push(created);
            }
        }
        if !stopping {
            self.record_series(&applied.requeue, applied.skipped);
        }
        let result = match applied.requeue {
            Requeue::Backoff(_) => OkLabel::failed,
            _ => OkLabel::ok,
        };
        self.services
            .metrics
            .syncs
            .get_or_create(&SyncLabels { result })
            .inc();
        if first {
            self.services.reports.do_send(ActorReport::Armed {
                key: self.key().clone(),
            });
        }
        if stopping {
            // Nothing more to arm or decide: the actor ends here.
            let next_look = match applied.requeue {
                Requeue::At(at) => Some(at),
                Requeue::Never => None,
                Requeue::Backoff(_) => Some(self.now()),
            };
            self.life = Life::Stopping {
                first: false,
                next_look,
            };
            ctx.stop();
            return;
        }
        match applied.requeue {
            Requeue::At(at) => {
                self.failures = 0;
                self.arm(at, ctx);
            }
            Requeue::Backoff(error) => {
                self.failures = self.failures.saturating_add(1);
                let delay = timer::failure_backoff(u32::from(self.failures));
                tracing::warn!(cronjob = %self.key(), %error, ?delay, "decision failed; retrying");
                let at = self.now().checked_add(delay).unwrap_or(Timestamp::MAX);
                self.arm(at, ctx);
            }
            Requeue::Never => self.failures = 0,
        }
        if again {
            self.decide(ctx, None);
        }
    }

    /// The per-CronJob metrics after a decision: the status as now held,
    /// the wake-up armed (a failed decision keeps the one before), the
    /// latest failure among the children, a skipped slot.
    fn record_series(&self, requeue: &Requeue, skipped: Option<(SkipReason, Timestamp)>) {
        // `None`: keep the wake-up recorded before.
        let next = match requeue {
            Requeue::At(at) => Some(Some(*at)),
            Requeue::Never => Some(None),
            Requeue::Backoff(_) => None,
        };
        let status = &self.cronjob.status;
        let last_failed = self
            .children
            .iter()
            .filter(|c| c.finished == Some(Finished::Failed))
            .filter_map(|c| Some((c.failed_at?, c.failure_reason)))
            .max_by_key(|(at, _)| *at);
        let suspended = self.cronjob.spec.suspend;
        self.services.metrics.cronjobs.update(self.key(), |record| {
            if let Some(next) = next {
                record.next_schedule = seconds(next);
            }
            record.last_schedule = seconds(status.last_schedule_time.get());
            record.settle(record.last_schedule);
            record.last_successful = seconds(status.last_successful_time.get());
            if let Some((at, reason)) = last_failed
                && seconds(Some(at)) >= record.last_failed
            {
                record.last_failed = seconds(Some(at));
                record.last_failed_reason = failure_reason_label(reason);
            }
            record.active = u16::try_from(status.active.len()).unwrap_or(u16::MAX);
            record.set_suspended(suspended);
            if let Some((reason, slot)) = skipped {
                record.skip(reason.as_str(), slot);
            }
        });
    }

    /// Takes its wake-up, if it is idle with one, off the wheel.
    fn disarm(&mut self) {
        if let Life::Idle { timer } = &mut self.life
            && let Some(key) = timer.take()
        {
            self.wheel.disarm(key);
        }
    }

    /// Arms the timer for `at`, replacing any earlier arming.
    /// Only an idle actor has a timer: one deciding decides again after
    /// (and arms then), one stopping arms nothing.
    fn arm(&mut self, at: Timestamp, ctx: &mut CellContext<'_, Self>) {
        match &mut self.life {
            Life::Idle { .. } => self.disarm(),
            Life::Deciding { again, .. } => {
                *again = true;
                return;
            }
            Life::NotStarted | Life::Stopping { .. } => return,
        }
        match timer::next_step(at, self.now(), MAX_SLEEP) {
            Wake::Due => self.decide(ctx, Some(at)),
            Wake::Sleep(_) => {
                let key = self.wheel.arm(at, ctx.weak_cell_ref());
                if let Life::Idle { timer } = &mut self.life {
                    *timer = Some(key);
                }
            }
        }
    }

    /// Arms the timer for `at` unless it is armed for an earlier instant
    /// (upstream's `AddAfter` keeps the earlier time).
    fn arm_no_later(&mut self, at: Timestamp, ctx: &mut CellContext<'_, Self>) {
        match &self.life {
            Life::Idle { timer: Some(armed) } if armed.at() <= at => {}
            _ => self.arm(at, ctx),
        }
    }
}

impl CellActor for CronJobActor {
    type Message = Mail;

    fn receive(&mut self, mail: Mail, ctx: &mut CellContext<'_, Self>) {
        match mail {
            Mail::Update(update) => self.on_update(update, ctx),
            Mail::Woken(Woken(key)) => self.on_woken(key, ctx),
            Mail::Inspect(reply) => {
                // The asker may have given up: nothing to do then.
                let _ = reply.send(self.inspect());
            }
            Mail::Decided(decided) => {
                let (applied, version) = *decided;
                self.finish(applied, version, ctx);
            }
        }
    }

    fn ended(&mut self) {
        let next_look = self.next_look();
        // Stopped otherwise than by `Update::Stop` (its thread ending), too.
        self.disarm();
        let status = &self.cronjob.status;
        let unrecorded = self
            .known_slot
            .get()
            .filter(|slot| self.status_unwritten || status.does_not_record(*slot));
        // Its series go with it: the next owner exports them.
        self.services.metrics.cronjobs.remove(self.key());
        self.services.reports.do_send(ActorReport::Stopped {
            key: self.key().clone(),
            uid: self.cronjob.uid.clone(),
            unrecorded,
            next_look,
        });
    }
}

impl CronJobActor {
    fn on_update(&mut self, update: Update, ctx: &mut CellContext<'_, Self>) {
        if matches!(self.life, Life::Stopping { .. }) {
            return;
        }
        match update {
            Update::Start { ran_elsewhere } => {
                if matches!(self.life, Life::NotStarted) {
                    if ran_elsewhere {
                        // Past 2106, every slot is read again first.
                        let second = u32::try_from(self.now().as_second()).unwrap_or(u32::MAX);
                        self.confirm_through = NonZeroU32::new(second);
                    }
                    self.decide(ctx, None);
                }
            }
            Update::CronJob(cronjob) => self.on_cronjob(&cronjob, ctx),
            Update::Job { job, relisted } => self.on_job(job, relisted, ctx),
            Update::JobGone { uid } => self.on_job_gone(&uid, ctx),
            Update::Stop => match &self.life {
                Life::Deciding { stop, first, .. } => {
                    stop.cancel();
                    // Replaced by the decision's own requeue when it ends.
                    self.life = Life::Stopping {
                        first: *first,
                        next_look: self.next_look(),
                    };
                }
                _ => {
                    let next_look = self.next_look();
                    // Its wake-up goes now: `stopped` sees it Stopping, and
                    // the wheel would keep a dead actor's entry until its
                    // instant (days, for a weekly CronJob).
                    self.disarm();
                    self.life = Life::Stopping {
                        first: false,
                        next_look,
                    };
                    ctx.stop();
                }
            },
        }
    }

    /// When it would next need its controller, as far as it knows: its
    /// armed wake-up; now while it decides or before its first decision.
    fn next_look(&self) -> Option<Timestamp> {
        match &self.life {
            Life::Stopping { next_look, .. } => *next_look,
            Life::Idle { timer } => timer.as_ref().map(WakeKey::at),
            Life::NotStarted | Life::Deciding { .. } => Some(self.now()),
        }
    }

    /// Its wake-up came (the wheel sends it at or after its instant): it
    /// arms again for the same instant, which decides now unless the wall
    /// clock was stepped back meanwhile. A key it no longer holds (armed
    /// again, or deciding) is stale.
    fn on_woken(&mut self, key: WakeKey, ctx: &mut CellContext<'_, Self>) {
        if let Life::Idle { timer } = &mut self.life
            && *timer == Some(key)
        {
            *timer = None;
            self.arm(key.at(), ctx);
        }
    }
}

/// An actor's live state: a copy, small, made on request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActorState {
    /// The armed wake-up (the next slot plus any spread offset, or a retry).
    pub next_wakeup: Option<Timestamp>,
    pub last_schedule_time: Option<Timestamp>,
    pub last_successful_time: Option<Timestamp>,
    pub active_jobs: Vec<String>,
    pub suspended: bool,
    /// The Jobs of the CronJob it knows.
    pub children: usize,
    /// A decision is being carried out.
    pub deciding: bool,
    /// What it would decide now, step by step (a dry run of the decision
    /// on what it holds: nothing is written).
    pub would_decide: Vec<String>,
}

impl CronJobActor {
    /// What it holds now ([`Mail::Inspect`]).
    fn inspect(&self) -> ActorState {
        let status = &self.cronjob.status;
        ActorState {
            next_wakeup: match &self.life {
                Life::Idle { timer: Some(key) } => Some(key.at()),
                _ => None,
            },
            last_schedule_time: status.last_schedule_time.get(),
            last_successful_time: status.last_successful_time.get(),
            active_jobs: status
                .active
                .iter()
                .filter_map(|reference| reference.name.clone())
                .collect(),
            suspended: self.cronjob.spec.suspend,
            children: self.children.len(),
            deciding: matches!(self.life, Life::Deciding { .. } | Life::Stopping { .. }),
            would_decide: self.dry_run(self.now()),
        }
    }

    /// The decision it would make at `now`, as text, without writing.
    fn dry_run(&self, now: Timestamp) -> Vec<String> {
        let input = crate::reconcile::Input {
            cronjob: &self.cronjob,
            children: &self.children,
            known_slot: self.known_slot.get(),
            now,
            default_zone: &self.services.default_zone,
        };
        match crate::reconcile::reconcile(&input, &crate::reconcile::LiveAnswers::new()) {
            crate::reconcile::Step::Plan(plan) => {
                plan.decisions.iter().map(ToString::to_string).collect()
            }
            crate::reconcile::Step::Lookup(lookups) => lookups
                .iter()
                .map(|lookup| format!("first a live read: {lookup:?}"))
                .collect(),
        }
    }
}

/// The index of `reason` in the metrics' `FAILURE_REASONS` (0: none).
fn failure_reason_label(reason: Option<FailureReason>) -> u8 {
    reason.map_or(0, |reason| {
        FailureReason::ALL
            .iter()
            .position(|r| *r == reason)
            .map_or(0, |i| i as u8 + 1)
    })
}
