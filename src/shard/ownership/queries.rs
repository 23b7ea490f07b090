//! What the supervisor asks of the protocol's state: who owns a CronJob,
//! what runs and waits, what `/debug/shards` shows.

use super::{JOIN_GRACE, Ownership, Phase};
use crate::bucket::Bucket;
use crate::shard::debug::{MemberReport, ShardReport};
use crate::shard::handoff::{self, KeyDecision};
use crate::shard::ring::Ring;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

impl Ownership {
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The epoch a read asked for now is of ([`super::Epoch`]).
    pub fn epoch(&self) -> super::Epoch {
        self.loads.epoch()
    }

    /// The ring this replica acts on, if any.
    pub fn target(&self) -> Option<&Arc<Ring>> {
        self.phase.target()
    }

    /// Whether this replica owns the CronJob with this UID under the ring
    /// it acts on.
    pub fn owns(&self, uid: &str) -> bool {
        self.owns_bucket(Bucket::of(uid))
    }

    /// Whether this replica owns `bucket` under the ring it acts on.
    pub fn owns_bucket(&self, bucket: Bucket) -> bool {
        self.phase
            .target()
            .is_some_and(|ring| ring.owner_of(bucket) == Some(self.me.as_str()))
    }

    /// The buckets of the keys whose actors were told to stop and have not
    /// reported back (one per such key).
    pub fn stopping_buckets(&self) -> impl Iterator<Item = Bucket> + '_ {
        self.keys.stopping_buckets()
    }

    /// Whether the ring change acted on last gave `bucket` to this replica.
    pub fn gained_now(&self, bucket: Bucket) -> bool {
        self.loads.gained_now(bucket)
    }

    /// The replica that owns the CronJob with this UID under the ring this
    /// one acts on (`None` before it has one).
    pub fn owner_of(&self, uid: &str) -> Option<&str> {
        self.phase.target().and_then(|ring| ring.owner(uid))
    }

    /// Whether `key` is owned here but waits for its previous owner.
    pub fn is_waiting(&self, key: &str) -> bool {
        self.keys.is_waiting(key)
    }

    /// The UID of the CronJob whose actor is the one for `key`.
    pub fn uid_of(&self, key: &str) -> Option<&Arc<str>> {
        self.keys.uid(key)
    }

    /// Whether an actor of CronJob `uid` is the one for `key`.
    pub fn has(&self, key: &str, uid: &str) -> bool {
        self.keys.has(key, uid)
    }

    /// The owned keys that start with `prefix`, in key order, each with
    /// its CronJob's UID.
    pub fn keys_from<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a Arc<str>, &'a Arc<str>)> + 'a {
        self.keys.owned_from(prefix)
    }

    /// Whether the actor of `key` has been started.
    pub fn is_running(&self, key: &str) -> bool {
        self.keys.is_running(key)
    }

    pub fn loads_in_flight(&self) -> usize {
        self.loads.in_flight()
    }

    /// When the membership must be judged next, apart from the periodic
    /// [`Input::Tick`]: the instant the first live peer's Lease runs out,
    /// or the end of the [`JOIN_GRACE`] while joining.
    pub fn next_expiry(&self, now: Instant) -> Option<Instant> {
        let grace_ends = match self.phase {
            Phase::Joining {
                valid_since: Some(since),
            } => Some(since + JOIN_GRACE),
            _ => None,
        };
        match (self.membership.next_expiry(now), grace_ends) {
            (Some(expiry), Some(grace)) => Some(expiry.min(grace)),
            (expiry, grace) => expiry.or(grace),
        }
    }

    /// When the longest-stopping actor was told to stop.
    pub fn oldest_stop(&self) -> Option<Instant> {
        self.keys.oldest_stop()
    }

    /// Owned actors, and how many of them still wait to start.
    pub fn counts(&self) -> (usize, usize) {
        self.keys.counts()
    }

    /// The keys whose actors run (unsorted: sorting is the reader's job).
    pub fn running_keys(&self) -> Vec<String> {
        self.keys
            .owned()
            .filter(|(key, _)| !self.keys.is_waiting(key))
            .map(|(key, _)| key.to_string())
            .collect()
    }

    /// The names of the ring's Leases seen (what a re-list must show again).
    pub fn lease_names(&self) -> Vec<String> {
        self.membership.names().map(str::to_owned).collect()
    }

    /// For `/debug/shards` (`jobs_remembered` is the supervisor's to fill).
    pub fn report(&mut self, now: Instant, lease_valid: bool, keys: bool) -> ShardReport {
        let (owned, waiting) = self.counts();
        let mut waiting_for: HashMap<String, usize> = HashMap::new();
        if let Some(target) = self.phase.target().cloned() {
            let (peers, own) = self.peers(now);
            for uid in self.keys.waiting().filter_map(|key| self.keys.uid(key)) {
                let blocker = match handoff::decide(&self.me, uid, &target, own, &peers) {
                    KeyDecision::WaitFor(peer) => peer,
                    KeyDecision::WaitForOwnView => "own view not published yet".to_owned(),
                    KeyDecision::Run => "starting".to_owned(),
                    KeyDecision::NotOurs => "stopping".to_owned(),
                };
                *waiting_for.entry(blocker).or_default() += 1;
            }
        }
        let view = self.phase.target().map(|r| handoff::encode_view(r));
        ShardReport {
            replica: self.me.clone(),
            ring: String::new(),
            phase: self.phase.name().to_owned(),
            lease_valid,
            recovering: matches!(self.phase, Phase::Recovering),
            view_digest: view.as_deref().map(handoff::view_digest),
            protocol: self.phase.target().map(|r| r.protocol().number()),
            view: view
                .map(|v| handoff::view_members(&v).map(str::to_owned).collect())
                .unwrap_or_default(),
            published: matches!(self.phase, Phase::Serving { .. }),
            members: self
                .membership
                .leases(now)
                .map(|(name, lease, since, live, deleted)| MemberReport {
                    lease: name.to_owned(),
                    holder: lease.holder.clone(),
                    live,
                    deleted,
                    last_renewal_seen_ms: since.as_millis() as u64,
                    view_digest: lease.view.as_deref().map(handoff::view_digest),
                    protocols: lease.protocols.map(|p| p.encode()),
                    view_protocol: lease.view.as_ref().map(|_| {
                        lease
                            .view_protocol
                            .map_or("unreadable".to_owned(), |p| p.to_string())
                    }),
                    build: lease.build.clone(),
                })
                .collect(),
            owned,
            running: owned - waiting,
            waiting,
            waiting_for,
            stopping: self.keys.stopping_count(),
            loads_in_flight: self.loads.in_flight(),
            jobs_remembered: 0,
            standby: Default::default(),
            keys: keys.then(|| self.running_keys()),
        }
    }
}
