//! The bulk loads of gained keys in flight. Counted, not a phase: a load
//! runs while lost keys stop and while the view is published, and a ring
//! change in the middle starts another.

use crate::bucket::{BUCKETS, Bucket};
use crate::shard::ring::Ring;
use std::collections::BTreeSet;
use std::sync::Arc;

/// A count of the ring changes a replica acted on: a read (a bulk load, a
/// key read alone) carries the epoch it was asked for in, and counts for a
/// key only if the key's bucket has been owned since then (see
/// [`Loads::fresh`]).
pub type Epoch = u64;

#[derive(Debug, Default)]
pub(super) struct Loads {
    /// Asked for and not done.
    in_flight: usize,
    /// In flight, their Jobs not all handed over yet: no waiting key starts
    /// meanwhile (its actor must know its Jobs: a `Forbid` CronJob with a
    /// Job running must not start another). Once none is, a gained key
    /// starts as its CronJob's page arrives, not when the whole load ends.
    loading_jobs: usize,
    /// Waiting keys the watch showed during a load, before the load did: a
    /// watch resumed after a ring change replays versions older than the
    /// load's consistent read (without the previous owner's last
    /// `lastScheduleTime`), so such a key starts once the load has shown
    /// its CronJob too, or once no load is in flight. Emptied then.
    unloaded: BTreeSet<Arc<str>>,
    /// Waiting keys read on their own, with their Jobs (at a take-over,
    /// those that fall due first: [`crate::shard::standby`]): they start
    /// while the loads still hand over Jobs. Emptied once no load is in
    /// flight.
    read_alone: BTreeSet<Arc<str>>,
    /// The current epoch, and by bucket the epoch it was last gained in.
    epoch: Epoch,
    gained_in: Vec<Epoch>,
}

impl Loads {
    /// The ring acted on changed from `previous` to `target` (`None`: no
    /// ring, after a lapse): a new epoch, in which the buckets `target`
    /// gives `me` and `previous` did not are gained.
    pub(super) fn ring_changed(
        &mut self,
        target: Option<&Ring>,
        previous: Option<&Ring>,
        me: &str,
    ) {
        self.epoch += 1;
        if self.gained_in.is_empty() {
            self.gained_in = vec![0; usize::from(BUCKETS)];
        }
        let Some(target) = target else {
            return;
        };
        for bucket in Bucket::all() {
            if target.owner_of(bucket) == Some(me)
                && previous.is_none_or(|p| p.owner_of(bucket) != Some(me))
            {
                self.gained_in[bucket.index()] = self.epoch;
            }
        }
    }

    /// Whether the latest ring change gained `bucket`.
    pub(super) fn gained_now(&self, bucket: Bucket) -> bool {
        self.gained_in.get(bucket.index()) == Some(&self.epoch)
    }

    /// The epoch a read asked for now is of.
    pub(super) fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// Whether a copy of the CronJob `uid` read in `read_in` (`None`: the
    /// watch's) is no older than the CronJob's latest gain: read after
    /// the ring gave it here, so after its previous owner let it go (or,
    /// dead, could write no more). A load asked for before the key was lost
    /// and gained again is not (the simulation found one, seed 1937 of
    /// 2026-11-29: a previous owner may have run a slot in between).
    pub(super) fn fresh(&self, uid: &str, read_in: Option<Epoch>) -> bool {
        read_in.is_some_and(|epoch| {
            epoch
                >= self
                    .gained_in
                    .get(Bucket::of(uid).index())
                    .copied()
                    .unwrap_or(0)
        })
    }

    /// A load was asked for.
    pub(super) fn asked(&mut self) {
        self.in_flight += 1;
        self.loading_jobs += 1;
    }

    /// A load in flight handed its Jobs over.
    pub(super) fn jobs_handed_over(&mut self) {
        self.loading_jobs = self.loading_jobs.saturating_sub(1);
    }

    /// A load ended; `jobs_told`: it had handed its Jobs over before.
    pub(super) fn ended(&mut self, jobs_told: bool) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if !jobs_told {
            self.jobs_handed_over();
        }
    }

    pub(super) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Some load in flight has not handed its Jobs over.
    pub(super) fn loading_jobs(&self) -> bool {
        self.loading_jobs > 0
    }

    /// The watch showed the waiting `key` first: it waits for a load's copy
    /// while one is in flight.
    pub(super) fn shown_by_the_watch(&mut self, key: Arc<str>) {
        if self.in_flight > 0 {
            self.unloaded.insert(key);
        }
    }

    /// A load showed `key`; whether it was waiting for that.
    pub(super) fn shown_by_a_load(&mut self, key: &str) -> bool {
        self.unloaded.remove(key)
    }

    /// `key` was read on its own, with its Jobs, after the ring changed.
    pub(super) fn read_alone(&mut self, key: Arc<str>) {
        self.unloaded.remove(&key);
        self.read_alone.insert(key);
    }

    /// Whether `key` may start while loads still hand over Jobs: it was
    /// read on its own, with its Jobs.
    pub(super) fn knows_jobs_of(&self, key: &str) -> bool {
        self.read_alone.contains(key)
    }

    /// The keys read on their own.
    pub(super) fn read_alone_keys(&self) -> impl Iterator<Item = &Arc<str>> {
        self.read_alone.iter()
    }

    /// Whether `key` waits for a load's copy.
    pub(super) fn awaits(&self, key: &str) -> bool {
        self.unloaded.contains(key)
    }

    pub(super) fn forget(&mut self, key: &str) {
        self.unloaded.remove(key);
        self.read_alone.remove(key);
    }

    /// No load is in flight.
    pub(super) fn idle(&self) -> bool {
        self.in_flight == 0
    }

    /// Once no load is in flight, no key waits for a load's copy.
    pub(super) fn stop_awaiting(&mut self) {
        self.unloaded.clear();
        self.read_alone.clear();
    }
}
