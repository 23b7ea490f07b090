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
//! itself before that; or it released the Lease) claims nothing.

use super::ring::Ring;
use std::collections::HashMap;
use std::sync::Arc;
use twox_hash::XxHash64;

/// A view as written on a Lease: the ring's members, sorted, comma-separated.
pub fn encode_view(ring: &Ring) -> String {
    ring.members().join(",")
}

/// The members a view as written on a Lease names ([`encode_view`]'s
/// inverse).
pub fn view_members(view: &str) -> impl Iterator<Item = &str> {
    view.split(',').filter(|m| !m.is_empty())
}

/// The short digest of a view, for logs, metrics and `/debug/shards`.
pub fn view_digest(view: &str) -> String {
    format!("{:016x}", XxHash64::oneshot(0, view.as_bytes()))
}

/// Peers' published views as rings, built once per distinct view.
#[derive(Default)]
pub struct ViewRings {
    rings: HashMap<String, Arc<Ring>>,
}

impl ViewRings {
    pub fn ring(&mut self, view: &str) -> Arc<Ring> {
        if let Some(ring) = self.rings.get(view) {
            return ring.clone();
        }
        // Views come and go with rebalances; a handful are live at a time.
        if self.rings.len() > 64 {
            self.rings.clear();
        }
        let ring = Arc::new(Ring::new(view_members(view)));
        self.rings.insert(view.to_owned(), ring.clone());
        ring
    }
}

/// A live peer and the ring of the view it published (`None`: no view yet,
/// so it runs nothing).
pub struct Peer {
    pub name: String,
    pub ring: Option<Arc<Ring>>,
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
/// `own_view_seen`: the view on our own Lease as the watch last showed it;
/// `peers`: the other live members.
pub fn decide(
    me: &str,
    uid: &str,
    target: &Ring,
    own_view_seen: Option<&str>,
    peers: &[Peer],
) -> KeyDecision {
    if target.owner(uid) != Some(me) {
        return KeyDecision::NotOurs;
    }
    if own_view_seen != Some(encode_view(target).as_str()) {
        return KeyDecision::WaitForOwnView;
    }
    match peers.iter().find(|peer| {
        peer.name != me
            && peer
                .ring
                .as_ref()
                .is_some_and(|ring| ring.owner(uid) == Some(peer.name.as_str()))
    }) {
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
            ring: view.map(|r| Arc::new(r.clone())),
        }
    }

    /// A key that r0 owns with {r0} and r1 owns with {r0, r1}.
    fn moving_key(from: &Ring, to: &Ring) -> String {
        (0..1000)
            .map(crate::apiserver::bucket::test_uid)
            .find(|k| from.owner(k) == Some("r0") && to.owner(k) == Some("r1"))
            .expect("some key moves")
    }

    #[test]
    fn a_gained_key_waits_for_the_previous_owner_to_publish_the_new_view() {
        let old = Ring::new(["r0"]);
        let new = Ring::new(["r0", "r1"]);
        let key = moving_key(&old, &new);
        let seen = encode_view(&new);
        let peers = [peer("r0", Some(&old))];
        assert_eq!(
            decide("r1", &key, &new, Some(&seen), &peers),
            KeyDecision::WaitFor("r0".into())
        );
        // The old owner sees the same: not ours any more.
        assert_eq!(decide("r0", &key, &new, None, &[]), KeyDecision::NotOurs);
        // r0 stopped the key and published the new view.
        let peers = [peer("r0", Some(&new))];
        assert_eq!(
            decide("r1", &key, &new, Some(&seen), &peers),
            KeyDecision::Run
        );
    }

    #[test]
    fn nothing_starts_before_our_own_view_comes_back() {
        let ring = Ring::new(["r0"]);
        let key = &crate::apiserver::bucket::test_uid(1);
        assert_eq!(
            decide("r0", key, &ring, None, &[]),
            KeyDecision::WaitForOwnView
        );
        let stale = encode_view(&Ring::new(["r0", "r1"]));
        assert_eq!(
            decide("r0", key, &ring, Some(&stale), &[]),
            KeyDecision::WaitForOwnView
        );
        let seen = encode_view(&ring);
        assert_eq!(decide("r0", key, &ring, Some(&seen), &[]), KeyDecision::Run);
    }

    #[test]
    fn two_replicas_that_disagree_never_both_run_a_key() {
        // r1 acts on {r0, r1}; r2 acts on {r0, r2}; each has published and
        // seen its own view, so each sees the other's (published earlier).
        let a = Ring::new(["r0", "r1"]);
        let b = Ring::new(["r0", "r2"]);
        for i in 0..2000 {
            let key = crate::apiserver::bucket::test_uid(i);
            let r1 = decide(
                "r1",
                &key,
                &a,
                Some(&encode_view(&a)),
                &[peer("r2", Some(&b))],
            );
            let r2 = decide(
                "r2",
                &key,
                &b,
                Some(&encode_view(&b)),
                &[peer("r1", Some(&a))],
            );
            assert!(!(r1 == KeyDecision::Run && r2 == KeyDecision::Run), "{key}");
        }
    }

    #[test]
    fn peers_without_a_view_claim_nothing_and_digests_ignore_order() {
        let ring = Ring::new(["r0", "r1"]);
        let key = (0..100)
            .map(crate::apiserver::bucket::test_uid)
            .find(|k| ring.owner(k) == Some("r0"))
            .unwrap();
        let seen = encode_view(&ring);
        assert_eq!(
            decide("r0", &key, &ring, Some(&seen), &[peer("r1", None)]),
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
        assert_eq!(rings.ring("a,b").members().len(), 2);
        assert!(Arc::ptr_eq(&rings.ring("a,b"), &rings.ring("a,b")));
    }
}
