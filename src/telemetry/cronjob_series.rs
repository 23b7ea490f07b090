//! Per-CronJob metrics, from the decision itself: when the owner will next
//! start a Job, the last slot started, the last success and failure, the
//! Jobs running, whether it is suspended, and the slots skipped by reason.
//!
//! kube-state-metrics computes `kube_cronjob_next_schedule_time` on its own
//! and has got it wrong (time zones, values in the past); the controller
//! knows the answer when it arms its timer. Only the replica that owns a
//! CronJob holds its record, written after each of its decisions and
//! removed when its actor stops, so its series move with the key and are
//! never exported twice.
//!
//! One small record per CronJob, keyed by the CronJob's key as its actor
//! holds it (shared, not copied:
//! [`CronJobView::key`](crate::reconcile::CronJobView::key)), rendered
//! at scrape time by a
//! [`Collector`], not kept as a registry series each (a `Family` holds an
//! `Arc`ed atomic and a cloned label set per series, several times more).
//! The map is bounded by the CronJobs this replica owns.

use jiff::Timestamp;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};

/// Shards of the map: a decision's update locks one, a scrape each in turn.
const SHARDS: usize = 16;

/// What the owner last knew of one CronJob. Instants are Unix seconds
/// ([`seconds`]), 0 for none (no CronJob has a slot at
/// 1970-01-01T00:00:00Z worth telling). 40 bytes: as `u32`, not `i64`, the
/// map's entries are 56 bytes instead of 80 (about 40 bytes a CronJob with
/// the table's spare room).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CronJobRecord {
    /// When the owner will next start a Job (the next slot, plus a spread
    /// offset); 0 when nothing is armed (suspended, no slot ahead).
    pub next_schedule: u32,
    pub last_schedule: u32,
    pub last_successful: u32,
    pub last_failed: u32,
    /// `status.active`'s length, saturated at 65,535.
    pub active: u16,
    /// [`SUSPENDED`] and [`HELD`].
    flags: u8,
    /// The last failure's reason: an index in [`FAILURE_REASONS`].
    pub last_failed_reason: u8,
    /// Slots skipped, by reason (in [`SKIP_REASONS`]' order).
    pub skipped: [u32; 3],
    /// The last slot counted in `skipped`, or held: a slot is decided on
    /// again at every event, and counts once.
    last_slot: u32,
    /// The first slot of the hold Forbid keeps up now (every slot since has
    /// been held back too); 0 when nothing is held.
    pub held_since: u32,
}

/// `spec.suspend` is true.
const SUSPENDED: u8 = 1;
/// `last_slot` is held back by `concurrencyPolicy: Forbid` behind a running
/// Job, not counted yet: upstream starts it when that Job ends, so it
/// counts as skipped only if a later slot (or its deadline) comes first.
const HELD: u8 = 2;

/// The `reason` label of `shardcron_cronjob_last_failed_time_seconds`:
/// `reconcile::FailureReason`'s names after an empty one for none (a test
/// there keeps them the same).
pub const FAILURE_REASONS: [&str; 7] = [
    "",
    "BackoffLimitExceeded",
    "DeadlineExceeded",
    "PodFailurePolicy",
    "MaxFailedIndexesExceeded",
    "FailedIndexes",
    "Other",
];

/// The `reason`s of `shardcron_cronjob_skipped_slots_total`: the names of
/// `reconcile::SkipReason` (a test there keeps them the same).
pub const SKIP_REASONS: [&str; 3] = ["forbid", "deadline", "too_many_missed"];

impl CronJobRecord {
    /// Notes `slot` skipped for `reason` (one of [`SKIP_REASONS`]), once
    /// per slot. A slot Forbid holds back is only held: it counts once it
    /// is known never to start ([`Self::settle`], or a later slot here).
    pub fn skip(&mut self, reason: &str, slot: Timestamp) {
        let slot = seconds(Some(slot));
        let Some(index) = SKIP_REASONS.iter().position(|r| *r == reason) else {
            return;
        };
        if slot < self.last_slot || (slot == self.last_slot && (index == 0 || !self.held())) {
            return;
        }
        if index == 0 {
            // A later slot held while one is: the hold goes on.
            let since = if self.held() { self.held_since } else { slot };
            self.settle(slot);
            self.held_since = since;
            self.flags |= HELD;
            self.last_slot = slot;
            return;
        }
        if self.held() && slot == self.last_slot {
            // Held, then past its deadline: one count, for the deadline.
            self.release();
        }
        self.settle(slot);
        self.last_slot = slot;
        self.skipped[index] = self.skipped[index].saturating_add(1);
    }

    /// After a decision whose latest slot (started, held or skipped) is
    /// `latest`: a held slot before it never started, and counts as skipped
    /// by Forbid; a held slot that started at last (it is `latest`) waited,
    /// which is not a skip. Either ends the hold.
    pub fn settle(&mut self, latest: u32) {
        if !self.held() || latest < self.last_slot {
            return;
        }
        if latest > self.last_slot {
            self.skipped[0] = self.skipped[0].saturating_add(1);
        }
        self.release();
    }

    fn release(&mut self) {
        self.flags &= !HELD;
        self.held_since = 0;
    }

    fn held(&self) -> bool {
        self.flags & HELD != 0
    }

    pub fn suspended(&self) -> bool {
        self.flags & SUSPENDED != 0
    }

    pub fn set_suspended(&mut self, suspended: bool) {
        if suspended {
            self.flags |= SUSPENDED;
        } else {
            self.flags &= !SUSPENDED;
        }
    }
}

/// Unix seconds of `t`, 0 for none (and for an instant before 1970). An
/// instant after 2106-02-07T06:28:15Z, the last a `u32` holds, is told as
/// that one: no schedule the API server accepts comes near it in practice.
pub fn seconds(t: Option<Timestamp>) -> u32 {
    t.map_or(0, |t| {
        u32::try_from(t.as_second().max(0)).unwrap_or(u32::MAX)
    })
}

/// The records of the CronJobs this replica owns, by key
/// (`reconcile::CronJobKind::key`).
#[derive(Debug)]
pub struct CronJobSeries {
    enabled: bool,
    hasher: RandomState,
    shards: [Mutex<HashMap<Arc<str>, CronJobRecord>>; SHARDS],
}

impl CronJobSeries {
    /// The families it exports (without the `shardcron_` prefix).
    pub const FAMILIES: [(&'static str, MetricType); 8] = [
        (GAUGES[0].0, MetricType::Gauge),
        (GAUGES[1].0, MetricType::Gauge),
        (GAUGES[2].0, MetricType::Gauge),
        (GAUGES[3].0, MetricType::Gauge),
        (GAUGES[4].0, MetricType::Gauge),
        (GAUGES[5].0, MetricType::Gauge),
        (GAUGES[6].0, MetricType::Gauge),
        (SKIPPED, MetricType::Counter),
    ];

    /// `enabled: false` keeps and exports nothing (`--cronjob-metrics=false`).
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            hasher: RandomState::new(),
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<HashMap<Arc<str>, CronJobRecord>> {
        &self.shards[(self.hasher.hash_one(key) % SHARDS as u64) as usize]
    }

    /// Changes the record of the CronJob whose key is `key` (a new one
    /// starts empty).
    pub fn update(&self, key: &Arc<str>, change: impl FnOnce(&mut CronJobRecord)) {
        if !self.enabled {
            return;
        }
        // A poisoned shard only means a panic elsewhere mid-update of plain
        // numbers: the data is still usable.
        let mut shard = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        match shard.get_mut(&**key) {
            Some(record) => change(record),
            None => {
                let mut record = CronJobRecord::default();
                change(&mut record);
                shard.insert(key.clone(), record);
            }
        }
    }

    /// Forgets the CronJob whose key is `key`: its actor stopped (the
    /// CronJob moved or was deleted).
    pub fn remove(&self, key: &str) {
        if self.enabled {
            self.shard(key)
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(key);
        }
    }

    /// How many CronJobs have a record.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of every record, one shard locked at a time.
    fn snapshot(&self) -> Vec<(Arc<str>, CronJobRecord)> {
        let mut all = Vec::with_capacity(self.len());
        for shard in &self.shards {
            let shard = shard.lock().unwrap_or_else(|e| e.into_inner());
            all.extend(shard.iter().map(|(k, r)| (k.clone(), *r)));
        }
        all
    }
}

/// The API group, namespace and name of a CronJob's key: `namespace/name`
/// for batch/v1, `group/namespace/name` for another group (the two forms of
/// `reconcile::CronJobKind::key`, which this layer does not import; a test
/// there keeps the two readings the same).
pub fn key_parts(key: &str) -> (&str, &str, &str) {
    let mut parts = key.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(group), Some(namespace), Some(name)) => (group, namespace, name),
        (namespace, name, _) => (
            "batch",
            namespace.unwrap_or_default(),
            name.unwrap_or_default(),
        ),
    }
}

/// The label set of one CronJob, from its key.
fn labels(key: &str) -> [(&'static str, &str); 3] {
    let (group, namespace, name) = key_parts(key);
    [
        ("namespace", namespace),
        ("cronjob", name),
        ("group", group),
    ]
}

/// A gauge family: its name (after the registry's `shardcron_` prefix),
/// help, and value of a record (`None`: no series for it).
type GaugeFamily = (
    &'static str,
    &'static str,
    fn(&CronJobRecord) -> Option<i64>,
);

const GAUGES: [GaugeFamily; 7] = [
    (
        "cronjob_next_schedule_time_seconds",
        "When the owning replica will next start a Job of the CronJob (its next slot in its time zone, plus its spread offset), Unix seconds; absent while none is armed (suspended, no slot ahead, an invalid schedule)",
        |r| (r.next_schedule != 0).then_some(i64::from(r.next_schedule)),
    ),
    (
        "cronjob_last_schedule_time_seconds",
        "status.lastScheduleTime: the last slot (or run-now request) a Job was started for, Unix seconds",
        |r| (r.last_schedule != 0).then_some(i64::from(r.last_schedule)),
    ),
    (
        "cronjob_last_successful_time_seconds",
        "status.lastSuccessfulTime: when the last successful Job completed, Unix seconds",
        |r| (r.last_successful != 0).then_some(i64::from(r.last_successful)),
    ),
    (
        "cronjob_last_failed_time_seconds",
        "When the last failed Job the owner has seen failed (its Failed condition's time), Unix seconds, with that condition's reason (BackoffLimitExceeded, DeadlineExceeded, PodFailurePolicy, MaxFailedIndexesExceeded, FailedIndexes, Other); absent when none of the CronJob's Jobs kept by its history has failed (the slot history keeps the last failure longer)",
        |r| (r.last_failed != 0).then_some(i64::from(r.last_failed)),
    ),
    (
        "cronjob_active_jobs",
        "Jobs of the CronJob running (status.active)",
        |r| Some(i64::from(r.active)),
    ),
    ("cronjob_suspended", "1 when spec.suspend is true", |r| {
        Some(i64::from(r.suspended()))
    }),
    (
        "cronjob_forbid_held_since_seconds",
        "The first slot concurrencyPolicy Forbid has held back behind a running Job, when every slot since has been held back too, Unix seconds; absent when no slot is held",
        |r| (r.held_since != 0).then_some(i64::from(r.held_since)),
    ),
];

const SKIPPED: &str = "cronjob_skipped_slots";
const LAST_FAILED: &str = GAUGES[3].0;

impl Collector for CronJobSeries {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if !self.enabled {
            return Ok(());
        }
        let records = self.snapshot();
        for (name, help, value) in GAUGES {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (key, record) in &records {
                if let Some(value) = value(record) {
                    let [namespace, cronjob, group] = labels(key);
                    let gauge = ConstGauge::new(value);
                    if name == LAST_FAILED {
                        let reason = FAILURE_REASONS
                            .get(usize::from(record.last_failed_reason))
                            .copied()
                            .unwrap_or_default();
                        let labels = [namespace, cronjob, group, ("reason", reason)];
                        gauge.encode(family.encode_family(&labels)?)?;
                    } else {
                        gauge.encode(family.encode_family(&[namespace, cronjob, group])?)?;
                    }
                }
            }
        }
        let mut family = encoder.encode_descriptor(
            SKIPPED,
            "Slots of the CronJob that never started, counted since this replica took it over, by reason: forbid (concurrencyPolicy Forbid held it behind a running Job until a later slot came; a slot started when that Job ended is not skipped, see shardcron_job_policy_wait_seconds), deadline (past startingDeadlineSeconds), too_many_missed (more than 100 missed: only the most recent was considered); a series appears at its first count",
            None,
            MetricType::Counter,
        )?;
        for (key, record) in &records {
            for (reason, count) in SKIP_REASONS.iter().zip(record.skipped) {
                if count > 0 {
                    let [namespace, cronjob, group] = labels(key);
                    let labels = [namespace, cronjob, group, ("reason", *reason)];
                    ConstCounter::new(u64::from(count)).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;
    use std::sync::Arc;

    fn exposition(series: Arc<CronJobSeries>) -> String {
        let mut registry = Registry::with_prefix("shardcron");
        registry.register_collector(Box::new(series));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode");
        out
    }

    #[test]
    fn each_owned_cronjob_is_exported_once_with_its_kind_and_skips_count_once_per_slot() {
        let series = Arc::new(CronJobSeries::new(true));
        let slot: Timestamp = "2026-11-26T10:00:00Z".parse().expect("a time");
        let batch: Arc<str> = "team-a/nightly".into();
        let crd: Arc<str> = "shardcron.io/team-a/nightly".into();
        series.update(&batch, |r| {
            r.next_schedule = 1_764_151_200;
            r.last_schedule = 1_764_064_800;
            r.active = 1;
            r.skip("forbid", slot);
            r.skip("forbid", slot);
            // A later slot came first: the held one never ran.
            r.settle(seconds(Some(slot)) + 60);
        });
        series.update(&crd, |r| r.set_suspended(true));
        let text = exposition(series.clone());
        assert!(text.contains(
            "shardcron_cronjob_next_schedule_time_seconds{namespace=\"team-a\",cronjob=\"nightly\",group=\"batch\"} 1764151200\n"
        ), "{text}");
        assert!(text.contains(
            "shardcron_cronjob_suspended{namespace=\"team-a\",cronjob=\"nightly\",group=\"shardcron.io\"} 1\n"
        ), "{text}");
        assert!(text.contains(
            "shardcron_cronjob_skipped_slots_total{namespace=\"team-a\",cronjob=\"nightly\",group=\"batch\",reason=\"forbid\"} 1\n"
        ), "{text}");
        // No series for what is not known, nor for a reason never counted.
        assert!(!text.contains("last_successful_time_seconds{"), "{text}");
        assert!(!text.contains("reason=\"deadline\""), "{text}");
        // A stopped actor's CronJob is gone from this replica.
        series.remove(&batch);
        series.remove(&crd);
        assert!(series.is_empty());
        assert!(!exposition(series).contains("cronjob=\""));
    }

    #[test]
    fn a_slot_forbid_holds_back_counts_as_skipped_only_if_it_never_starts() {
        let t = |minute: i64| Timestamp::from_second(1_764_151_200 + 60 * minute).expect("a time");
        let s = |minute: i64| seconds(Some(t(minute)));
        let mut r = CronJobRecord::default();
        // Held at minute 1, decided on again at every Job event.
        r.skip("forbid", t(1));
        r.skip("forbid", t(1));
        assert_eq!((r.skipped, r.held_since), ([0, 0, 0], s(1)));
        // The running Job ends and minute 1 starts: it waited, not skipped.
        r.settle(s(1));
        assert_eq!((r.skipped, r.held_since), ([0, 0, 0], 0));
        // Minute 2 held, then minute 3 held before it could start: minute 2
        // never runs; the hold goes on from minute 2.
        r.skip("forbid", t(2));
        r.settle(s(1));
        r.skip("forbid", t(3));
        assert_eq!((r.skipped, r.held_since), ([1, 0, 0], s(2)));
        // Minute 3 passes its deadline while held: one count, for that.
        r.skip("deadline", t(3));
        r.skip("deadline", t(3));
        assert_eq!((r.skipped, r.held_since), ([1, 1, 0], 0));
        // Minute 5 held, minute 6 starts (the Job ended between): 5 skipped.
        r.skip("forbid", t(5));
        r.settle(s(6));
        assert_eq!((r.skipped, r.held_since), ([2, 1, 0], 0));
        // A stale decision about an older slot changes nothing.
        r.skip("forbid", t(4));
        r.skip("deadline", t(4));
        assert_eq!((r.skipped, r.held_since), ([2, 1, 0], 0));
    }

    #[test]
    fn instants_are_whole_seconds_within_what_a_u32_holds() {
        let at = |s: i64| Some(Timestamp::from_second(s).expect("an instant"));
        assert_eq!(seconds(None), 0);
        assert_eq!(seconds(at(1_764_151_200)), 1_764_151_200);
        assert_eq!(seconds(at(-86_400)), 0);
        assert_eq!(seconds(at(i64::from(u32::MAX) + 1)), u32::MAX);
        assert_eq!(size_of::<CronJobRecord>(), 40);
    }

    #[test]
    fn disabled_keeps_and_exports_nothing() {
        let series = Arc::new(CronJobSeries::new(false));
        series.update(&"team-a/nightly".into(), |r| r.active = 3);
        assert!(series.is_empty());
        assert!(!exposition(series).contains("cronjob_active_jobs"));
    }
}
