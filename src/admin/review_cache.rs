//! The metrics endpoint's memory of recent answers, as controller-runtime's
//! secure metrics serving keeps one: Prometheus scrapes every 15 to 60 s
//! with the same token, and asking the API server twice per scrape per
//! replica would be most of what a quiet cluster asks it. Pure: time is
//! passed in.
//!
//! Only answers about a valid token are kept (a let-through for
//! [`ALLOWED_FOR`], a refusal for [`FORBIDDEN_FOR`]): a caller making up
//! tokens leaves nothing here, so it cannot push real callers out. Keys
//! are SHA-256 digests of the token, never the token.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// How long a let-through is kept: a token revoked, or a binding removed,
/// still scrapes for this long (controller-runtime keeps one 5 min).
pub const ALLOWED_FOR: Duration = Duration::from_secs(60);
/// How long a valid token's refusal is kept: a binding just made takes
/// effect within this.
pub const FORBIDDEN_FOR: Duration = Duration::from_secs(10);
/// At most this many answers are kept (a few hundred bytes each).
pub const CAPACITY: usize = 1024;

/// Answers by key until they expire, at most `capacity` of them.
#[derive(Debug)]
pub struct ReviewCache<K, V> {
    answers: HashMap<K, (V, Instant)>,
    capacity: usize,
}

impl<K: Hash + Eq + Clone, V: Clone> ReviewCache<K, V> {
    pub fn new(capacity: usize) -> Self {
        Self {
            answers: HashMap::new(),
            capacity,
        }
    }

    /// The answer kept for `key`, unless it has expired by `now`.
    pub fn get(&self, key: &K, now: Instant) -> Option<V> {
        let (answer, until) = self.answers.get(key)?;
        (now < *until).then(|| answer.clone())
    }

    /// Keeps `answer` for `key` for `ttl` from `now`. When full, the
    /// expired answers go first, then the one that would expire soonest.
    pub fn put(&mut self, key: K, answer: V, now: Instant, ttl: Duration) {
        if self.capacity == 0 {
            return;
        }
        if self.answers.len() >= self.capacity && !self.answers.contains_key(&key) {
            self.answers.retain(|_, (_, until)| now < *until);
            if self.answers.len() >= self.capacity {
                let soonest = self
                    .answers
                    .iter()
                    .min_by_key(|(_, (_, until))| *until)
                    .map(|(key, _)| key.clone());
                if let Some(soonest) = soonest {
                    self.answers.remove(&soonest);
                }
            }
        }
        self.answers.insert(key, (answer, now + ttl));
    }

    pub fn len(&self) -> usize {
        self.answers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_kept_until_it_expires() {
        let t0 = Instant::now();
        let mut cache = ReviewCache::new(4);
        cache.put("a", true, t0, ALLOWED_FOR);
        cache.put("b", false, t0, FORBIDDEN_FOR);
        // (key, at, expected)
        for (key, at, expected) in [
            ("a", t0, Some(true)),
            ("a", t0 + ALLOWED_FOR - Duration::from_millis(1), Some(true)),
            ("a", t0 + ALLOWED_FOR, None),
            ("b", t0 + Duration::from_secs(9), Some(false)),
            ("b", t0 + FORBIDDEN_FOR, None),
            ("c", t0, None),
        ] {
            assert_eq!(cache.get(&key, at), expected, "{key} at +{:?}", at - t0);
        }
    }

    #[test]
    fn a_full_cache_drops_the_expired_then_the_soonest_to_expire() {
        let t0 = Instant::now();
        let secs = Duration::from_secs;
        let mut cache = ReviewCache::new(3);
        cache.put(1, "one", t0, secs(5));
        cache.put(2, "two", t0, secs(60));
        cache.put(3, "three", t0, secs(30));
        // Nothing expired yet: 1 would expire soonest.
        cache.put(4, "four", t0, secs(60));
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&1, t0), None);
        assert_eq!(cache.get(&3, t0), Some("three"));
        // At +40 s, 3 has expired: it goes, the rest stay.
        cache.put(5, "five", t0 + secs(40), secs(60));
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&2, t0 + secs(40)), Some("two"));
        assert_eq!(cache.get(&4, t0 + secs(40)), Some("four"));
        // Replacing a key already there drops nothing.
        cache.put(5, "five again", t0 + secs(41), secs(60));
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&5, t0 + secs(41)), Some("five again"));
    }

    #[test]
    fn a_cache_of_no_capacity_keeps_nothing() {
        let mut cache = ReviewCache::new(0);
        cache.put("a", 1, Instant::now(), ALLOWED_FOR);
        assert!(cache.is_empty());
    }
}
