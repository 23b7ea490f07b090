//! Every Job of a namespace, recorded from a watch started before the
//! first CronJob: with no Job history (`successfulJobsHistoryLimit: 0`,
//! `ttlSecondsAfterFinished: 0`) a slot's Job is gone within seconds, and a
//! list at the end would not show that it ran, nor that it ran twice.

use super::fleet::Slot;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use kube::runtime::watcher::{self, Event};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

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
