//! Self-fencing: a replica acts only while its own Lease is surely valid,
//! judged on its own boot clock ([`BootInstant`]: a paused VM's time
//! counts). If it cannot renew within the renew
//! deadline (shorter than the Lease duration), it stops acting before any
//! peer can consider the Lease expired; a process that was frozen and wakes
//! up late sees the deadline passed and writes nothing. Pure.
//!
//! Once lapsed, the fence stays shut until the supervisor has stopped every
//! actor and calls [`Fence::rejoin`]: a renewal that happens to succeed
//! right after a freeze must not let an actor that is still running (and
//! whose CronJob a peer took over meanwhile) write again.

use crate::clock::BootInstant;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Fence {
    renew_deadline: Duration,
    /// When the last renewal that the API server accepted was *sent*: the
    /// Lease is valid from no later than that moment.
    renewed_at: Option<BootInstant>,
    lapsed: bool,
    /// Lapses noticed since the process started (a release is not one).
    lapses: u64,
}

/// Where the fence stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceState {
    /// Not renewed yet (starting, or rejoining after a lapse).
    Waiting,
    Valid,
    /// The renew deadline passed: no writes until [`Fence::rejoin`].
    Lapsed,
}

impl Fence {
    /// `renew_deadline` must be shorter than the Lease duration, leaving the
    /// peers' expiry judgement a margin (defaults: 10 s of 15 s).
    pub fn new(renew_deadline: Duration) -> Self {
        Fence {
            renew_deadline,
            renewed_at: None,
            lapsed: false,
            lapses: 0,
        }
    }

    /// A renewal sent at `sent_at` was accepted, its answer arriving at
    /// `answered_at`. Measuring from the send, not the answer, keeps the
    /// judgement on the safe side of a slow reply. It counts only if the
    /// answer came while the fence was still open: the server may have
    /// applied it as late as the answer, and once the fence has lapsed a
    /// peer may have judged the Lease expired before that. A lapse nobody
    /// checked for is noticed (and latched) here.
    pub fn renewed(&mut self, sent_at: BootInstant, answered_at: BootInstant) {
        if self.check(answered_at) != FenceState::Lapsed {
            self.renewed_at = Some(self.renewed_at.map_or(sent_at, |t| t.max(sent_at)));
        }
    }

    /// Whether this replica may write at `now`.
    pub fn may_act(&self, now: BootInstant) -> bool {
        self.valid_for(now).is_some()
    }

    /// How much longer from `now` this replica may write if no renewal
    /// succeeds meanwhile; `None` if it may not write now.
    pub fn valid_for(&self, now: BootInstant) -> Option<Duration> {
        if self.lapsed {
            return None;
        }
        let since = now.saturating_duration_since(self.renewed_at?);
        Some(self.renew_deadline.saturating_sub(since)).filter(|left| !left.is_zero())
    }

    /// The state at `now`; notices (and latches) a lapse.
    pub fn check(&mut self, now: BootInstant) -> FenceState {
        if self.lapsed {
            return FenceState::Lapsed;
        }
        match self.renewed_at {
            None => FenceState::Waiting,
            Some(_) if self.may_act(now) => FenceState::Valid,
            Some(_) => {
                self.lapsed = true;
                self.lapses += 1;
                FenceState::Lapsed
            }
        }
    }

    /// How many times the renew deadline passed unrenewed since start: the
    /// replica stopped acting and had to rejoin. A release is not counted.
    pub fn lapses(&self) -> u64 {
        self.lapses
    }

    /// Every actor has stopped after a lapse: renewals count again.
    pub fn rejoin(&mut self) {
        self.lapsed = false;
        self.renewed_at = None;
    }

    /// Gives up the Lease (graceful exit): no more writes.
    pub fn release(&mut self) {
        self.renewed_at = None;
        self.lapsed = true;
    }
}

/// The fence shared by the Lease keeper (which feeds it), the gateway
/// (which checks it before every request) and the supervisor.
#[derive(Debug, Clone)]
pub struct SharedFence(Arc<Mutex<Fence>>);

impl crate::apiserver::write_fence::WriteFence for SharedFence {
    fn valid_for(&self) -> Option<Duration> {
        self.lock().valid_for(BootInstant::now())
    }
}

impl SharedFence {
    pub fn new(renew_deadline: Duration) -> Self {
        SharedFence(Arc::new(Mutex::new(Fence::new(renew_deadline))))
    }

    /// The fence; a panic elsewhere while holding it does not poison it for
    /// good (its state is a few plain values, always consistent).
    pub fn lock(&self) -> MutexGuard<'_, Fence> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acts_only_within_the_renew_deadline_of_the_last_accepted_renewal() {
        let t0 = BootInstant::from_since_boot(Duration::from_secs(1_000));
        let mut fence = Fence::new(Duration::from_secs(10));
        assert!(!fence.may_act(t0), "never renewed");
        assert_eq!(fence.check(t0), FenceState::Waiting);
        fence.renewed(t0, t0);
        assert!(fence.may_act(t0 + Duration::from_millis(9_999)));
        assert_eq!(
            fence.valid_for(t0 + Duration::from_secs(4)),
            Some(Duration::from_secs(6))
        );
        assert!(
            !fence.may_act(t0 + Duration::from_secs(10)),
            "a frozen process wakes up fenced"
        );
        // Slow, but answered within the deadline: it counts from its send.
        fence.renewed(t0 + Duration::from_secs(8), t0 + Duration::from_secs(9));
        assert!(fence.may_act(t0 + Duration::from_secs(17)));
        // A late answer to an older renewal does not move the fence back.
        fence.renewed(t0, t0 + Duration::from_secs(9));
        assert!(fence.may_act(t0 + Duration::from_secs(17)));
        fence.release();
        assert!(!fence.may_act(t0 + Duration::from_secs(9)));
    }

    #[test]
    fn a_lapse_holds_until_rejoin_even_if_a_renewal_then_succeeds() {
        let t0 = BootInstant::from_since_boot(Duration::from_secs(1_000));
        let mut fence = Fence::new(Duration::from_secs(10));
        fence.renewed(t0, t0);
        assert_eq!(fence.check(t0 + Duration::from_secs(1)), FenceState::Valid);
        let woke = t0 + Duration::from_secs(30);
        // The first thing after waking is a renewal that succeeds.
        fence.renewed(woke, woke);
        assert_eq!(fence.check(woke), FenceState::Lapsed);
        assert!(!fence.may_act(woke), "renewed while actors may still run");
        fence.rejoin();
        assert_eq!(fence.check(woke), FenceState::Waiting);
        fence.renewed(woke, woke);
        assert!(fence.may_act(woke + Duration::from_secs(1)));
        assert_eq!(fence.lapses(), 1, "latched once, however often checked");
        fence.release();
        assert_eq!(fence.check(woke), FenceState::Lapsed);
        assert_eq!(fence.lapses(), 1, "a release is not a lapse");
    }

    #[test]
    fn a_renewal_answered_after_the_deadline_does_not_reopen_the_fence() {
        let t0 = BootInstant::from_since_boot(Duration::from_secs(1_000));
        let mut fence = Fence::new(Duration::from_secs(10));
        fence.renewed(t0, t0);
        // Sent in time, but applied (at the latest) when answered, 6 s after
        // the deadline: a peer may have taken over meanwhile, and nobody
        // ticked in between to notice the lapse.
        fence.renewed(t0 + Duration::from_secs(9), t0 + Duration::from_secs(16));
        assert!(!fence.may_act(t0 + Duration::from_secs(16)));
        assert_eq!(
            fence.check(t0 + Duration::from_secs(16)),
            FenceState::Lapsed
        );
    }
}
