//! A graceful stop's terms: how long a leaving replica keeps running its
//! keys while its peers load them (the drain), and when SIGTERM came in the
//! middle of a ring change (it leaves once its lost keys have stopped).

use std::time::{Duration, Instant};

#[derive(Debug)]
pub(super) struct Leave {
    drain: Duration,
    asked_midway: Option<Instant>,
}

impl Leave {
    pub(super) fn new(drain: Duration) -> Self {
        Self {
            drain,
            asked_midway: None,
        }
    }

    /// Whether keys are kept running while peers load them at all (a
    /// drain of zero stops at once).
    pub(super) fn drains(&self) -> bool {
        !self.drain.is_zero()
    }

    pub(super) fn drain(&self) -> Duration {
        self.drain
    }

    /// SIGTERM came at `now` during a ring change (the first time counts).
    pub(super) fn ask_midway(&mut self, now: Instant) {
        self.asked_midway.get_or_insert(now);
    }

    pub(super) fn asked_midway(&self) -> Option<Instant> {
        self.asked_midway
    }

    /// Whether a drain begun at `since` is over at `now`.
    pub(super) fn over(&self, since: Instant, now: Instant) -> bool {
        now.saturating_duration_since(since) >= self.drain
    }
}
