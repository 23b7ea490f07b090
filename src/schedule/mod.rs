//! Cron schedules with Kubernetes' exact semantics: pure, no clock, no I/O.
//!
//! Kubernetes evaluates `spec.schedule` with robfig/cron v3.0.1
//! `ParseStandard`, and users' schedules were written against it. This module
//! reproduces it exactly (checked against robfig itself by
//! `tests/schedule_differential.rs`):
//!
//! - [`parse`] accepts what robfig accepts, rejects what it rejects, and says
//!   which field is wrong and why;
//! - [`Schedule::next`] is robfig's `Next`: DST gaps are skipped, not moved;
//!   times in a DST overlap fire twice; after five years of search it gives
//!   up ([`None`], "never"); `@every` counts from the instant given;
//! - [`slots`] holds the controller's questions built on `next`: the most
//!   recent due slot, missed-slot counting, the starting-deadline clamp and
//!   the next wake-up, as kube-controller-manager computes them.

mod compiled;
mod go_duration;
mod go_time;
mod parse;
pub mod slots;
mod zone;

pub use compiled::Schedule;
pub use go_duration::{DurationError, parse_go_duration};
pub use go_time::format_rfc3339;
pub use parse::{Field, FieldError, ParseError, parse};
pub use zone::{ScheduleZone, ZoneError, load_named_zone};

use compiled::{Fields, Kind};

use go_time::Zone;
use jiff::Timestamp;
use jiff::tz::TimeZone;

/// A bound on the search steps of one `next` call. Legitimate searches take
/// at most a few thousand steps (a day at a time over five years); robfig
/// itself loops forever where a calendar day is missing from a zone
/// (Pacific/Apia skipped 2011-12-30), and this ends such a search with "never".
const MAX_SEARCH_STEPS: u32 = 1_000_000;

/// More slots than a day of minutes in one fall-back's repeat: no zone
/// repeats a day.
const MAX_REPEATED_SLOTS: u32 = 24 * 60;

/// Whether `at` is the second occurrence of its wall-clock time in `zone`
/// (it falls in a fall-back's fold, on the later offset).
pub fn is_repeated_wall_time(at: Timestamp, zone: &TimeZone) -> bool {
    let offset = zone.to_offset(at);
    match zone.to_ambiguous_timestamp(offset.to_datetime(at)).offset() {
        jiff::tz::AmbiguousOffset::Fold { after, .. } => offset == after,
        _ => false,
    }
}

/// Instants beyond this many seconds are not searched (jiff stops at year 9999).
const LAST_SEARCHABLE: i64 = 253_000_000_000; // ~ year 9987

impl Schedule {
    /// Where this schedule's times are evaluated.
    pub fn zone(&self) -> &ScheduleZone {
        &self.zone
    }

    /// The schedule's own zone, else the caller's.
    fn zone_or<'a>(&'a self, caller: &'a TimeZone) -> &'a TimeZone {
        match &self.zone {
            ScheduleZone::Caller => caller,
            ScheduleZone::Fixed(own) => own,
        }
    }

    /// Whether this is an `@every` schedule (a constant delay, not aligned to the clock).
    pub fn is_every(&self) -> bool {
        matches!(self.kind, Kind::Every(_))
    }

    /// The first activation strictly after `after`, as robfig's `Next`.
    ///
    /// `zone` is used unless the schedule names its own (a `TZ=` prefix),
    /// just as robfig evaluates prefix-less schedules in the location of the
    /// time it is given. `None` means no activation within robfig's search
    /// horizon (five years), or beyond the year 9987.
    pub fn next(&self, after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
        let nanos = after.as_nanosecond();
        let floor_secs = i64::try_from(nanos.div_euclid(1_000_000_000)).ok()?;
        if floor_secs > LAST_SEARCHABLE {
            return None;
        }
        match self.kind {
            Kind::Every(delay) => {
                Timestamp::from_second(floor_secs.checked_add_unsigned(delay)?).ok()
            }
            Kind::Spec(fields) => {
                let unix = spec_next(&fields, &Zone::new(self.zone_or(zone)), floor_secs + 1)?;
                Timestamp::from_second(unix).ok()
            }
        }
    }

    /// [`Self::next`], or with `once_per_wall_time`
    /// [`Self::next_once_per_wall_time`].
    pub fn next_slot(
        &self,
        after: Timestamp,
        zone: &TimeZone,
        once_per_wall_time: bool,
    ) -> Option<Timestamp> {
        if once_per_wall_time {
            self.next_once_per_wall_time(after, zone)
        } else {
            self.next(after, zone)
        }
    }

    /// The first activation after `after` whose wall-clock time has not
    /// been seen before: on a fall-back, the repeated hour's slots run at
    /// their first occurrence and not at the second (the opt-in
    /// `shardcron.io/fall-back: once`; upstream runs both). `@every` counts
    /// elapsed time, not wall-clock time: for it this is [`Self::next`].
    pub fn next_once_per_wall_time(&self, after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
        let mut slot = self.next(after, zone)?;
        if self.is_every() {
            return Some(slot);
        }
        let own = self.zone_or(zone);
        // A repeat lasts at most hours, at most a slot a minute: bounded.
        for _ in 0..MAX_REPEATED_SLOTS {
            if !is_repeated_wall_time(slot, own) {
                return Some(slot);
            }
            slot = self.next(slot, zone)?;
        }
        Some(slot)
    }

    /// Whether `at` is an activation time of a field schedule, read in `zone`
    /// (or the schedule's own zone). Always false for `@every`, which is not
    /// tied to the clock.
    pub fn matches(&self, at: Timestamp, zone: &TimeZone) -> bool {
        let Kind::Spec(f) = self.kind else {
            return false;
        };
        if at.subsec_nanosecond() != 0 {
            return false;
        }
        let c = Zone::new(self.zone_or(zone)).civil(at.as_second());
        c.second == 0
            && f.minute & (1 << c.minute) != 0
            && f.hour & (1 << c.hour) != 0
            && f.month & (1 << c.month) != 0
            && f.day_matches(c.day, c.weekday)
    }

    /// Successive activations after `after` (stops at "never").
    pub fn upcoming<'a>(
        &'a self,
        after: Timestamp,
        zone: &'a TimeZone,
    ) -> impl Iterator<Item = Timestamp> + 'a {
        self.upcoming_slots(after, zone, false)
    }

    /// Successive slots after `after`, as [`Self::next_slot`] finds them.
    pub fn upcoming_slots<'a>(
        &'a self,
        after: Timestamp,
        zone: &'a TimeZone,
        once_per_wall_time: bool,
    ) -> impl Iterator<Item = Timestamp> + 'a {
        std::iter::successors(self.next_slot(after, zone, once_per_wall_time), move |&t| {
            self.next_slot(t, zone, once_per_wall_time)
        })
    }
}

/// robfig's `SpecSchedule.Next` from the whole second `start`, step for step,
/// including its quirks at DST transitions (the wrap-arounds, the midnight
/// correction after adding a day). Returns Unix seconds. Where robfig would
/// loop forever this gives up after [`MAX_SEARCH_STEPS`].
fn spec_next(f: &Fields, zone: &Zone, start: i64) -> Option<i64> {
    if !f.can_fire() {
        return None;
    }
    let mut t = start;
    let mut added = false;
    let mut steps = 0u32;
    let mut step = || {
        steps += 1;
        (steps <= MAX_SEARCH_STEPS).then_some(())
    };
    let year_limit = zone.civil(t).year + 5;
    'wrap: loop {
        let mut c = zone.civil(t);
        if c.year > year_limit {
            return None;
        }
        while f.month & (1 << c.month) == 0 {
            step()?;
            if !added {
                added = true;
                t = zone.date(c.year, i64::from(c.month), 1, 0, 0, 0);
                c = zone.civil(t);
            }
            t = zone.add_date(c, 1, 0);
            c = zone.civil(t);
            if c.month == 1 {
                continue 'wrap;
            }
        }
        while !f.day_matches(c.day, c.weekday) {
            step()?;
            if !added {
                added = true;
                t = zone.date(c.year, i64::from(c.month), i64::from(c.day), 0, 0, 0);
                c = zone.civil(t);
            }
            t = zone.add_date(c, 0, 1);
            c = zone.civil(t);
            // Where midnight does not exist, robfig pulls the time back to
            // (or pushes it on to) an hour-0 reading.
            if c.hour != 0 {
                let hour = i64::from(c.hour);
                t += if hour > 12 {
                    (24 - hour) * 3600
                } else {
                    -hour * 3600
                };
                c = zone.civil(t);
            }
            if c.day == 1 {
                continue 'wrap;
            }
        }
        while f.hour & (1 << c.hour) == 0 {
            step()?;
            if !added {
                added = true;
                t = zone.date(
                    c.year,
                    i64::from(c.month),
                    i64::from(c.day),
                    i64::from(c.hour),
                    0,
                    0,
                );
            }
            t += 3600;
            c = zone.civil(t);
            if c.hour == 0 {
                continue 'wrap;
            }
        }
        while f.minute & (1 << c.minute) == 0 {
            step()?;
            if !added {
                added = true;
                t = t.div_euclid(60) * 60;
            }
            t += 60;
            c = zone.civil(t);
            if c.minute == 0 {
                continue 'wrap;
            }
        }
        // The seconds field is "0"; only zones with odd-second offsets get here.
        while c.second != 0 {
            step()?;
            added = true;
            t += 1;
            c = zone.civil(t);
            if c.second == 0 {
                continue 'wrap;
            }
        }
        return Some(t);
    }
}

#[cfg(test)]
mod tests;
