//! Watching a run: every Job of a loadtest CronJob as the watch first shows
//! it, the controller processes' CPU and memory, and the API server's
//! per-client counters; summarized into an [`Observation`].

use crate::procstat::{self, ProcSample};
use crate::slots::{self, CronJobSeen, JobSeen, SlotSummary};
use crate::{apimetrics, create};
use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde::{Deserialize, Serialize};
use shardcron::actor::apply::CREATED_BY_ANNOTATION;
use shardcron::reconcile::{CronJobKind, SCHEDULED_TIMESTAMP_ANNOTATION};
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A process whose CPU and memory a run reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Process {
    pub name: String,
    pub pid: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcessFigures {
    pub name: String,
    /// CPU seconds spent from the window's start to the observation's end.
    pub cpu_seconds: f64,
    pub peak_rss_bytes: u64,
    pub rss_bytes_at_end: u64,
    /// At the window's start (absent from runs kept before it was kept).
    #[serde(default)]
    pub rss_bytes_at_start: u64,
}

/// Everything one run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Observation {
    /// Slots due in `[from, to]` (unix seconds) are counted.
    pub from: i64,
    pub to: i64,
    /// How long after `to` late Jobs were still awaited.
    pub tail_seconds: u64,
    pub cronjobs: usize,
    pub slots: SlotSummary,
    /// The killed controller's CronJobs against the rest (failover only).
    #[serde(default)]
    pub failover: Option<slots::Failover>,
    /// The slots of every namespace but the big tenant's (tenants mix only).
    pub small_tenants: Option<SlotSummary>,
    /// Jobs first seen in each second since `from` (index = second).
    pub jobs_per_second: Vec<u32>,
    pub processes: Vec<ProcessFigures>,
    /// Requests and execution time per FlowSchema during the run.
    pub api: apimetrics::Snapshot,
    /// Jobs per `shardcron.io/created-by` value ("-" when absent).
    pub created_by: BTreeMap<String, usize>,
    /// Times the Job watch had to be re-established.
    pub watch_errors: usize,
}

/// The first minute boundary at or after `unix` (seconds).
pub fn next_minute(unix: i64) -> i64 {
    (unix + 59).div_euclid(60) * 60
}

/// The first and last of `minutes` whole-minute slots (unix seconds),
/// starting at the first boundary at least `lead` seconds from now.
pub fn whole_minutes(lead: i64, minutes: u32) -> (i64, i64) {
    let from = next_minute(unix_ms() / 1000 + lead);
    (from, from + 60 * (i64::from(minutes.max(1)) - 1))
}

pub fn unix_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The running Job watch of an observation in progress.
pub struct JobWatch {
    seen: Arc<Mutex<(Vec<JobSeen>, usize)>>,
    task: tokio::task::JoinHandle<()>,
}

impl JobWatch {
    /// Starts watching Jobs in namespaces starting with `prefix`.
    pub fn start(client: &kube::Client, prefix: &str) -> Self {
        let seen = Arc::new(Mutex::new((Vec::new(), 0usize)));
        let api: Api<Job> = Api::all(client.clone());
        let prefix = prefix.to_owned();
        let sink = seen.clone();
        let task = tokio::spawn(async move {
            let mut uids = HashSet::new();
            let mut stream = watcher::watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(event) = stream.next().await {
                let now = unix_ms();
                let job = match event {
                    Ok(Event::Apply(job) | Event::InitApply(job)) => job,
                    Ok(_) => continue,
                    Err(error) => {
                        eprintln!("observe: Job watch error (retrying): {error}");
                        lock(&sink).1 += 1;
                        continue;
                    }
                };
                if let Some(found) = job_seen(&job, &prefix, now)
                    && uids.insert(found.uid.clone())
                {
                    lock(&sink).0.push(found);
                }
            }
        });
        Self { seen, task }
    }

    /// Stops the watch: the Jobs seen, and how often it was re-established.
    pub fn take(self) -> (Vec<JobSeen>, usize) {
        self.task.abort();
        std::mem::take(&mut *lock(&self.seen))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A loadtest CronJob's Job; `None` for anything else.
fn job_seen(job: &Job, prefix: &str, seen_ms: i64) -> Option<JobSeen> {
    let namespace = job.metadata.namespace.as_deref()?;
    if !namespace.starts_with(prefix) {
        return None;
    }
    let cronjob = job
        .metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "CronJob")?;
    let annotations = job.metadata.annotations.as_ref()?;
    let scheduled: jiff::Timestamp = annotations
        .get(SCHEDULED_TIMESTAMP_ANNOTATION)?
        .parse()
        .ok()?;
    Some(JobSeen {
        namespace: namespace.to_owned(),
        cronjob: cronjob.name.clone(),
        uid: job.metadata.uid.clone()?,
        scheduled: scheduled.as_second(),
        seen_ms,
        created_by: annotations.get(CREATED_BY_ANNOTATION).cloned(),
    })
}

/// What an observation needs besides the watch.
pub struct Window<'a> {
    pub from: i64,
    pub to: i64,
    pub tail: Duration,
    pub prefix: &'a str,
    /// The kind of the window's CronJobs (their Jobs are the same).
    pub kind: CronJobKind,
    pub processes: &'a [Process],
    /// The tenants mix's big namespace, to report the others apart.
    pub big_tenant: Option<&'a str>,
    /// A controller killed just before the slot at `.0`: `.1` names the
    /// replica (`shardcron.io/created-by`), `None` the only controller.
    pub failover: Option<(i64, Option<&'a str>)>,
    /// Ends the tail early, [`SETTLE`] after this many Jobs have been seen:
    /// a herd's tail is sized for the slowest controller, and the others
    /// need not sit through it. Duplicates still have `SETTLE` to show.
    pub done_after_jobs: Option<usize>,
}

/// How long an observation goes on after every expected Job was seen.
pub const SETTLE: Duration = Duration::from_secs(30);

/// Waits for the window to start, samples through it and its tail, and
/// summarizes. `watch` must have been started before `window.from`.
pub async fn observe(
    client: &kube::Client,
    watch: JobWatch,
    window: &Window<'_>,
) -> anyhow::Result<Observation> {
    sleep_until_ms(window.from * 1000).await;
    let api_before = apimetrics::snapshot(client).await?;
    let cpu_before = sample_all(window.processes)?;
    let mut end_ms = window.to * 1000 + window.tail.as_millis() as i64;
    let mut last_progress = unix_ms();
    while unix_ms() < end_ms {
        tokio::time::sleep(Duration::from_secs(1)).await;
        // A controller that died mid-run is an error, not a low CPU figure.
        sample_all(window.processes)?;
        let seen = lock(&watch.seen).0.len();
        if let Some(expected) = window.done_after_jobs
            && seen >= expected
        {
            end_ms = end_ms.min(unix_ms() + SETTLE.as_millis() as i64);
        }
        if unix_ms() - last_progress >= 15_000 {
            last_progress = unix_ms();
            eprintln!(
                "observe: {seen} Jobs seen, {}s to go",
                (end_ms - unix_ms()) / 1000
            );
        }
    }
    let cpu_after = sample_all(window.processes)?;
    let api_after = apimetrics::snapshot(client).await?;
    let (jobs, watch_errors) = watch.take();

    let cronjobs = list_cronjobs(client, window.prefix, window.kind).await?;
    let summary = slots::summarize(&cronjobs, &jobs, window.from, window.to)?;
    let small_tenants = match window.big_tenant {
        Some(big) => {
            let keep = |ns: &str| ns != big;
            let small: Vec<CronJobSeen> = cronjobs
                .iter()
                .filter(|c| keep(&c.namespace))
                .cloned()
                .collect();
            let jobs: Vec<JobSeen> = jobs
                .iter()
                .filter(|j| keep(&j.namespace))
                .cloned()
                .collect();
            Some(slots::summarize(&small, &jobs, window.from, window.to)?)
        }
        None => None,
    };
    let failover = match window.failover {
        Some((kill_slot, victim)) => Some(slots::failover(&cronjobs, &jobs, kill_slot, victim)?),
        None => None,
    };
    let mut jobs_per_second =
        vec![0u32; ((end_ms - window.from * 1000) / 1000 + 1).max(1) as usize];
    let mut created_by = BTreeMap::new();
    for job in jobs
        .iter()
        .filter(|j| (window.from..=window.to).contains(&j.scheduled))
    {
        let second =
            ((job.seen_ms - window.from * 1000) / 1000).clamp(0, jobs_per_second.len() as i64 - 1);
        jobs_per_second[second as usize] += 1;
        *created_by
            .entry(job.created_by.clone().unwrap_or_else(|| "-".into()))
            .or_insert(0) += 1;
    }
    let processes = window
        .processes
        .iter()
        .zip(cpu_before.iter().zip(&cpu_after))
        .map(|(p, (before, after))| ProcessFigures {
            name: p.name.clone(),
            cpu_seconds: after.cpu_seconds - before.cpu_seconds,
            peak_rss_bytes: after.peak_rss_bytes,
            rss_bytes_at_end: after.rss_bytes,
            rss_bytes_at_start: before.rss_bytes,
        })
        .collect();
    Ok(Observation {
        from: window.from,
        to: window.to,
        tail_seconds: ((end_ms - window.to * 1000) / 1000) as u64,
        cronjobs: cronjobs.len(),
        slots: summary,
        small_tenants,
        failover,
        jobs_per_second,
        processes,
        api: apimetrics::delta(&api_before, &api_after),
        created_by,
        watch_errors,
    })
}

fn sample_all(processes: &[Process]) -> anyhow::Result<Vec<ProcSample>> {
    processes
        .iter()
        .map(|p| procstat::sample(p.pid).with_context(|| format!("{} (pid {})", p.name, p.pid)))
        .collect()
}

pub async fn sleep_until_ms(at_ms: i64) {
    let wait = at_ms - unix_ms();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait as u64)).await;
    }
}

/// The CronJobs of `kind` in namespaces starting with `prefix`.
pub async fn list_cronjobs(
    client: &kube::Client,
    prefix: &str,
    kind: CronJobKind,
) -> anyhow::Result<Vec<CronJobSeen>> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &create::resource(kind));
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await.context("listing CronJobs")?;
        for cj in &page.items {
            let namespace = cj.metadata.namespace.clone().unwrap_or_default();
            if namespace.starts_with(prefix) {
                let name = cj.metadata.name.clone().unwrap_or_default();
                let spread_offset = shardcron::reconcile::Options::from_annotations(
                    cj.metadata.annotations.as_ref(),
                )
                .spread_offset(&namespace, &name);
                let schedule = cj.data["spec"]["schedule"]
                    .as_str()
                    .with_context(|| format!("CronJob {namespace}/{name} without a schedule"))?
                    .to_owned();
                out.push(CronJobSeen {
                    namespace,
                    name,
                    schedule,
                    spread_offset,
                });
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_minute_rounds_up_to_a_boundary() {
        assert_eq!(next_minute(120), 120);
        assert_eq!(next_minute(121), 180);
    }
}
