//! Who holds the replica's `WatchDecisions` streams. Pure.
//!
//! A stream is cheap but long: one namespace viewer opening streams in a
//! loop held all of them before, and every other caller was refused. So at
//! most [`super::MAX_WATCHERS`] streams are open in all and
//! [`MAX_WATCHERS_PER_IDENTITY`] per authenticated user (the TokenReview's
//! username); a stream is authorized again every [`REAUTHORIZE_EVERY`]
//! and ends after [`STREAM_LIFETIME`] (`shardcron status --watch` then
//! watches again).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// At most this many streams per authenticated user.
pub const MAX_WATCHERS_PER_IDENTITY: usize = 8;

/// A stream's caller is authorized again this often (a RoleBinding
/// removed, a token revoked or expired ends the stream).
pub const REAUTHORIZE_EVERY: Duration = Duration::from_secs(300);

/// A stream ends after this long, whatever happens.
pub const STREAM_LIFETIME: Duration = Duration::from_secs(3600);

/// Why a stream could not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{0} decision streams are open on this replica already")]
    Full(usize),
    #[error("{identity} has {held} decision streams open on this replica already")]
    IdentityFull { identity: String, held: usize },
}

#[derive(Debug, Default)]
struct Held {
    total: usize,
    by_identity: HashMap<String, usize>,
}

/// The streams held, by whom.
#[derive(Debug, Clone)]
pub struct StreamSlots {
    held: Arc<Mutex<Held>>,
    total: usize,
    per_identity: usize,
}

impl StreamSlots {
    pub fn new(total: usize, per_identity: usize) -> Self {
        Self {
            held: Arc::default(),
            total,
            per_identity,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A slot for a stream of `identity`, held until dropped.
    pub fn open(&self, identity: &str) -> Result<StreamSlot, Refused> {
        let mut held = self.lock();
        if held.total >= self.total {
            return Err(Refused::Full(held.total));
        }
        let mine = held.by_identity.get(identity).copied().unwrap_or(0);
        if mine >= self.per_identity {
            return Err(Refused::IdentityFull {
                identity: identity.to_owned(),
                held: mine,
            });
        }
        held.total += 1;
        *held.by_identity.entry(identity.to_owned()).or_default() += 1;
        Ok(StreamSlot {
            slots: self.clone(),
            identity: identity.to_owned(),
        })
    }

    /// Streams open now.
    pub fn open_now(&self) -> usize {
        self.lock().total
    }
}

/// One open stream's slot.
#[derive(Debug)]
pub struct StreamSlot {
    slots: StreamSlots,
    identity: String,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut held = self.slots.lock();
        held.total = held.total.saturating_sub(1);
        if let Some(mine) = held.by_identity.get_mut(&self.identity) {
            *mine = mine.saturating_sub(1);
            if *mine == 0 {
                held.by_identity.remove(&self.identity);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_identity_cannot_hold_every_stream() {
        let slots = StreamSlots::new(4, 2);
        let mallory: Vec<_> = (0..2)
            .map(|_| slots.open("mallory").expect("a slot"))
            .collect();
        assert_eq!(
            slots.open("mallory").map(drop),
            Err(Refused::IdentityFull {
                identity: "mallory".into(),
                held: 2
            })
        );
        let alice = slots.open("alice").expect("another identity's slot");
        let bob = slots.open("bob").expect("another identity's slot");
        assert_eq!(slots.open("carol").map(drop), Err(Refused::Full(4)));
        drop(mallory);
        assert_eq!(slots.open_now(), 2);
        let again = slots.open("mallory").expect("freed slots");
        drop((alice, bob, again));
        assert_eq!(slots.open_now(), 0);
        assert!(slots.lock().by_identity.is_empty(), "no identity kept");
    }
}
