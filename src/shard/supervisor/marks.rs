//! Two instants the supervisor keeps between messages: the one-off tick
//! armed for a peer's Lease that runs out before the periodic tick (a
//! failover that much shorter), and when the ring changed with the view
//! not yet published (the hand-off's losing side is timed from there,
//! `shardcron_handoff_publish_seconds`).

use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub(super) struct Marks {
    /// The expiry a one-off tick is armed for; at most one at a time.
    expiry_armed: Option<Instant>,
    /// The first ring change since the view was last published.
    unpublished_since: Option<Instant>,
}

impl Marks {
    /// A peer's Lease runs out at `expiry`: the wait before a one-off tick
    /// judges it, if one is to be armed (the periodic tick, every `tick`,
    /// comes sooner; or one is armed for this expiry or an earlier one).
    pub(super) fn arm_expiry(
        &mut self,
        expiry: Instant,
        now: Instant,
        tick: Duration,
    ) -> Option<Duration> {
        let wait = expiry.saturating_duration_since(now);
        if wait >= tick || self.expiry_armed.is_some_and(|armed| armed <= expiry) {
            return None;
        }
        self.expiry_armed = Some(expiry);
        Some(wait)
    }

    /// The one-off tick ran.
    pub(super) fn expiry_judged(&mut self) {
        self.expiry_armed = None;
    }

    /// The ring changed at `now`; the first change since the last
    /// publication is the one kept.
    pub(super) fn ring_changed(&mut self, now: Instant) {
        self.unpublished_since.get_or_insert(now);
    }

    /// The view is published at `now`: how long since the ring changed
    /// (`None`: it did not since the last publication).
    pub(super) fn published(&mut self, now: Instant) -> Option<Duration> {
        self.unpublished_since
            .take()
            .map(|since| now.saturating_duration_since(since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_secs(1);

    #[test]
    fn one_expiry_tick_at_a_time_the_earliest() {
        let now = Instant::now();
        let ms = Duration::from_millis;
        let mut marks = Marks::default();
        assert_eq!(
            marks.arm_expiry(now + TICK, now, TICK),
            None,
            "the periodic tick is as soon"
        );
        assert_eq!(marks.arm_expiry(now + ms(600), now, TICK), Some(ms(600)));
        assert_eq!(
            marks.arm_expiry(now + ms(800), now, TICK),
            None,
            "a sooner one is armed"
        );
        assert_eq!(
            marks.arm_expiry(now + ms(600), now, TICK),
            None,
            "this one is armed"
        );
        assert_eq!(
            marks.arm_expiry(now + ms(300), now, TICK),
            Some(ms(300)),
            "a sooner one"
        );
        marks.expiry_judged();
        assert_eq!(marks.arm_expiry(now + ms(800), now, TICK), Some(ms(800)));
        assert_eq!(
            marks.arm_expiry(now, now + ms(5), TICK),
            Some(Duration::ZERO),
            "an expiry past is judged at once"
        );
    }

    #[test]
    fn the_publication_is_timed_from_the_first_ring_change() {
        let now = Instant::now();
        let s = Duration::from_secs;
        let mut marks = Marks::default();
        assert_eq!(marks.published(now), None);
        marks.ring_changed(now);
        marks.ring_changed(now + s(2));
        assert_eq!(marks.published(now + s(3)), Some(s(3)));
        assert_eq!(marks.published(now + s(4)), None, "once");
    }
}
