//! The keys this replica owns and the actors it stopped: what the
//! supervisor's actors mirror. Each owned key has its CronJob's UID; an
//! owned key may be unarmed (its actor has not made its first decision:
//! readiness) and waiting (not started yet: its previous owner may still
//! run it). A key can be owned and stopping at once: its CronJob deleted
//! and created again under the same name, the old actor stopping while the
//! new one waits.
//!
//! Invariants, kept by every method: the unarmed and the waiting keys are
//! owned; a stopping key's entry is the UID of the actor told to stop.

use crate::bucket::Bucket;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

/// Ordered, so that every run of the same inputs gives the same commands in
/// the same order (the simulation replays seeds exactly). The unarmed and
/// waiting keys are apart from `owned`, which would otherwise hold 16 bytes
/// of "since" for every running key too (about 24 bytes a CronJob at 10^6
/// with the tree's spare room).
#[derive(Debug, Default)]
pub(super) struct Keys {
    /// Key -> its CronJob's UID.
    owned: BTreeMap<Arc<str>, Arc<str>>,
    unarmed: BTreeSet<Arc<str>>,
    /// Key -> since when it waits.
    waiting: BTreeMap<Arc<str>, Instant>,
    /// Key -> the UID of the actor told to stop, and when.
    stopping: BTreeMap<Arc<str>, (Arc<str>, Instant)>,
}

impl Keys {
    /// `key` (of the CronJob `uid`) is owned from `now`: unarmed, waiting.
    pub(super) fn gain(&mut self, key: Arc<str>, uid: Arc<str>, now: Instant) {
        self.unarmed.insert(key.clone());
        self.waiting.insert(key.clone(), now);
        self.owned.insert(key, uid);
    }

    /// Drops `key` from the owned keys; returns it with its CronJob's UID.
    pub(super) fn forget(&mut self, key: &str) -> Option<(Arc<str>, Arc<str>)> {
        let (key, uid) = self.owned.remove_entry(key)?;
        self.unarmed.remove(&key);
        self.waiting.remove(&key);
        Some((key, uid))
    }

    /// Drops `key` from the owned keys and counts its actor as stopping
    /// from `now`; returns it with its CronJob's UID.
    pub(super) fn stop(&mut self, key: &str, now: Instant) -> Option<(Arc<str>, Arc<str>)> {
        let (key, uid) = self.forget(key)?;
        self.stopping.insert(key.clone(), (uid.clone(), now));
        Some((key, uid))
    }

    /// The actor of `key` for CronJob `uid` reported stopping; whether it
    /// was the last one stopping (an older actor's report counts not).
    pub(super) fn stopped(&mut self, key: &str, uid: &str) -> bool {
        let told = self
            .stopping
            .get(key)
            .is_some_and(|(stopping, _)| **stopping == *uid);
        if told {
            self.stopping.remove(key);
        }
        told && self.stopping.is_empty()
    }

    /// The actor of `key` made its first decision.
    pub(super) fn armed(&mut self, key: &str) {
        self.unarmed.remove(key);
    }

    /// `key` starts: no longer waiting; since when it waited.
    pub(super) fn started(&mut self, key: &str) -> Option<Instant> {
        self.waiting.remove(key)
    }

    pub(super) fn all_armed(&self) -> bool {
        self.unarmed.is_empty()
    }

    pub(super) fn none_stopping(&self) -> bool {
        self.stopping.is_empty()
    }

    pub(super) fn none_waiting(&self) -> bool {
        self.waiting.is_empty()
    }

    /// How many are owned.
    pub(super) fn len(&self) -> usize {
        self.owned.len()
    }

    pub(super) fn uid(&self, key: &str) -> Option<&Arc<str>> {
        self.owned.get(key)
    }

    /// Whether an actor of CronJob `uid` is the one for `key`.
    pub(super) fn has(&self, key: &str, uid: &str) -> bool {
        self.owned.get(key).is_some_and(|owned| **owned == *uid)
    }

    pub(super) fn is_waiting(&self, key: &str) -> bool {
        self.waiting.contains_key(key)
    }

    /// `key` as stored, with since when it waits, if it does.
    pub(super) fn waiting_entry(&self, key: &str) -> Option<(&Arc<str>, &Instant)> {
        self.waiting.get_key_value(key)
    }

    /// The waiting keys, in order.
    pub(super) fn waiting(&self) -> impl Iterator<Item = &Arc<str>> {
        self.waiting.keys()
    }

    /// The owned keys, in order, each with its CronJob's UID.
    pub(super) fn owned(&self) -> impl Iterator<Item = (&Arc<str>, &Arc<str>)> {
        self.owned.iter()
    }

    /// The owned keys from `prefix` on, in order.
    pub(super) fn owned_from<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a Arc<str>, &'a Arc<str>)> + 'a {
        self.owned
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(move |(key, _)| key.starts_with(prefix))
    }

    /// Owned and started.
    pub(super) fn is_running(&self, key: &str) -> bool {
        self.owned.contains_key(key) && !self.waiting.contains_key(key)
    }

    /// Owned, and how many of them wait.
    pub(super) fn counts(&self) -> (usize, usize) {
        (self.owned.len(), self.waiting.len())
    }

    pub(super) fn stopping_count(&self) -> usize {
        self.stopping.len()
    }

    /// The buckets of the stopping actors' CronJobs (one per actor).
    pub(super) fn stopping_buckets(&self) -> impl Iterator<Item = Bucket> + '_ {
        self.stopping.values().map(|(uid, _)| Bucket::of(uid))
    }

    /// When the longest-stopping actor was told to stop.
    pub(super) fn oldest_stop(&self) -> Option<Instant> {
        self.stopping.values().map(|(_, since)| *since).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_gained_armed_started_and_stopped() {
        let now = Instant::now();
        let mut keys = Keys::default();
        keys.gain("ns/a".into(), "u1".into(), now);
        assert_eq!(keys.counts(), (1, 1));
        assert!(!keys.all_armed() && keys.is_waiting("ns/a") && !keys.is_running("ns/a"));
        keys.armed("ns/a");
        assert_eq!(keys.started("ns/a"), Some(now));
        assert!(keys.all_armed() && keys.is_running("ns/a"));
        assert_eq!(
            keys.stop("ns/a", now).map(|(_, uid)| uid),
            Some("u1".into())
        );
        assert_eq!(keys.counts(), (0, 0));
        assert!(!keys.none_stopping());
        assert!(keys.stopped("ns/a", "u1"), "the last one stopping");
        assert!(keys.none_stopping());
    }

    #[test]
    fn a_name_created_again_waits_while_its_old_actor_stops() {
        let now = Instant::now();
        let mut keys = Keys::default();
        keys.gain("ns/a".into(), "old".into(), now);
        keys.stop("ns/a", now);
        keys.gain("ns/a".into(), "new".into(), now);
        assert!(keys.has("ns/a", "new") && keys.stopping_count() == 1);
        assert!(
            !keys.stopped("ns/a", "new"),
            "the new actor's report is not the old one's"
        );
        assert_eq!(keys.stopping_count(), 1);
        assert!(keys.stopped("ns/a", "old"));
        assert!(keys.has("ns/a", "new"));
    }

    #[test]
    fn forgetting_a_key_drops_its_waiting_and_unarmed_marks() {
        let now = Instant::now();
        let mut keys = Keys::default();
        keys.gain("ns/a".into(), "u1".into(), now);
        assert!(keys.forget("ns/a").is_some());
        assert!(keys.all_armed() && keys.none_waiting() && keys.none_stopping());
        assert_eq!(keys.forget("ns/a"), None);
    }
}
