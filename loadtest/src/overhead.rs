//! The tracing overhead benchmark: two shardcron processes side by side on
//! one control plane, each with its own CronJobs (same count, same
//! every-minute schedule, own namespaces and ring), one exporting every
//! span (sampler always_on) to the local Jaeger and one with tracing off.
//! Both see the same machine load in the same minutes, so the ratio of
//! their CPU per firing is the cost of tracing.
//!
//! With a variant (`--variant "--threads 1"`, `--variant-bin PATH`), both
//! sides are untraced and the second runs with the variant's extra
//! arguments, or the variant's build: the same A/B measurement for any
//! flag, or for a change against the build before it.

use crate::cluster::{self, LocalCluster};
use crate::firingcost::requests_between;
use crate::mix::{self, Mix};
use crate::observe::{self, JobWatch, Observation, Process, Window};
use crate::{apimetrics, create};
use anyhow::Context;
use serde::{Deserialize, Serialize};
use shardcron::reconcile::CronJobKind;
use shardcron_harness::{Replica, ReplicaSpec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Side {
    pub tracing: bool,
    /// Extra arguments of this side's process (the variant's).
    #[serde(default)]
    pub args: Vec<String>,
    /// The variant's build, where it is not the plain side's.
    #[serde(default)]
    pub bin: Option<String>,
    pub observation: Observation,
    pub cpu_ms_per_firing: f64,
    /// The replica's requests (`shardcron_api_requests_total`, every verb
    /// and code) over the window, per slot answered.
    #[serde(default)]
    pub requests_per_firing: f64,
    /// Those requests by series, over the window.
    #[serde(default)]
    pub requests: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OverheadReport {
    pub cronjobs_per_side: usize,
    /// Each side's CronJobs (`every-minute` unless asked).
    #[serde(default = "every_minute")]
    pub mix: Mix,
    pub minutes: u32,
    /// The plain process: untraced, no extra arguments.
    pub off: Side,
    /// The traced process, or the variant's.
    pub on: Side,
    /// on / off CPU per firing.
    pub ratio: f64,
    /// How the figures were taken.
    pub note: String,
}

fn every_minute() -> Mix {
    Mix::EveryMinute
}

/// What the second side changes, if anything (else it is traced).
#[derive(Debug, Default)]
pub struct Variant {
    pub args: Vec<String>,
    pub bin: Option<PathBuf>,
}

impl Variant {
    fn is_empty(&self) -> bool {
        self.args.is_empty() && self.bin.is_none()
    }
}

pub async fn run(
    out: &Path,
    bin: &Path,
    workload: Mix,
    count: usize,
    minutes: u32,
    variant: &Variant,
) -> anyhow::Result<OverheadReport> {
    std::fs::create_dir_all(out)?;
    let dir = out.join("cluster");
    let cluster = LocalCluster::up(&dir, false, "", true).await?;
    let mut replicas = Vec::new();
    let result = run_on(
        &cluster,
        bin,
        workload,
        count,
        minutes,
        variant,
        &mut replicas,
    )
    .await;
    let report = cluster
        .finish(replicas, result, &out.join("logs"), false)
        .await?;
    std::fs::write(
        out.join("overhead.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;
    Ok(report)
}

async fn run_on(
    cluster: &LocalCluster,
    bin: &Path,
    workload: Mix,
    count: usize,
    minutes: u32,
    variant: &Variant,
    replicas: &mut Vec<Replica>,
) -> anyhow::Result<OverheadReport> {
    let client = &cluster.client;
    apimetrics::install_flow_schemas(client).await?;
    let credentials = cluster.shardcron_credentials().await?;
    let otlp = cluster
        .env("SHARDCRON_OTLP_ENDPOINT")
        .context("the cluster runs no Jaeger (SHARDCRON_OTLP_ENDPOINT)")?;
    let mut sides = Vec::new();
    for (group, second) in [("off", false), ("on", true)] {
        let tracing = second && variant.is_empty();
        let extra = if second {
            variant.args.clone()
        } else {
            Vec::new()
        };
        let side_bin = match (second, &variant.bin) {
            (true, Some(variant_bin)) => Some(variant_bin.clone()),
            _ => None,
        };
        let plan = mix::plan(workload, count, 2, group, mix::Anchor::default());
        create::create(client, &plan, 100.0).await?;
        let mut args = vec!["--shard-ring-name".to_owned(), format!("overhead-{group}")];
        for namespace in mix::namespaces_of(&plan) {
            args.extend(["--namespace".to_owned(), namespace]);
        }
        args.extend(extra.iter().cloned());
        let mut env = Vec::new();
        if tracing {
            args.extend(["--otlp-endpoint".to_owned(), otlp.to_owned()]);
            env.push(("OTEL_TRACES_SAMPLER".to_owned(), "always_on".to_owned()));
        }
        let spec = ReplicaSpec {
            bin: side_bin.clone().unwrap_or_else(|| bin.to_owned()),
            id: format!("tracing-{group}"),
            kubeconfig: credentials.clone(),
            args,
            env,
            log: cluster.dir().join(format!("shardcron-{group}.log")),
        };
        let replica = Replica::start(spec, cluster::READY_WITHIN).await?;
        let process = Process {
            name: format!("shardcron-tracing-{group}"),
            pid: cluster::pid(&replica)?,
        };
        replicas.push(replica);
        let prefix = format!("{}{group}-", mix::NAMESPACE_PREFIX);
        sides.push((tracing, extra, side_bin, prefix, process));
    }
    let side_replicas = &replicas[replicas.len() - sides.len()..];
    let before: Vec<String> = side_replicas.iter().map(Replica::metrics_text).collect();
    let (from, to) = observe::whole_minutes(11, minutes);
    let observations = sides.iter().map(|(_, _, _, prefix, process)| {
        let watch = JobWatch::start(client, prefix);
        let processes = std::slice::from_ref(process);
        async move {
            let window = Window {
                from,
                to,
                tail: Duration::from_secs(30),
                prefix,
                kind: CronJobKind::Batch,
                processes,
                big_tenant: None,
                done_after_jobs: None,
                failover: None,
            };
            observe::observe(client, watch, &window).await
        }
    });
    let observations = futures::future::try_join_all(observations).await?;
    let side_replicas = &replicas[replicas.len() - sides.len()..];
    let mut sides: Vec<Side> = sides
        .iter()
        .zip(observations)
        .zip(side_replicas.iter().zip(before))
        .map(
            |(((tracing, args, side_bin, _, _), observation), (replica, before))| {
                let cpu: f64 = observation.processes.iter().map(|p| p.cpu_seconds).sum();
                let answered = observation.slots.answered.max(1) as f64;
                let requests = requests_between(&before, &replica.metrics_text());
                Side {
                    requests_per_firing: requests.values().sum::<f64>() / answered,
                    requests,
                    tracing: *tracing,
                    args: args.clone(),
                    bin: side_bin.as_ref().map(|b| b.display().to_string()),
                    cpu_ms_per_firing: 1000.0 * cpu / answered,
                    observation,
                }
            },
        )
        .collect();
    let on = sides.pop().context("no traced or variant side")?;
    let off = sides.pop().context("no untraced side")?;
    Ok(OverheadReport {
        cronjobs_per_side: count,
        mix: workload,
        minutes,
        ratio: on.cpu_ms_per_firing / off.cpu_ms_per_firing,
        off,
        on,
        note: "CPU per firing = the process's user+system CPU from the first watched slot to 30 s after the last, \
               divided by the slots it answered (a Job created; skipped slots cost CPU but answer none); both processes ran in the same minutes on one control plane"
            .into(),
    })
}
