//! When a replica may start a CronJob it gains in a rebalance. Pure.
//!
//! The protocol (DESIGN.md, "Sharding protocol"): a replica first stops the
//! keys it loses, then publishes its new view (the digest of the member set
//! it acts on) on its own Lease. A gained key starts only when its previous
//! owner has stopped it: the owner publishes the same view, or it is gone
//! from the live set (its Lease expired, and it fenced itself before that).

use super::membership::Membership;
use super::ring::Ring;
use std::time::Instant;
use twox_hash::XxHash64;

/// The digest of a member set: the same on every replica for the same set.
pub fn view_digest(ring: &Ring) -> String {
    let joined = ring.members().join("\n");
    format!("{:016x}", XxHash64::oneshot(0, joined.as_bytes()))
}

/// What to do with a key under the new ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyDecision {
    /// Not ours under the new ring: stop it (before publishing the new view).
    NotOurs,
    /// Ours: run it.
    Run,
    /// Ours, but the previous owner has not yet shown that it stopped it.
    WaitFor(String),
}

/// Decides key `namespace/name` for replica `me`, moving from the `acting`
/// ring to the `target` ring, given the peers' Leases at `now`.
///
/// `acting` is the ring the key's previous owner acted on. For a replica
/// that is just starting, that is the ring of the members live before it
/// joined, never an empty ring: an empty `acting` ring means "nobody owned
/// anything", and the key starts at once.
pub fn decide(
    me: &str,
    namespace: &str,
    name: &str,
    acting: &Ring,
    target: &Ring,
    peers: &Membership,
    now: Instant,
) -> KeyDecision {
    if target.owner(namespace, name) != Some(me) {
        return KeyDecision::NotOurs;
    }
    match acting.owner(namespace, name) {
        None => KeyDecision::Run,
        Some(previous) if previous == me => KeyDecision::Run,
        Some(previous) => {
            let gone = !peers.live(now).contains(previous);
            let agrees = peers.view_of(previous, now) == Some(view_digest(target).as_str());
            if gone || agrees {
                KeyDecision::Run
            } else {
                KeyDecision::WaitFor(previous.to_owned())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shard::membership::LeaseObservation;
    use std::time::Duration;

    fn observe(m: &mut Membership, who: &str, renewal: &str, view: Option<String>, now: Instant) {
        let lease = LeaseObservation {
            holder: Some(who.into()),
            renewal: renewal.into(),
            duration: Duration::from_secs(15),
            view,
        };
        m.observe(who, lease, now);
    }

    /// A key that r0 owns with {r0} and r1 owns with {r0, r1}.
    fn moving_key(acting: &Ring, target: &Ring) -> String {
        (0..1000)
            .map(|i| format!("job-{i}"))
            .find(|k| acting.owner("ns", k) == Some("r0") && target.owner("ns", k) == Some("r1"))
            .expect("some key moves")
    }

    #[test]
    fn a_gained_key_waits_for_the_previous_owner_to_publish_the_new_view() {
        let t0 = Instant::now();
        let acting = Ring::new(["r0"]);
        let target = Ring::new(["r0", "r1"]);
        let key = moving_key(&acting, &target);
        let mut peers = Membership::default();
        observe(&mut peers, "r0", "1", Some(view_digest(&acting)), t0);
        observe(&mut peers, "r1", "1", None, t0);
        assert_eq!(
            decide("r1", "ns", &key, &acting, &target, &peers, t0),
            KeyDecision::WaitFor("r0".into())
        );
        // The old owner sees the same: not ours any more.
        assert_eq!(
            decide("r0", "ns", &key, &acting, &target, &peers, t0),
            KeyDecision::NotOurs
        );
        // r0 stopped the key and published the new view.
        observe(&mut peers, "r0", "2", Some(view_digest(&target)), t0);
        assert_eq!(
            decide("r1", "ns", &key, &acting, &target, &peers, t0),
            KeyDecision::Run
        );
    }

    #[test]
    fn a_gained_key_starts_once_the_previous_owner_is_gone() {
        let t0 = Instant::now();
        let acting = Ring::new(["r0", "r1"]);
        let target = Ring::new(["r1"]);
        let key = (0..1000)
            .map(|i| format!("job-{i}"))
            .find(|k| acting.owner("ns", k) == Some("r0"))
            .unwrap();
        let mut peers = Membership::default();
        observe(&mut peers, "r0", "1", Some(view_digest(&acting)), t0);
        assert_eq!(
            decide("r1", "ns", &key, &acting, &target, &peers, t0),
            KeyDecision::WaitFor("r0".into())
        );
        let expired = t0 + Duration::from_secs(15);
        assert_eq!(
            decide("r1", "ns", &key, &acting, &target, &peers, expired),
            KeyDecision::Run
        );
    }

    #[test]
    fn keys_that_stay_keep_running_and_digests_ignore_order() {
        let t0 = Instant::now();
        let ring = Ring::new(["r0", "r1"]);
        let peers = Membership::default();
        let key = (0..100)
            .map(|i| format!("job-{i}"))
            .find(|k| ring.owner("ns", k) == Some("r0"))
            .unwrap();
        assert_eq!(
            decide("r0", "ns", &key, &ring, &ring, &peers, t0),
            KeyDecision::Run
        );
        assert_eq!(
            view_digest(&Ring::new(["a", "b"])),
            view_digest(&Ring::new(["b", "a"]))
        );
        assert_ne!(
            view_digest(&Ring::new(["a", "b"])),
            view_digest(&Ring::new(["a"]))
        );
    }
}
