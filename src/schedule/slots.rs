//! The controller's questions about a CronJob's slots, answered as
//! kube-controller-manager answers them (`pkg/controller/cronjob/utils.go`).
//!
//! Upstream counts missed slots approximately: it measures the interval
//! between the first two slots after the baseline and divides the elapsed
//! time by it. For irregular schedules (`30 10,11,12 * * 1-5`) this can miss
//! the most recent slot, and an `@every` schedule with a starting deadline
//! shorter than its interval never fires. Both are reproduced on purpose:
//! shardcron is a drop-in replacement, and users' CronJobs behave today as
//! that code makes them behave. Two departures, both where upstream would
//! loop forever or spin: a search that runs past robfig's five-year horizon
//! stops instead of restarting from year 1, and a wake-up with no slot ahead
//! is "none" instead of "immediately".

use super::Schedule;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use thiserror::Error;

/// How many slots were missed since the baseline (upstream's `missedSchedulesType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Missed {
    None,
    Few,
    /// More than 100: upstream warns (`TooManyMissedTimes`) but still starts the most recent slot.
    Many,
}

/// The schedule's first two slots are less than a second apart (or there is no
/// second one), so missed slots cannot be counted. Upstream reports it as an
/// `InvalidSchedule` warning; `59 23 31 2 *` is the classic case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("time difference between two schedules is less than 1 second")]
pub struct IntervalTooShort;

/// What upstream's `mostRecentScheduleTime` returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecentSlot {
    /// The baseline: lastScheduleTime, else creationTimestamp, possibly
    /// clamped forward by the starting deadline.
    pub earliest: Timestamp,
    /// The latest slot at or before `now` after the baseline, if any.
    pub most_recent: Option<Timestamp>,
    pub missed: Missed,
}

/// A CronJob's schedule and the status and spec fields that place its slots.
#[derive(Debug, Clone, Copy)]
pub struct Slots<'a> {
    pub schedule: &'a Schedule,
    /// The zone prefix-less schedules are evaluated in: `spec.timeZone`, else
    /// the controller's default (UTC, as kube-controller-manager in practice).
    pub zone: &'a TimeZone,
    pub created: Timestamp,
    pub last_scheduled: Option<Timestamp>,
    pub starting_deadline_seconds: Option<i64>,
    /// The opt-in `shardcron.io/fall-back: once`: a wall-clock time that a
    /// fall-back repeats is a slot at its first instant only
    /// ([`Schedule::next_once_per_wall_time`]).
    pub once_per_wall_time: bool,
    /// The opt-in `shardcron.io/catch-up-window`, in seconds: the missed
    /// slots within it run, oldest first ([`Self::due`]).
    pub catch_up_window: Option<i64>,
    /// The opt-in `shardcron.io/spread`: every slot starts this many seconds
    /// late (0: on time). [`Self::due`], [`Self::catch_up`] and
    /// [`Self::next_wakeup`] answer as upstream would at `now` minus the
    /// offset, so the starting deadline counts from the delayed start; the
    /// slots themselves (the Job's name, `lastScheduleTime`) stay nominal.
    pub spread_offset: i64,
}

/// Go's zero `time.Time` (0001-01-01T00:00:00Z), which robfig returns for "never".
fn go_zero_time() -> Timestamp {
    Timestamp::from_second(-62_135_596_800).unwrap_or(Timestamp::MIN)
}

fn nanos(t: Timestamp) -> i128 {
    t.as_nanosecond()
}

impl Slots<'_> {
    /// The first slot strictly after `after` (in nominal time).
    pub fn next(&self, after: Timestamp) -> Option<Timestamp> {
        self.schedule
            .next_slot(after, self.zone, self.once_per_wall_time)
    }

    /// Upstream's `mostRecentScheduleTime(cj, now, schedule, includeStartingDeadlineSeconds)`.
    pub fn most_recent(
        &self,
        now: Timestamp,
        include_deadline: bool,
    ) -> Result<RecentSlot, IntervalTooShort> {
        self.most_recent_and_next(now, include_deadline)
            .map(|(recent, _)| recent)
    }

    /// [`Self::most_recent`], and the first slot after its baseline
    /// (`next(earliest)`, which [`Self::next_wakeup`] would otherwise
    /// search for again).
    fn most_recent_and_next(
        &self,
        now: Timestamp,
        include_deadline: bool,
    ) -> Result<(RecentSlot, Option<Timestamp>), IntervalTooShort> {
        let mut earliest = self.last_scheduled.unwrap_or(self.created);
        if include_deadline && let Some(sds) = self.starting_deadline_seconds {
            // Go multiplies a Duration by the deadline, which wraps on overflow.
            let back = (-1_000_000_000i64).wrapping_mul(sds);
            let deadline =
                Timestamp::from_nanosecond(nanos(now) + i128::from(back)).unwrap_or(if back < 0 {
                    Timestamp::MIN
                } else {
                    Timestamp::MAX
                });
            if deadline > earliest {
                earliest = deadline;
            }
        }
        let none = RecentSlot {
            earliest,
            most_recent: None,
            missed: Missed::None,
        };
        let t1 = self.next(earliest);
        if let Some(t1) = t1
            && now < t1
        {
            // Upstream computes t2 first; nothing here depends on it.
            return Ok((none, Some(t1)));
        }
        // Go: t2 := Next(t1); with t1 the zero time robfig searches from year 1 in UTC.
        let t2 = match t1 {
            Some(t1) => self.next(t1),
            None => self.schedule.next(go_zero_time(), &TimeZone::UTC),
        };
        match t1 {
            Some(t1) if t2.is_some_and(|t2| now < t2) => {
                return Ok((
                    RecentSlot {
                        most_recent: Some(t1),
                        ..none
                    },
                    Some(t1),
                ));
            }
            // No slot within the horizon after the baseline. Upstream goes on
            // from year 1 and loops forever when the schedule fires at all.
            None if t2.is_some() => return Ok((none, t1)),
            _ => {}
        }
        let (Some(t1), Some(t2)) = (t1, t2) else {
            return Err(IntervalTooShort);
        };
        let between = t2.as_second() - t1.as_second();
        if between < 1 {
            return Err(IntervalTooShort);
        }
        let elapsed = go_seconds(go_sub(now, t1));
        let missed_count = elapsed / between + 1;
        let back = (missed_count - 2)
            .wrapping_mul(between)
            .wrapping_mul(1_000_000_000);
        let potential_earliest =
            Timestamp::from_nanosecond(nanos(t1) + i128::from(back)).unwrap_or(Timestamp::MIN);
        let mut most_recent = None;
        let mut t = self.next(potential_earliest);
        while let Some(slot) = t.filter(|&slot| slot <= now) {
            most_recent = Some(slot);
            t = self.next(slot);
        }
        let missed = match missed_count {
            n if n > 100 => Missed::Many,
            n if n > 0 => Missed::Few,
            _ => Missed::None,
        };
        Ok((
            RecentSlot {
                earliest,
                most_recent,
                missed,
            },
            Some(t1),
        ))
    }

    /// Upstream's `nextScheduleTime`: the slot to start now, if any, with the
    /// starting deadline applied, and whether more than 100 were missed.
    /// With a catch-up window, the oldest unstarted slot within it instead
    /// ([`Self::catch_up`]); slots older than the window do not run.
    pub fn due(&self, now: Timestamp) -> Result<Option<(Timestamp, Missed)>, IntervalTooShort> {
        let now = self.nominal(now);
        let recent = self.most_recent(now, true)?;
        if self.catch_up_window.is_some() {
            // Catching up is not missing: no TooManyMissedTimes for it.
            return Ok(self.catch_up_at(now).map(|slot| (slot, Missed::Few)));
        }
        Ok(recent
            .most_recent
            .filter(|&slot| slot <= now)
            .map(|slot| (slot, recent.missed)))
    }

    /// With a catch-up window: the oldest slot after the last one started
    /// that is within the window and the starting deadline and not after
    /// `now`, if any. `None` without a window.
    pub fn catch_up(&self, now: Timestamp) -> Option<Timestamp> {
        self.catch_up_at(self.nominal(now))
    }

    /// [`Self::catch_up`] at a nominal `now` (the spread offset taken off).
    fn catch_up_at(&self, now: Timestamp) -> Option<Timestamp> {
        let window = self.catch_up_window?;
        // `next` answers strictly after a whole second: one second before
        // the window's start lets a slot exactly at its start in.
        let since = |seconds: i64| {
            now.checked_sub(SignedDuration::from_secs(seconds.saturating_add(1)))
                .unwrap_or(Timestamp::MIN)
        };
        let mut from = self
            .last_scheduled
            .unwrap_or(self.created)
            .max(since(window));
        if let Some(deadline) = self.starting_deadline_seconds {
            from = from.max(since(deadline));
        }
        self.next(from).filter(|&slot| slot <= now)
    }

    /// When to look again: upstream's `nextScheduleTimeDuration` as an
    /// instant, without its 100 ms margin (an actor's own timer needs none).
    /// `None` when the schedule has no slot within the search horizon.
    pub fn next_wakeup(&self, now: Timestamp) -> Option<Timestamp> {
        let now = self.nominal(now);
        let base = match self.most_recent_and_next(now, false) {
            Err(IntervalTooShort) => now,
            Ok((
                RecentSlot {
                    most_recent: Some(slot),
                    ..
                },
                _,
            )) => slot,
            // The baseline: the slot after it is found already.
            Ok((
                RecentSlot {
                    most_recent: None,
                    missed: Missed::None,
                    ..
                },
                next,
            )) => return next.map(|slot| self.start_of(slot)),
            Ok((
                RecentSlot {
                    most_recent: None, ..
                },
                _,
            )) => now,
        };
        self.next(base).map(|slot| self.start_of(slot))
    }

    /// The instant that counts as `now` for the slots: `now` less the
    /// spread offset.
    pub fn nominal(&self, now: Timestamp) -> Timestamp {
        now.checked_sub(SignedDuration::from_secs(self.spread_offset))
            .unwrap_or(Timestamp::MIN)
    }

    /// When `slot` starts: the slot plus the spread offset.
    pub fn start_of(&self, slot: Timestamp) -> Timestamp {
        slot.checked_add(SignedDuration::from_secs(self.spread_offset))
            .unwrap_or(Timestamp::MAX)
    }
}

/// Go's `t.Sub(u)`: nanoseconds, saturating at the range of `time.Duration`.
fn go_sub(t: Timestamp, u: Timestamp) -> i64 {
    let d = nanos(t) - nanos(u);
    d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// `int64(d.Seconds())` as Go computes it (through float64, truncated).
fn go_seconds(d: i64) -> i64 {
    let secs = (d / 1_000_000_000) as f64 + (d % 1_000_000_000) as f64 / 1e9;
    secs as i64
}

#[cfg(test)]
mod tests;
