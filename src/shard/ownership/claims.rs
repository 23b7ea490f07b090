//! Which owned buckets' keys may have run on another replica after this
//! replica read them: [`super::Command::Start`]'s `ran_elsewhere`, which makes the
//! actor read its CronJob again before a slot that fell due before its
//! start (`src/actor/apply/confirm.rs`).
//!
//! A gained key is read (a bulk load, or on its own) when the ring gives it
//! here, and starts once no live peer's view claims it. If its previous
//! owner was still live then (a join moves keys off a running peer, a
//! leave off a leaving one), that owner ran it after the read, and its
//! last slot reaches this replica through the CronJob and Job watches,
//! which are not ordered with the Lease watch that lets the key start. If
//! the previous owner was dead (its Lease expired on this clock, so it had
//! fenced itself), or there was none (a start of the whole ring), the read
//! already shows its every write: the slot due at a take-over runs without
//! one more request. Judged per bucket:
//! - at the gain: the previous ring's owner of the bucket is a live peer;
//! - from then on, at every Lease seen: a live peer's published view gives
//!   the bucket to that peer (a ring this replica had not seen: a Lease
//!   watch that lagged behind the peer's claim; the simulation found a
//!   claim seen only after a start of the whole ring was published, seed
//!   174, and one seen during the load from a peer that then lapsed and
//!   withdrew its view, seed 664). A peer runs a key only under a view
//!   that claims it, and that view comes on the Lease watch before this
//!   replica's own view does, so before the key can start here.

use super::{Flaw, Ownership};
use crate::bucket::{BUCKETS, Bucket};
use crate::shard::handoff;
use crate::shard::ring::Ring;
use std::time::Instant;

/// By bucket, whether its keys may have run elsewhere since they were read.
#[derive(Debug)]
pub(super) struct RanElsewhere(Vec<bool>);

impl Default for RanElsewhere {
    fn default() -> Self {
        Self(vec![false; usize::from(BUCKETS)])
    }
}

impl RanElsewhere {
    /// Whether the keys of the CronJob `uid` may have run elsewhere.
    pub(super) fn of(&self, uid: &str) -> bool {
        self.0.get(Bucket::of(uid).index()).copied().unwrap_or(true)
    }

    fn set(&mut self, bucket: Bucket, ran: bool) {
        if let Some(flag) = self.0.get_mut(bucket.index()) {
            *flag = ran;
        }
    }
}

impl Ownership {
    /// The ring acted on replaced `previous` (`None`: the first ring of a
    /// join), the gains already counted in [`super::Loads`]: each bucket
    /// gained from an owner that is live now may have run there.
    pub(super) fn note_gains(&mut self, previous: Option<&Ring>, now: Instant) {
        let live = self.live_peers(now);
        for bucket in Bucket::all() {
            if self.loads.gained_now(bucket) {
                let from_live = previous
                    .and_then(|p| p.owner_of(bucket))
                    .is_some_and(|owner| live.contains(owner));
                self.ran_elsewhere.set(bucket, from_live);
            }
        }
        self.note_claims_elsewhere(now);
    }

    /// Every owned bucket a live peer's published view gives to that peer.
    pub(super) fn note_claims_elsewhere(&mut self, now: Instant) {
        if self.flawed(Flaw::TrustTheWatchesAtHandOff) {
            return;
        }
        let Some(target) = self.phase.target().cloned() else {
            return;
        };
        let claims: Vec<(String, handoff::Claims)> = self
            .membership
            .live_views(now)
            .filter(|(member, lease)| {
                *member != self.me
                    && !handoff::shows(lease.view.as_deref(), lease.view_protocol, &target)
            })
            .map(|(member, lease)| (member.to_owned(), (lease.view.clone(), lease.view_protocol)))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|(member, (view, protocol))| {
                let claims = self.rings.claims(view.as_deref(), protocol);
                (member, claims)
            })
            .collect();
        // By index, not by each bucket's owner's name: this runs at every
        // Lease seen (the simulation's hottest path).
        let mut mine = vec![false; usize::from(BUCKETS)];
        for bucket in target.buckets_of(&self.me) {
            mine[bucket.index()] = true;
        }
        for (peer, theirs) in claims {
            for bucket in theirs.buckets(&peer) {
                if mine[bucket.index()] {
                    self.ran_elsewhere.set(bucket, true);
                }
            }
        }
    }

    /// [`super::Command::Start`]'s `ran_elsewhere` for the CronJob `uid`.
    pub(super) fn ran_elsewhere(&self, uid: &str) -> bool {
        !self.flawed(Flaw::TrustTheWatchesAtHandOff) && self.ran_elsewhere.of(uid)
    }
}
