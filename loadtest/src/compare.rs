//! The comparison driver: one scenario against each controller on a fresh
//! control plane of the same build, with the same client QPS and burst.

use crate::cluster::{self, ClientLimits, LocalCluster};
use crate::mix::{self, Mix};
use crate::observe::{self, JobWatch, Observation, Process, Window};
use crate::{apimetrics, create};
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use shardcron::reconcile::CronJobKind;
use shardcron_harness::Replica;
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
    /// 100,000 daily CronJobs (short: 10,000): memory per CronJob, time
    /// until armed, idle CPU.
    S3,
    /// 10,000 CronJobs (short: 300) every minute; one controller is killed
    /// (SIGKILL) one second before a slot.
    S4,
    /// One tenant with 5,000 (short: 1,000) at one minute, 50 with one each.
    S5,
    /// Scale-out: 100,000 CronJobs (short: 10,000) of the steady mix,
    /// shardcron with 1, 2 and 4 replicas: what each replica receives.
    S6,
    /// A million CronJobs (short: 100,000) of the `million` mix, from a
    /// data set made once and kept: shardcron with 4 and 8 replicas, each
    /// armed, measured per replica, then one killed (SIGKILL) and its
    /// CronJobs handed over.
    S7,
    /// Hostile neighbour: one tenant floods run-now requests and large
    /// annotations on its 200 CronJobs (several times a replica's QPS)
    /// while 50 quiet tenants have one every-minute CronJob each: their
    /// skew, missed and doubled slots, the replicas' RSS growth.
    S8,
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
    /// Its results' directory: `loadtest/results/<scenario>-<mode>-qps<qps>`,
    /// then `-spread<seconds>` and `suffix` (a variant's: `-no-flood`,
    /// `-unsharded`).
    pub fn default_out(&self, qps: f64, spread: Option<u32>, suffix: &str) -> PathBuf {
        let (name, mode) = (self.name, self.mode);
        let spread = spread.map_or_else(String::new, |s| format!("-spread{s}"));
        shardcron_harness::repo_root().join(
            format!("loadtest/results/{name:?}-{mode:?}-qps{qps}{spread}{suffix}").to_lowercase(),
        )
    }

    pub fn new(name: ScenarioName, mode: Mode) -> Self {
        let (mix, count, namespaces, minutes, tail_seconds) = match (name, mode) {
            (ScenarioName::S1, Mode::Ci) => (Mix::Steady, 600, 20, 4, 60),
            (ScenarioName::S1, Mode::Short) => (Mix::Steady, 1_000, 50, 10, 60),
            (ScenarioName::S1, Mode::Full) => (Mix::Steady, 10_000, 500, 60, 120),
            (ScenarioName::S2, Mode::Ci) => (Mix::Herd, 300, 10, 1, 120),
            (ScenarioName::S2, Mode::Short) => (Mix::Herd, 1_000, 50, 1, 240),
            (ScenarioName::S2, Mode::Full) => (Mix::Herd, 5_000, 250, 1, 900),
            (ScenarioName::S3, Mode::Ci) => (Mix::Daily, 1_000, 10, 0, 0),
            (ScenarioName::S3, Mode::Short) => (Mix::Daily, 10_000, 100, 0, 0),
            (ScenarioName::S3, Mode::Full) => (Mix::Daily, 100_000, 1_000, 0, 0),
            (ScenarioName::S4, Mode::Ci) => (Mix::EveryMinute, 150, 5, 6, 60),
            (ScenarioName::S4, Mode::Short) => (Mix::EveryMinute, 300, 10, 6, 60),
            (ScenarioName::S4, Mode::Full) => (Mix::EveryMinute, 10_000, 100, 6, 120),
            (ScenarioName::S5, Mode::Ci) => (Mix::Tenants, 350, 1, 1, 120),
            (ScenarioName::S5, Mode::Short) => (Mix::Tenants, 1_050, 1, 1, 240),
            (ScenarioName::S5, Mode::Full) => (Mix::Tenants, 5_050, 1, 1, 900),
            (ScenarioName::S6, Mode::Ci) => (Mix::Steady, 600, 20, 2, 0),
            (ScenarioName::S6, Mode::Short) => (Mix::Steady, 10_000, 100, 5, 0),
            (ScenarioName::S6, Mode::Full) => (Mix::Steady, 100_000, 1_000, 5, 0),
            (ScenarioName::S7, Mode::Ci) => (Mix::Million, 2_000, 10, 4, 60),
            (ScenarioName::S7, Mode::Short) => (Mix::Million, 100_000, 100, 6, 60),
            (ScenarioName::S7, Mode::Full) => (Mix::Million, 1_000_000, 1_000, 8, 60),
            (ScenarioName::S8, Mode::Ci) => (Mix::Hostile, 100, 1, 2, 60),
            (ScenarioName::S8, Mode::Short) => (Mix::Hostile, 250, 1, 3, 60),
            (ScenarioName::S8, Mode::Full) => (Mix::Hostile, 250, 1, 6, 60),
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

    /// Watches `minutes` minute slots instead of the mode's (S6: measures
    /// each run over that many minutes). Only S1, S4 and S6 have a window
    /// to stretch: herds watch their one minute and S3 watches none.
    pub fn set_minutes(&mut self, minutes: u32) -> anyhow::Result<()> {
        if !matches!(
            self.name,
            ScenarioName::S1
                | ScenarioName::S4
                | ScenarioName::S6
                | ScenarioName::S7
                | ScenarioName::S8
        ) {
            anyhow::bail!("--minutes applies to S1, S4, S6, S7 and S8 only");
        }
        if minutes < 2 {
            anyhow::bail!("--minutes must be at least 2");
        }
        self.minutes = minutes;
        Ok(())
    }

    /// The controllers to compare: `given`, or by default upstream and
    /// shardcron with 1 and 3 replicas. S4 kills one controller, so a
    /// single replica (nothing left to take over) is left out by default
    /// and refused when asked for.
    pub fn controllers(&self, given: Vec<Variant>) -> anyhow::Result<Vec<Variant>> {
        let failover = self.name == ScenarioName::S4;
        if self.name == ScenarioName::S6 && given.is_empty() {
            return Ok(vec![
                Variant::Shardcron(1),
                Variant::Shardcron(2),
                Variant::Shardcron(4),
            ]);
        }
        if self.name == ScenarioName::S7 && given.is_empty() {
            return Ok(vec![Variant::Shardcron(4), Variant::Shardcron(8)]);
        }
        // Upstream has no run-now to flood.
        if self.name == ScenarioName::S8 && given.is_empty() {
            return Ok(vec![Variant::Shardcron(1), Variant::Shardcron(3)]);
        }
        if given.is_empty() {
            return Ok(if failover {
                vec![Variant::Upstream, Variant::Shardcron(3)]
            } else {
                vec![
                    Variant::Upstream,
                    Variant::Shardcron(1),
                    Variant::Shardcron(3),
                ]
            });
        }
        if failover && given.contains(&Variant::Shardcron(1)) {
            anyhow::bail!(
                "S4 kills one replica: with shardcron-1 nothing is left to take over; \
                 pass at least 2 replicas (e.g. --controllers upstream,shardcron-3)"
            );
        }
        Ok(given)
    }

    fn is_herd(&self) -> bool {
        matches!(self.mix, Mix::Herd | Mix::Tenants)
    }

    /// How many minute slots a run watches: a herd's one, else `minutes`.
    fn slot_minutes(&self) -> u32 {
        if self.is_herd() {
            1
        } else {
            self.minutes.max(1)
        }
    }

    /// S4 kills a controller one second before this slot (unix seconds),
    /// the middle one of the window.
    fn kill_slot(&self, from: i64) -> Option<i64> {
        (self.name == ScenarioName::S4).then(|| from + 60 * i64::from(self.minutes / 2))
    }
}

/// The controller process S4 kills.
enum Victim {
    /// A kube-controller-manager.
    Process(u32),
    Replica(Box<Replica>),
}

impl Victim {
    async fn kill(self) -> anyhow::Result<()> {
        match self {
            // SAFETY: kill has no memory-safety preconditions.
            Victim::Process(pid) => {
                if unsafe { libc::kill(pid as i32, libc::SIGKILL) } != 0 {
                    bail!("kill -9 {pid}: {}", std::io::Error::last_os_error());
                }
                Ok(())
            }
            Victim::Replica(mut replica) => {
                replica.kill();
                Ok(())
            }
        }
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

/// One controller's run of a scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    pub variant: String,
    pub limits: ClientLimits,
    /// From the first replica's start until the last one's /readyz (every
    /// actor armed); shardcron only.
    pub ready_seconds: Option<f64>,
    pub observation: Observation,
    /// Lease lapses the replicas still running at the end counted
    /// (`shardcron_lease_lapses_total`, summed); shardcron only, and none
    /// if one of them did not answer (reports from before it: none).
    #[serde(default)]
    pub lease_lapses: Option<u64>,
    /// A replica that joined during the herd (`--join-during-herd`).
    #[serde(default)]
    pub handoff: Option<Handoff>,
}

/// A replica joining the ring while a herd is being served: how long the
/// hand-off took on each side.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Handoff {
    /// Seconds after the herd's minute at which the replica started.
    pub joined_after_seconds: f64,
    /// From the joiner's start until its /readyz.
    pub joiner_ready_seconds: f64,
    /// The losing side: from the ring's change to the publication of the
    /// new view (the stop of the lost keys' actors), the slowest replica's
    /// (`shardcron_handoff_publish_seconds` observed after the join).
    pub publish_seconds_max: Option<f64>,
    /// The gaining side: how long the joiner's CronJobs waited before they
    /// started, on average (`shardcron_handoff_wait_seconds`).
    pub gained_wait_seconds_avg: Option<f64>,
}

/// When a replica joins during a herd, after the herd's minute.
const JOIN_AFTER: Duration = Duration::from_secs(2);

/// The losing side's histogram of a hand-off.
const PUBLISH_HISTOGRAM: &str = "shardcron_handoff_publish_seconds";

/// A histogram's (sum, count) on one replica.
fn histogram(replica: &Replica, name: &str) -> Option<(f64, f64)> {
    shardcron_harness::histogram(&replica.metrics_text(), name)
}

/// The mean of what a histogram observed between `before` and `after`.
fn mean_since(before: (f64, f64), after: (f64, f64)) -> Option<f64> {
    let count = after.1 - before.1;
    (count > 0.0).then(|| (after.0 - before.0) / count)
}

pub struct Settings {
    pub out: PathBuf,
    pub shardcron_bin: PathBuf,
    pub limits: ClientLimits,
    pub create_qps: f64,
    /// Keep the runs already written to `out`.
    pub resume: bool,
    /// Copy every run's logs to `out/logs-<controller>`, not only a failed
    /// run's.
    pub keep_logs: bool,
    /// Herds with shardcron: one more replica joins the ring
    /// [`JOIN_AFTER`] the herd's minute.
    pub join_during_herd: bool,
    /// S8's hostile tenant floods (off: the quiet tenants' reference).
    pub flood: bool,
    /// With the flood, the tenant's attacks on what a replica keeps
    /// (`hostile::attacks`; off: S8 as before they were added).
    pub attacks: bool,
    /// Every CronJob spread over this many seconds (`shardcron.io/spread`).
    pub spread_seconds: u32,
    /// S7: after the kill and the rejoin, every replica restarted
    /// gracefully, one at a time.
    pub rolling_restart: bool,
    /// kube-apiserver shards CronJob watches (`ShardedListAndWatch`); off
    /// as on the clusters users run (`--without-sharded-watch`).
    pub sharded_watch: bool,
    /// The CronJobs shardcron's runs serve (upstream's are batch/v1).
    pub cronjob_kind: CronJobKind,
}

/// Runs `scenario` against each variant in turn, saying each run's
/// figures in a line made by `line` (the caller writes the report).
pub async fn compare(
    scenario: &Scenario,
    variants: &[Variant],
    settings: &Settings,
    line: fn(&Run) -> String,
) -> anyhow::Result<Vec<Run>> {
    std::fs::create_dir_all(&settings.out)?;
    let mut runs = Vec::new();
    for variant in variants {
        let path = settings.out.join(format!("{variant}.json"));
        if settings.resume
            && let Some(run) = kept_run(&path, scenario, settings.limits)?
        {
            eprintln!("compare: {variant}: kept {}", path.display());
            runs.push(run);
            continue;
        }
        eprintln!(
            "compare: {:?} {:?} with {variant}",
            scenario.name, scenario.mode
        );
        let run = run_variant(scenario, *variant, settings)
            .await
            .with_context(|| format!("{variant}"))?;
        std::fs::write(&path, serde_json::to_vec_pretty(&run)?)?;
        eprintln!("compare: {variant}: {}", line(&run));
        runs.push(run);
    }
    Ok(runs)
}

/// The run an earlier invocation wrote to `path`, if any. One measured
/// with another number of CronJobs, another window or other client limits
/// is an error, not something to mix into this report.
fn kept_run(path: &Path, scenario: &Scenario, limits: ClientLimits) -> anyhow::Result<Option<Run>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error).with_context(|| format!("reading {}", path.display())),
    };
    let run: Run =
        serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))?;
    let minutes = |o: &Observation| (o.to - o.from) / 60 + 1;
    let expected_minutes = i64::from(scenario.slot_minutes());
    if run.observation.cronjobs != scenario.count
        || minutes(&run.observation) != expected_minutes
        || run.limits.qps != limits.qps
        || run.limits.burst != limits.burst
    {
        bail!(
            "{} was measured with {} CronJobs over {} minute(s) at QPS {}/burst {}, not {} over {} at {}/{}: remove it or choose another --out",
            path.display(),
            run.observation.cronjobs,
            minutes(&run.observation),
            run.limits.qps,
            run.limits.burst,
            scenario.count,
            expected_minutes,
            limits.qps,
            limits.burst
        );
    }
    Ok(Some(run))
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
    let mut cluster = LocalCluster::up(
        &dir,
        variant == Variant::Upstream,
        &kcm_args,
        settings.sharded_watch,
    )
    .await?;
    let mut replicas = Vec::new();
    let result = run_on(&mut cluster, scenario, variant, settings, &mut replicas).await;
    let logs = settings.out.join(format!("logs-{variant}"));
    cluster
        .finish(replicas, result, &logs, settings.keep_logs)
        .await
}

async fn run_on(
    cluster: &mut LocalCluster,
    scenario: &Scenario,
    variant: Variant,
    settings: &Settings,
    replicas: &mut Vec<Replica>,
) -> anyhow::Result<Run> {
    let client = &cluster.client.clone();
    apimetrics::install_flow_schemas(client).await?;
    let kind = match variant {
        Variant::Shardcron(_) => settings.cronjob_kind,
        Variant::Upstream => CronJobKind::Batch,
    };
    cluster.serve(kind);
    let credentials = match variant {
        Variant::Shardcron(_) => Some(cluster.shardcron_credentials().await?),
        Variant::Upstream => None,
    };
    // A herd's minute leaves time to create everything and start up.
    let lead = scenario.count as f64 / settings.create_qps + 120.0;
    let herd_at = observe::next_minute(observe::unix_ms() / 1000 + lead as i64);
    let at = mix::Anchor {
        minute: ((herd_at / 60) % 60) as u8,
        quiet_hour: 0,
    };
    let plan = mix::plan(scenario.mix, scenario.count, scenario.namespaces, "a", at);
    create::create_as(
        client,
        &plan,
        settings.create_qps,
        settings.spread_seconds,
        kind,
    )
    .await?;
    let watch = JobWatch::start(client, mix::NAMESPACE_PREFIX);

    let mut processes = Vec::new();
    let mut ready_seconds = None;
    let mut victim = None;
    // S4's upstream: a second kube-controller-manager, both leader-elected.
    let mut _standby = None;
    let kcm = match (variant, &credentials) {
        (Variant::Shardcron(n), Some(credentials)) => {
            let started = std::time::Instant::now();
            replicas.extend(
                cluster
                    .start_shardcron(&settings.shardcron_bin, n, credentials, settings.limits, "")
                    .await?,
            );
            ready_seconds = Some(started.elapsed().as_secs_f64());
            if scenario.name == ScenarioName::S4 {
                victim = Some(Victim::Replica(Box::new(replicas.remove(0))));
            }
            for replica in replicas.iter() {
                processes.push(Process {
                    name: replica.id().to_owned(),
                    pid: cluster::pid(replica)?,
                });
            }
            cluster.pid("kube-controller-manager")?
        }
        (Variant::Upstream, _) if scenario.name == ScenarioName::S4 => {
            let (leader, standby, follower) = leader_elected_pair(cluster).await?;
            victim = Some(Victim::Process(leader));
            _standby = Some(standby);
            follower
        }
        _ => cluster.pid("kube-controller-manager")?,
    };
    processes.push(Process {
        name: "kube-controller-manager".into(),
        pid: kcm,
    });

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
        observe::whole_minutes(10, scenario.slot_minutes())
    };
    let big = mix::big_tenant_namespace("a");
    let kill_slot = scenario.kill_slot(from);
    let victim_name = match &victim {
        Some(Victim::Replica(replica)) => Some(replica.id().to_owned()),
        _ => None,
    };
    let window = Window {
        from,
        to,
        // A spread herd's last Jobs start up to the window late.
        tail: Duration::from_secs(scenario.tail_seconds + u64::from(settings.spread_seconds)),
        prefix: mix::NAMESPACE_PREFIX,
        kind,
        processes: &processes,
        big_tenant: matches!(scenario.mix, Mix::Tenants | Mix::Hostile).then_some(big.as_str()),
        done_after_jobs: scenario.is_herd().then_some(scenario.count),
        failover: kill_slot.map(|slot| (slot, victim_name.as_deref())),
    };
    eprintln!(
        "compare: {variant}: watching slots {from}..={to} (+{} s tail)",
        window.tail.as_secs()
    );
    let kill = async {
        match (victim, kill_slot) {
            (Some(victim), Some(slot)) => {
                observe::sleep_until_ms(slot * 1000 - 1000).await;
                eprintln!(
                    "compare: {variant}: killing a controller (SIGKILL) 1 s before slot {slot}"
                );
                victim.kill().await
            }
            _ => Ok(()),
        }
    };
    let join = async {
        let (Variant::Shardcron(n), Some(credentials)) = (variant, &credentials) else {
            return Ok(None);
        };
        if !(settings.join_during_herd && scenario.is_herd()) {
            return Ok(None);
        }
        let join_at = herd_at * 1000 + JOIN_AFTER.as_millis() as i64;
        observe::sleep_until_ms(join_at).await;
        let before: Vec<Option<(f64, f64)>> = replicas
            .iter()
            .map(|r| histogram(r, PUBLISH_HISTOGRAM))
            .collect();
        let joined_after_seconds = (observe::unix_ms() - herd_at * 1000) as f64 / 1000.0;
        eprintln!(
            "compare: {variant}: shardcron-{n} joins {joined_after_seconds:.1} s into the herd"
        );
        let started = std::time::Instant::now();
        let joiner = cluster
            .start_shardcron_ids(
                &settings.shardcron_bin,
                n..n + 1,
                credentials,
                settings.limits,
                "",
            )
            .await?;
        Ok::<_, anyhow::Error>(Some((
            joiner,
            before,
            joined_after_seconds,
            started.elapsed(),
        )))
    };
    let flood = async {
        if scenario.mix != Mix::Hostile || !settings.flood {
            return None;
        }
        let hostile: Vec<mix::Planned> = plan
            .iter()
            .filter(|p| p.namespace == big)
            .cloned()
            .collect();
        observe::sleep_until_ms(from * 1000 - 5_000).await;
        eprintln!(
            "compare: {variant}: flooding {} CronJobs of {big}",
            hostile.len()
        );
        Some(crate::hostile::flood(client, &hostile, to * 1000 + 30_000, settings.attacks).await)
    };
    let (killed, joined, flooded, observation) =
        tokio::join!(kill, join, flood, observe::observe(client, watch, &window));
    if let Some(flooded) = flooded {
        eprintln!(
            "compare: {variant}: the flood sent {} run-now requests and {} large annotations ({} refused or timed out); \
             made {} CronJobs with {}-byte templates and {} Jobs by hand in a namespace it then deleted ({})",
            flooded.run_now,
            flooded.large_annotations,
            flooded.refused,
            flooded.big_templates,
            crate::hostile::BIG_TEMPLATE_BYTES,
            flooded.doomed_jobs,
            if flooded.doomed_deleted {
                "deleted"
            } else {
                "not deleted"
            }
        );
    }
    killed?;
    let joined = joined?;
    let observation = observation?;
    let handoff = joined.map(|(joiner, before, joined_after_seconds, ready)| {
        let publish_seconds_max = replicas
            .iter()
            .zip(before)
            .filter_map(|(replica, before)| {
                mean_since(before?, histogram(replica, PUBLISH_HISTOGRAM)?)
            })
            .reduce(f64::max);
        let gained_wait_seconds_avg = joiner.first().and_then(|joiner| {
            mean_since(
                (0.0, 0.0),
                histogram(joiner, "shardcron_handoff_wait_seconds")?,
            )
        });
        replicas.extend(joiner);
        Handoff {
            joined_after_seconds,
            joiner_ready_seconds: ready.as_secs_f64(),
            publish_seconds_max,
            gained_wait_seconds_avg,
        }
    });
    let lease_lapses = match variant {
        Variant::Shardcron(_) => lease_lapses(replicas),
        Variant::Upstream => None,
    };
    Ok(Run {
        variant: variant.to_string(),
        limits: settings.limits,
        ready_seconds,
        observation,
        lease_lapses,
        handoff,
    })
}

/// The sum of the replicas' `shardcron_lease_lapses_total`, or none if one
/// of them does not serve it (a scrape that failed is not a zero).
fn lease_lapses(replicas: &[Replica]) -> Option<u64> {
    replicas
        .iter()
        .map(|replica| {
            shardcron_harness::sample(&replica.metrics_text(), "shardcron_lease_lapses_total")
                .map(|lapses| lapses as u64)
        })
        .sum()
}

/// Restarts kube-controller-manager with leader election and starts a
/// second one beside it; returns the leader's pid, the second one's child
/// handle (it dies with it) and the other's pid, once one holds the lease.
async fn leader_elected_pair(
    cluster: &mut LocalCluster,
) -> anyhow::Result<(u32, tokio::process::Child, u32)> {
    let elect = [("--leader-elect", "true")];
    let first = cluster.restart_kcm(&elect)?;
    let first_log = cluster.dir().join("kube-controller-manager.log");
    let second_log = cluster.dir().join("kube-controller-manager-standby.log");
    let standby = cluster.start_kcm_standby(&elect, &second_log)?;
    let second = standby
        .id()
        .context("the second kube-controller-manager exited")?;
    let acquired = |log: &Path| {
        // klog's "Successfully acquired lease" (older releases: lower case).
        std::fs::read_to_string(log)
            .is_ok_and(|text| text.to_lowercase().contains("successfully acquired lease"))
    };
    for _ in 0..120 {
        if acquired(&first_log) {
            return Ok((first, standby, second));
        }
        if acquired(&second_log) {
            return Ok((second, standby, first));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("neither kube-controller-manager acquired its lease within 60 s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_run_must_match_the_scenario_and_the_limits() {
        // A run from a committed report (S2 short: 1,000 CronJobs, 20/30).
        let compressed = include_bytes!("../report/s2-short/report.json.zst");
        let report: serde_json::Value =
            serde_json::from_slice(&zstd::decode_all(&compressed[..]).unwrap()).unwrap();
        let dir = std::env::temp_dir().join(format!("kept-run-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("upstream.json");
        let s2 = Scenario::new(ScenarioName::S2, Mode::Short);
        let limits = ClientLimits {
            qps: 20.0,
            burst: 30,
        };

        assert!(
            kept_run(&path, &s2, limits).unwrap().is_none(),
            "nothing kept yet"
        );
        std::fs::write(&path, report["runs"][0].to_string()).unwrap();
        let kept = kept_run(&path, &s2, limits).unwrap().expect("kept");
        assert_eq!(kept.variant, "upstream");
        let high = ClientLimits {
            qps: 200.0,
            burst: 300,
        };
        assert!(kept_run(&path, &s2, high).is_err(), "other limits");
        let s2_full = Scenario::new(ScenarioName::S2, Mode::Full);
        assert!(kept_run(&path, &s2_full, limits).is_err(), "another count");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn variants_parse_and_print_alike() {
        for text in ["upstream", "shardcron-1", "shardcron-3"] {
            assert_eq!(text.parse::<Variant>().unwrap().to_string(), text);
        }
        assert!("shardcron-0".parse::<Variant>().is_err());
        assert!("kcm".parse::<Variant>().is_err());
    }

    #[test]
    fn failover_leaves_out_and_refuses_a_single_replica() {
        let s4 = Scenario::new(ScenarioName::S4, Mode::Short);
        assert_eq!(
            s4.controllers(Vec::new()).unwrap(),
            [Variant::Upstream, Variant::Shardcron(3)]
        );
        assert!(s4.controllers(vec![Variant::Shardcron(1)]).is_err());
        let s1 = Scenario::new(ScenarioName::S1, Mode::Short);
        assert_eq!(s1.controllers(Vec::new()).unwrap().len(), 3);
        assert_eq!(
            s1.controllers(vec![Variant::Shardcron(1)]).unwrap(),
            [Variant::Shardcron(1)]
        );
    }

    #[test]
    fn only_windowed_scenarios_take_other_minutes() {
        let mut s1 = Scenario::new(ScenarioName::S1, Mode::Full);
        s1.set_minutes(20).unwrap();
        assert_eq!(s1.minutes, 20);
        assert!(s1.set_minutes(1).is_err());
        assert!(
            Scenario::new(ScenarioName::S2, Mode::Full)
                .set_minutes(20)
                .is_err()
        );
    }
}
