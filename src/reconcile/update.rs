//! What a CronJob update means for the next decision: upstream's
//! `updateCronJob` informer handler.
//!
//! A change of schedule or time zone moves the next look to the new
//! schedule's wake-up (or, if the new schedule does not parse, records
//! `UnParseableCronJobSchedule` and waits for the next change); any other
//! change means "look now".

use super::events::Event;
use super::view::{CronJobView, SpecView};
use crate::schedule::slots::Slots;
use jiff::Timestamp;
use jiff::tz::TimeZone;

/// When to decide after an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterUpdate {
    /// Decide now (upstream: `queue.Add`).
    Now,
    /// Decide at this instant, or earlier if a decision is already due
    /// earlier (upstream: `AddAfter` keeps the earlier time).
    At(Timestamp),
    /// The new schedule has no slot within the search horizon.
    Never,
    /// The new schedule does not parse: record this event; nothing is queued.
    Unparseable(Event),
}

/// Upstream's `updateCronJob(old, new)` at `now`. Upstream's delay adds
/// 100 ms to the wake-up; this gives the wake-up itself.
pub fn after_update(
    old: &SpecView,
    new: &CronJobView,
    now: Timestamp,
    default_zone: &TimeZone,
) -> AfterUpdate {
    let spec = &new.spec;
    if old.schedule == spec.schedule && old.time_zone == spec.time_zone {
        return AfterUpdate::Now;
    }
    // Upstream parses formatSchedule(new) without a recorder: no
    // UnsupportedSchedule event here.
    let Ok(schedule) = &spec.setup.schedule else {
        return AfterUpdate::Unparseable(Event::unparseable_cronjob_schedule(&spec.schedule));
    };
    let slots = Slots {
        schedule,
        zone: default_zone,
        created: new.created(),
        last_scheduled: new.status.last_schedule_time.get(),
        starting_deadline_seconds: spec.starting_deadline_seconds,
        once_per_wall_time: new.options.once_per_wall_time(),
        catch_up_window: new.options.catch_up_window(),
        spread_offset: new.options.spread_offset(new.namespace(), new.name()),
    };
    match slots.next_wakeup(now) {
        Some(t) => AfterUpdate::At(t),
        None => AfterUpdate::Never,
    }
}
