//! Who is in the ring: one Lease per replica, judged on this replica's own
//! monotonic clock. A peer is live while its Lease has changed within its
//! `leaseDurationSeconds` of our observing it (as client-go's leader
//! election judges a leader), so clock skew between replicas never matters:
//! the renew time written in the Lease is only compared with itself.
//! A deleted Lease is not taken as proof that its holder stopped: it stays
//! live until its duration has passed without a renewal (the holder may
//! still be acting, and re-creates it on its next renewal). Only a released
//! Lease (no holder) ends membership at once. Pure: the caller feeds
//! observations and the monotonic time. It also tells which protocol
//! version the live members share ([`super::protocol::negotiate`]).

use super::protocol::{Negotiated, Protocol, Protocols, negotiate};
use crate::apiserver::resource_version::is_older;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// What one watch event of a member Lease says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseObservation {
    /// `spec.holderIdentity`; `None` once released.
    pub holder: Option<String>,
    /// Anything that changes on every renewal (the resourceVersion).
    pub renewal: String,
    pub duration: Duration,
    /// The view the member published: the members of the ring it acts on
    /// (see [`super::handoff`]).
    pub view: Option<String>,
    /// Which publication of its view this is (see
    /// [`super::ownership`]): a replica trusts its own view only once the
    /// watch shows back the publication it asked for, never an older write
    /// that happens to carry the same members.
    pub publication: Option<String>,
    /// The member is leaving: it still runs (and claims) the keys of its
    /// view, and is in no peer's ring (see [`super::ownership`]).
    pub leaving: bool,
    /// The protocol versions it speaks (`None`: its Lease's do not read).
    pub protocols: Option<Protocols>,
    /// The version its view is written in (`None`: it does not read).
    pub view_protocol: Option<Protocol>,
    /// Its release and commit, as it states them (for people only).
    pub build: Option<String>,
}

#[derive(Debug, Clone)]
struct Seen {
    lease: LeaseObservation,
    /// When we saw `lease.renewal` change last, on our clock.
    changed_at: Instant,
    deleted: bool,
}

/// The member Leases as this replica has seen them.
#[derive(Debug)]
pub struct Membership {
    leases: HashMap<String, Seen>,
    /// The protocol versions this replica speaks.
    speaks: Protocols,
    /// The incompatible peers last reported ([`Self::note_incompatible`]).
    reported_incompatible: BTreeSet<String>,
}

impl Default for Membership {
    fn default() -> Self {
        Self::speaking(Protocols::THIS_BUILD)
    }
}

impl Membership {
    /// For a replica that speaks `speaks` (tests of mixed builds; a
    /// process speaks [`Protocols::THIS_BUILD`]).
    pub fn speaking(speaks: Protocols) -> Self {
        Self {
            leases: HashMap::new(),
            speaks,
            reported_incompatible: BTreeSet::new(),
        }
    }

    /// Whether `negotiated`'s incompatible peers differ from those last
    /// reported; remembers them as reported.
    pub fn note_incompatible(&mut self, negotiated: &Negotiated) -> bool {
        let names = super::protocol::incompatible_names(negotiated);
        if names == self.reported_incompatible {
            return false;
        }
        self.reported_incompatible = names;
        true
    }

    /// The versions this replica speaks.
    pub fn speaks(&self) -> Protocols {
        self.speaks
    }

    /// The version a ring of `me` and the live peers runs at `now`, and
    /// the peers it leaves out.
    pub fn negotiate(&self, me: &str, now: Instant) -> Negotiated {
        negotiate(
            self.speaks,
            self.live_views(now)
                .filter(|(member, _)| *member != me)
                .map(|(member, lease)| (member, lease.protocols)),
        )
    }

    /// Records Lease `name` as observed at `now`. A renewal restarts its
    /// expiry; an event that changes nothing (a re-list) does not, nor does
    /// one older than what was seen (a re-list served from a lagging cache,
    /// see [`is_older`]).
    pub fn observe(&mut self, name: &str, lease: LeaseObservation, now: Instant) {
        let older = |seen: &Seen| is_older(&lease.renewal, &seen.lease.renewal);
        if self.leases.get(name).is_some_and(older) {
            return;
        }
        match self.leases.get_mut(name) {
            Some(seen) if seen.lease.renewal == lease.renewal => {
                seen.lease = lease;
                seen.deleted = false;
            }
            _ => {
                self.leases.insert(
                    name.to_owned(),
                    Seen {
                        lease,
                        changed_at: now,
                        deleted: false,
                    },
                );
            }
        }
    }

    /// Lease `name` was deleted: its holder counts as live until the
    /// Lease's duration has passed since its last renewal.
    pub fn deleted(&mut self, name: &str) {
        if let Some(seen) = self.leases.get_mut(name) {
            seen.deleted = true;
        }
    }

    /// Drops deleted Leases that have expired.
    pub fn prune(&mut self, now: Instant) {
        self.leases
            .retain(|_, seen| !seen.deleted || Self::is_live(seen, now));
    }

    fn is_live(seen: &Seen, now: Instant) -> bool {
        seen.lease.holder.is_some()
            && now.saturating_duration_since(seen.changed_at) < seen.lease.duration
    }

    /// The holders of the Leases that are live at `now`.
    pub fn live(&self, now: Instant) -> BTreeSet<String> {
        self.leases
            .values()
            .filter(|seen| Self::is_live(seen, now))
            .filter_map(|seen| seen.lease.holder.clone())
            .collect()
    }

    /// The next instant a live member's Lease expires, unless renewed
    /// before: when membership must be judged again, not a tick later.
    pub fn next_expiry(&self, now: Instant) -> Option<Instant> {
        self.leases
            .values()
            .filter(|seen| Self::is_live(seen, now))
            .map(|seen| seen.changed_at + seen.lease.duration)
            .min()
    }

    /// The live members at `now` with what their Leases last showed.
    pub fn live_views(&self, now: Instant) -> impl Iterator<Item = (&str, &LeaseObservation)> {
        self.leases
            .values()
            .filter(move |seen| Self::is_live(seen, now))
            .filter_map(|seen| Some((seen.lease.holder.as_deref()?, &seen.lease)))
    }

    /// The names of every Lease seen.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.leases.keys().map(String::as_str)
    }

    /// Every Lease seen, for `/debug/shards`: name, observation, time since
    /// its last renewal was seen, liveness at `now`, deleted.
    pub fn leases(
        &self,
        now: Instant,
    ) -> impl Iterator<Item = (&str, &LeaseObservation, Duration, bool, bool)> {
        self.leases.iter().map(move |(name, seen)| {
            (
                name.as_str(),
                &seen.lease,
                now.saturating_duration_since(seen.changed_at),
                Self::is_live(seen, now),
                seen.deleted,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(15);

    fn lease(holder: &str, renewal: &str, view: Option<&str>) -> LeaseObservation {
        LeaseObservation {
            holder: Some(holder.into()),
            renewal: renewal.into(),
            duration: D,
            view: view.map(Into::into),
            publication: None,
            leaving: false,
            protocols: Some(Protocols::THIS_BUILD),
            view_protocol: Some(Protocol::V1),
            build: None,
        }
    }

    #[test]
    fn a_member_expires_after_its_duration_without_renewal_on_our_clock() {
        let t0 = Instant::now();
        let mut m = Membership::default();
        m.observe("r0", lease("r0", "1", None), t0);
        m.observe("r1", lease("r1", "1", None), t0);
        assert_eq!(m.live(t0).len(), 2);
        // r1 renews, r0 does not; a re-list of r0 (same renewal) is no renewal.
        m.observe("r1", lease("r1", "2", None), t0 + Duration::from_secs(10));
        m.observe("r0", lease("r0", "1", None), t0 + Duration::from_secs(10));
        let later = t0 + D;
        assert_eq!(m.live(later), BTreeSet::from(["r1".to_string()]));
        assert!(m.live(t0 + Duration::from_secs(25)).is_empty());
    }

    #[test]
    fn the_next_expiry_is_the_earliest_live_lease_running_out() {
        let t0 = Instant::now();
        let mut m = Membership::default();
        assert_eq!(m.next_expiry(t0), None);
        m.observe("r0", lease("r0", "1", None), t0);
        m.observe("r1", lease("r1", "1", None), t0 + Duration::from_secs(3));
        assert_eq!(m.next_expiry(t0), Some(t0 + D));
        // Live until then, and not at that instant.
        assert_eq!(m.live(t0 + D - Duration::from_nanos(1)).len(), 2);
        assert_eq!(m.live(t0 + D), BTreeSet::from(["r1".to_string()]));
        assert_eq!(m.next_expiry(t0 + D), Some(t0 + Duration::from_secs(18)));
        assert_eq!(m.next_expiry(t0 + Duration::from_secs(18)), None);
    }

    #[test]
    fn released_leases_are_gone_at_once_deleted_ones_when_they_expire() {
        let t0 = Instant::now();
        let mut m = Membership::default();
        m.observe("r0", lease("r0", "1", None), t0);
        m.observe(
            "r0",
            LeaseObservation {
                holder: None,
                ..lease("r0", "2", None)
            },
            t0,
        );
        assert!(m.live(t0).is_empty());
        m.observe("r1", lease("r1", "1", None), t0);
        m.deleted("r1");
        m.prune(t0);
        assert_eq!(m.live(t0), BTreeSet::from(["r1".to_string()]));
        m.prune(t0 + D);
        assert!(m.live(t0 + D).is_empty());
        assert_eq!(m.leases(t0 + D).count(), 1, "r0's released Lease stays");
        // Re-created by its holder: live again.
        m.observe("r1", lease("r1", "7", None), t0 + D);
        assert_eq!(m.live(t0 + D).len(), 1);
    }

    #[test]
    fn an_older_version_of_a_lease_changes_nothing() {
        let t0 = Instant::now();
        let mut m = Membership::default();
        m.observe("r0", lease("r0", "12", Some("r0,r1")), t0);
        m.observe("r0", lease("r0", "9", Some("r0")), t0 + D);
        assert!(m.live(t0 + D).is_empty(), "a stale version is no renewal");
        let views: Vec<_> = m.live_views(t0).map(|(_, l)| l.view.clone()).collect();
        assert_eq!(views, [Some("r0,r1".to_string())]);
    }

    #[test]
    fn the_live_peers_negotiate_the_version_and_expired_ones_count_for_nothing() {
        let t0 = Instant::now();
        let mut m = Membership::speaking(Protocols::THIS_BUILD);
        m.observe("me", lease("me", "1", None), t0);
        m.observe(
            "odd",
            LeaseObservation {
                protocols: Protocols::of_lease(Some("900")),
                ..lease("odd", "1", None)
            },
            t0,
        );
        m.observe("r1", lease("r1", "1", None), t0 + D / 2);
        let now = m.negotiate("me", t0);
        assert_eq!(now.protocol, Protocol::V1);
        assert!(now.excludes("odd") && !now.excludes("r1") && !now.excludes("me"));
        assert!(m.negotiate("me", t0 + D).incompatible.is_empty());
    }

    #[test]
    fn views_are_read_only_from_live_members() {
        let t0 = Instant::now();
        let mut m = Membership::default();
        m.observe("r0", lease("r0", "1", Some("abc")), t0);
        let views = |at| {
            m.live_views(at)
                .map(|(member, lease)| (member, lease.view.as_deref()))
                .collect::<Vec<_>>()
        };
        assert_eq!(views(t0), [("r0", Some("abc"))]);
        assert!(views(t0 + D).is_empty());
    }
}
