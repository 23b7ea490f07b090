//! When a replica may start a CronJob it owns. Pure.
//!
//! Each replica publishes its *view* on its own Lease: the members of the
//! ring it acts on. It keeps one invariant: **its published view gives it
//! every key it runs.** On a change it first stops the keys the new ring
//! takes away, then publishes the new view, and only then starts keys:
//!
//! 1. a key starts only under the ring of the view this replica published,
//!    and only once its own Lease watch has shown that view back (the watch
//!    is one ordered stream, so everything written before the publication,
//!    every peer's earlier view included, has been seen);
//! 2. and only if no live peer's published view gives the key to that peer.
//!
//! Two replicas that both want a key each published before checking; the
//! one that published second sees the other's claim and waits. A peer that
//! is gone from the live set (its Lease expired on our clock, and it fenced
//! itself before that; or it released the Lease) claims nothing. A view is
//! read under the protocol version it was written in; one this build
//! cannot read claims every key ([`super::protocol`]).

use super::protocol::Protocol;
use super::ring::Ring;
use std::collections::HashMap;
use std::sync::Arc;
use twox_hash::XxHash64;

/// A view as written on a Lease: the ring's members, sorted, comma-separated
/// (protocol version 1; the version goes beside it,
/// [`super::protocol::VIEW_PROTOCOL_ANNOTATION`]).
pub fn encode_view(ring: &Ring) -> String {
    ring.members().join(",")
}

/// Whether a Lease's view (`view` written in `protocol`) is `ring`'s.
pub fn shows(view: Option<&str>, protocol: Option<Protocol>, ring: &Ring) -> bool {
    protocol == Some(ring.protocol()) && view == Some(encode_view(ring).as_str())
}

/// The members a view as written on a Lease names ([`encode_view`]'s
/// inverse).
pub fn view_members(view: &str) -> impl Iterator<Item = &str> {
    view.split(',').filter(|m| !m.is_empty())
}

/// The digest of who owns what under `ring`, its protocol version and
/// members, as a number a float holds exactly (53 bits): the metric
/// `shardcron_ring_assignment`, equal on replicas that agree.
pub fn assignment_digest(ring: &Ring) -> u64 {
    let text = format!("{}:{}", ring.protocol(), encode_view(ring));
    XxHash64::oneshot(0, text.as_bytes()) >> 11
}

/// The short digest of a view, for logs, metrics and `/debug/shards`.
pub fn view_digest(view: &str) -> String {
    format!("{:016x}", XxHash64::oneshot(0, view.as_bytes()))
}

/// Peers' published views as rings, built once per distinct view.
#[derive(Default)]
pub struct ViewRings {
    rings: HashMap<(Protocol, String), Arc<Ring>>,
}

impl ViewRings {
    /// The ring of `view` written in `protocol`; `None` if this build
    /// cannot read that version.
    pub fn ring(&mut self, protocol: Protocol, view: &str) -> Option<Arc<Ring>> {
        let key = (protocol, view.to_owned());
        if let Some(ring) = self.rings.get(&key) {
            return Some(ring.clone());
        }
        let ring = Arc::new(Ring::of(protocol, view_members(view))?);
        // Views come and go with rebalances; a handful are live at a time.
        if self.rings.len() > 64 {
            self.rings.clear();
        }
        self.rings.insert(key, ring.clone());
        Some(ring)
    }

    /// What a peer's Lease claims: its `view`, written in `protocol`
    /// (`None`: a version that does not read).
    pub fn claims(&mut self, view: Option<&str>, protocol: Option<Protocol>) -> Claims {
        match (view, protocol) {
            (None, _) => Claims::Nothing,
            (Some(view), Some(protocol)) => match self.ring(protocol, view) {
                Some(ring) => Claims::Ring(ring),
                None => Claims::Everything,
            },
            (Some(_), None) => Claims::Everything,
        }
    }
}

/// The keys a live peer's published view gives it.
#[derive(Debug, Clone)]
pub enum Claims {
    /// No view yet: it runs nothing.
    Nothing,
    /// The keys this ring gives it.
    Ring(Arc<Ring>),
    /// A view this build cannot read: any key may be its.
    Everything,
}

impl Claims {
    /// Whether `peer`, whose claims these are, may run the key `uid`.
    pub fn key(&self, peer: &str, uid: &str) -> bool {
        match self {
            Claims::Nothing => false,
            Claims::Ring(ring) => ring.owner(uid) == Some(peer),
            Claims::Everything => true,
        }
    }

    /// The buckets whose keys `peer` may run, in order.
    pub fn buckets(&self, peer: &str) -> Vec<crate::bucket::Bucket> {
        match self {
            Claims::Nothing => Vec::new(),
            Claims::Ring(ring) => ring.buckets_of(peer),
            Claims::Everything => crate::bucket::Bucket::all().collect(),
        }
    }
}

/// A live peer and what its published view claims.
pub struct Peer {
    pub name: String,
    pub claims: Claims,
}

/// What to do with a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyDecision {
    /// Not ours under the ring we move to: stop it (before publishing).
    NotOurs,
    /// Ours: run it.
    Run,
    /// Ours, but our own published view has not come back on the watch yet.
    WaitForOwnView,
    /// Ours, but this peer's published view still gives it the key.
    WaitFor(String),
}

/// Decides the CronJob with UID `uid` for replica `me` acting on `target`.
/// `own_view_seen`: whether the watch has shown our own Lease with the
/// publication of `target`'s view; `peers`: the other live members.
pub fn decide(
    me: &str,
    uid: &str,
    target: &Ring,
    own_view_seen: bool,
    peers: &[Peer],
) -> KeyDecision {
    if target.owner(uid) != Some(me) {
        return KeyDecision::NotOurs;
    }
    if !own_view_seen {
        return KeyDecision::WaitForOwnView;
    }
    match peers
        .iter()
        .find(|peer| peer.name != me && peer.claims.key(&peer.name, uid))
    {
        Some(peer) => KeyDecision::WaitFor(peer.name.clone()),
        None => KeyDecision::Run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(name: &str, view: Option<&Ring>) -> Peer {
        Peer {
            name: name.into(),
            claims: match view {
                Some(ring) => Claims::Ring(Arc::new(ring.clone())),
                None => Claims::Nothing,
            },
        }
    }

    /// A key that r0 owns with {r0} and r1 owns with {r0, r1}.
    fn moving_key(from: &Ring, to: &Ring) -> String {
        (0..1000)
            .map(crate::bucket::test_uid)
            .find(|k| from.owner(k) == Some("r0") && to.owner(k) == Some("r1"))
            .expect("some key moves")
    }

    #[test]
    fn a_gained_key_waits_for_the_previous_owner_to_publish_the_new_view() {
        let old = Ring::new(["r0"]);
        let new = Ring::new(["r0", "r1"]);
        let key = moving_key(&old, &new);
        let peers = [peer("r0", Some(&old))];
        assert_eq!(
            decide("r1", &key, &new, true, &peers),
            KeyDecision::WaitFor("r0".into())
        );
        // The old owner sees the same: not ours any more.
        assert_eq!(decide("r0", &key, &new, false, &[]), KeyDecision::NotOurs);
        // r0 stopped the key and published the new view.
        let peers = [peer("r0", Some(&new))];
        assert_eq!(decide("r1", &key, &new, true, &peers), KeyDecision::Run);
    }

    #[test]
    fn nothing_starts_before_our_own_view_comes_back() {
        let ring = Ring::new(["r0"]);
        let key = &crate::bucket::test_uid(1);
        assert_eq!(
            decide("r0", key, &ring, false, &[]),
            KeyDecision::WaitForOwnView
        );
        assert_eq!(decide("r0", key, &ring, true, &[]), KeyDecision::Run);
        let v1 = encode_view(&ring);
        assert!(shows(Some(&v1), Some(Protocol::V1), &ring));
        assert!(!shows(Some(&v1), Some(Protocol::new(2)), &ring));
        assert!(!shows(Some(&v1), None, &ring));
        assert!(!shows(Some("r0,r1"), Some(Protocol::V1), &ring));
    }

    #[test]
    fn two_replicas_that_disagree_never_both_run_a_key() {
        // r1 acts on {r0, r1}; r2 acts on {r0, r2}; each has published and
        // seen its own view, so each sees the other's (published earlier).
        let a = Ring::new(["r0", "r1"]);
        let b = Ring::new(["r0", "r2"]);
        for i in 0..2000 {
            let key = crate::bucket::test_uid(i);
            let r1 = decide("r1", &key, &a, true, &[peer("r2", Some(&b))]);
            let r2 = decide("r2", &key, &b, true, &[peer("r1", Some(&a))]);
            assert!(!(r1 == KeyDecision::Run && r2 == KeyDecision::Run), "{key}");
        }
    }

    #[test]
    fn peers_without_a_view_claim_nothing_and_digests_ignore_order() {
        let ring = Ring::new(["r0", "r1"]);
        let key = (0..100)
            .map(crate::bucket::test_uid)
            .find(|k| ring.owner(k) == Some("r0"))
            .unwrap();
        assert_eq!(
            decide("r0", &key, &ring, true, &[peer("r1", None)]),
            KeyDecision::Run
        );
        assert_eq!(
            encode_view(&Ring::new(["a", "b"])),
            encode_view(&Ring::new(["b", "a"]))
        );
        assert_ne!(
            view_digest(&encode_view(&Ring::new(["a", "b"]))),
            view_digest(&encode_view(&Ring::new(["a"])))
        );
        let mut rings = ViewRings::default();
        let ab = rings.ring(Protocol::V1, "a,b").unwrap();
        assert_eq!(ab.members().len(), 2);
        assert!(Arc::ptr_eq(&ab, &rings.ring(Protocol::V1, "a,b").unwrap()));
    }

    #[test]
    fn a_view_in_a_version_this_build_cannot_read_claims_every_key() {
        let ring = Ring::new(["r0", "r1"]);
        let mut rings = ViewRings::default();
        for (view, protocol) in [
            (Some("r0,r1"), Some(Protocol::new(99))),
            (Some("r0,r1"), None),
            (Some("whatever v99 writes"), Some(Protocol::new(99))),
        ] {
            let claims = rings.claims(view, protocol);
            assert!(
                matches!(claims, Claims::Everything),
                "{view:?} {protocol:?}"
            );
            let r1 = Peer {
                name: "r1".into(),
                claims,
            };
            for i in 0..200 {
                let key = crate::bucket::test_uid(i);
                let decision = decide("r0", &key, &ring, true, std::slice::from_ref(&r1));
                assert_ne!(decision, KeyDecision::Run, "{key}");
            }
        }
        assert!(matches!(rings.claims(None, None), Claims::Nothing));
        // The same members in a version it reads: the ring of that version.
        let Claims::Ring(v2) = rings.claims(Some("r0,r1"), Some(Protocol::new(2))) else {
            panic!("version 2 reads in the tests");
        };
        assert_eq!(v2.protocol(), Protocol::new(2));
    }
}
