//! Upstream's `sync()` and `syncCronJob()`, step for step, as a pure
//! function of the input, the live answers and the results of the writes.
//!
//! The same function computes the plan (writes not yet done: each is taken
//! as successful) and the follow-up (with their real results). Running it
//! twice rather than patching the plan keeps every consequence of a failed
//! write exact: a history delete that fails leaves its Job in
//! `status.active`, which later yields a `SawCompletedJob`; a Replace delete
//! that fails stops the create; and so on, as in upstream's sequence.

use super::decision::Decision;
use super::events::Event;
use super::history::{self, OverHistoryLimit};
use super::job::{active_reference, build_job_in, job_name, run_now_job_name};
use super::lateness::{Readiness, readiness};
use super::live::{ApiError, CreateResult, EffectResults, JobLookup, LiveAnswers, Lookup};
use super::options::{
    InvalidOption, RUN_NOW_ANNOTATION, RUN_NOW_DEADLINE_SECONDS, RUN_NOW_MAX_AHEAD_SECONDS,
    RUN_NOW_MIN_INTERVAL_SECONDS,
};
use super::pause::{self, Pause, StreakUpdate};
use super::slot_fates::{SlotFacts, Unstarted, slot_history_update};
use super::slot_history::SlotHistory;
use super::view::{CronJobView, JobSummary, ref_name, ref_namespace, ref_uid};
use super::{ConcurrencyPolicy, DeleteReason, Deletion, Input, JobToCreate, Requeue, StatusView};
use crate::schedule::slots::{Missed, Slots};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use std::collections::HashSet;

/// At most this many entries of `status.active` that are not among the
/// CronJob's known children are looked up in one decision; the rest are
/// dropped. Legitimate ones are Jobs created moments ago whose watch event
/// has not arrived (after a hand-off or a restart): a few at most.
pub const MAX_UNLISTED_LOOKUPS: usize = 10;

const NOT_CONTROLLED: &str = "it is not a Job controlled by this CronJob";

/// Everything one run decided.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    pub deletes: Vec<Deletion>,
    pub create: Option<JobToCreate>,
    pub events: Vec<Event>,
    pub decisions: Vec<Decision>,
    /// The status upstream would send to UpdateStatus.
    pub status: StatusView,
    /// Upstream's `updateStatusAfterCleanup || updateStatusAfterSync`.
    pub status_changed: bool,
    pub requeue: Requeue,
    /// The streak of failed Jobs to write, and a pause ([`super::pause`]).
    pub streak: Option<StreakUpdate>,
    /// The slot history to write ([`super::slot_history`]).
    pub slot_history: Option<SlotHistory>,
}

/// Where `syncCronJob` returned.
enum Exit {
    Requeue(Requeue),
    NeedLookups(Vec<Lookup>),
}

struct Engine<'a> {
    input: &'a Input<'a>,
    live: &'a LiveAnswers,
    /// `None` while planning: every write is taken as successful.
    results: Option<&'a EffectResults>,
    /// The object mutated by the sync: the CronJob read, or the live copy
    /// after a switch.
    cj: CronJobView,
    /// The status of the object upstream passes to UpdateStatus, frozen when
    /// the sync switched to a live copy.
    written: Option<StatusView>,
    update_status: bool,
    deletes: Vec<Deletion>,
    create: Option<JobToCreate>,
    events: Vec<Event>,
    decisions: Vec<Decision>,
    /// The pause this decision makes: it starts nothing, as if suspended.
    pausing: Option<&'a Pause>,
    /// Slots found never started before the one decided on.
    unstarted: Option<Unstarted>,
}

pub(crate) fn run(
    input: &Input,
    live: &LiveAnswers,
    results: Option<&EffectResults>,
) -> Result<Run, Vec<Lookup>> {
    let streak = pause::streak_update(input.cronjob, input.children, input.now);
    let mut engine = Engine {
        input,
        live,
        results,
        cj: input.cronjob.clone(),
        written: None,
        update_status: false,
        deletes: Vec::new(),
        create: None,
        events: Vec::new(),
        decisions: Vec::new(),
        pausing: streak.as_ref().and_then(|update| update.pause.as_ref()),
        unstarted: None,
    };
    engine.record_known_slot();
    // sync(): history first, then the schedule (upstream tests this order).
    engine.cleanup_finished_jobs();
    let requeue = match engine.sync_cron_job() {
        Exit::Requeue(requeue) => requeue,
        Exit::NeedLookups(lookups) => return Err(lookups),
    };
    match requeue {
        Requeue::At(t) => engine.decisions.push(Decision::WakeAt(t)),
        Requeue::Never if engine.decisions.last() == Some(&Decision::NothingDue) => {
            engine.decisions.push(Decision::NoWakeup)
        }
        _ => {}
    }
    // A newer release's history is kept as it is, not overwritten with less.
    let slot_history = (!input.cronjob.options.history_of_a_newer_release)
        .then(|| {
            slot_history_update(
                input.cronjob.options.history.as_deref(),
                &input.cronjob.spec.concurrency_policy,
                input.cronjob.spec.suspend,
                input.children,
                &engine.decisions,
                SlotFacts {
                    unstarted: engine.unstarted,
                },
                input.now,
            )
        })
        .flatten();
    Ok(Run {
        slot_history,
        deletes: engine.deletes,
        create: engine.create,
        events: engine.events,
        decisions: engine.decisions,
        status: engine.written.unwrap_or(engine.cj.status),
        status_changed: engine.update_status,
        requeue,
        streak,
    })
}

impl Engine<'_> {
    fn delete_failure(&self, job: &str) -> Option<&ApiError> {
        self.results?.delete_failures.get(job)
    }

    /// Upstream's `deleteJob`: the write, then on success the active entry
    /// (by the Job's UID) and `SuccessfulDelete`; on failure `FailedDelete`.
    fn delete_job(&mut self, namespace: &str, name: &str, uid: &str, why: DeleteReason) -> bool {
        self.deletes.push(Deletion {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            why,
        });
        if self
            .results
            .is_some_and(|r| r.deletes_not_sent.contains(name))
        {
            return false;
        }
        if let Some(error) = self.delete_failure(name).cloned() {
            self.events.push(Event::failed_delete(&error.message));
            self.decisions.push(Decision::DeleteFailed {
                job: name.to_owned(),
                error: error.message,
            });
            return false;
        }
        self.cj.status.remove_uid(uid);
        self.events.push(Event::successful_delete(name));
        true
    }

    /// Before anything else: a Job known to have been made for a slot later
    /// than `lastScheduleTime`, and no longer running, means the status
    /// write that followed its create was lost (a replica fenced or stopped
    /// between the two, a failed write). The Job's name stops being a lock
    /// as soon as the Job is deleted (history limit 0,
    /// `ttlSecondsAfterFinished`), so the status must record the slot or it
    /// would be started again (a TTL controller's delete waits for that:
    /// see [`super::SLOT_FINALIZER`]). A Job still running is left to upstream's
    /// own path (the live GET of the CronJob, then the create's
    /// AlreadyExists records it as active), which also tells a stale read
    /// from a lost write. Known slots later than `now` are ignored: only a
    /// hand-made Job can claim one, and it must not make the CronJob skip
    /// real slots.
    fn record_known_slot(&mut self) {
        let input = self.input;
        let now = input.now;
        // A Job being deleted has ended, whether or not it finished: a
        // held one waits only for its slot to be recorded.
        let ended = |job: &&JobSummary| job.finished.is_some() || job.deleting;
        let running: Vec<Timestamp> = input
            .children
            .iter()
            .filter(|job| !ended(job))
            .filter_map(|job| job.scheduled)
            .collect();
        let finished = input
            .children
            .iter()
            .filter(ended)
            .filter_map(|job| job.scheduled);
        let remembered = input.known_slot.filter(|slot| !running.contains(slot));
        let Some(slot) = finished
            .chain(remembered)
            .filter(|slot| *slot <= now && self.cj.status.does_not_record(*slot))
            .max()
        else {
            return;
        };
        self.cj.status.last_schedule_time = slot.into();
        self.update_status = true;
        self.decisions.push(Decision::RecordedKnownSlot { slot });
    }

    fn cleanup_finished_jobs(&mut self) {
        let input = self.input;
        let doomed = history::over_limit(&input.cronjob.spec, input.children);
        for (job, OverHistoryLimit { finished, limit }) in doomed {
            self.decisions.push(Decision::HistoryDelete {
                job: job.name.clone(),
                finished,
                limit,
            });
            let namespace = input.cronjob.namespace();
            if self.delete_job(
                namespace,
                &job.name,
                &job.uid,
                DeleteReason::HistoryLimit { finished, limit },
            ) {
                self.update_status = true;
            }
        }
    }

    fn sync_cron_job(&mut self) -> Exit {
        if let Some(exit) = self.reconcile_children() {
            return exit;
        }
        if let Some(exit) = self.reconcile_missing_active() {
            return exit;
        }
        self.schedule()
    }

    /// The first loop of `syncCronJob`: each listed child against `status.active`.
    fn reconcile_children(&mut self) -> Option<Exit> {
        for job in self.input.children {
            let found = self.cj.status.has_uid(&job.uid);
            match job.finished {
                // Going (a held Job waiting for its slot's record, a Job
                // Replace deleted): not adopted as unexpected. Upstream
                // never sees one linger.
                None if !found && job.deleting => {}
                None if !found => {
                    let Some(answer) = self.live.cronjob() else {
                        return Some(Exit::NeedLookups(vec![Lookup::CronJob {
                            namespace: self.cj.namespace().to_owned(),
                            name: self.cj.name().to_owned(),
                        }]));
                    };
                    match answer {
                        Err(error) => {
                            return Some(self.fail_lookup(
                                format!("cronjob {}", self.cj.name()),
                                error.clone(),
                            ));
                        }
                        Ok(live) if live.status.has_uid(&job.uid) => {
                            // Upstream: `cronJob = cjCopy`. Later changes go
                            // to the live copy, UpdateStatus gets the first.
                            let first = std::mem::replace(&mut self.cj, live.clone());
                            self.written.get_or_insert(first.status);
                            self.decisions.push(Decision::SwitchedToLiveCronJob {
                                job: job.name.clone(),
                            });
                            // The live copy must not start a known slot either.
                            self.record_known_slot();
                        }
                        Ok(_) => {
                            self.events.push(Event::unexpected_job(&job.name));
                            self.decisions.push(Decision::Unexpected {
                                job: job.name.clone(),
                            });
                        }
                    }
                }
                None => {}
                Some(finished) => {
                    if found {
                        self.cj.status.remove_uid(&job.uid);
                        self.events
                            .push(Event::saw_completed_job(&job.name, finished.as_str()));
                        self.decisions.push(Decision::SawCompleted {
                            job: job.name.clone(),
                            finished,
                        });
                        self.update_status = true;
                    }
                    if job.succeeded {
                        self.note_success(job);
                    }
                }
            }
        }
        None
    }

    /// lastSuccessfulTime: the latest completionTime of a succeeded child.
    /// Upstream sets the flag whenever the field is unset, even to another
    /// unset value (a succeeded Job without completionTime).
    fn note_success(&mut self, job: &JobSummary) {
        let status = &mut self.cj.status;
        let mut changed = false;
        if status.last_successful_time.is_none() {
            status.last_successful_time = job.completion_time.into();
            changed = true;
        }
        if let (Some(done), Some(last)) = (job.completion_time, status.last_successful_time.get())
            && done > last
        {
            status.last_successful_time = done.into();
            changed = true;
        }
        if changed {
            self.update_status = true;
            self.decisions.push(Decision::LastSuccessful {
                job: job.name.clone(),
                time: status.last_successful_time.get(),
            });
        }
    }

    /// The second loop: active entries that are not among the children.
    ///
    /// A departure from upstream, which looks up every such entry wherever
    /// it points and keeps it if anything by that name exists: an entry in
    /// another namespace, an entry past the first [`MAX_UNLISTED_LOOKUPS`],
    /// or one whose Job is not controlled by this CronJob is dropped with a
    /// `ForeignActiveJob` warning. Whoever may write `cronjobs/status` could
    /// otherwise make the controller look up, and with Replace delete, any
    /// Job in the cluster, one GET per entry.
    fn reconcile_missing_active(&mut self) -> Option<Exit> {
        let children: HashSet<&str> = self.input.children.iter().map(|j| j.uid.as_str()).collect();
        let mut unlisted = Vec::new();
        let mut foreign = Vec::new();
        for reference in &self.cj.status.active {
            if children.contains(ref_uid(reference)) {
                continue;
            }
            if ref_namespace(reference) != self.cj.namespace() {
                foreign.push((reference.clone(), "it is in another namespace"));
            } else if unlisted.len() == MAX_UNLISTED_LOOKUPS {
                foreign.push((reference.clone(), "too many entries are unknown Jobs"));
            } else {
                unlisted.push(reference.clone());
            }
        }
        self.drop_foreign(foreign);
        if let Some(exit) = self.ask_jobs(&unlisted) {
            return Some(exit);
        }
        let mut foreign = Vec::new();
        for reference in &unlisted {
            let name = ref_name(reference);
            match self.live.job(ref_namespace(reference), name) {
                Some(JobLookup::Found(job)) if !self.controls(job, reference) => {
                    foreign.push((reference.clone(), NOT_CONTROLLED));
                }
                Some(JobLookup::NotFound) => {
                    self.events.push(Event::missing_job(name));
                    self.decisions.push(Decision::Missing {
                        job: name.to_owned(),
                    });
                    self.cj.status.remove_uid(ref_uid(reference));
                    self.update_status = true;
                }
                Some(JobLookup::Failed(error)) => {
                    return Some(self.fail_lookup(format!("job {name}"), error.clone()));
                }
                Some(JobLookup::Found(_)) | None => {
                    self.decisions.push(Decision::StillExists {
                        job: name.to_owned(),
                    });
                }
            }
        }
        self.drop_foreign(foreign);
        None
    }

    /// Whether `job` (a live answer for `reference`) is this CronJob's: it
    /// is in the CronJob's namespace, its controller is this CronJob, and
    /// it is the object the entry names (UID), not a namesake.
    fn controls(&self, job: &super::live::LiveJob, reference: &ObjectReference) -> bool {
        job.namespace == self.cj.namespace()
            && job.controller_uid.as_deref() == Some(&*self.cj.uid)
            && (ref_uid(reference).is_empty() || job.uid == ref_uid(reference))
    }

    /// Removes entries of `status.active` that are not this CronJob's Jobs,
    /// with one `ForeignActiveJob` warning for all of them (a tenant can
    /// write thousands).
    fn drop_foreign(&mut self, foreign: Vec<(ObjectReference, &str)>) {
        let Some((first, why)) = foreign.first() else {
            return;
        };
        let more = match foreign.len() - 1 {
            0 => String::new(),
            n => format!(" (and {n} more entries)"),
        };
        self.events.push(Event::foreign_active_job(
            ref_namespace(first),
            ref_name(first),
            &format!("{why}{more}"),
        ));
        for (reference, why) in &foreign {
            self.decisions.push(Decision::ForeignActive {
                namespace: ref_namespace(reference).to_owned(),
                job: ref_name(reference).to_owned(),
                why: (*why).to_owned(),
            });
            self.cj.status.active.retain(|r| r != reference);
        }
        self.update_status = true;
    }

    /// The GETs of these active Jobs that have no answer yet, if any.
    fn ask_jobs(&self, references: &[k8s_openapi::api::core::v1::ObjectReference]) -> Option<Exit> {
        let mut asks: Vec<Lookup> = Vec::new();
        for reference in references {
            let (namespace, name) = (ref_namespace(reference), ref_name(reference));
            let ask = Lookup::Job {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            };
            if self.live.job(namespace, name).is_none() && !asks.contains(&ask) {
                asks.push(ask);
            }
        }
        (!asks.is_empty()).then_some(Exit::NeedLookups(asks))
    }

    fn fail_lookup(&mut self, what: String, error: ApiError) -> Exit {
        self.decisions.push(Decision::LookupFailed {
            what,
            error: error.message.clone(),
        });
        Exit::Requeue(Requeue::Backoff(error))
    }

    /// The gates and the start decision, after the active list is settled.
    fn schedule(&mut self) -> Exit {
        let input = self.input;
        let spec = self.cj.spec.clone();
        if self.cj.deleting {
            self.decisions.push(Decision::Deleting);
            return Exit::Requeue(Requeue::Never);
        }
        if let (Some(Err(error)), Some(time_zone)) = (&spec.setup.time_zone, &spec.time_zone) {
            self.events.push(Event::unknown_time_zone(time_zone, error));
            self.decisions.push(Decision::UnknownTimeZone {
                time_zone: time_zone.to_string(),
            });
            return Exit::Requeue(Requeue::Never);
        }
        if let Some(pause) = self.pausing {
            self.decisions.push(Decision::PausedAfterFailures {
                jobs: pause.jobs.clone(),
            });
            return self.run_now_or(Requeue::Never, None);
        }
        if spec.suspend {
            self.decisions.push(Decision::Suspended);
            // A run-now request is an explicit ask: it runs while suspended
            // too (as `kubectl create job --from` does).
            return self.run_now_or(Requeue::Never, None);
        }
        if let Some(invalid) = &self.cj.options.invalid {
            self.events.push(Event::invalid_option(invalid));
            self.decisions.push(Decision::InvalidOption {
                error: invalid.to_string(),
            });
        }
        if spec.setup.tz_in_schedule {
            self.events
                .push(Event::unsupported_schedule(&spec.schedule));
            self.decisions.push(Decision::TimeZoneInSchedule);
        }
        let schedule = match &spec.setup.schedule {
            Ok(schedule) => schedule,
            Err(error) => {
                self.events
                    .push(Event::unparseable_schedule(&spec.schedule, error));
                self.decisions.push(Decision::Unparseable {
                    error: error.to_string(),
                });
                return Exit::Requeue(Requeue::Never);
            }
        };
        let once_per_wall_time = self.cj.options.once_per_wall_time();
        let catch_up_window = self.cj.options.catch_up_window();
        let spread_offset = self
            .cj
            .options
            .spread_offset(self.cj.namespace(), self.cj.name());
        let slots = |status: &StatusView, created| Slots {
            schedule,
            zone: input.default_zone,
            created,
            last_scheduled: status.last_schedule_time.get(),
            starting_deadline_seconds: spec.starting_deadline_seconds,
            once_per_wall_time,
            catch_up_window,
            spread_offset,
        };
        let now = input.now;
        let wake_up = |status: &StatusView, created| match slots(status, created).next_wakeup(now) {
            Some(t) => Requeue::At(t),
            None => Requeue::Never,
        };
        // The next slot whose start is still ahead (later than `now` only
        // with a spread): a run-now request after it waits for it.
        let run_now_asked = self.cj.options.run_now.get().is_some();
        let ahead = |status: &StatusView, created| {
            // Read only for a run-now request ([`Self::run_now_or`]).
            if !run_now_asked {
                return None;
            }
            let slots = slots(status, created);
            slots.next(slots.nominal(now))
        };
        let created = self.cj.created();
        let (slot, missed) = match slots(&self.cj.status, created).due(now) {
            Err(error) => {
                let error = error.to_string();
                self.events
                    .push(Event::invalid_schedule(&spec.schedule, &error));
                self.decisions.push(Decision::NeverFires { error });
                return Exit::Requeue(Requeue::Never);
            }
            Ok(None) => {
                self.decisions.push(Decision::NothingDue);
                return self.run_now_or(
                    wake_up(&self.cj.status, created),
                    ahead(&self.cj.status, created),
                );
            }
            Ok(Some(due)) => due,
        };
        if missed == Missed::Many {
            self.events.push(Event::too_many_missed_times());
            self.decisions.push(Decision::TooManyMissed { slot });
        }
        // The slots between the last one started and this one never ran
        // (the slot history tells which and why).
        let slots_then = slots(&self.cj.status, created);
        let first = slots_then.next(self.cj.status.last_schedule_time.get().unwrap_or(created));
        self.unstarted = Unstarted::between(first, slot, |t| slots_then.next(t));
        // With a spread, the deadline counts from the slot's delayed start.
        if let Some(deadline) = spec.starting_deadline_seconds
            && go_add_seconds(slot, deadline) < slots(&self.cj.status, created).nominal(now)
        {
            self.events.push(Event::miss_schedule(slot));
            self.decisions.push(Decision::TooLate { slot });
            return self.run_now_or(
                wake_up(&self.cj.status, created),
                ahead(&self.cj.status, created),
            );
        }
        let name = job_name(self.cj.name(), slot);
        let namespace = self.cj.namespace().to_owned();
        let status = &self.cj.status;
        if status
            .active
            .iter()
            .any(|r| ref_name(r) == name && ref_namespace(r) == namespace)
            || status.last_schedule_time.get() == Some(slot)
        {
            self.decisions
                .push(Decision::AlreadyHandled { slot, job: name });
            return self.run_now_or(
                wake_up(&self.cj.status, created),
                ahead(&self.cj.status, created),
            );
        }
        if let Some(running) = self.forbidden() {
            self.decisions
                .push(Decision::ForbidWhileActive { slot, running });
            return Exit::Requeue(wake_up(&self.cj.status, created));
        }
        if spec.concurrency_policy == ConcurrencyPolicy::Replace
            && let Some(exit) = self.replace_active()
        {
            return exit;
        }
        // Once this slot is recorded, a catch-up window's next missed slot,
        // then a run-now request the slot's Job does not serve, is due at
        // once; every other exit waits as upstream does (under Forbid, the
        // running Job's end brings the next decision; a slot whose name a
        // foreign Job holds is not retried in a loop).
        let run_now = self.cj.options.run_now.get();
        let wake_up_after_start = |status: &StatusView, created| {
            let slots = slots(status, created);
            let recorded = status.last_schedule_time.get() == Some(slot);
            match slots.catch_up(now).filter(|_| recorded) {
                Some(next) => Requeue::At(slots.start_of(next)),
                None if recorded && run_now.is_some_and(|requested| requested > slot) => {
                    Requeue::At(now)
                }
                None => wake_up(status, created),
            }
        };
        let slots_now = slots(&self.cj.status, created);
        let start_at = slots_now.start_of(slot);
        let catch_up = catch_up_window.is_some()
            && slots_now
                .next(slot)
                .is_some_and(|later| slots_now.start_of(later) <= now);
        let ready = readiness(
            start_at,
            now,
            catch_up,
            &spec.concurrency_policy,
            input.children,
        );
        self.start(slot, start_at, ready, name, &wake_up_after_start)
    }

    /// A run-now request (`shardcron.io/run-now`) that no Job has served
    /// yet is started now, as a slot at the request's time would be (its own
    /// Job name, `concurrencyPolicy`, `lastScheduleTime` moved to the
    /// request's time, which marks it served); without one, `otherwise`.
    /// Only called when no slot is started in this decision: a due slot
    /// goes first, and its Job, started after the request, serves it. A
    /// slot before the request whose spread start is still ahead (`ahead`)
    /// goes first too: recording the request's time first would skip it.
    fn run_now_or(&mut self, otherwise: Requeue, ahead: Option<Timestamp>) -> Exit {
        let Some(requested) = self.run_now_request() else {
            return Exit::Requeue(otherwise);
        };
        if let Some(slot) = ahead.filter(|slot| *slot <= requested) {
            self.decisions
                .push(Decision::RunNowAfterSlot { requested, slot });
            return Exit::Requeue(otherwise);
        }
        if requested > self.input.now {
            // Within the tolerance for the requester's clock: at its time.
            return Exit::Requeue(match otherwise {
                Requeue::At(t) => Requeue::At(t.min(requested)),
                _ => Requeue::At(requested),
            });
        }
        if let Some(earliest) = self
            .cj
            .status
            .last_schedule_time
            .get()
            .map(|last| last + SignedDuration::from_secs(RUN_NOW_MIN_INTERVAL_SECONDS))
            .filter(|earliest| self.input.now < *earliest)
        {
            self.decisions.push(Decision::RunNowTooSoon {
                requested,
                earliest,
            });
            return Exit::Requeue(match otherwise {
                Requeue::At(t) => Requeue::At(t.min(earliest)),
                _ => Requeue::At(earliest),
            });
        }
        let name = run_now_job_name(self.cj.name(), requested);
        let status = &self.cj.status;
        if status.active.iter().any(|r| ref_name(r) == name) {
            self.decisions.push(Decision::AlreadyHandled {
                slot: requested,
                job: name,
            });
            return Exit::Requeue(otherwise);
        }
        if let Some(running) = self.forbidden() {
            self.decisions
                .push(Decision::RunNowWaits { requested, running });
            return Exit::Requeue(otherwise);
        }
        if self.cj.spec.concurrency_policy == ConcurrencyPolicy::Replace
            && let Some(exit) = self.replace_active()
        {
            return exit;
        }
        self.decisions.push(Decision::RunNow { requested });
        // Nothing was due before the request: the wake-up stays the one
        // the schedule gave (its next slot is after the request's time).
        let ready = Readiness {
            at: requested,
            waited: None,
        };
        let exit = self.start(requested, requested, ready, name, &|_, _| otherwise.clone());
        // The Job says it was asked for, not scheduled.
        if let Some(job) = self.create.as_mut().and_then(|create| create.job.as_mut()) {
            job.metadata
                .annotations
                .get_or_insert_default()
                .insert(RUN_NOW_ANNOTATION.to_owned(), requested.to_string());
        }
        exit
    }

    /// Under Forbid with Jobs running: upstream's `JobAlreadyActive` event,
    /// and the running Jobs' names; otherwise `None`.
    fn forbidden(&mut self) -> Option<Vec<String>> {
        let active = &self.cj.status.active;
        if self.cj.spec.concurrency_policy != ConcurrencyPolicy::Forbid || active.is_empty() {
            return None;
        }
        let running = active.iter().map(|r| ref_name(r).to_owned()).collect();
        self.events.push(Event::job_already_active());
        Some(running)
    }

    /// The run-now request to serve, if any: set, not yet served (no Job
    /// started at or after it), made after the CronJob was created, not
    /// lapsed and not too far ahead of the clock. Each request that will not
    /// run says why, once per decision.
    fn run_now_request(&mut self) -> Option<Timestamp> {
        let requested = self.cj.options.run_now.get()?;
        if self
            .cj
            .status
            .last_schedule_time
            .get()
            .is_some_and(|last| last >= requested)
        {
            return None;
        }
        let now = self.input.now;
        let ignored = if requested < self.cj.created() {
            "it is older than the CronJob (a manifest's copy)"
        } else if requested > now + SignedDuration::from_secs(RUN_NOW_MAX_AHEAD_SECONDS) {
            self.events.push(Event::invalid_option(&InvalidOption::new(
                RUN_NOW_ANNOTATION,
                &requested.to_string(),
                "an instant at most 60s ahead of the controller's clock",
            )));
            "it is more than 60s ahead of the controller's clock"
        } else if now
            > requested
                + SignedDuration::from_secs(
                    // A request that waited for a slot's spread start (at
                    // most the offset) has its 5 minutes after that.
                    RUN_NOW_DEADLINE_SECONDS
                        + self
                            .cj
                            .options
                            .spread_offset(self.cj.namespace(), self.cj.name()),
                )
        {
            "it lapsed: not started within 5 minutes of its time (plus a spread offset)"
        } else {
            return Some(requested);
        };
        self.decisions.push(Decision::RunNowIgnored {
            requested,
            why: ignored,
        });
        None
    }

    /// Replace: a live GET of every active Job, then its delete, in order;
    /// the first failure stops the sync (and the create).
    fn replace_active(&mut self) -> Option<Exit> {
        let active = self.cj.status.active.clone();
        if let Some(exit) = self.ask_jobs(&active) {
            return Some(exit);
        }
        for reference in &active {
            let (namespace, name) = (ref_namespace(reference), ref_name(reference));
            let job = match self.live.job(namespace, name) {
                Some(JobLookup::Found(job)) => job,
                Some(JobLookup::Failed(error)) => {
                    let error = error.clone();
                    self.events.push(Event::failed_get(&error.message));
                    return Some(self.fail_lookup(format!("job {name}"), error));
                }
                // Upstream's GET has no special case for NotFound here.
                Some(JobLookup::NotFound) | None => {
                    let error = ApiError::job_not_found(name);
                    self.events.push(Event::failed_get(&error.message));
                    return Some(self.fail_lookup(format!("job {name}"), error));
                }
            };
            if !self.controls(job, reference) {
                self.drop_foreign(vec![(reference.clone(), NOT_CONTROLLED)]);
                continue;
            }
            self.decisions.push(Decision::Replace {
                job: job.name.clone(),
            });
            if !self.delete_job(&job.namespace, &job.name, &job.uid, DeleteReason::Replace) {
                let error = ApiError::new(format!(
                    "could not replace job {}/{}",
                    job.namespace, job.name
                ));
                return Some(Exit::Requeue(Requeue::Backoff(error)));
            }
            self.update_status = true;
        }
        None
    }

    fn start(
        &mut self,
        slot: Timestamp,
        start_at: Timestamp,
        ready: Readiness,
        name: String,
        wake_up: &dyn Fn(&StatusView, Timestamp) -> Requeue,
    ) -> Exit {
        let input = self.input;
        let annotation_zone = match self.cj.spec.setup.annotation_zone() {
            Ok(zone) => zone,
            // Upstream: getJobFromTemplate2 fails on the zone (the
            // UnknownTimeZone gate makes this unreachable).
            Err(error) => return Exit::Requeue(Requeue::Backoff(ApiError::new(error))),
        };
        // The Job object is built once, while planning; the follow-up only
        // needs its name. The one decoding of the template (or its one
        // read, when it was too big to keep) is made here.
        let job = match self.results {
            None => {
                let template = match self.cj.spec.job_template.decode() {
                    Some(template) => template,
                    None => match self.live.template() {
                        None => {
                            return Exit::NeedLookups(vec![Lookup::JobTemplate {
                                namespace: self.cj.namespace().to_owned(),
                                name: self.cj.name().to_owned(),
                            }]);
                        }
                        Some(Err(error)) => {
                            return self
                                .fail_lookup(format!("cronjob {}", self.cj.name()), error.clone());
                        }
                        Some(Ok(template)) => template.clone(),
                    },
                };
                Some(build_job_in(
                    &self.cj,
                    template,
                    annotation_zone,
                    input.default_zone,
                    slot,
                    name.clone(),
                ))
            }
            Some(_) => None,
        };
        self.decisions.push(Decision::Start {
            slot,
            job: name.clone(),
        });
        self.create = Some(JobToCreate {
            name: name.clone(),
            scheduled_time: slot,
            start_at,
            ready,
            job,
        });
        let namespace = self.cj.namespace().to_owned();
        let assumed = CreateResult::Created(super::live::LiveJob {
            namespace: namespace.clone(),
            name: name.clone(),
            uid: String::new(),
            resource_version: None,
            controller_uid: Some(self.cj.uid.to_string()),
        });
        let result = self
            .results
            .and_then(|r| r.create.as_ref())
            .unwrap_or(&assumed);
        let created = match result {
            CreateResult::Created(job) => {
                self.events.push(Event::successful_create(&job.name));
                job
            }
            CreateResult::NamespaceTerminating(error) => {
                self.decisions
                    .push(Decision::NamespaceTerminating { job: name });
                return Exit::Requeue(Requeue::Backoff(error.clone()));
            }
            CreateResult::Failed(error) => {
                self.events.push(Event::failed_create(&error.message));
                self.decisions.push(Decision::CreateFailed {
                    job: name,
                    error: error.message.clone(),
                });
                return Exit::Requeue(Requeue::Backoff(error.clone()));
            }
            CreateResult::AlreadyExists(Err(error)) => {
                return self.fail_lookup(format!("job {name}"), error.clone());
            }
            CreateResult::AlreadyExists(Ok(job)) => {
                // Upstream requeues neither case, so nothing would look at
                // the CronJob again until someone edits it or one of its
                // Jobs changes: a foreign Job holding one slot's name would
                // stop every later slot. A departure: the next slot is
                // examined as usual.
                if job.controller_uid.as_deref() != Some(&*self.cj.uid) {
                    self.decisions.push(Decision::ExistsForeign { job: name });
                    return Exit::Requeue(wake_up(&self.cj.status, self.cj.created()));
                }
                if self.cj.status.has_uid(&job.uid) {
                    self.decisions.push(Decision::ExistsActive { job: name });
                    return Exit::Requeue(wake_up(&self.cj.status, self.cj.created()));
                }
                self.decisions.push(Decision::ExistsRecorded { job: name });
                job
            }
        };
        let job_namespace = if created.namespace.is_empty() {
            namespace.as_str()
        } else {
            created.namespace.as_str()
        };
        self.cj.status.active.push(active_reference(
            job_namespace,
            &created.name,
            &created.uid,
            created.resource_version.as_deref(),
        ));
        self.cj.status.last_schedule_time = slot.into();
        self.update_status = true;
        Exit::Requeue(wake_up(&self.cj.status, self.cj.created()))
    }
}

/// Go's `t.Add(time.Second * time.Duration(seconds))`: the duration wraps
/// on overflow, the instant saturates.
fn go_add_seconds(t: Timestamp, seconds: i64) -> Timestamp {
    let nanos = 1_000_000_000i64.wrapping_mul(seconds);
    t.checked_add(SignedDuration::from_nanos(nanos))
        .unwrap_or(if nanos < 0 {
            Timestamp::MIN
        } else {
            Timestamp::MAX
        })
}
