//! Namespaces the API server said are gone or going (a NotFound of the
//! namespace, a `NamespaceTerminating` cause): for a while, nothing more is
//! sent there. Pure; time is passed in.
//!
//! Why: a tenant's namespace deleted with 2,000 Jobs in it left a replica
//! sending about 2,000 queued Events there, each refused, at the gateway's
//! lowest class for more than 9 minutes, while its actors' writes failed
//! and were retried the same way, and other tenants waited behind them.
//! Now the namespaces' watch, as the deletion begins
//! ([`crate::apiserver::watch::namespaces`]), or the first answer that
//! says so, drops what waits for the namespace,
//! and what comes for it in the next [`REMEMBERED_FOR`] fails without a
//! request. A terminating namespace refuses only creates (updates and
//! deletes still land, and must: a held Job's slot finalizer is released
//! by an update, and the namespace's deletion waits for it), so there
//! only creates are held back; a namespace that is gone refuses
//! everything. A namespace is only remembered that long: one made again
//! under the same name after its deletion finished is another namespace,
//! and its writes are sent again after at most that delay.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a namespace is taken as gone after the answer that said so.
pub const REMEMBERED_FOR: Duration = Duration::from_secs(10);

/// Namespaces remembered at most (each a name and an instant); when full,
/// the one told longest ago is forgotten first.
pub const CAPACITY: usize = 1_024;

/// What an answer said of a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Going {
    /// Terminating: it refuses creates.
    Terminating,
    /// Not found: it refuses everything.
    Gone,
}

/// The namespaces answered gone within [`REMEMBERED_FOR`].
#[derive(Debug, Default)]
pub struct GoneNamespaces {
    since: HashMap<String, (Instant, Going)>,
}

impl GoneNamespaces {
    /// An answer at `now` said `namespace` is `going`.
    pub fn mark(&mut self, namespace: &str, going: Going, now: Instant) {
        self.forget_older_than(now);
        if self.since.len() >= CAPACITY
            && !self.since.contains_key(namespace)
            && let Some(oldest) = self
                .since
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(name, _)| name.clone())
        {
            self.since.remove(&oldest);
        }
        self.since.insert(namespace.to_owned(), (now, going));
    }

    /// Whether a request for `namespace` (a create, or not) would be
    /// refused, by an answer less than [`REMEMBERED_FOR`] before `now`.
    /// Cluster-scoped requests (no namespace) never are.
    pub fn refuses(&mut self, namespace: &str, create: bool, now: Instant) -> bool {
        if self.since.is_empty() || namespace.is_empty() {
            return false;
        }
        match self.since.get(namespace) {
            Some((at, going)) if now.saturating_duration_since(*at) < REMEMBERED_FOR => {
                create || *going == Going::Gone
            }
            Some(_) => {
                self.since.remove(namespace);
                false
            }
            None => false,
        }
    }

    fn forget_older_than(&mut self, now: Instant) {
        self.since
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < REMEMBERED_FOR);
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
        assert!(!gone.refuses("tenant", false, start));
        gone.mark("tenant", Going::Gone, start);
        assert!(gone.refuses("tenant", false, start + Duration::from_secs(9)));
        assert!(gone.refuses("tenant", true, start + Duration::from_secs(9)));
        assert!(!gone.refuses("other", true, start + Duration::from_secs(1)));
        assert!(!gone.refuses("", true, start));
        // Made again under the same name: tried again after the while.
        assert!(!gone.refuses("tenant", true, start + REMEMBERED_FOR));
        assert!(gone.is_empty());
        // A second answer starts the while again.
        gone.mark("tenant", Going::Gone, start + REMEMBERED_FOR);
        assert!(gone.refuses("tenant", true, start + REMEMBERED_FOR * 3 / 2));
    }

    #[test]
    fn a_terminating_namespace_refuses_creates_only() {
        // Its held Jobs' finalizers must still be released (an update),
        // or its deletion waits for them.
        let start = Instant::now();
        let mut gone = GoneNamespaces::default();
        gone.mark("tenant", Going::Terminating, start);
        assert!(gone.refuses("tenant", true, start));
        assert!(!gone.refuses("tenant", false, start));
        // Then found gone altogether: everything.
        gone.mark("tenant", Going::Gone, start + Duration::from_secs(1));
        assert!(gone.refuses("tenant", false, start + Duration::from_secs(2)));
    }

    #[test]
    fn the_set_is_bounded_and_forgets_the_oldest_first() {
        let start = Instant::now();
        let mut gone = GoneNamespaces::default();
        for i in 0..CAPACITY + 10 {
            gone.mark(
                &format!("ns-{i}"),
                Going::Gone,
                start + Duration::from_micros(i as u64),
            );
            assert!(gone.len() <= CAPACITY);
        }
        let now = start + Duration::from_secs(1);
        assert!(!gone.refuses("ns-0", false, now), "the oldest went first");
        assert!(gone.refuses(&format!("ns-{}", CAPACITY + 9), false, now));
        // All expire together once the while is over.
        gone.mark("late", Going::Gone, start + REMEMBERED_FOR * 2);
        assert_eq!(gone.len(), 1);
    }
}
