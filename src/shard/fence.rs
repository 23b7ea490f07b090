//! Self-fencing: a replica acts only while its own Lease is surely valid,
//! judged on its own monotonic clock. If it cannot renew within the renew
//! deadline (shorter than the Lease duration), it stops acting before any
//! peer can consider the Lease expired; a process that was frozen and wakes
//! up late sees the deadline passed and writes nothing. Pure.

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Fence {
    renew_deadline: Duration,
    /// When the last renewal that the API server accepted was *sent*: the
    /// Lease is valid from no later than that moment.
    renewed_at: Option<Instant>,
}

impl Fence {
    /// `renew_deadline` must be shorter than the Lease duration, leaving the
    /// peers' expiry judgement a margin (defaults: 10 s of 15 s).
    pub fn new(renew_deadline: Duration) -> Self {
        Fence {
            renew_deadline,
            renewed_at: None,
        }
    }

    /// A renewal sent at `sent_at` was accepted. Measuring from the send,
    /// not the answer, keeps the judgement on the safe side of a slow reply.
    pub fn renewed(&mut self, sent_at: Instant) {
        self.renewed_at = Some(self.renewed_at.map_or(sent_at, |t| t.max(sent_at)));
    }

    /// Whether this replica may write at `now`.
    pub fn may_act(&self, now: Instant) -> bool {
        self.renewed_at
            .is_some_and(|at| now.saturating_duration_since(at) < self.renew_deadline)
    }

    /// Gives up the Lease (graceful exit): no more writes.
    pub fn release(&mut self) {
        self.renewed_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acts_only_within_the_renew_deadline_of_the_last_accepted_renewal() {
        let t0 = Instant::now();
        let mut fence = Fence::new(Duration::from_secs(10));
        assert!(!fence.may_act(t0), "never renewed");
        fence.renewed(t0);
        assert!(fence.may_act(t0 + Duration::from_millis(9_999)));
        assert!(
            !fence.may_act(t0 + Duration::from_secs(10)),
            "a frozen process wakes up fenced"
        );
        fence.renewed(t0 + Duration::from_secs(8));
        assert!(fence.may_act(t0 + Duration::from_secs(17)));
        // A late answer to an older renewal does not move the fence back.
        fence.renewed(t0);
        assert!(fence.may_act(t0 + Duration::from_secs(17)));
        fence.release();
        assert!(!fence.may_act(t0 + Duration::from_secs(9)));
    }
}
