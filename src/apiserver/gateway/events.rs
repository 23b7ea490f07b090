//! The Events waiting to be recorded: a bounded backlog, drained by a few
//! workers through the gateway at its lowest priority. Pure backlog, thin
//! workers.
//!
//! Under sustained saturation the API server takes fewer events than the
//! controller has to say; an unbounded queue would grow against the pod's
//! memory limit. As upstream's recorder does (its spam filter and
//! aggregation), the backlog keeps what is worth telling: an event equal
//! to one already waiting (same object, reason and message) is not queued
//! twice, and when the backlog is full the oldest waiting event of the
//! newcomer's reason makes room (else the oldest of all), so one noisy
//! reason cannot push out the rest. Each event not recorded is counted in
//! `shardcron_events_dropped_total`.

use std::collections::VecDeque;

/// Events waiting at most, per replica. An event holds a few hundred bytes:
/// the backlog stays under a few MiB.
pub const BACKLOG: usize = 4_096;

/// Events being sent at once, each waiting for its turn in the gateway.
pub const WORKERS: usize = 4;

/// What an event is for the backlog's rules.
pub trait Queued {
    /// Events of one kind: the oldest of a kind goes first when full.
    fn kind(&self) -> &str;
    /// Equal events are told once.
    fn same_as(&self, other: &Self) -> bool;
}

/// A bounded FIFO of events.
#[derive(Debug)]
pub struct Backlog<E> {
    waiting: VecDeque<E>,
    capacity: usize,
}

/// What [`Backlog::push`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Pushed {
    Queued,
    /// An equal event was already waiting.
    Duplicate,
    /// Queued, and an older event was dropped to make room.
    QueuedDroppingOldest,
}

impl<E: Queued> Backlog<E> {
    pub fn new(capacity: usize) -> Self {
        Backlog {
            waiting: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    pub fn push(&mut self, event: E) -> Pushed {
        if self.waiting.iter().any(|e| e.same_as(&event)) {
            return Pushed::Duplicate;
        }
        let mut pushed = Pushed::Queued;
        if self.waiting.len() >= self.capacity {
            let victim = self
                .waiting
                .iter()
                .position(|e| e.kind() == event.kind())
                .unwrap_or(0);
            self.waiting.remove(victim);
            pushed = Pushed::QueuedDroppingOldest;
        }
        self.waiting.push_back(event);
        pushed
    }

    /// Drops every waiting event `gone` says so of; returns how many.
    pub fn drop_where(&mut self, gone: impl Fn(&E) -> bool) -> usize {
        let before = self.waiting.len();
        self.waiting.retain(|e| !gone(e));
        before - self.waiting.len()
    }

    pub fn pop(&mut self) -> Option<E> {
        self.waiting.pop_front()
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Told(&'static str, &'static str, u32);

    impl Queued for Told {
        fn kind(&self) -> &str {
            self.0
        }
        fn same_as(&self, other: &Self) -> bool {
            self == other
        }
    }

    fn drain(backlog: &mut Backlog<Told>) -> Vec<Told> {
        std::iter::from_fn(|| backlog.pop()).collect()
    }

    #[test]
    fn first_in_first_out_and_equal_events_told_once() {
        let mut backlog = Backlog::new(8);
        assert_eq!(backlog.push(Told("Created", "a", 1)), Pushed::Queued);
        assert_eq!(backlog.push(Told("Created", "a", 1)), Pushed::Duplicate);
        assert_eq!(backlog.push(Told("Created", "b", 1)), Pushed::Queued);
        assert_eq!(
            drain(&mut backlog),
            [Told("Created", "a", 1), Told("Created", "b", 1)]
        );
    }

    #[test]
    fn when_full_the_oldest_of_the_newcomers_kind_goes_first() {
        let mut backlog = Backlog::new(3);
        backlog.push(Told("Missed", "a", 1));
        backlog.push(Told("Created", "b", 1));
        backlog.push(Told("Created", "c", 1));
        assert_eq!(
            backlog.push(Told("Created", "d", 1)),
            Pushed::QueuedDroppingOldest
        );
        assert_eq!(
            drain(&mut backlog),
            [
                Told("Missed", "a", 1),
                Told("Created", "c", 1),
                Told("Created", "d", 1)
            ],
            "the rare Missed survives a flood of Created"
        );
    }

    #[test]
    fn the_events_of_a_namespace_gone_are_dropped_and_counted() {
        let mut backlog = Backlog::new(8);
        backlog.push(Told("Created", "gone", 1));
        backlog.push(Told("Created", "kept", 1));
        backlog.push(Told("Missed", "gone", 2));
        assert_eq!(backlog.drop_where(|e| e.1 == "gone"), 2);
        assert_eq!(drain(&mut backlog), [Told("Created", "kept", 1)]);
        assert_eq!(backlog.drop_where(|e| e.1 == "gone"), 0);
    }

    #[test]
    fn a_new_kind_in_a_full_backlog_drops_the_oldest_of_all_and_the_bound_holds() {
        let mut backlog = Backlog::new(2);
        for n in 0..1_000 {
            backlog.push(Told("Created", "x", n));
            assert!(backlog.len() <= 2);
        }
        backlog.push(Told("Failed", "y", 0));
        assert_eq!(
            drain(&mut backlog),
            [Told("Created", "x", 999), Told("Failed", "y", 0)]
        );
        assert!(backlog.is_empty());
    }
}
