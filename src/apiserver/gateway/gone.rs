//! Namespaces the API server said are gone or going (a NotFound of the
//! namespace, a `NamespaceTerminating` cause): for a while, nothing more is
//! sent there. Pure; time is passed in.
//!
//! Why: a tenant's namespace deleted with 2,000 Jobs in it left a replica
//! sending about 2,000 queued Events there, each refused, at the gateway's
//! lowest class for more than 9 minutes, while its actors' writes failed
//! and were retried the same way, and other tenants waited behind them.
//! Now the first answer that says so drops what waits for the namespace,
//! and what comes for it in the next [`REMEMBERED_FOR`] fails without a
//! request. A namespace is only remembered that long: one made again
//! under the same name after its deletion finished is another namespace,
//! and its writes are sent again after at most that delay.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a namespace is taken as gone after the answer that said so.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(10);

/// Namespaces remembered at most (each a name and an instant); when full,
/// the one told longest ago is forgotten first.
pub const CAPACITY: usize = 1_024;

/// The namespaces answered gone within [`REMEMBERED_FOR`].
#[derive(Debug, Default)]
pub struct GoneNamespaces {
    since: HashMap<String, Instant>,
}

impl GoneNamespaces {
    /// An answer at `now` said `namespace` is gone or terminating.
    pub fn mark(&mut self, namespace: &str, now: Instant) {
        self.forget_older_than(now);
        if self.since.len() >= CAPACITY
            && !self.since.contains_key(namespace)
            && let Some(oldest) = self
                .since
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(name, _)| name.clone())
        {
            self.since.remove(&oldest);
        }
        self.since.insert(namespace.to_owned(), now);
    }

    /// Whether `namespace` was answered gone less than [`REMEMBERED_FOR`]
    /// before `now`. Cluster-scoped requests (no namespace) never are.
    pub fn is_gone(&mut self, namespace: &str, now: Instant) -> bool {
        if self.since.is_empty() || namespace.is_empty() {
            return false;
        }
        match self.since.get(namespace) {
            Some(at) if now.saturating_duration_since(*at) < REMEMBERED_FOR => true,
            Some(_) => {
                self.since.remove(namespace);
                false
            }
            None => false,
        }
    }

    fn forget_older_than(&mut self, now: Instant) {
        self.since
            .retain(|_, at| now.saturating_duration_since(*at) < REMEMBERED_FOR);
    }

    pub fn len(&self) -> usize {
        self.since.len()
    }

    pub fn is_empty(&self) -> bool {
        self.since.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_answered_gone_is_gone_for_a_while_then_tried_again() {
        let start = Instant::now();
        let mut gone = GoneNamespaces::default();
        assert!(!gone.is_gone("tenant", start));
        gone.mark("tenant", start);
        assert!(gone.is_gone("tenant", start + Duration::from_secs(9)));
        assert!(!gone.is_gone("other", start + Duration::from_secs(1)));
        assert!(!gone.is_gone("", start));
        // Made again under the same name: tried again after the while.
        assert!(!gone.is_gone("tenant", start + REMEMBERED_FOR));
        assert_eq!(gone.len(), 0);
        // A second answer starts the while again.
        gone.mark("tenant", start + REMEMBERED_FOR);
        assert!(gone.is_gone("tenant", start + REMEMBERED_FOR * 3 / 2));
    }

    #[test]
    fn the_set_is_bounded_and_forgets_the_oldest_first() {
        let start = Instant::now();
        let mut gone = GoneNamespaces::default();
        for i in 0..CAPACITY + 10 {
            gone.mark(&format!("ns-{i}"), start + Duration::from_micros(i as u64));
            assert!(gone.len() <= CAPACITY);
        }
        let now = start + Duration::from_secs(1);
        assert!(!gone.is_gone("ns-0", now), "the oldest went first");
        assert!(gone.is_gone(&format!("ns-{}", CAPACITY + 9), now));
        // All expire together once the while is over.
        gone.mark("late", start + REMEMBERED_FOR * 2);
        assert_eq!(gone.len(), 1);
    }
}
