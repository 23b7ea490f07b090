//! What a replica keeps, ahead of time, of the CronJobs it would gain if
//! one peer died: for each, only when it next needs its controller
//! ([`crate::reconcile::next_look`]). At a take-over the replica reads
//! first, one by one, the gained CronJobs that fall due soonest
//! (`src/apiserver/bulk/narrow.rs`), while the bulk load brings the rest:
//! at 10^6 CronJobs a dead peer's quarter takes 35-80 s to load, and
//! about 50 of its CronJobs fall due in a minute.
//!
//! Never a state to start from: a standby entry may be stale (a watch
//! event not delivered yet, the dead peer's last status write still in
//! flight), so a key starts only from a consistent read made after the
//! ring changed, the narrow one or the bulk one. A stale entry costs an
//! order, not a slot: a key it puts late starts with the bulk load, as
//! before. Pure: no I/O, time passed in.

use crate::bucket::{BUCKETS, Bucket};
use crate::shard::ring::Ring;
use jiff::Timestamp;
use std::collections::HashMap;
use std::sync::Arc;

/// How far ahead a take-over reads gained CronJobs one by one: those due
/// within it, and again every [`RESCAN`] while a load is in flight.
pub const HORIZON_SECONDS: i64 = 30;

/// How often, while a bulk load of gained keys is in flight, the gained
/// keys not loaded yet are looked at again for those now within
/// [`HORIZON_SECONDS`].
pub const RESCAN: std::time::Duration = std::time::Duration::from_secs(5);

/// At most this many gained keys are read one by one in a round (each
/// read is three requests); past it (a herd falling due at once) the bulk
/// load is the cheaper way, and brings the others.
pub const MAX_NARROW_PER_ROUND: usize = 500;

/// A set of buckets.
#[derive(Clone, PartialEq, Eq)]
pub struct BucketSet([u64; BUCKETS as usize / 64]);

impl Default for BucketSet {
    fn default() -> Self {
        Self([0; BUCKETS as usize / 64])
    }
}

impl std::fmt::Debug for BucketSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BucketSet({} buckets)", self.len())
    }
}

impl BucketSet {
    pub fn insert(&mut self, bucket: Bucket) {
        self.0[bucket.index() / 64] |= 1 << (bucket.index() % 64);
    }

    pub fn contains(&self, bucket: Bucket) -> bool {
        self.0[bucket.index() / 64] & (1 << (bucket.index() % 64)) != 0
    }

    pub fn len(&self) -> usize {
        self.0.iter().map(|word| word.count_ones() as usize).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its buckets, in order.
    pub fn buckets(&self) -> Vec<Bucket> {
        Bucket::all().filter(|b| self.contains(*b)).collect()
    }
}

impl FromIterator<Bucket> for BucketSet {
    fn from_iter<I: IntoIterator<Item = Bucket>>(buckets: I) -> Self {
        let mut set = BucketSet::default();
        for bucket in buckets {
            set.insert(bucket);
        }
        set
    }
}

/// The buckets `me` would gain if one member of `ring` left it (died,
/// expired, or left): for each other member, the ring without it. With
/// the ring's capacity, a leave may also move a few buckets between
/// survivors; those are here too. Empty when `me` is not a member or the
/// only one.
pub fn standby_buckets(ring: &Ring, me: &str) -> BucketSet {
    let mut set = BucketSet::default();
    if !ring.members().iter().any(|m| &**m == me) {
        return set;
    }
    for gone in ring.members().iter().filter(|m| &***m != me) {
        let without = ring.without(gone);
        for bucket in Bucket::all() {
            if ring.owner_of(bucket) != Some(me) && without.owner_of(bucket) == Some(me) {
                set.insert(bucket);
            }
        }
    }
    set
}

/// One standby CronJob: its bucket, and when it next needs its controller
/// (unix seconds; `i64::MAX`: never without a change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    bucket: Bucket,
    next_look: i64,
}

/// The standby CronJobs by key, and the buckets they are kept for.
/// Bounded by the CronJobs of those buckets (about one in N of the
/// cluster's with N replicas), about 100 bytes each.
#[derive(Debug, Default)]
pub struct Standby {
    buckets: BucketSet,
    entries: HashMap<Arc<str>, Entry>,
}

impl Standby {
    /// Whether CronJobs of `bucket` are kept.
    pub fn covers(&self, bucket: Bucket) -> bool {
        self.buckets.contains(bucket)
    }

    pub fn buckets(&self) -> &BucketSet {
        &self.buckets
    }

    /// The standby buckets are now `buckets`; returns those newly covered
    /// (their CronJobs are to be read). Entries of buckets no longer
    /// covered go, except those `keep` names (gained buckets whose load is
    /// in flight: their urgent keys are still to be read).
    pub fn set_buckets(
        &mut self,
        buckets: BucketSet,
        keep: impl Fn(Bucket) -> bool,
    ) -> Vec<Bucket> {
        let added = buckets
            .buckets()
            .into_iter()
            .filter(|b| !self.buckets.contains(*b))
            .collect();
        self.entries
            .retain(|_, entry| buckets.contains(entry.bucket) || keep(entry.bucket));
        self.buckets = buckets;
        added
    }

    /// `key` (of `bucket`) next needs its controller at `next_look`.
    /// Ignored for a bucket not covered.
    pub fn record(&mut self, key: &str, bucket: Bucket, next_look: Option<Timestamp>) {
        if !self.covers(bucket) {
            return;
        }
        let entry = Entry {
            bucket,
            next_look: next_look.map_or(i64::MAX, |t| t.as_second()),
        };
        match self.entries.get_mut(key) {
            Some(known) => *known = entry,
            None => {
                self.entries.insert(key.into(), entry);
            }
        }
    }

    pub fn forget(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Drops the entries of the buckets `owned` names: once their load is
    /// done, they are actors here.
    pub fn forget_owned(&mut self, owned: impl Fn(Bucket) -> bool) {
        self.entries.retain(|_, entry| !owned(entry.bucket));
    }

    /// Takes out the keys of buckets `owned` names that need their
    /// controller by `until`, soonest first, at most `limit`.
    pub fn take_due(
        &mut self,
        owned: impl Fn(Bucket) -> bool,
        until: Timestamp,
        limit: usize,
    ) -> Vec<(Arc<str>, Bucket)> {
        let until = until.as_second();
        let mut due: Vec<(i64, Arc<str>, Bucket)> = self
            .entries
            .iter()
            .filter(|(_, entry)| entry.next_look <= until && owned(entry.bucket))
            .map(|(key, entry)| (entry.next_look, key.clone(), entry.bucket))
            .collect();
        due.sort_unstable();
        due.truncate(limit);
        due.into_iter()
            .map(|(_, key, bucket)| {
                self.entries.remove(&key);
                (key, bucket)
            })
            .collect()
    }

    /// `key` (of the owned `bucket`), taken out by [`Self::take_due`], is
    /// due again now: its read alone failed.
    pub fn due_again(&mut self, key: Arc<str>, bucket: Bucket) {
        self.entries.insert(
            key,
            Entry {
                bucket,
                next_look: i64::MIN,
            },
        );
    }

    /// Whether a key of a bucket `owned` names needs its controller by
    /// `until` (not taken out yet).
    pub fn any_due(&self, owned: impl Fn(Bucket) -> bool, until: Timestamp) -> bool {
        let until = until.as_second();
        self.entries
            .values()
            .any(|entry| entry.next_look <= until && owned(entry.bucket))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    fn bucket(index: usize) -> Bucket {
        Bucket::all().nth(index).unwrap()
    }

    #[test]
    fn each_bucket_is_on_standby_where_its_owner_s_leave_puts_it() {
        let members = ["a", "b", "c", "d"];
        let ring = Ring::new(members);
        let sets: Vec<BucketSet> = members.iter().map(|m| standby_buckets(&ring, m)).collect();
        for bucket in Bucket::all() {
            let owner = ring.owner_of(bucket).unwrap();
            let without = Ring::new(members.iter().copied().filter(|m| *m != owner));
            let heir = without.owner_of(bucket).unwrap();
            let index = members.iter().position(|m| *m == heir).unwrap();
            assert!(sets[index].contains(bucket), "{bucket:?} with {heir}");
            // Never one's own bucket.
            let own = members.iter().position(|m| *m == owner).unwrap();
            assert!(!sets[own].contains(bucket));
        }
        // Every bucket has its heir, so about an even share each (a few
        // more where a leave moves buckets between survivors too): the
        // standby keys are about as many as the owned ones, not all.
        assert!(sets.iter().map(BucketSet::len).sum::<usize>() >= 1024);
        for set in &sets {
            assert!((200..=320).contains(&set.len()), "{sets:?}");
        }
        assert!(standby_buckets(&Ring::new(["a"]), "a").is_empty());
        assert!(standby_buckets(&ring, "z").is_empty());
    }

    #[test]
    fn the_soonest_due_are_taken_first_and_only_once() {
        let (b1, b2) = (bucket(1), bucket(2));
        let mut standby = Standby::default();
        let both: BucketSet = [b1, b2].into_iter().collect();
        assert_eq!(standby.set_buckets(both, |_| false), vec![b1, b2]);
        standby.record("late", b1, Some(at(100)));
        standby.record("soon", b1, Some(at(10)));
        standby.record("never", b1, None);
        standby.record("other bucket", b2, Some(at(5)));
        standby.record("uncovered", bucket(3), Some(at(1)));
        assert_eq!(standby.len(), 4);
        let owned = |b: Bucket| b == b1;
        let mut take = |until, limit| -> Vec<String> {
            standby
                .take_due(owned, at(until), limit)
                .into_iter()
                .map(|(key, bucket)| {
                    assert_eq!(bucket, b1);
                    key.to_string()
                })
                .collect()
        };
        assert_eq!(take(200, 1), ["soon"]);
        assert!(take(50, 10).is_empty());
        assert_eq!(take(200, 10), ["late"]);
        // A newer look replaces the older.
        standby.record("never", b1, Some(at(20)));
        assert_eq!(standby.take_due(owned, at(30), 10).len(), 1);
        standby.forget_owned(|b| b == b2);
        assert!(standby.is_empty());
    }

    #[test]
    fn buckets_no_longer_covered_drop_their_entries_unless_kept() {
        let (b1, b2) = (bucket(1), bucket(2));
        let mut standby = Standby::default();
        let both: BucketSet = [b1, b2].into_iter().collect();
        standby.set_buckets(both, |_| false);
        standby.record("k1", b1, Some(at(1)));
        standby.record("k2", b2, Some(at(1)));
        let only_b1: BucketSet = [b1].into_iter().collect();
        // b2 now owned and loading: kept for its urgent reads.
        assert!(standby.set_buckets(only_b1.clone(), |b| b == b2).is_empty());
        assert_eq!(standby.len(), 2);
        assert!(!standby.covers(b2));
        standby.set_buckets(only_b1, |_| false);
        assert_eq!(standby.len(), 1);
    }

    /// A key whose read alone failed is due again, first, and vouched for
    /// by no "nothing due" until it is read.
    #[test]
    fn a_key_whose_read_failed_is_due_again_first() {
        let b1 = bucket(1);
        let mut standby = Standby::default();
        standby.set_buckets([b1].into_iter().collect(), |_| false);
        standby.record("later", b1, Some(at(20)));
        standby.record("failed", b1, Some(at(10)));
        let owned = |b: Bucket| b == b1;
        let taken = standby.take_due(owned, at(15), 10);
        assert_eq!(taken.len(), 1);
        assert!(!standby.any_due(owned, at(15)));
        let (key, bucket) = taken.into_iter().next().unwrap();
        standby.due_again(key, bucket);
        assert!(standby.any_due(owned, at(0)));
        let again = standby.take_due(owned, at(30), 10);
        assert_eq!(
            again.iter().map(|(k, _)| &**k).collect::<Vec<_>>(),
            ["failed", "later"]
        );
    }
}
