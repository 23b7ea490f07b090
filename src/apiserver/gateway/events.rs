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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{BuildHasher, Hash, RandomState};

/// Events waiting at most, per replica. An event holds a few hundred bytes:
/// the backlog stays under a few MiB.
pub const BACKLOG: usize = 4_096;

/// Events being sent at once, each waiting for its turn in the gateway.
pub const WORKERS: usize = 4;

/// What an event is for the backlog's rules.
pub trait Queued {
    /// Events of one kind: the oldest of a kind goes first when full.
    fn kind(&self) -> &str;
    /// What makes two events equal: equal events are told once.
    type Identity<'a>: Hash + Eq
    where
        Self: 'a;
    fn identity(&self) -> Self::Identity<'_>;
}

/// A bounded FIFO of events, indexed so that a push, a pop and making room
/// cost about the same with 4,096 waiting as with one. Under a herd the
/// backlog sits full and every push makes room; a plain queue compared the
/// newcomer with every waiting event and then moved the queue's tail over
/// the evicted one, on each push.
#[derive(Debug)]
pub struct Backlog<E> {
    /// Every waiting event by its arrival number: the first is the oldest.
    waiting: BTreeMap<u64, E>,
    /// Each kind's waiting events' arrival numbers, oldest first.
    by_kind: HashMap<String, VecDeque<u64>>,
    /// The arrival numbers of the waiting events by their identity's hash:
    /// a duplicate is looked for among these only.
    by_identity: HashMap<u64, Vec<u64>>,
    hasher: RandomState,
    next: u64,
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
            waiting: BTreeMap::new(),
            by_kind: HashMap::new(),
            by_identity: HashMap::new(),
            hasher: RandomState::new(),
            next: 0,
            capacity: capacity.max(1),
        }
    }

    pub fn push(&mut self, event: E) -> Pushed {
        let hash = self.hasher.hash_one(event.identity());
        let equal_waiting = self.by_identity.get(&hash).is_some_and(|numbers| {
            numbers.iter().any(|n| {
                self.waiting
                    .get(n)
                    .is_some_and(|waiting| waiting.identity() == event.identity())
            })
        });
        if equal_waiting {
            return Pushed::Duplicate;
        }
        let mut pushed = Pushed::Queued;
        if self.waiting.len() >= self.capacity {
            let oldest_of_kind = self
                .by_kind
                .get(event.kind())
                .and_then(|numbers| numbers.front().copied());
            let victim = oldest_of_kind.or_else(|| self.waiting.keys().next().copied());
            if let Some(victim) = victim {
                self.remove(victim);
            }
            pushed = Pushed::QueuedDroppingOldest;
        }
        let number = self.next;
        self.next += 1;
        self.by_identity.entry(hash).or_default().push(number);
        match self.by_kind.get_mut(event.kind()) {
            Some(numbers) => numbers.push_back(number),
            None => {
                self.by_kind
                    .insert(event.kind().to_owned(), VecDeque::from([number]));
            }
        }
        self.waiting.insert(number, event);
        pushed
    }

    /// Drops every waiting event `gone` says so of; returns how many.
    pub fn drop_where(&mut self, gone: impl Fn(&E) -> bool) -> usize {
        let doomed: Vec<u64> = self
            .waiting
            .iter()
            .filter(|(_, e)| gone(e))
            .map(|(n, _)| *n)
            .collect();
        for number in &doomed {
            if let Some(event) = self.waiting.remove(number) {
                self.forget_identity(&event, *number);
            }
        }
        // One pass over each reason's queue, not a search per event: a
        // namespace deleted with thousands waiting drops them at once.
        let waiting = &self.waiting;
        self.by_kind.retain(|_, numbers| {
            numbers.retain(|n| waiting.contains_key(n));
            !numbers.is_empty()
        });
        doomed.len()
    }

    pub fn pop(&mut self) -> Option<E> {
        let oldest = *self.waiting.keys().next()?;
        self.remove(oldest)
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Takes the event of arrival number `number`, the oldest of its kind,
    /// out of the backlog and its indexes.
    fn remove(&mut self, number: u64) -> Option<E> {
        let event = self.waiting.remove(&number)?;
        if let Some(numbers) = self.by_kind.get_mut(event.kind()) {
            if let Some(at) = numbers.iter().position(|n| *n == number) {
                numbers.remove(at);
            }
            if numbers.is_empty() {
                self.by_kind.remove(event.kind());
            }
        }
        self.forget_identity(&event, number);
        Some(event)
    }

    fn forget_identity(&mut self, event: &E, number: u64) {
        let hash = self.hasher.hash_one(event.identity());
        if let Some(numbers) = self.by_identity.get_mut(&hash) {
            numbers.retain(|n| *n != number);
            if numbers.is_empty() {
                self.by_identity.remove(&hash);
            }
        }
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
        type Identity<'a> = (&'static str, &'static str, u32);
        fn identity(&self) -> Self::Identity<'_> {
            (self.0, self.1, self.2)
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

    /// The backlog against the plain queue it replaced (a linear search
    /// for equals, the oldest of the kind removed in place), over a long
    /// seeded mix of pushes, pops and drops on a small capacity.
    #[test]
    fn the_indexed_backlog_behaves_as_a_plain_queue() {
        const KINDS: [&str; 3] = ["Created", "Completed", "Missed"];
        const OBJECTS: [&str; 4] = ["a", "b", "c", "d"];
        let mut backlog = Backlog::new(5);
        let mut plain: VecDeque<Told> = VecDeque::new();
        let mut seed: u64 = 0x5eed;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        for step in 0..20_000 {
            match next() % 10 {
                0..=5 => {
                    let told = Told(KINDS[next() % 3], OBJECTS[next() % 4], (next() % 3) as u32);
                    let expected = if plain.contains(&told) {
                        Pushed::Duplicate
                    } else if plain.len() >= 5 {
                        let victim = plain.iter().position(|e| e.0 == told.0).unwrap_or(0);
                        plain.remove(victim);
                        plain.push_back(Told(told.0, told.1, told.2));
                        Pushed::QueuedDroppingOldest
                    } else {
                        plain.push_back(Told(told.0, told.1, told.2));
                        Pushed::Queued
                    };
                    assert_eq!(backlog.push(told), expected, "step {step}");
                }
                6..=8 => assert_eq!(backlog.pop(), plain.pop_front(), "step {step}"),
                _ => {
                    let object = OBJECTS[next() % 4];
                    let before = plain.len();
                    plain.retain(|e| e.1 != object);
                    assert_eq!(
                        backlog.drop_where(|e| e.1 == object),
                        before - plain.len(),
                        "step {step}"
                    );
                }
            }
            assert_eq!(backlog.len(), plain.len(), "step {step}");
        }
        assert_eq!(drain(&mut backlog), Vec::from(plain));
    }
}
