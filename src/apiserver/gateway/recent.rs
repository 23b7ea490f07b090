//! A map that forgets: at most `capacity` entries, each stamped with the
//! time it was last touched; when full, the entry touched longest ago is
//! forgotten first, and entries untouched since a cut-off can be forgotten
//! in the order they were touched. Pure: time is passed in. What the
//! Events' series ([`super::event_recorder`]) and budgets
//! ([`super::event_budget`]) remember.

use jiff::Timestamp;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

#[derive(Debug)]
pub struct RecentMap<K, V> {
    entries: HashMap<K, (Timestamp, V)>,
    /// Keys in the order they were touched, with that time; an entry whose
    /// key was touched again since is stale and skipped.
    order: VecDeque<(Timestamp, K)>,
    capacity: usize,
}

impl<K: Hash + Eq + Clone, V> RecentMap<K, V> {
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    pub fn get(&self, key: &K) -> Option<&V> {
        self.entries.get(key).map(|(_, value)| value)
    }

    /// Sets `key`'s value, touched at `now`; forgets the entry touched
    /// longest ago if that makes one too many.
    pub fn insert(&mut self, key: K, value: V, now: Timestamp) {
        self.entries.insert(key.clone(), (now, value));
        self.order.push_back((now, key));
        while self.entries.len() > self.capacity {
            let Some((at, oldest)) = self.order.pop_front() else {
                break;
            };
            self.forget_if_last_touched(&oldest, at);
        }
        // Touches again leave stale entries behind: never more than one
        // per entry plus one per capacity.
        if self.order.len() > 2 * self.capacity {
            let entries = &self.entries;
            self.order
                .retain(|(at, key)| entries.get(key).is_some_and(|(touched, _)| touched == at));
        }
    }

    /// Forgets the entries last touched at or before `cutoff`.
    pub fn forget_touched_until(&mut self, cutoff: Timestamp) {
        while let Some((at, _)) = self.order.front() {
            if *at > cutoff {
                break;
            }
            if let Some((at, key)) = self.order.pop_front() {
                self.forget_if_last_touched(&key, at);
            }
        }
    }

    /// Forgets `key` unless it was touched again after `at` (then this
    /// entry of the order is stale: a later one stands for it).
    fn forget_if_last_touched(&mut self, key: &K, at: Timestamp) {
        if self
            .entries
            .get(key)
            .is_some_and(|(touched, _)| *touched <= at)
        {
            self.entries.remove(key);
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many touches are remembered in order (for the bound's test).
    #[cfg(test)]
    pub fn order_len(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    #[test]
    fn when_full_the_entry_touched_longest_ago_is_forgotten() {
        let mut map = RecentMap::new(2);
        map.insert("a", 1, at(0));
        map.insert("b", 2, at(1));
        map.insert("a", 3, at(2)); // a touched again: b is now the oldest
        map.insert("c", 4, at(3));
        assert_eq!(
            (map.get(&"a"), map.get(&"b"), map.get(&"c")),
            (Some(&3), None, Some(&4))
        );
    }

    #[test]
    fn entries_untouched_since_the_cutoff_are_forgotten() {
        let mut map = RecentMap::new(8);
        map.insert("a", 1, at(0));
        map.insert("b", 2, at(10));
        map.insert("a", 3, at(20));
        map.forget_touched_until(at(10));
        assert_eq!((map.get(&"a"), map.get(&"b")), (Some(&3), None));
        map.forget_touched_until(at(20));
        assert!(map.is_empty());
    }

    #[test]
    fn touches_leave_the_order_bounded() {
        let mut map = RecentMap::new(4);
        for second in 0..1_000 {
            map.insert("same", second, at(second));
        }
        assert_eq!(map.len(), 1);
        assert!(map.order_len() <= 2 * 4 + 1, "{}", map.order_len());
    }
}
