//! The decisions this replica's actors make, for the admin API: a journal
//! of the last [`JOURNAL_CAPACITY`] of them, [`JOURNAL_BYTES`] at most (all
//! CronJobs together, oldest dropped first) that `GetCronJob` reads a CronJob's recent ones from,
//! and a bounded broadcast for `WatchDecisions`, sent to only while someone
//! listens.

use jiff::Timestamp;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;

/// How many decisions a watcher may fall behind before it skips ahead
/// (it is told how many it missed).
pub const FEED_CAPACITY: usize = 1024;

/// How many decisions the journal keeps, all CronJobs of the replica
/// together (a few hundred bytes each: about 2 MB full). On a busy replica
/// a CronJob that fires rarely may have none left; the answer says how far
/// back the journal reaches.
pub const JOURNAL_CAPACITY: usize = 4096;

/// The journal's bound in bytes (its records' text, estimated): whatever a
/// tenant makes its decisions say, the journal never holds more.
pub const JOURNAL_BYTES: usize = 4 << 20;

/// A record keeps at most this many steps and this many events (a
/// decision that deletes a long history records an event per Job), each
/// cut to [`crate::reconcile::MAX_NOTE_BYTES`]: a record is at most about
/// 70 KB whatever the CronJob holds.
pub const RECORD_LINES: usize = 32;

/// At most this many of one CronJob's decisions are read back, newest last.
pub const RECENT_PER_CRONJOB: usize = 10;

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
    /// The events it recorded on the CronJob (`Normal SuccessfulCreate: ...`).
    pub events: Vec<String>,
    /// The firing's trace, when it was sampled.
    pub trace_id: Option<String>,
    /// The Job it created, if any.
    pub created: Option<String>,
}

impl DecisionRecord {
    /// The record of `plan`, decided at `now` about the CronJob `key`,
    /// which recorded `events` and created `created`.
    pub fn of(
        key: String,
        now: Timestamp,
        plan: &crate::reconcile::Plan,
        events: &[crate::reconcile::Event],
        trace_id: Option<String>,
        created: Option<String>,
    ) -> DecisionRecord {
        DecisionRecord {
            key,
            at: now,
            outcome: crate::reconcile::slot_outcome(&plan.decisions),
            steps: bounded_lines(plan.decisions.iter().map(ToString::to_string)),
            events: bounded_lines(events.iter().map(|event| {
                format!("{:?} {}: {}", event.event_type, event.reason, event.message)
            })),
            trace_id,
            created,
        }
    }

    /// About how many bytes the record holds (its text and its fixed part).
    fn bytes(&self) -> usize {
        let lines = self.steps.iter().chain(&self.events);
        std::mem::size_of::<Self>()
            + self.key.len()
            + lines
                .map(|line| line.len() + std::mem::size_of::<String>())
                .sum::<usize>()
            + self.trace_id.as_ref().map_or(0, String::len)
            + self.created.as_ref().map_or(0, String::len)
    }
}

/// The first [`RECORD_LINES`] of `lines`, each cut to an Event note's bound,
/// and a last line saying how many more there were.
fn bounded_lines(lines: impl ExactSizeIterator<Item = String>) -> Vec<String> {
    let total = lines.len();
    let mut kept: Vec<String> = lines
        .take(RECORD_LINES)
        .map(|line| crate::reconcile::cut_text(line, crate::reconcile::MAX_NOTE_BYTES))
        .collect();
    if total > RECORD_LINES {
        kept.push(format!("({} more)", total - RECORD_LINES));
    }
    kept
}

/// The journal: records, oldest first, and their bytes.
#[derive(Debug, Default)]
struct Journal {
    records: VecDeque<Arc<DecisionRecord>>,
    bytes: usize,
}

impl Journal {
    fn push(&mut self, record: Arc<DecisionRecord>) {
        self.bytes += record.bytes();
        self.records.push_back(record);
        while self.records.len() > JOURNAL_CAPACITY || self.bytes > JOURNAL_BYTES {
            let Some(oldest) = self.records.pop_front() else {
                break;
            };
            self.bytes -= oldest.bytes();
        }
    }
}

#[derive(Debug, Clone)]
pub struct DecisionFeed {
    live: broadcast::Sender<Arc<DecisionRecord>>,
    journal: Arc<Mutex<Journal>>,
}

impl Default for DecisionFeed {
    fn default() -> Self {
        Self {
            live: broadcast::channel(FEED_CAPACITY).0,
            journal: Arc::default(),
        }
    }
}

/// A CronJob's decisions found in the journal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recent {
    /// Oldest first, at most [`RECENT_PER_CRONJOB`].
    pub decisions: Vec<Arc<DecisionRecord>>,
    /// When the journal's oldest decision was made (of any CronJob): no
    /// decision before it is known.
    pub since: Option<Timestamp>,
}

impl DecisionFeed {
    pub fn publish(&self, record: DecisionRecord) {
        let record = Arc::new(record);
        // A poisoned lock (a panic elsewhere while pushing) loses the
        // journal, never the decision.
        if let Ok(mut journal) = self.journal.lock() {
            journal.push(record.clone());
        }
        if self.live.receiver_count() > 0 {
            // No receiver left meanwhile: nothing to do.
            let _ = self.live.send(record);
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<DecisionRecord>> {
        self.live.subscribe()
    }

    /// The last [`RECENT_PER_CRONJOB`] decisions about `key` the journal
    /// holds.
    pub fn recent(&self, key: &str) -> Recent {
        let Ok(journal) = self.journal.lock() else {
            return Recent::default();
        };
        let mut decisions: Vec<_> = journal
            .records
            .iter()
            .rev()
            .filter(|record| record.key == key)
            .take(RECENT_PER_CRONJOB)
            .cloned()
            .collect();
        decisions.reverse();
        Recent {
            decisions,
            since: journal.records.front().map(|record| record.at),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(key: &str, second: i64) -> DecisionRecord {
        DecisionRecord {
            key: key.to_owned(),
            at: Timestamp::from_second(second).expect("a time"),
            outcome: "created",
            steps: Vec::new(),
            events: Vec::new(),
            trace_id: None,
            created: None,
        }
    }

    #[test]
    fn the_journal_keeps_the_last_decisions_of_all_and_returns_one_cronjobs_newest() {
        let feed = DecisionFeed::default();
        assert_eq!(feed.recent("ns/a"), Recent::default());
        for second in 0..20 {
            feed.publish(record("ns/a", second));
            feed.publish(record("ns/b", second));
        }
        let recent = feed.recent("ns/a");
        let seconds: Vec<i64> = recent.decisions.iter().map(|r| r.at.as_second()).collect();
        assert_eq!(
            seconds,
            (10..20).collect::<Vec<_>>(),
            "the newest ten, oldest first"
        );
        assert_eq!(recent.since.map(|t| t.as_second()), Some(0));

        // Full: the oldest go first, whoever they were about.
        for second in 100..100 + JOURNAL_CAPACITY as i64 {
            feed.publish(record("ns/b", second));
        }
        assert!(feed.recent("ns/a").decisions.is_empty());
        assert_eq!(feed.recent("ns/a").since.map(|t| t.as_second()), Some(100));
        assert_eq!(
            feed.journal.lock().expect("not poisoned").records.len(),
            JOURNAL_CAPACITY
        );
    }

    #[test]
    fn a_tenants_long_texts_are_cut_and_the_journal_holds_its_bytes_whatever_they_say() {
        let long = "\\u{1}".repeat(100_000);
        let lines = bounded_lines(
            (0..100)
                .map(|_| long.clone())
                .collect::<Vec<_>>()
                .into_iter(),
        );
        assert_eq!(lines.len(), RECORD_LINES + 1);
        assert_eq!(lines[RECORD_LINES], "(68 more)");
        assert!(
            lines
                .iter()
                .all(|l| l.len() <= crate::reconcile::MAX_NOTE_BYTES)
        );

        let feed = DecisionFeed::default();
        for second in 0..1_000 {
            let mut big = record("ns/a", second);
            big.steps = lines.clone();
            big.events = lines.clone();
            feed.publish(big);
        }
        let journal = feed.journal.lock().expect("not poisoned");
        assert!(journal.bytes <= JOURNAL_BYTES, "{} bytes", journal.bytes);
        let counted: usize = journal.records.iter().map(|r| r.bytes()).sum();
        assert_eq!(counted, journal.bytes);
        assert!(journal.records.len() < 1_000 && !journal.records.is_empty());
    }

    #[tokio::test]
    async fn a_watcher_receives_what_is_published_after_it_subscribed() {
        let feed = DecisionFeed::default();
        feed.publish(record("ns/a", 1));
        let mut watcher = feed.subscribe();
        feed.publish(record("ns/a", 2));
        let received = watcher.recv().await.expect("a record");
        assert_eq!(received.at.as_second(), 2);
    }
}
