//! Slots this replica knows were started but whose CronJob's status did not
//! record them, kept between one actor of a CronJob and the next. Pure.
//!
//! A replica whose fence lapses right after a create (a freeze, a cut from
//! the API server) cannot write the status that records the slot, and it
//! stops every actor. If it runs the CronJob again (it rejoins, the key
//! comes back), the new actor starts from a listed status that does not
//! show the slot, and the Job that held the slot's name may be gone by then
//! (history limit 0, `ttlSecondsAfterFinished`). Handed this memory, the
//! new actor records the slot instead of starting it again.
//!
//! Bounded: one entry per CronJob UID, taken by the CronJob's next actor;
//! at most [`CAPACITY`] entries, the one with the oldest slot dropped first
//! (entries of CronJobs that moved to another replica for good are never
//! taken).

use jiff::Timestamp;
use std::collections::HashMap;

/// At most this many CronJobs' unrecorded slots are remembered (about
/// 100 bytes each).
pub const CAPACITY: usize = 65_536;

#[derive(Debug)]
pub struct UnrecordedSlots {
    slots: HashMap<String, Timestamp>,
    capacity: usize,
}

impl Default for UnrecordedSlots {
    fn default() -> Self {
        Self::with_capacity(CAPACITY)
    }
}

impl UnrecordedSlots {
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            slots: HashMap::new(),
            capacity,
        }
    }

    /// The actor of CronJob `uid` stopped knowing `slot` was started and
    /// not recorded. A later slot replaces an earlier one.
    pub fn remember(&mut self, uid: &str, slot: Timestamp) {
        if let Some(known) = self.slots.get_mut(uid) {
            *known = (*known).max(slot);
            return;
        }
        if self.slots.len() >= self.capacity {
            let oldest = self
                .slots
                .iter()
                .min_by_key(|(_, slot)| **slot)
                .map(|(uid, _)| uid.clone());
            match oldest {
                Some(oldest) if self.slots[&oldest] < slot => {
                    self.slots.remove(&oldest);
                }
                // Full of later slots (or no room at all): this one is the
                // one to drop.
                _ => return,
            }
        }
        self.slots.insert(uid.to_owned(), slot);
    }

    /// What the next actor of CronJob `uid` must know; forgotten here.
    pub fn take(&mut self, uid: &str) -> Option<Timestamp> {
        self.slots.remove(uid)
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minute: i64) -> Timestamp {
        Timestamp::from_second(minute * 60).expect("a time")
    }

    #[test]
    fn the_next_actor_takes_the_latest_slot_once() {
        let mut memory = UnrecordedSlots::default();
        memory.remember("a", at(5));
        memory.remember("a", at(3));
        assert_eq!(memory.take("a"), Some(at(5)));
        assert_eq!(memory.take("a"), None);
        assert_eq!(memory.take("b"), None);
    }

    #[test]
    fn when_full_the_oldest_slot_is_dropped_first() {
        let mut memory = UnrecordedSlots::with_capacity(2);
        memory.remember("a", at(2));
        memory.remember("b", at(1));
        memory.remember("c", at(3));
        assert_eq!(memory.len(), 2);
        assert_eq!(memory.take("b"), None);
        // An older slot than all kept is not taken in.
        memory.remember("d", at(0));
        assert_eq!(memory.take("d"), None);
        assert_eq!(
            (memory.take("a"), memory.take("c")),
            (Some(at(2)), Some(at(3)))
        );
        assert!(memory.is_empty());
        // An entry already kept is updated even when full.
        let mut full = UnrecordedSlots::with_capacity(1);
        full.remember("a", at(1));
        full.remember("a", at(4));
        assert_eq!(full.take("a"), Some(at(4)));
    }
}
