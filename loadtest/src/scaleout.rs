//! S6, scale-out: what each replica receives, decodes and burns when the
//! ring grows. One control plane and one set of CronJobs (the steady mix,
//! so Jobs come and go) serve shardcron with 1, 2 and 4 replicas in turn;
//! each run is measured per replica over the same window: the objects and
//! bytes each watch received (the controller's own counters,
//! `shardcron_watch_events_total` and `shardcron_watch_bytes_total`), CPU
//! seconds and resident memory. Sharding divides the input when each of N
//! replicas sees about 1/N of what one replica sees.

use crate::apimetrics::ServerTotals;
use crate::cluster::{self, LocalCluster};
use crate::compare::{Scenario, Settings, Variant};
use crate::create;
use crate::mix::{self, Anchor};
use crate::procstat;
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use shardcron_harness::Replica;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// After every replica is ready, this long passes before the window opens:
/// the initial lists' garbage is freed or reused by then.
const SETTLE: Duration = Duration::from_secs(20);

/// One replica over the window.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ReplicaFigures {
    pub replica: String,
    /// Objects received per watch (`cronjobs`, `jobs`, `unlabelled_jobs`,
    /// `leases`), from the start (initial lists included).
    pub events: BTreeMap<String, f64>,
    /// Response bytes received per watch, from the start.
    pub bytes: BTreeMap<String, f64>,
    /// Objects received per watch within the window only.
    pub window_events: BTreeMap<String, f64>,
    /// Response bytes received per watch within the window only.
    #[serde(default)]
    pub window_bytes: BTreeMap<String, f64>,
    /// CPU seconds per second over the window.
    pub cpu: f64,
    /// Resident set at the end of the window.
    pub rss_bytes: u64,
    /// Until ready (every owned CronJob armed), from the start.
    pub ready_seconds: f64,
}

/// A replica at the start of a window: its CPU and its watches' counters.
pub struct WindowStart {
    cpu_seconds: f64,
    events: BTreeMap<String, f64>,
    bytes: BTreeMap<String, f64>,
}

impl WindowStart {
    pub fn read(replica: &Replica, pid: u32) -> anyhow::Result<Self> {
        let cpu_seconds = procstat::sample(pid)?.cpu_seconds;
        let text = replica.metrics_text();
        Ok(Self {
            cpu_seconds,
            events: by_resource(&text, "watch_events"),
            bytes: by_resource(&text, "watch_bytes"),
        })
    }
}

impl ReplicaFigures {
    /// `replica`'s figures over the `seconds` since `start`.
    pub fn measure(
        replica: &Replica,
        pid: u32,
        start: &WindowStart,
        seconds: f64,
        ready_seconds: f64,
    ) -> anyhow::Result<Self> {
        let after = procstat::sample(pid).context("a replica exited in the window")?;
        let text = replica.metrics_text();
        let events = by_resource(&text, "watch_events");
        let bytes = by_resource(&text, "watch_bytes");
        Ok(Self {
            replica: replica.id().to_owned(),
            window_events: since(&events, &start.events),
            window_bytes: since(&bytes, &start.bytes),
            events,
            bytes,
            cpu: (after.cpu_seconds - start.cpu_seconds) / seconds,
            rss_bytes: after.rss_bytes,
            ready_seconds,
        })
    }
}

/// kube-apiserver over one run's window: what the ring costs the server.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ApiServerFigures {
    /// kube-apiserver's CPU seconds per second.
    pub cpu: f64,
    /// What it sent and created in the window (every client's watches:
    /// the replicas', and a constant share of kube-controller-manager's).
    pub sent: ServerTotals,
}

impl ApiServerFigures {
    /// Watch bytes sent per Job created for `resource` (`cronjobs` of
    /// either group, `jobs`).
    pub fn watch_bytes_per_firing(&self, resource: &str) -> f64 {
        let bytes: f64 = (self.sent.watch_bytes.iter())
            .filter(|(key, _)| key.rsplit_once('/').is_some_and(|(_, r)| r == resource))
            .map(|(_, bytes)| bytes)
            .sum();
        bytes / self.sent.job_creates.max(1.0)
    }

    /// CPU milliseconds per Job created.
    pub fn cpu_ms_per_firing(&self, window_seconds: f64) -> f64 {
        1000.0 * self.cpu * window_seconds / self.sent.job_creates.max(1.0)
    }
}

/// One variant's run: its replicas' figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScaleOutRun {
    pub variant: String,
    pub replicas: usize,
    pub cronjobs: usize,
    pub window_seconds: f64,
    pub per_replica: Vec<ReplicaFigures>,
    /// Absent in reports written before it was recorded.
    #[serde(default)]
    pub api_server: Option<ApiServerFigures>,
}

impl ScaleOutRun {
    /// The largest per-replica value of `figure`.
    pub fn max(&self, figure: impl Fn(&ReplicaFigures) -> f64) -> f64 {
        self.per_replica.iter().map(figure).fold(0.0, f64::max)
    }
}

/// `shardcron_<metric>_total{resource="<r>"} <value>` lines of a replica's
/// exposition, by resource.
pub fn by_resource(text: &str, metric: &str) -> BTreeMap<String, f64> {
    let prefix = format!("shardcron_{metric}_total{{resource=\"");
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (resource, value) = rest.split_once("\"} ")?;
            Some((resource.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Runs S6 against each variant on one control plane, saying each run's
/// figures in a line made by `line` (the caller writes the report).
pub async fn run(
    scenario: &Scenario,
    variants: &[Variant],
    settings: &Settings,
    line: fn(&ScaleOutRun) -> String,
) -> anyhow::Result<Vec<ScaleOutRun>> {
    if variants.contains(&Variant::Upstream) {
        bail!("S6 compares shardcron with itself: pass shardcron-N controllers only");
    }
    std::fs::create_dir_all(&settings.out)?;
    if settings.resume {
        // Every run kept: the report is written again from them.
        let kept: Option<Vec<ScaleOutRun>> = variants
            .iter()
            .map(|variant| {
                let path = settings.out.join(format!("{variant}.json"));
                let run: ScaleOutRun = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
                (run.cronjobs == scenario.count).then_some(run)
            })
            .collect();
        if let Some(runs) = kept {
            return Ok(runs);
        }
    }
    let mut cluster = LocalCluster::up(
        &settings.out.join("cluster"),
        false,
        "",
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
    line: fn(&ScaleOutRun) -> String,
) -> anyhow::Result<Vec<ScaleOutRun>> {
    cluster.serve(settings.cronjob_kind);
    let credentials = cluster.shardcron_credentials().await?;
    let plan = mix::plan(
        scenario.mix,
        scenario.count,
        scenario.namespaces,
        "a",
        Anchor::default(),
    );
    create::create_as(
        &cluster.client,
        &plan,
        settings.create_qps,
        0,
        settings.cronjob_kind,
    )
    .await?;
    let window = Duration::from_secs(60 * u64::from(scenario.minutes.max(1)));
    let mut runs = Vec::new();
    for variant in variants {
        let Variant::Shardcron(n) = *variant else {
            continue;
        };
        eprintln!("scale-out: {variant} with {} CronJobs", scenario.count);
        let started = Instant::now();
        let replicas = cluster
            .start_shardcron(
                &settings.shardcron_bin,
                n,
                &credentials,
                settings.limits,
                &format!("-{variant}"),
            )
            .await?;
        let ready_seconds = started.elapsed().as_secs_f64();
        tokio::time::sleep(SETTLE).await;
        let pids: Vec<u32> = replicas
            .iter()
            .map(cluster::pid)
            .collect::<Result<_, _>>()?;
        let starts: Vec<WindowStart> = replicas
            .iter()
            .zip(&pids)
            .map(|(replica, pid)| WindowStart::read(replica, *pid))
            .collect::<Result<_, _>>()?;
        let server_pid = cluster.pid("kube-apiserver")?;
        let server_cpu = procstat::sample(server_pid)?.cpu_seconds;
        let server_sent = ServerTotals::read(&cluster.client).await?;
        tokio::time::sleep(window).await;
        let api_server = ApiServerFigures {
            cpu: (procstat::sample(server_pid)?.cpu_seconds - server_cpu) / window.as_secs_f64(),
            sent: ServerTotals::read(&cluster.client)
                .await?
                .since(&server_sent),
        };
        let per_replica: Vec<ReplicaFigures> = replicas
            .iter()
            .zip(pids.iter().zip(&starts))
            .map(|(replica, (pid, start))| {
                ReplicaFigures::measure(replica, *pid, start, window.as_secs_f64(), ready_seconds)
            })
            .collect::<Result<_, _>>()?;
        for replica in replicas {
            cluster::stop(replica).await?;
        }
        let run = ScaleOutRun {
            variant: variant.to_string(),
            replicas: n,
            cronjobs: scenario.count,
            window_seconds: window.as_secs_f64(),
            per_replica,
            api_server: Some(api_server),
        };
        eprintln!("scale-out: {}", line(&run));
        std::fs::write(
            settings.out.join(format!("{variant}.json")),
            serde_json::to_vec_pretty(&run)?,
        )?;
        runs.push(run);
    }
    Ok(runs)
}

/// Each counter's growth from `before` to `after`.
fn since(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counters_are_read_by_resource() {
        let text = "\
# TYPE shardcron_watch_events counter
shardcron_watch_events_total{resource=\"jobs\"} 120
shardcron_watch_events_total{resource=\"cronjobs\"} 3.3e4
shardcron_watch_bytes_total{resource=\"jobs\"} 999
";
        let events = by_resource(text, "watch_events");
        assert_eq!(events.get("jobs"), Some(&120.0));
        assert_eq!(events.get("cronjobs"), Some(&33_000.0));
        assert_eq!(events.len(), 2);
        assert_eq!(by_resource(text, "watch_bytes").get("jobs"), Some(&999.0));
    }
}
