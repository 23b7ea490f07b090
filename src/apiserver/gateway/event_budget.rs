//! Each object's budget of Events, as upstream's recorder keeps it: 25
//! Events about one object of one type (Normal, Warning) at once, then one
//! more every 5 minutes.
//!
//! kube-controller-manager's CronJob controller records through
//! client-go's `tools/record`, whose spam filter
//! (`EventSourceObjectSpamFilter`: `defaultSpamBurst` 25, `defaultSpamQPS`
//! 1/300, keyed by source, object and type, in an LRU of 4,096 objects)
//! drops the rest. A CronJob firing every minute says three things a slot
//! (SuccessfulCreate, SawCompletedJob, SuccessfulDelete): upstream tells
//! the first 25 and then one every 5 minutes; a CronJob firing hourly is
//! never held back. The same here, per replica, before an Event is queued:
//! one request a slot fewer, and a tenant's CronJob cannot flood the API
//! server with Events. What is held back is counted in
//! `shardcron_events_held_back_total`. Pure: time is passed in.

use super::recent::RecentMap;
use jiff::{SignedDuration, Timestamp};

/// Events about one object of one type told at once (upstream's
/// `defaultSpamBurst`).
pub const BURST: i64 = 25;

/// One more Event is allowed each this long (upstream's `defaultSpamQPS`,
/// 1/300).
pub const REFILL: SignedDuration = SignedDuration::from_secs(300);

/// Objects remembered per replica (upstream's LRU: 4,096 per process). An
/// object forgotten starts again with a full budget, as upstream's does;
/// a budget untouched for `BURST` refills is full anyway.
pub const CAPACITY: usize = 4_096;

/// Whose budget an Event spends: the object it is about (its UID, or its
/// namespace and name without one) and its type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BudgetKey {
    object: String,
    warning: bool,
}

impl BudgetKey {
    pub fn new(uid: Option<&str>, namespace: &str, name: &str, warning: bool) -> Self {
        let object = match uid {
            Some(uid) if !uid.is_empty() => uid.to_owned(),
            _ => format!("{namespace}/{name}"),
        };
        Self { object, warning }
    }
}

/// One object's bucket: its credit as of `at`, in milliseconds of refill
/// (a token is [`REFILL`] of them: whole numbers, so a token's edge is
/// exact).
#[derive(Debug, Clone, Copy)]
struct Bucket {
    credit_ms: i64,
    at: Timestamp,
}

const TOKEN_MS: i64 = REFILL.as_millis() as i64;
const FULL_MS: i64 = BURST * TOKEN_MS;

/// The Events' budgets: a token bucket per object and type.
#[derive(Debug)]
pub struct EventBudgets {
    buckets: RecentMap<BudgetKey, Bucket>,
}

impl EventBudgets {
    pub fn new(capacity: usize) -> Self {
        Self {
            buckets: RecentMap::new(capacity),
        }
    }

    /// Whether an Event for `key` may be told at `now`; spends a token if so.
    pub fn allow(&mut self, key: &BudgetKey, now: Timestamp) -> bool {
        let (credit_ms, at) = match self.buckets.get(key) {
            // A clock stepped back refills nothing, and the bucket keeps
            // its time (or the gap would be refilled twice).
            Some(bucket) if now <= bucket.at => (bucket.credit_ms, bucket.at),
            Some(bucket) => {
                let elapsed_ms = now.duration_since(bucket.at).as_millis();
                let refilled = i128::from(bucket.credit_ms) + elapsed_ms;
                (refilled.min(i128::from(FULL_MS)) as i64, now)
            }
            None => (FULL_MS, now),
        };
        let allowed = credit_ms >= TOKEN_MS;
        let credit_ms = if allowed {
            credit_ms - TOKEN_MS
        } else {
            credit_ms
        };
        self.buckets
            .insert(key.clone(), Bucket { credit_ms, at }, now);
        allowed
    }

    pub fn len(&self) -> usize {
        self.buckets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).expect("a valid time")
    }

    fn key(uid: &str) -> BudgetKey {
        BudgetKey::new(Some(uid), "team-a", "report", false)
    }

    /// Events allowed of `count` told at `start`, `start + every`, ...
    fn allowed(
        budgets: &mut EventBudgets,
        key: &BudgetKey,
        start: i64,
        every: i64,
        count: i64,
    ) -> usize {
        (0..count)
            .filter(|i| budgets.allow(key, at(start + i * every)))
            .count()
    }

    #[test]
    fn upstreams_budget_25_at_once_then_one_every_5_minutes() {
        // (told every N seconds, how many, allowed): upstream's spam
        // filter with its defaults.
        let table: &[(i64, i64, usize)] = &[
            // A burst: the first 25.
            (0, 100, 25),
            // Every minute, three a slot (20 s apart) for an hour: 180
            // told; 25 plus one per 300 s of the 3,580 s (11).
            (20, 180, 36),
            // Every 20 minutes: never held back.
            (1_200, 72, 72),
            // Every 300 s: exactly the refill, never held back.
            (300, 100, 100),
        ];
        for &(every, count, expected) in table {
            let mut budgets = EventBudgets::new(CAPACITY);
            let got = allowed(&mut budgets, &key("cj"), 0, every, count);
            assert_eq!(got, expected, "every {every} s, {count} told");
        }
    }

    #[test]
    fn each_object_and_type_has_its_own_budget() {
        let mut budgets = EventBudgets::new(CAPACITY);
        assert_eq!(allowed(&mut budgets, &key("a"), 0, 0, 30), 25);
        assert_eq!(allowed(&mut budgets, &key("b"), 0, 0, 30), 25);
        let warning = BudgetKey::new(Some("a"), "team-a", "report", true);
        assert_eq!(allowed(&mut budgets, &warning, 0, 0, 30), 25);
        // Without a UID: its namespace and name.
        let unnamed = BudgetKey::new(None, "team-a", "report", false);
        assert_eq!(unnamed, BudgetKey::new(Some(""), "team-a", "report", false));
        assert_ne!(unnamed, key("a"));
    }

    #[test]
    fn a_spent_budget_refills_and_a_clock_stepped_back_refills_nothing() {
        let mut budgets = EventBudgets::new(CAPACITY);
        let cj = key("cj");
        assert_eq!(allowed(&mut budgets, &cj, 0, 0, 25), 25);
        assert!(!budgets.allow(&cj, at(0)));
        assert!(!budgets.allow(&cj, at(-3_600)), "stepped back an hour");
        assert!(!budgets.allow(&cj, at(299)));
        assert!(budgets.allow(&cj, at(300)));
        // More than two hours of silence: the whole burst again, no more.
        assert_eq!(allowed(&mut budgets, &cj, 8_000, 0, 30), 25);
    }

    #[test]
    fn the_objects_remembered_are_bounded_and_one_forgotten_starts_full() {
        let mut budgets = EventBudgets::new(2);
        assert_eq!(allowed(&mut budgets, &key("a"), 0, 0, 25), 25);
        budgets.allow(&key("b"), at(1));
        budgets.allow(&key("c"), at(2));
        assert_eq!(budgets.len(), 2);
        assert!(
            budgets.allow(&key("a"), at(3)),
            "a forgotten: a full budget"
        );
    }
}
