//! The bulk loads of gained keys in flight. Counted, not a phase: a load
//! runs while lost keys stop and while the view is published, and a ring
//! change in the middle starts another.

use std::collections::BTreeSet;
use std::sync::Arc;

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
}

impl Loads {
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
