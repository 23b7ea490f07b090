//! A schedule as parsed: robfig's bit sets of matching values, or
//! `@every`'s period, and the zone it is evaluated in.

use super::zone::ScheduleZone;

/// A parsed schedule. Cheap to clone; small enough to keep one per CronJob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub(super) kind: Kind,
    pub(super) zone: ScheduleZone,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Five cron fields (or a descriptor other than `@every`).
    Spec(Fields),
    /// `@every`: a whole number of seconds, at least one.
    Every(u64),
}

/// Bit sets of matching values, as robfig keeps them (bit `n` = value `n`).
/// The seconds field of `ParseStandard` is always `0` and is not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fields {
    pub(super) minute: u64,
    pub(super) hour: u32,
    pub(super) dom: u32,
    pub(super) month: u16,
    pub(super) dow: u8,
    /// robfig's "star bit" (`*`, `?` or a step of 1 over `*`): with either
    /// day field starred both must match, otherwise either may.
    pub(super) dom_star: bool,
    pub(super) dow_star: bool,
}

impl Fields {
    /// Whether any instant can match. robfig would search its whole horizon
    /// to find out; a field with no values (`,`) cannot match anything.
    pub(super) fn can_fire(&self) -> bool {
        let day = if self.dom_star || self.dow_star {
            self.dom != 0 && self.dow != 0
        } else {
            self.dom != 0 || self.dow != 0
        };
        self.minute != 0 && self.hour != 0 && self.month != 0 && day
    }

    pub(super) fn day_matches(&self, day: u32, weekday: u32) -> bool {
        let dom = self.dom & (1 << day) != 0;
        let dow = self.dow & (1 << weekday) != 0;
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }
}
