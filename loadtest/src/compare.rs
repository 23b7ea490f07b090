//! The comparison driver: one scenario against each controller on a fresh
//! control plane of the same build, with the same client QPS and burst.

use crate::cluster::{LocalCluster, Replica};
use crate::mix::{self, Mix};
use crate::observe::{self, JobWatch, Observation, Process, Window};
use crate::{apimetrics, create, report};
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum ScenarioName {
    /// 10,000 CronJobs (short: 1,000), the `steady` mix.
    S1,
    /// 5,000 CronJobs (short: 1,000) due in the same minute.
    S2,
    /// One tenant with 5,000 (short: 1,000) at one minute, 50 with one each.
    S5,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// A few hundred CronJobs for a few minutes: CI's check.
    Ci,
    /// Fewer objects, shorter: a quick look.
    Short,
    /// The figures.
    Full,
}

/// What a scenario creates and how long it watches.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Scenario {
    pub name: ScenarioName,
    pub mode: Mode,
    pub mix: Mix,
    pub count: usize,
    pub namespaces: usize,
    /// Minute slots watched (steady mix); herds watch their one minute.
    pub minutes: u32,
    /// How long after the last watched slot late Jobs still count.
    pub tail_seconds: u64,
}

impl Scenario {
    pub fn new(name: ScenarioName, mode: Mode) -> Self {
        let (mix, count, namespaces, minutes, tail_seconds) = match (name, mode) {
            (ScenarioName::S1, Mode::Ci) => (Mix::Steady, 600, 20, 4, 60),
            (ScenarioName::S1, Mode::Short) => (Mix::Steady, 1_000, 50, 10, 60),
            (ScenarioName::S1, Mode::Full) => (Mix::Steady, 10_000, 500, 60, 120),
            (ScenarioName::S2, Mode::Ci) => (Mix::Herd, 300, 10, 1, 120),
            (ScenarioName::S2, Mode::Short) => (Mix::Herd, 1_000, 50, 1, 240),
            (ScenarioName::S2, Mode::Full) => (Mix::Herd, 5_000, 250, 1, 900),
            (ScenarioName::S5, Mode::Ci) => (Mix::Tenants, 350, 1, 1, 120),
            (ScenarioName::S5, Mode::Short) => (Mix::Tenants, 1_050, 1, 1, 240),
            (ScenarioName::S5, Mode::Full) => (Mix::Tenants, 5_050, 1, 1, 900),
        };
        Self {
            name,
            mode,
            mix,
            count,
            namespaces,
            minutes,
            tail_seconds,
        }
    }

    fn is_herd(&self) -> bool {
        matches!(self.mix, Mix::Herd | Mix::Tenants)
    }
}

/// A controller under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Variant {
    /// kube-controller-manager's own CronJob controller.
    Upstream,
    /// shardcron with this many replicas in one ring.
    Shardcron(usize),
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Variant::Upstream => f.write_str("upstream"),
            Variant::Shardcron(n) => write!(f, "shardcron-{n}"),
        }
    }
}

impl FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "upstream" => Ok(Variant::Upstream),
            _ => s
                .strip_prefix("shardcron-")
                .and_then(|n| n.parse().ok())
                .filter(|n| (1..=20).contains(n))
                .map(Variant::Shardcron)
                .ok_or_else(|| {
                    format!("unknown controller {s:?}: upstream or shardcron-N (N = 1..20)")
                }),
        }
    }
}

/// The client settings every controller of a comparison gets.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct ClientLimits {
    pub qps: f64,
    pub burst: u32,
}

/// One controller's run of a scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub variant: String,
    pub limits: ClientLimits,
    /// From the first replica's start until the last one's /readyz (every
    /// actor armed); shardcron only.
    pub ready_seconds: Option<f64>,
    pub observation: Observation,
}

pub struct Settings {
    pub repo: PathBuf,
    pub out: PathBuf,
    pub shardcron_bin: PathBuf,
    pub limits: ClientLimits,
    pub create_qps: f64,
}

/// Runs `scenario` against each variant in turn and writes the report.
pub async fn compare(
    scenario: &Scenario,
    variants: &[Variant],
    settings: &Settings,
) -> anyhow::Result<Vec<Run>> {
    std::fs::create_dir_all(&settings.out)?;
    let mut runs = Vec::new();
    for variant in variants {
        eprintln!(
            "compare: {:?} {:?} with {variant}",
            scenario.name, scenario.mode
        );
        let run = run_variant(scenario, *variant, settings)
            .await
            .with_context(|| format!("{variant}"))?;
        let path = settings.out.join(format!("{variant}.json"));
        std::fs::write(&path, serde_json::to_vec_pretty(&run)?)?;
        eprintln!("compare: {variant}: {}", report::one_line(&run));
        runs.push(run);
    }
    report::write(&settings.out, scenario, &runs)?;
    Ok(runs)
}

async fn run_variant(
    scenario: &Scenario,
    variant: Variant,
    settings: &Settings,
) -> anyhow::Result<Run> {
    let dir = settings.out.join(format!("cluster-{variant}"));
    let kcm_args = format!(
        "--kube-api-qps={} --kube-api-burst={}",
        settings.limits.qps, settings.limits.burst
    );
    let cluster = LocalCluster::up(
        &settings.repo,
        &dir,
        variant == Variant::Upstream,
        &kcm_args,
    )
    .await?;
    let mut replicas = Vec::new();
    let result = run_on(&cluster, scenario, variant, settings, &mut replicas).await;
    let logs = settings.out.join(format!("logs-{variant}"));
    cluster.finish(replicas, result, &logs).await
}

async fn run_on(
    cluster: &LocalCluster,
    scenario: &Scenario,
    variant: Variant,
    settings: &Settings,
    replicas: &mut Vec<Replica>,
) -> anyhow::Result<Run> {
    let client = &cluster.client;
    apimetrics::install_flow_schemas(client).await?;
    let credentials = match variant {
        Variant::Shardcron(_) => Some(cluster.shardcron_credentials().await?),
        Variant::Upstream => None,
    };
    // A herd's minute leaves time to create everything and start up.
    let lead = scenario.count as f64 / settings.create_qps + 120.0;
    let herd_at = observe::next_minute(observe::unix_ms() / 1000 + lead as i64);
    let minute = ((herd_at / 60) % 60) as u8;
    let plan = mix::plan(
        scenario.mix,
        scenario.count,
        scenario.namespaces,
        "a",
        minute,
    );
    create::create(client, &plan, settings.create_qps).await?;
    let watch = JobWatch::start(client, mix::NAMESPACE_PREFIX);

    let kcm = Process {
        name: "kube-controller-manager".into(),
        pid: cluster.pid("kube-controller-manager")?,
    };
    let mut processes = vec![kcm];
    let mut ready_seconds = None;
    if let (Variant::Shardcron(n), Some(credentials)) = (variant, credentials) {
        let started = std::time::Instant::now();
        let args = vec![
            "--kubeconfig".to_owned(),
            credentials.display().to_string(),
            "--shard-ring-name".into(),
            "loadtest".into(),
            "--kube-api-qps".into(),
            settings.limits.qps.to_string(),
            "--kube-api-burst".into(),
            settings.limits.burst.to_string(),
        ];
        for i in 0..n {
            let name = format!("shardcron-{i}");
            let log = cluster.dir.join(format!("{name}.log"));
            let (replica, _) =
                Replica::start(&settings.shardcron_bin, &name, &args, &[], &log).await?;
            processes.push(Process {
                name: name.clone(),
                pid: replica.pid()?,
            });
            replicas.push(replica);
        }
        ready_seconds = Some(started.elapsed().as_secs_f64());
    }

    let now = observe::unix_ms() / 1000;
    let (from, to) = if scenario.is_herd() {
        if herd_at < now + 5 {
            bail!(
                "the herd's minute passed during set-up ({} s late); lower the count or raise --create-qps",
                now + 5 - herd_at
            );
        }
        (herd_at, herd_at)
    } else {
        observe::whole_minutes(10, scenario.minutes)
    };
    let big = mix::big_tenant_namespace("a");
    let window = Window {
        from,
        to,
        tail: Duration::from_secs(scenario.tail_seconds),
        prefix: mix::NAMESPACE_PREFIX,
        processes: &processes,
        big_tenant: (scenario.mix == Mix::Tenants).then_some(big.as_str()),
        done_after_jobs: scenario.is_herd().then_some(scenario.count),
    };
    eprintln!(
        "compare: {variant}: watching slots {from}..={to} (+{} s tail)",
        scenario.tail_seconds
    );
    let observation = observe::observe(client, watch, &window).await?;
    Ok(Run {
        variant: variant.to_string(),
        limits: settings.limits,
        ready_seconds,
        observation,
    })
}

/// The repository root: the loadtest crate's parent.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_owned)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_parse_and_print_alike() {
        for text in ["upstream", "shardcron-1", "shardcron-3"] {
            assert_eq!(text.parse::<Variant>().unwrap().to_string(), text);
        }
        assert!("shardcron-0".parse::<Variant>().is_err());
        assert!("kcm".parse::<Variant>().is_err());
    }
}
