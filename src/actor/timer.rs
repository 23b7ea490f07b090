//! How long a CronJob's actor sleeps before its next slot. Pure.
//!
//! Timers run on the monotonic clock, slots are wall-clock instants. So the
//! actor never trusts one long sleep: it sleeps at most `cap`, then reads the
//! wall clock again. A wall-clock jump (NTP step, VM resume) is noticed
//! within `cap`, and a timer that fires early just sleeps again.

use jiff::Timestamp;
use std::time::Duration;

/// The default cap on one sleep.
pub const MAX_SLEEP: Duration = Duration::from_secs(60);

/// What the actor does on waking (or when armed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The slot has come: run the decision now.
    Due,
    /// Sleep this long, then ask again.
    Sleep(Duration),
}

/// The actor's next step for a wake-up at `wake_at`, with the wall clock at `now`.
pub fn next_step(wake_at: Timestamp, now: Timestamp, cap: Duration) -> Wake {
    let left = wake_at.as_nanosecond() - now.as_nanosecond();
    if left <= 0 {
        return Wake::Due;
    }
    let left = Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX));
    Wake::Sleep(left.min(cap))
}

/// The instant a decision runs at: the clock's `now`, and for a firing
/// not before the slot it fired for (`due`): a clock stepped back between
/// the wake-up and the decision must not find that slot not yet due (the
/// decision would arm the same slot again: a second wake-up for it, and
/// the slot as late as the clock stepped).
pub fn decision_time(now: Timestamp, due: Option<Timestamp>) -> Timestamp {
    due.map_or(now, |due| now.max(due))
}

/// The wait before retrying a failed decision: upstream's per-item
/// exponential backoff (5 ms doubling to at most 1000 s), after `failures`
/// consecutive failures (1 = the first).
pub fn failure_backoff(failures: u32) -> Duration {
    const BASE: Duration = Duration::from_millis(5);
    const CAP: Duration = Duration::from_secs(1000);
    let doublings = failures.saturating_sub(1).min(30);
    BASE.saturating_mul(1 << doublings).min(CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn wakes_at_the_slot_itself_not_after_it() {
        let slot = ts("2024-01-01T10:00:00Z");
        assert_eq!(
            next_step(slot, ts("2024-01-01T09:59:59.75Z"), MAX_SLEEP),
            Wake::Sleep(Duration::from_millis(250))
        );
        assert_eq!(next_step(slot, slot, MAX_SLEEP), Wake::Due);
        assert_eq!(
            next_step(slot, ts("2024-01-01T10:00:00.001Z"), MAX_SLEEP),
            Wake::Due
        );
    }

    #[test]
    fn a_firing_decides_at_its_slot_at_the_earliest() {
        let slot = ts("2024-01-01T10:00:00Z");
        let later = ts("2024-01-01T10:00:00.2Z");
        let stepped_back = ts("2024-01-01T09:59:58Z");
        let table = [
            (later, Some(slot), later),
            (slot, Some(slot), slot),
            (stepped_back, Some(slot), slot),
            (stepped_back, None, stepped_back),
        ];
        for (now, due, expected) in table {
            assert_eq!(decision_time(now, due), expected, "{now} {due:?}");
        }
    }

    #[test]
    fn long_sleeps_are_capped_so_clock_jumps_are_noticed() {
        let slot = ts("2024-01-02T00:00:00Z");
        assert_eq!(
            next_step(slot, ts("2024-01-01T00:00:00Z"), MAX_SLEEP),
            Wake::Sleep(MAX_SLEEP)
        );
        // The wall clock jumped forward past the slot while we slept: due at once.
        assert_eq!(
            next_step(slot, ts("2024-01-02T00:00:30Z"), MAX_SLEEP),
            Wake::Due
        );
        // The timer fired early (clock stepped back): sleep again.
        assert_eq!(
            next_step(slot, ts("2024-01-01T23:59:59Z"), MAX_SLEEP),
            Wake::Sleep(Duration::from_secs(1))
        );
    }

    #[test]
    fn failure_backoff_doubles_from_5ms_to_1000s() {
        assert_eq!(failure_backoff(1), Duration::from_millis(5));
        assert_eq!(failure_backoff(2), Duration::from_millis(10));
        assert_eq!(failure_backoff(18), Duration::from_millis(655_360));
        assert_eq!(failure_backoff(19), Duration::from_secs(1000));
        assert_eq!(failure_backoff(u32::MAX), Duration::from_secs(1000));
        assert_eq!(failure_backoff(0), Duration::from_millis(5));
    }
}
