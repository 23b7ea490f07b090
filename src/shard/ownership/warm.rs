//! Warm joins and leaves ([`super`]'s sections of those names): who is in
//! the ring this replica acts on, when its view may be published, and when
//! a leaving replica may let go. Part of the pure protocol.

use super::Ownership;
use crate::shard::handoff;
use crate::shard::protocol::Negotiated;
use crate::shard::ring::{self, Ring};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// How long before a whole minute a publication that moves keys off a
/// peer still running them waits ([`near_a_whole_minute`]). Cron's slots
/// fall on whole minutes, and at 10^6 CronJobs a move takes 3-6 s (peers
/// stopping ~80,000 actors each, publishing, the echo): a join published
/// 2.5 s before 09:30:00 put that minute's slots of the moved keys 5.6-6.0
/// s late in a rolling restart (S7).
pub const HOLD_BEFORE_MINUTE: Duration = Duration::from_secs(10);

/// How long after a whole minute the hold lasts: the old owner writes that
/// minute's slots first (a stopping actor abandons the requests it has not
/// sent). A join or a leave waits at most the sum, 15 s, once.
pub const HOLD_AFTER_MINUTE: Duration = Duration::from_secs(5);

/// Whether `wall` falls within the hold around a whole minute: from
/// [`HOLD_BEFORE_MINUTE`] before it to [`HOLD_AFTER_MINUTE`] after it.
/// Whole minutes are the same in every time zone (their offsets are whole
/// minutes), so Unix time tells.
pub fn near_a_whole_minute(wall: jiff::Timestamp) -> bool {
    let into = wall.as_millisecond().rem_euclid(60_000);
    into >= 60_000 - HOLD_BEFORE_MINUTE.as_millis() as i64
        || into < HOLD_AFTER_MINUTE.as_millis() as i64
}

impl Ownership {
    /// The live peers (this replica's own Lease left out).
    pub(super) fn live_peers(&self, now: Instant) -> BTreeSet<String> {
        let mut live = self.membership.live(now);
        live.remove(&self.me);
        live
    }

    /// The live peers that are leaving.
    pub(super) fn leaving_peers(&self, now: Instant) -> BTreeSet<&str> {
        self.membership
            .live_views(now)
            .filter(|(member, lease)| lease.leaving && *member != self.me)
            .map(|(member, _)| member)
            .collect()
    }

    /// Whether every live peer that is not leaving has published a view
    /// that leaves this replica out: they have loaded its keys, or read
    /// those due first ([`Self::may_publish`]), and wait only for it to
    /// let go. A view this build cannot read leaves nobody out.
    pub(super) fn peers_took_over(&self, now: Instant) -> bool {
        self.membership
            .live_views(now)
            .filter(|(member, lease)| *member != self.me && !lease.leaving)
            .all(|(_, lease)| {
                lease.view.as_deref().is_some_and(|view| {
                    lease.view_protocol.is_some_and(ring::knows)
                        && !handoff::view_members(view).any(|m| m == self.me)
                })
            })
    }

    /// Whether a live peer has published a view other than `target`'s: it
    /// runs keys under another ring, so this replica's first view of
    /// `target` joins a running ring ([warm joins](self#warm-joins)). Peers
    /// that started with it and published `target` first run none of its
    /// keys: that is a start of the whole ring.
    pub fn joins_a_running_ring(&self, target: &Ring, now: Instant) -> bool {
        self.membership.live_views(now).any(|(member, lease)| {
            member != self.me
                && lease.view.is_some()
                && (lease.leaving
                    || !handoff::shows(lease.view.as_deref(), lease.view_protocol, target))
        })
    }

    /// The members of the ring to act on: this replica and the live peers,
    /// but not a peer that is leaving ([warm leaves](self#warm-leaves)),
    /// nor a joiner still loading (no view published) that is not in the
    /// ring yet, unless this is our own first ring ([warm
    /// joins](self#warm-joins)), nor a peer that cannot run the ring's
    /// protocol version (`negotiated`).
    pub(super) fn ring_members(&self, negotiated: &Negotiated, now: Instant) -> BTreeSet<String> {
        let current = self.phase.target();
        let mut members: BTreeSet<String> = self
            .membership
            .live_views(now)
            .filter(|(member, lease)| {
                !lease.leaving
                    && !negotiated.excludes(member)
                    && current.is_none_or(|ring| {
                        lease.view.is_some() || ring.members().iter().any(|m| &**m == *member)
                    })
            })
            .map(|(member, _)| member.to_owned())
            .collect();
        members.insert(self.me.clone());
        members
    }

    /// Whether the view may be published: at once, unless it is the first
    /// of a join into a running ring (peers move keys here as soon as they
    /// see it) or it leaves out a member that is leaving (which lets go
    /// when it sees it); those once the first lists and every load are
    /// done, or, leaving out a leaver, once the gained keys due within the
    /// standby horizon have been read on their own in this epoch
    /// ([`super::Input::DueKeysRead`]): those start the moment the leaver
    /// lets go, and the rest as the loads bring them, as at a take-over.
    /// At 10^6 CronJobs waiting for the whole load held three of four
    /// leaves of a rolling restart to their 60 s drain, and the slot due as
    /// the drain ended started 4-5 s late (S7). A first view that no live
    /// peer's view contradicts (a start of the whole ring, or a lone
    /// replica) is published once the first lists are done: no peer runs
    /// its keys, so they start as the load brings them; waiting for the
    /// whole load held a cold start of 10^6 CronJobs by 28 s (S7). Either
    /// of the two that moves keys off a live peer waits, besides, while a
    /// whole minute is near ([`Self::holds_for_the_minute`]).
    pub(super) fn may_publish(&self, target: &Ring, now: Instant) -> bool {
        let gains_ready = self.published.gains_ready(self.loads.epoch());
        let ready = (self.published.in_join() && gains_ready)
            || (self.started.watches_listed && self.loads.idle())
            || (self.started.watches_listed
                && gains_ready
                && !self.joins_a_running_ring(target, now));
        ready && !self.holds_for_the_minute(target, now)
    }

    /// Whether publishing `target`'s view now would move keys off a live
    /// peer that runs them (the first view of a join into a running ring,
    /// or a view leaving out a leaver still live) while a whole minute is
    /// near, as the last [`super::Input::Tick`]'s wall clock tells: the
    /// move would fall on that minute's slots. A take-over from a dead peer
    /// (its keys run nowhere) and a start of the whole ring do not wait,
    /// unless the same view also moves keys off a live peer: a view is
    /// published whole.
    fn holds_for_the_minute(&self, target: &Ring, now: Instant) -> bool {
        let Some((told_at, wall)) = self.wall else {
            return false;
        };
        let wall = crate::clock::advanced(wall, now.saturating_duration_since(told_at));
        near_a_whole_minute(wall)
            && ((self.published.gains_from_a_leaver() && !self.leaving_peers(now).is_empty())
                || (!self.published.in_join() && self.joins_a_running_ring(target, now)))
    }
}
