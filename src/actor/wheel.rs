//! One timer for all the CronJob actors of a replica: a map of wake-ups,
//! earliest first, and one task that sleeps until the earliest and tells
//! each due actor ([`Woken`]).
//!
//! Why not a timer per actor: each would be a boxed future with a tokio
//! `Sleep` inside it (81 bytes of an idle actor's heap, docs/performance.md)
//! waking every [`MAX_SLEEP`] to read the wall clock again, so a replica
//! with 250,000 idle actors would wake about 4,000 times a second doing
//! nothing. Here an idle actor costs one map entry (its wake-up and a weak
//! address), and one task reads the wall clock for all of them: at the
//! earliest wake-up, and at least every [`MAX_SLEEP`], so a wall-clock step
//! is noticed within it.
//!
//! The actor keeps its identity: each actor still owns its one wake-up
//! ([`WakeKey`]); arming again replaces it, and a [`Woken`] for a key the
//! actor no longer holds is ignored.
//!
//! Bounds: at most one entry per actor (arming removes the one before;
//! a stopping actor removes its own), so the map is as large as the
//! replica's idle actors; at most one [`Woken`] in an actor's mailbox from
//! here at a time (the entry is removed when it is sent).

use super::runtime::{CellActor, WeakCellRef};
use super::timer::{self, MAX_SLEEP, Wake};
use crate::clock::Clock;
use jiff::Timestamp;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// One armed wake-up: its instant (wall clock) and a sequence number that
/// tells apart two armings for the same instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct WakeKey {
    at: Timestamp,
    seq: u64,
}

impl WakeKey {
    pub fn at(&self) -> Timestamp {
        self.at
    }
}

/// The wheel tells an actor that its wake-up `0` has come.
#[derive(Debug)]
pub struct Woken(pub WakeKey);

struct Entries<A: CellActor> {
    by_time: BTreeMap<WakeKey, WeakCellRef<A>>,
    next_seq: u64,
}

struct Wheel<A: CellActor> {
    entries: Mutex<Entries<A>>,
    /// Woken when a wake-up earlier than every other is armed.
    earlier: Notify,
    clock: Clock,
}

impl<A: CellActor> Wheel<A> {
    fn lock(&self) -> MutexGuard<'_, Entries<A>> {
        // A panic elsewhere while holding it leaves a consistent map (every
        // change is one insert or remove).
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A handle on the replica's wheel for actors of type `A` (the CronJob
/// actor), cheap to clone. The wheel's task ends (within [`MAX_SLEEP`])
/// once every handle is dropped.
pub struct TimerWheel<A: CellActor> {
    wheel: Arc<Wheel<A>>,
}

impl<A: CellActor> Clone for TimerWheel<A> {
    fn clone(&self) -> Self {
        Self {
            wheel: self.wheel.clone(),
        }
    }
}

impl<A> TimerWheel<A>
where
    A: CellActor,
    A::Message: From<Woken>,
{
    /// Starts the wheel's task on the current tokio runtime, reading the
    /// wall clock with `clock` (the supervisor's).
    pub fn start(clock: Clock) -> Self {
        let wheel = Arc::new(Wheel {
            entries: Mutex::new(Entries {
                by_time: BTreeMap::new(),
                next_seq: 0,
            }),
            earlier: Notify::new(),
            clock,
        });
        tokio::spawn(turn(Arc::downgrade(&wheel)));
        Self { wheel }
    }

    /// Arms a wake-up of `actor` at `at`; the key disarms it.
    pub fn arm(&self, at: Timestamp, actor: WeakCellRef<A>) -> WakeKey {
        let (key, earliest) = {
            let mut entries = self.wheel.lock();
            let key = WakeKey {
                at,
                seq: entries.next_seq,
            };
            entries.next_seq += 1;
            let earliest = entries
                .by_time
                .first_key_value()
                .is_none_or(|(first, _)| key < *first);
            entries.by_time.insert(key, actor);
            (key, earliest)
        };
        if earliest {
            self.wheel.earlier.notify_one();
        }
        key
    }

    /// Removes a wake-up (one already sent is simply gone).
    pub fn disarm(&self, key: WakeKey) {
        self.wheel.lock().by_time.remove(&key);
    }

    /// Wake-ups armed.
    pub fn len(&self) -> usize {
        self.wheel.lock().by_time.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The wheel's task: sends what is due, sleeps until the next wake-up (at
/// most [`MAX_SLEEP`]) or until an earlier one is armed.
async fn turn<A>(wheel: Weak<Wheel<A>>)
where
    A: CellActor,
    A::Message: From<Woken>,
{
    while let Some(wheel) = wheel.upgrade() {
        let now = wheel.clock.now();
        let (due, next) = take_due(&mut wheel.lock().by_time, now);
        for (key, actor) in due {
            if let Some(actor) = actor.upgrade() {
                actor.post(Woken(key));
            }
        }
        let sleep = match next.map(|at| timer::next_step(at, now, MAX_SLEEP)) {
            None => MAX_SLEEP,
            Some(Wake::Due) => Duration::ZERO,
            Some(Wake::Sleep(sleep)) => sleep,
        };
        tokio::select! {
            () = tokio::time::sleep(sleep) => {}
            () = wheel.earlier.notified() => {}
        }
    }
}

/// Removes and returns the entries due at `now` (their instant at or
/// before it), and the instant of the next one left. Pure.
fn take_due<V>(
    by_time: &mut BTreeMap<WakeKey, V>,
    now: Timestamp,
) -> (Vec<(WakeKey, V)>, Option<Timestamp>) {
    let mut due = Vec::new();
    while let Some(first) = by_time.first_entry() {
        if first.key().at > now {
            break;
        }
        due.push(first.remove_entry());
    }
    let next = by_time.first_key_value().map(|(key, _)| key.at);
    (due, next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::SignedDuration;

    fn plus(at: Timestamp, seconds: i64) -> Timestamp {
        at.checked_add(SignedDuration::from_secs(seconds)).unwrap()
    }

    fn key(at: Timestamp, seq: u64) -> WakeKey {
        WakeKey { at, seq }
    }

    #[test]
    fn only_what_is_due_is_taken_earliest_first_and_the_next_is_named() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut map = BTreeMap::new();
        map.insert(key(plus(t0, 60), 0), "later");
        map.insert(key(t0, 2), "second at t0");
        map.insert(key(t0, 1), "first at t0");
        map.insert(key(plus(t0, -5), 3), "overdue");
        let (due, next) = take_due(&mut map, t0);
        let names: Vec<&str> = due.iter().map(|(_, v)| *v).collect();
        assert_eq!(names, ["overdue", "first at t0", "second at t0"]);
        assert_eq!(next, Some(plus(t0, 60)));
        assert_eq!(map.len(), 1);
        let (due, next) = take_due(&mut map, plus(t0, 59));
        assert!(due.is_empty());
        assert_eq!(next, Some(plus(t0, 60)));
        let (due, next) = take_due(&mut map, plus(t0, 61));
        assert_eq!(due.len(), 1);
        assert_eq!(next, None);
    }
}
