//! The decisions this replica's actors make, for whoever watches them (the
//! admin API's `WatchDecisions`): a bounded broadcast, written to only
//! while someone listens, so it costs nothing otherwise.

use jiff::Timestamp;
use std::sync::Arc;
use tokio::sync::broadcast;

/// How many decisions a watcher may fall behind before it skips ahead
/// (it is told how many it missed).
pub const FEED_CAPACITY: usize = 1024;

/// One decision that did something (a write, an event), as published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecisionRecord {
    /// The CronJob's key (`namespace/name`, kind-qualified for the CRD).
    pub key: String,
    pub at: Timestamp,
    /// In a word (`created`, `skipped-forbid`, ...): the trace's
    /// `cronjob.decision`.
    pub outcome: &'static str,
    /// Each step and its reason.
    pub steps: Vec<String>,
    /// The firing's trace, when it was sampled.
    pub trace_id: Option<String>,
    /// The Job it created, if any.
    pub created: Option<String>,
}

#[derive(Debug, Clone)]
pub struct DecisionFeed(broadcast::Sender<Arc<DecisionRecord>>);

impl Default for DecisionFeed {
    fn default() -> Self {
        Self(broadcast::channel(FEED_CAPACITY).0)
    }
}

impl DecisionFeed {
    /// Whether anyone listens: the record is built only then.
    pub fn wanted(&self) -> bool {
        self.0.receiver_count() > 0
    }

    pub fn publish(&self, record: DecisionRecord) {
        // No receiver left meanwhile: nothing to do.
        let _ = self.0.send(Arc::new(record));
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<DecisionRecord>> {
        self.0.subscribe()
    }
}
