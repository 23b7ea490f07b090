//! Slot accounting, pure: which slots were due in a window, which Job
//! answered each, and the skew, missed and duplicate figures that follow.
//!
//! The schedule math is shardcron's own (`shardcron::schedule`), which the
//! project tests against robfig/cron; the loadtest's CronJobs have no
//! `timeZone`, and both controllers run in UTC.

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A CronJob as `observe` found it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CronJobSeen {
    pub namespace: String,
    pub name: String,
    pub schedule: String,
    /// Its `shardcron.io/spread` offset in seconds (0: none): its skew
    /// counts from the slot plus this.
    #[serde(default)]
    pub spread_offset: i64,
}

/// A Job of a loadtest CronJob, the first time the watch showed it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobSeen {
    pub namespace: String,
    pub cronjob: String,
    pub uid: String,
    /// From the `batch.kubernetes.io/cronjob-scheduled-timestamp` annotation
    /// (unix seconds).
    pub scheduled: i64,
    /// When the watch delivered it (unix milliseconds, this host's clock).
    pub seen_ms: i64,
    /// `shardcron.io/created-by`, where present.
    pub created_by: Option<String>,
}

type SlotKey = (String, String, i64);

/// What happened to the slots due in `[from, to]` (unix seconds).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SlotSummary {
    pub expected: usize,
    pub answered: usize,
    pub missed: usize,
    /// Slots answered by more than one Job (count of extra Jobs).
    pub duplicates: usize,
    /// Jobs for a time that is not a slot of their CronJob's schedule.
    pub off_schedule: usize,
    /// Skew of the first Job of each answered slot, milliseconds, sorted.
    pub skews_ms: Vec<i64>,
    /// Up to 20 missed slots, for the report.
    pub missed_examples: Vec<String>,
    /// The 20 latest answered slots, latest first, as
    /// `namespace/name@slot +skew ms`: which CronJobs and when, to tell
    /// which hand-off kept them waiting.
    #[serde(default)]
    pub latest_examples: Vec<String>,
}

/// How many of the latest slots [`SlotSummary::latest_examples`] names.
const LATEST_EXAMPLES: usize = 20;

/// Every slot of every CronJob due in `[from, to]`.
pub fn expected_slots(
    cronjobs: &[CronJobSeen],
    from: i64,
    to: i64,
) -> anyhow::Result<Vec<SlotKey>> {
    let mut slots = Vec::new();
    for cronjob in cronjobs {
        let schedule = shardcron::schedule::parse(&cronjob.schedule)
            .map_err(|e| anyhow::anyhow!("{}/{}: {e}", cronjob.namespace, cronjob.name))?;
        let mut at = Timestamp::from_second(from - 1)?;
        while let Some(next) = schedule.next(at, &TimeZone::UTC) {
            if next.as_second() > to {
                break;
            }
            slots.push((
                cronjob.namespace.clone(),
                cronjob.name.clone(),
                next.as_second(),
            ));
            at = next;
        }
    }
    Ok(slots)
}

/// Matches the Jobs seen against the slots due in `[from, to]`.
pub fn summarize(
    cronjobs: &[CronJobSeen],
    jobs: &[JobSeen],
    from: i64,
    to: i64,
) -> anyhow::Result<SlotSummary> {
    let mut answers: BTreeMap<SlotKey, Vec<&JobSeen>> = expected_slots(cronjobs, from, to)?
        .into_iter()
        .map(|key| (key, Vec::new()))
        .collect();
    let mut summary = SlotSummary {
        expected: answers.len(),
        ..SlotSummary::default()
    };
    for job in jobs.iter().filter(|j| (from..=to).contains(&j.scheduled)) {
        let key = (job.namespace.clone(), job.cronjob.clone(), job.scheduled);
        match answers.get_mut(&key) {
            Some(found) => found.push(job),
            None => summary.off_schedule += 1,
        }
    }
    let offsets: BTreeMap<(&str, &str), i64> = cronjobs
        .iter()
        .map(|c| ((c.namespace.as_str(), c.name.as_str()), c.spread_offset))
        .collect();
    let mut latest: Vec<(i64, String)> = Vec::new();
    for ((namespace, name, scheduled), found) in &answers {
        let offset = offsets
            .get(&(namespace.as_str(), name.as_str()))
            .copied()
            .unwrap_or(0);
        match found.iter().map(|j| j.seen_ms).min() {
            Some(first) => {
                summary.answered += 1;
                summary.duplicates += found.len() - 1;
                let skew = first - (scheduled + offset) * 1000;
                summary.skews_ms.push(skew);
                latest.push((skew, format!("{namespace}/{name}@{scheduled} +{skew} ms")));
            }
            None => {
                summary.missed += 1;
                if summary.missed_examples.len() < 20 {
                    summary
                        .missed_examples
                        .push(format!("{namespace}/{name}@{scheduled}"));
                }
            }
        }
    }
    summary.skews_ms.sort_unstable();
    latest.sort_unstable_by(|a, b| b.cmp(a));
    summary.latest_examples = (latest.into_iter().take(LATEST_EXAMPLES))
        .map(|(_, slot)| slot)
        .collect();
    Ok(summary)
}

/// What a killed controller cost: the CronJobs it served before the kill,
/// and their first slot after it, beside everyone else's.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Failover {
    pub cronjobs: usize,
    /// CronJobs whose last Job before the kill came from the victim.
    pub affected_cronjobs: usize,
    /// The slot at `kill_slot` of the affected CronJobs.
    pub affected: SlotSummary,
    /// The same slot of the others.
    pub others: SlotSummary,
}

/// Splits the CronJobs by who created their last Job before `kill_slot`
/// (`shardcron.io/created-by`) and summarizes the slot at `kill_slot` for
/// each side. `victim: None` means one controller served every CronJob
/// (upstream's leader), so all are affected.
pub fn failover(
    cronjobs: &[CronJobSeen],
    jobs: &[JobSeen],
    kill_slot: i64,
    victim: Option<&str>,
) -> anyhow::Result<Failover> {
    let mut last_before: BTreeMap<(&str, &str), &JobSeen> = BTreeMap::new();
    for job in jobs.iter().filter(|j| j.scheduled < kill_slot) {
        let key = (job.namespace.as_str(), job.cronjob.as_str());
        let newer = last_before
            .get(&key)
            .is_none_or(|seen| seen.scheduled < job.scheduled);
        if newer {
            last_before.insert(key, job);
        }
    }
    let is_affected = |namespace: &str, name: &str| match victim {
        None => true,
        Some(victim) => last_before
            .get(&(namespace, name))
            .is_some_and(|j| j.created_by.as_deref() == Some(victim)),
    };
    let (affected, others): (Vec<CronJobSeen>, Vec<CronJobSeen>) = cronjobs
        .iter()
        .cloned()
        .partition(|c| is_affected(&c.namespace, &c.name));
    let (affected_jobs, other_jobs): (Vec<JobSeen>, Vec<JobSeen>) = jobs
        .iter()
        .cloned()
        .partition(|j| is_affected(&j.namespace, &j.cronjob));
    Ok(Failover {
        cronjobs: cronjobs.len(),
        affected_cronjobs: affected.len(),
        affected: summarize(&affected, &affected_jobs, kill_slot, kill_slot)?,
        others: summarize(&others, &other_jobs, kill_slot, kill_slot)?,
    })
}

/// The nearest-rank percentile `p` (0..=100) of sorted values.
pub fn percentile(sorted: &[i64], p: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cronjob(name: &str, schedule: &str) -> CronJobSeen {
        CronJobSeen {
            namespace: "lt-a-0".into(),
            name: name.into(),
            schedule: schedule.into(),
            spread_offset: 0,
        }
    }

    fn job(name: &str, uid: &str, scheduled: i64, seen_ms: i64) -> JobSeen {
        JobSeen {
            namespace: "lt-a-0".into(),
            cronjob: name.into(),
            uid: uid.into(),
            scheduled,
            seen_ms,
            created_by: None,
        }
    }

    // 2026-01-01T00:00:00Z
    const T0: i64 = 1_767_225_600;

    #[test]
    fn slots_in_the_window_are_bounded_on_both_ends() {
        let slots = expected_slots(&[cronjob("a", "*/5 * * * *")], T0, T0 + 600).unwrap();
        let times: Vec<i64> = slots.iter().map(|s| s.2).collect();
        assert_eq!(times, vec![T0, T0 + 300, T0 + 600]);
    }

    #[test]
    fn a_spread_cronjobs_skew_counts_from_its_offset() {
        let mut spread = cronjob("a", "* * * * *");
        spread.spread_offset = 120;
        let jobs = [job("a", "1", T0, (T0 + 120) * 1000 + 300)];
        let s = summarize(&[spread], &jobs, T0, T0).unwrap();
        assert_eq!(s.skews_ms, vec![300]);
    }

    #[test]
    fn missed_duplicate_and_off_schedule_jobs_are_counted() {
        let cronjobs = [cronjob("a", "* * * * *"), cronjob("b", "0 * * * *")];
        let jobs = [
            job("a", "1", T0, T0 * 1000 + 250),
            job("a", "2", T0, T0 * 1000 + 900),
            job("a", "3", T0 + 60, (T0 + 60) * 1000 + 1500),
            job("b", "4", T0 + 30, (T0 + 30) * 1000),
            // Outside the window: ignored.
            job("a", "5", T0 + 600, 0),
        ];
        let s = summarize(&cronjobs, &jobs, T0, T0 + 120).unwrap();
        assert_eq!(s.expected, 4, "a at 0, 60, 120 and b at 0");
        assert_eq!(s.answered, 2);
        assert_eq!(s.missed, 2);
        assert_eq!(s.duplicates, 1);
        assert_eq!(s.off_schedule, 1);
        assert_eq!(
            s.skews_ms,
            vec![250, 1500],
            "the first Job of a slot gives its skew"
        );
        assert_eq!(s.missed_examples.len(), 2);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn a_failover_counts_the_victims_cronjobs_and_their_next_slot() {
        let cronjobs: Vec<CronJobSeen> = ["a", "b", "c"]
            .iter()
            .map(|name| CronJobSeen {
                namespace: "ns".into(),
                name: (*name).into(),
                schedule: "* * * * *".into(),
                spread_offset: 0,
            })
            .collect();
        let job = |cronjob: &str, scheduled: i64, delay_ms: i64, by: &str| JobSeen {
            namespace: "ns".into(),
            cronjob: cronjob.into(),
            uid: format!("{cronjob}-{scheduled}-{by}"),
            scheduled,
            seen_ms: scheduled * 1000 + delay_ms,
            created_by: Some(by.into()),
        };
        let jobs = vec![
            job("a", 60, 100, "r0"),
            job("a", 120, 100, "r1"),
            job("b", 120, 100, "r1"),
            job("c", 120, 100, "r2"),
            // The kill came before 180: r1's CronJobs are late, c is not;
            // b's slot was answered twice.
            job("a", 180, 16_000, "r0"),
            job("b", 180, 17_000, "r2"),
            job("b", 180, 17_500, "r0"),
            job("c", 180, 200, "r2"),
        ];
        let f = failover(&cronjobs, &jobs, 180, Some("r1")).unwrap();
        assert_eq!((f.cronjobs, f.affected_cronjobs), (3, 2));
        assert_eq!(f.affected.skews_ms, vec![16_000, 17_000]);
        assert_eq!(f.affected.duplicates, 1);
        assert_eq!(f.others.skews_ms, vec![200]);

        let all = failover(&cronjobs, &jobs, 180, None).unwrap();
        assert_eq!(all.affected_cronjobs, 3);
        assert_eq!(all.others.expected, 0);
    }
}
