//! The process's two clocks, each read in one place.
//!
//! - [`Clock`]: the wall clock, the time slots are in. The supervisor, the
//!   timer wheel, the actors and their decisions read the one they were
//!   handed (`SupervisorParts::clock`), so that a test runs them on tokio's
//!   paused time; the shell's edges (an Event's time, a Lease's renewal, the
//!   CLI's "now") read [`Clock::System`]. Nothing else in `src/` reads the
//!   wall clock (`tests/layers.rs` keeps it so).
//! - [`BootInstant`]: time since boot, counting a paused VM: the fence's.
//!
//! Monotonic reads (`Instant`, tokio's) measure durations and deadlines, not
//! the time of day; tokio's paused time already moves them in tests.

mod boot;

pub use boot::BootInstant;

use jiff::{SignedDuration, Timestamp};

/// A wall clock, cheap to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The system's (`Timestamp::now`).
    System,
    /// `start` at `anchor` on tokio's clock, then moving with it: on a
    /// paused runtime (tests) it moves only when the test sleeps or
    /// everything waits.
    FollowingTokio {
        start: Timestamp,
        anchor: tokio::time::Instant,
    },
}

impl Clock {
    /// A clock reading `start` now and moving with tokio's clock from here.
    pub fn following_tokio(start: Timestamp) -> Self {
        Clock::FollowingTokio {
            start,
            anchor: tokio::time::Instant::now(),
        }
    }

    /// The time now.
    pub fn now(&self) -> Timestamp {
        match self {
            Clock::System => Timestamp::now(),
            Clock::FollowingTokio { start, anchor } => advanced(*start, anchor.elapsed()),
        }
    }
}

/// `start` moved on by `elapsed` of a monotonic clock (the wall clock of a
/// later instant, read once at an earlier one); `Timestamp::MAX` past it.
pub fn advanced(start: Timestamp, elapsed: std::time::Duration) -> Timestamp {
    SignedDuration::try_from(elapsed)
        .ok()
        .and_then(|elapsed| start.checked_add(elapsed).ok())
        .unwrap_or(Timestamp::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_clock_following_tokio_moves_only_with_tokios_time() {
        let start: Timestamp = "2024-03-01T09:29:30Z".parse().expect("a time");
        let clock = Clock::following_tokio(start);
        assert_eq!(clock.now(), start);
        tokio::time::sleep(Duration::from_secs(90)).await;
        assert_eq!(clock.now(), "2024-03-01T09:31:00Z".parse().expect("a time"));
    }

    #[test]
    fn the_system_clock_is_the_systems() {
        let before = Timestamp::now();
        let read = Clock::System.now();
        assert!(read >= before && read <= Timestamp::now());
    }
}
