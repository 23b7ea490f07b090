//! Every Job of a namespace, recorded from a watch started before the
//! first CronJob: with no Job history (`successfulJobsHistoryLimit: 0`,
//! `ttlSecondsAfterFinished: 0`) a slot's Job is gone within seconds, and a
//! list at the end would not show that it ran, nor that it ran twice.

use super::fleet::{Slot, minutes, next_minute};
use futures::StreamExt;
use jiff::{Timestamp, ToSpan};
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::watcher::{self, Event};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every Job the watch saw, by CronJob and slot.
#[derive(Debug, Default)]
pub struct Record {
    /// (CronJob, slot) -> Job UID -> the Job's slot record.
    pub slots: BTreeMap<(String, Timestamp), BTreeMap<String, Slot>>,
    /// Re-lists after the first list: a Job created and deleted in the gap
    /// would be missed, so the run would prove nothing.
    pub relists: u32,
}

fn record(job: &Job, into: &mut Record) {
    if let Some(slot) = Slot::of(job) {
        into.slots
            .entry((slot.cronjob.clone(), slot.scheduled))
            .or_default()
            .insert(job.metadata.uid.clone().unwrap_or_default(), slot);
    }
}

/// Watches the namespace's Jobs into `into` until the test ends.
pub fn watch_jobs(jobs: kube::Api<Job>, into: Arc<Mutex<Record>>) {
    tokio::spawn(async move {
        let mut events = watcher::watcher(jobs, watcher::Config::default()).boxed();
        let mut listed = false;
        while let Some(event) = events.next().await {
            let Ok(event) = event else { continue };
            let mut record_now = into.lock().expect("record");
            match event {
                Event::Init if listed => record_now.relists += 1,
                Event::InitDone => listed = true,
                Event::Apply(job) | Event::InitApply(job) | Event::Delete(job) => {
                    record(&job, &mut record_now)
                }
                Event::Init => {}
            }
        }
    });
}

/// What a record shows of every slot of `names` from `first_slot` through
/// the next whole minute.
#[derive(Debug)]
pub struct Tally {
    /// How many slots were due.
    pub slots: usize,
    /// The slots with more than one Job, and their Jobs.
    pub twice: Vec<((String, Timestamp), Vec<Slot>)>,
    /// The slots with no Job.
    pub missing: Vec<(String, Timestamp)>,
    /// Seconds from each slot run to its first Job's creation.
    pub delays: Vec<i64>,
    /// See [`Record::relists`].
    pub relists: u32,
}

/// Waits until the record holds a Job for every slot of `names` from
/// `first_slot` through the next whole minute (at most a minute past it;
/// a slot still missing then is listed, not a panic, so that a failure says
/// which), then 10 s for late duplicates, and tallies.
pub async fn tally(seen: &Arc<Mutex<Record>>, names: &[String], first_slot: Timestamp) -> Tally {
    let last = next_minute(Timestamp::now() + 5.seconds());
    let expected: BTreeSet<(String, Timestamp)> = names
        .iter()
        .flat_map(|name| minutes(first_slot, last).map(move |slot| (name.clone(), slot)))
        .collect();
    let every_slot_seen = async {
        while !{
            let record = seen.lock().expect("record");
            expected.iter().all(|slot| record.slots.contains_key(slot))
        } {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let wait = last
        .as_second()
        .saturating_sub(Timestamp::now().as_second()) as u64
        + 60;
    let _ = tokio::time::timeout(Duration::from_secs(wait), every_slot_seen).await;
    // Late duplicates would come within a renew period or two.
    tokio::time::sleep(Duration::from_secs(10)).await;

    let record = seen.lock().expect("record");
    Tally {
        slots: expected.len(),
        twice: record
            .slots
            .iter()
            .filter(|(_, jobs)| jobs.len() > 1)
            .map(|(slot, jobs)| (slot.clone(), jobs.values().cloned().collect()))
            .collect(),
        missing: expected
            .iter()
            .filter(|slot| !record.slots.contains_key(slot))
            .cloned()
            .collect(),
        delays: expected
            .iter()
            .filter_map(|slot| {
                let first = record.slots.get(slot)?.values().map(|s| s.created).min()?;
                Some(first.as_second() - slot.1.as_second())
            })
            .collect(),
        relists: record.relists,
    }
}
