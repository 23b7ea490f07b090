//! What a decision adds to a CronJob's slot history
//! (`super::slot_history`): a function of the CronJob (its history as
//! written, its status and policy), its children and the decision, so a
//! replayed event, a stale read or a second owner computes the same
//! entries, and a decision made again records nothing twice: skipped slots
//! are recorded up to a mark (`recordedTo`), failures by their time and
//! Job.

use super::decision::Decision;
use super::slot_history::{
    Fate, LastFailure, SkipWhy, SlotEntry, SlotHistory, Suspension, cut_owned,
};
use super::view::{ConcurrencyPolicy, Finished, JobSummary};
use jiff::Timestamp;

/// Slots counted one by one in a run of skipped ones; more is "more than
/// 100", as upstream's `TooManyMissedTimes`.
const MAX_COUNTED: u32 = 101;

/// Slots a decision found never started: the first of them, how many
/// (at most [`MAX_COUNTED`]), up to the slot it decided on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unstarted {
    pub first: Timestamp,
    pub count: u32,
    /// The slot the decision was about (not among them).
    pub before: Timestamp,
}

impl Unstarted {
    /// The slots from `first` (the first after the last one started) that
    /// come before `due`, by `next`; `None` when there are none.
    pub fn between(
        first: Option<Timestamp>,
        due: Timestamp,
        next: impl Fn(Timestamp) -> Option<Timestamp>,
    ) -> Option<Self> {
        let first = first.filter(|first| *first < due)?;
        let mut count = 1;
        let mut slot = first;
        while count < MAX_COUNTED {
            match next(slot) {
                Some(later) if later < due => {
                    count += 1;
                    slot = later;
                }
                _ => break,
            }
        }
        Some(Self {
            first,
            count,
            before: due,
        })
    }
}

/// What one decision tells the history, besides the decisions themselves.
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotFacts {
    /// Slots found never started before the slot decided on.
    pub unstarted: Option<Unstarted>,
}

/// The history after this decision, if it changes: `current` as written
/// (`None`: none yet, or unreadable), the CronJob's policy and
/// suspension, its children, the decision's steps and facts, at `now`.
pub fn slot_history_update(
    current: Option<&SlotHistory>,
    policy: &ConcurrencyPolicy,
    suspended: bool,
    children: &[JobSummary],
    decisions: &[Decision],
    facts: SlotFacts,
    now: Timestamp,
) -> Option<SlotHistory> {
    let mut draft = Draft {
        read: current,
        edited: None,
        now,
    };

    // Slots that never started, and why.
    if let Some(unstarted) = facts.unstarted.filter(|u| u.first > draft.recorded_to()) {
        let running = running_at(children, unstarted.first);
        let suspension = draft
            .get()
            .and_then(|h| h.suspended)
            .filter(|s| s.since <= unstarted.first);
        let why = match (suspension, &running) {
            _ if unstarted.count >= MAX_COUNTED => SkipWhy::TooManyMissed,
            (Some(s), _) if s.paused => SkipWhy::Paused,
            (Some(_), _) => SkipWhy::Suspended,
            (None, Some(_)) if *policy == ConcurrencyPolicy::Forbid => SkipWhy::Forbid,
            _ => SkipWhy::Missed,
        };
        let job = running
            .filter(|_| why == SkipWhy::Forbid)
            .map(|job| cut_owned(&job))
            .unwrap_or_default();
        let history = draft.edit();
        history.skipped.add(why, unstarted.count);
        history.push(SlotEntry {
            slot: unstarted.first,
            fate: Fate::Skipped {
                why,
                count: unstarted.count,
            },
            job,
        });
        history.recorded_to = history
            .recorded_to
            .max(unstarted.before - jiff::SignedDuration::from_secs(1));
    }
    for decision in decisions {
        match decision {
            // The slot decided on, past its deadline.
            Decision::TooLate { slot } if *slot > draft.recorded_to() => {
                let history = draft.edit();
                history.skipped.add(SkipWhy::Deadline, 1);
                history.push(SlotEntry {
                    slot: *slot,
                    fate: Fate::Skipped {
                        why: SkipWhy::Deadline,
                        count: 1,
                    },
                    job: String::new(),
                });
                history.recorded_to = *slot;
            }
            // A Job this decision replaces.
            Decision::Replace { job } => {
                let slot = children
                    .iter()
                    .find(|c| c.name == *job)
                    .and_then(|c| c.scheduled)
                    .unwrap_or(now);
                let history = draft.edit();
                history.replaced = history.replaced.saturating_add(1);
                history.push(SlotEntry {
                    slot,
                    fate: Fate::Replaced,
                    job: cut_owned(job),
                });
            }
            _ => {}
        }
    }
    // Failed Jobs not yet recorded, oldest first.
    let mut failed: Vec<&JobSummary> = children
        .iter()
        .filter(|c| c.finished == Some(Finished::Failed))
        .collect();
    failed.sort_by_key(|c| c.failed_at);
    for job in failed {
        let at = job.failed_at.unwrap_or(now);
        if draft.get().is_some_and(|h| h.has_failure(&job.name, at)) {
            continue;
        }
        let reason = job
            .failure_reason
            .map(|r| r.as_str().to_owned())
            .unwrap_or_default();
        let history = draft.edit();
        history.failed = history.failed.saturating_add(1);
        history.last_failure = Some(LastFailure {
            job: cut_owned(&job.name),
            at,
            reason: reason.clone(),
        });
        history.push(SlotEntry {
            slot: job.scheduled.unwrap_or(at),
            fate: Fate::Failed { at, reason },
            job: cut_owned(&job.name),
        });
    }
    // A suspension begins or ends.
    let paused = decisions
        .iter()
        .any(|d| matches!(d, Decision::PausedAfterFailures { .. }));
    match (suspended || paused, draft.get().and_then(|h| h.suspended)) {
        (true, None) => draft.edit().suspended = Some(Suspension { since: now, paused }),
        (false, Some(_)) => draft.edit().suspended = None,
        _ => {}
    }

    let mut history = draft.edited?;
    // A new history begins with its oldest entry.
    if current.is_none()
        && let Some(oldest) = history.slots.iter().map(|e| e.slot).min()
    {
        history.since = history.since.min(oldest);
    }
    Some(history)
}

/// The history as one decision leaves it: the one read until something
/// changes, then an owned copy (most decisions change nothing, and copy
/// nothing).
struct Draft<'a> {
    read: Option<&'a SlotHistory>,
    edited: Option<SlotHistory>,
    now: Timestamp,
}

impl Draft<'_> {
    fn get(&self) -> Option<&SlotHistory> {
        self.edited.as_ref().or(self.read)
    }

    /// Every skipped slot up to this one is recorded.
    fn recorded_to(&self) -> Timestamp {
        self.get().map_or(Timestamp::UNIX_EPOCH, |h| h.recorded_to)
    }

    fn edit(&mut self) -> &mut SlotHistory {
        let (read, now) = (self.read, self.now);
        self.edited
            .get_or_insert_with(|| read.cloned().unwrap_or_else(|| SlotHistory::new(now)))
    }
}

/// The child running at `slot`: started by then and not finished before.
fn running_at(children: &[JobSummary], slot: Timestamp) -> Option<String> {
    children
        .iter()
        .filter(|c| c.start_time.is_some_and(|start| start <= slot))
        .filter(|c| {
            let finished = c.completion_time.or(c.failed_at);
            c.finished.is_none() || finished.is_some_and(|end| end > slot)
        })
        .map(|c| c.name.clone())
        .next()
}

#[cfg(test)]
mod tests;
