//! S3, scale: what a CronJob costs each controller in memory, how long a
//! start takes until every CronJob is armed, and what a controller burns
//! while nothing is due.
//!
//! One control plane serves every controller in turn. The CronJobs are daily
//! at hours outside the run ([`mix::Anchor::quiet_hour`]), so no controller
//! writes anything and each finds the objects as they were created. Each
//! controller is measured twice, on the empty cluster and with every
//! CronJob; the cost of a CronJob is the difference over the count, so
//! kube-controller-manager's other controllers and shardcron's runtime,
//! present in both, cancel out.

use crate::apimetrics;
use crate::cluster::{self, LocalCluster};
use crate::compare::{Scenario, Settings, Variant};
use crate::create;
use crate::mix::{self, Anchor};
use crate::procstat::{self, ProcSample};
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::{Duration, Instant};

/// After every CronJob is armed, this long passes before memory is read:
/// start-up garbage (the initial list) is freed or reused by then.
const SETTLE: Duration = Duration::from_secs(20);
/// Idle CPU is averaged over this long.
const IDLE: Duration = Duration::from_secs(60);
/// The longest a start may take until every CronJob is armed.
const ARM_TIMEOUT: Duration = Duration::from_secs(900);

/// One controller at rest, summed over its processes.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Footprint {
    /// From the start (the first process) until every CronJob was armed.
    pub armed_seconds: f64,
    /// Resident set after `SETTLE`.
    pub rss_bytes: u64,
    /// Peak resident set (VmHWM) at the end.
    pub peak_rss_bytes: u64,
    /// CPU seconds per second over `IDLE`.
    pub idle_cpu: f64,
    /// Requests the controller's identity made until armed (kube-apiserver's
    /// APF counters).
    pub startup_requests: f64,
}

/// One controller's S3 figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScaleRun {
    pub variant: String,
    pub cronjobs: usize,
    pub empty: Footprint,
    pub loaded: Footprint,
}

impl ScaleRun {
    /// Resident bytes a CronJob adds.
    pub fn rss_bytes_per_cronjob(&self) -> f64 {
        (self.loaded.rss_bytes as f64 - self.empty.rss_bytes as f64) / self.cronjobs.max(1) as f64
    }
}

/// Runs S3 against each variant on one control plane, saying each run's
/// figures in a line made by `line` (the caller writes the report).
pub async fn run(
    scenario: &Scenario,
    variants: &[Variant],
    settings: &Settings,
    line: fn(&ScaleRun) -> String,
) -> anyhow::Result<Vec<ScaleRun>> {
    std::fs::create_dir_all(&settings.out)?;
    // The upstream controller's start-up is read from kube-controller-
    // manager's /metrics, which must answer without credentials.
    let kcm_args = format!(
        "--kube-api-qps={} --kube-api-burst={} --authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        settings.limits.qps, settings.limits.burst
    );
    let mut cluster = LocalCluster::up(
        &settings.out.join("cluster"),
        false,
        &kcm_args,
        settings.sharded_watch,
    )
    .await?;
    let result = run_on(&mut cluster, scenario, variants, settings, line).await;
    cluster
        .finish(
            Vec::new(),
            result,
            &settings.out.join("logs"),
            settings.keep_logs,
        )
        .await
}

async fn run_on(
    cluster: &mut LocalCluster,
    scenario: &Scenario,
    variants: &[Variant],
    settings: &Settings,
    line: fn(&ScaleRun) -> String,
) -> anyhow::Result<Vec<ScaleRun>> {
    apimetrics::install_flow_schemas(&cluster.client).await?;
    let credentials = if variants.iter().any(|v| *v != Variant::Upstream) {
        Some(cluster.shardcron_credentials().await?)
    } else {
        None
    };
    let mut empty = Vec::new();
    for variant in variants {
        eprintln!("scale: {variant} on the empty cluster");
        empty.push(
            measure(
                cluster,
                *variant,
                0,
                settings,
                credentials.as_deref(),
                "empty",
            )
            .await?,
        );
    }
    // The controllers run on this machine's local time, like the schedules.
    let now = jiff::Zoned::now();
    let at = Anchor {
        minute: 0,
        quiet_hour: now.hour() as u8,
    };
    let quiet_until = now
        .with()
        .minute(0)
        .second(0)
        .subsec_nanosecond(0)
        .build()?
        .checked_add(jiff::SignedDuration::from_hours(3))?;
    let plan = mix::plan(scenario.mix, scenario.count, scenario.namespaces, "a", at);
    create::create(&cluster.client, &plan, settings.create_qps).await?;
    let mut runs = Vec::new();
    for (variant, empty) in variants.iter().zip(empty) {
        eprintln!("scale: {variant} with {} CronJobs", scenario.count);
        let loaded = measure(
            cluster,
            *variant,
            scenario.count,
            settings,
            credentials.as_deref(),
            "loaded",
        )
        .await?;
        let run = ScaleRun {
            variant: variant.to_string(),
            cronjobs: scenario.count,
            empty,
            loaded,
        };
        eprintln!("scale: {}", line(&run));
        std::fs::write(
            settings.out.join(format!("{variant}.json")),
            serde_json::to_vec_pretty(&run)?,
        )?;
        runs.push(run);
    }
    if jiff::Zoned::now() > quiet_until {
        bail!(
            "the run outlasted its quiet hours (until {quiet_until}): CronJobs fired during the measurements"
        );
    }
    Ok(runs)
}

/// Starts `variant`, waits until its `cronjobs` CronJobs are armed, reads
/// its memory and idle CPU, and stops it again.
async fn measure(
    cluster: &mut LocalCluster,
    variant: Variant,
    cronjobs: usize,
    settings: &Settings,
    credentials: Option<&Path>,
    phase: &str,
) -> anyhow::Result<Footprint> {
    let before = apimetrics::snapshot(&cluster.client).await?;
    let started = Instant::now();
    let (pids, replicas) = match variant {
        Variant::Upstream => {
            let pid = cluster.restart_kcm(&[("--controllers", r"\*")])?;
            wait_upstream_armed(cluster, pid, cronjobs).await?;
            (vec![pid], Vec::new())
        }
        Variant::Shardcron(n) => {
            let credentials = credentials.context("no ServiceAccount kubeconfig")?;
            let replicas = cluster
                .start_shardcron(
                    &settings.shardcron_bin,
                    n,
                    credentials,
                    settings.limits,
                    &format!("-{phase}"),
                )
                .await?;
            let pids = replicas
                .iter()
                .map(cluster::pid)
                .collect::<Result<_, _>>()?;
            (pids, replicas)
        }
    };
    let armed_seconds = started.elapsed().as_secs_f64();
    let after = apimetrics::snapshot(&cluster.client).await?;
    let startup_requests = apimetrics::delta(&before, &after)
        .get(apimetrics::schema_of(variant == Variant::Upstream))
        .map(|l| l.requests)
        .unwrap_or(0.0);

    tokio::time::sleep(SETTLE).await;
    let idle_from = sum(&pids)?;
    tokio::time::sleep(IDLE).await;
    let idle_to = sum(&pids)?;
    let footprint = Footprint {
        armed_seconds,
        rss_bytes: idle_from.rss_bytes,
        peak_rss_bytes: idle_to.peak_rss_bytes,
        idle_cpu: (idle_to.cpu_seconds - idle_from.cpu_seconds) / IDLE.as_secs_f64(),
        startup_requests,
    };

    match variant {
        Variant::Upstream => {
            cluster.restart_kcm(&[("--controllers", r"\*\,-cronjob-controller")])?;
        }
        Variant::Shardcron(_) => {
            for replica in replicas {
                cluster::stop(replica).await?;
            }
        }
    }
    Ok(footprint)
}

/// Waits until kube-controller-manager's CronJob controller has synced every
/// CronJob once (each sync computes the next schedule and requeues the
/// CronJob for it: upstream's "armed") and its queue is empty.
async fn wait_upstream_armed(
    cluster: &LocalCluster,
    pid: u32,
    cronjobs: usize,
) -> anyhow::Result<()> {
    let client = cluster.kcm_client()?;
    let started = Instant::now();
    loop {
        procstat::sample(pid).context("kube-controller-manager exited during start-up")?;
        let request = http::Request::get("/metrics").body(Vec::new())?;
        if let Ok(text) = client.request_text(request).await
            && let Some(queue) = CronJobQueue::parse(&text)
            && queue.depth == 0.0
            && queue.processed >= cronjobs as f64
        {
            return Ok(());
        }
        if started.elapsed() > ARM_TIMEOUT {
            bail!(
                "kube-controller-manager's CronJob controller did not sync {cronjobs} CronJobs within {} s",
                ARM_TIMEOUT.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// kube-controller-manager's CronJob work queue (named `cronjob`), from
/// its Prometheus text.
#[derive(Debug, PartialEq)]
struct CronJobQueue {
    depth: f64,
    /// Items taken off the queue and synced.
    processed: f64,
}

impl CronJobQueue {
    /// `None` until the queue exists (the controller has not started).
    fn parse(text: &str) -> Option<Self> {
        let value = |metric: &str| {
            let prefix = format!("{metric}{{name=\"cronjob\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .and_then(|v| v.trim().parse::<f64>().ok())
        };
        Some(Self {
            depth: value("workqueue_depth")?,
            processed: value("workqueue_work_duration_seconds_count")?,
        })
    }
}

fn sum(pids: &[u32]) -> anyhow::Result<ProcSample> {
    pids.iter().try_fold(ProcSample::default(), |total, pid| {
        let s = procstat::sample(*pid)?;
        Ok(ProcSample {
            cpu_seconds: total.cpu_seconds + s.cpu_seconds,
            rss_bytes: total.rss_bytes + s.rss_bytes,
            peak_rss_bytes: total.peak_rss_bytes + s.peak_rss_bytes,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cronjob_queue_is_read_apart_from_the_others() {
        let text = "\
# TYPE workqueue_depth gauge
workqueue_depth{name=\"job\"} 7
workqueue_depth{name=\"cronjob\"} 3
workqueue_work_duration_seconds_count{name=\"job\"} 99
workqueue_work_duration_seconds_count{name=\"cronjob\"} 1.2e+06
";
        assert_eq!(
            CronJobQueue::parse(text),
            Some(CronJobQueue {
                depth: 3.0,
                processed: 1.2e6
            })
        );
        assert_eq!(
            CronJobQueue::parse("workqueue_depth{name=\"job\"} 1\n"),
            None
        );
    }

    #[test]
    fn the_cost_of_a_cronjob_is_the_difference_over_the_count() {
        let run = ScaleRun {
            variant: "x".into(),
            cronjobs: 1000,
            empty: Footprint {
                rss_bytes: 10_000_000,
                ..Footprint::default()
            },
            loaded: Footprint {
                rss_bytes: 12_048_000,
                ..Footprint::default()
            },
        };
        assert_eq!(run.rss_bytes_per_cronjob(), 2048.0);
    }
}
