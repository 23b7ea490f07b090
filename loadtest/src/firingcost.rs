//! CPU per firing against upstream's, measured like with like: one control
//! plane, one set of every-minute CronJobs, kube-controller-manager running
//! only its Job controller throughout, and phases that take turns on it:
//!
//! - **upstream**: a second kube-controller-manager running only the
//!   CronJob controller (its own process, its own informers);
//! - **shardcron**: one shardcron replica.
//!
//! Each side's cost per firing is its whole process's CPU over the slots
//! it answered. Upstream's is also given less a third
//! kube-controller-manager beside it with only a Job informer (the
//! TTL-after-finished controller, idle here), in the same minutes: the
//! CronJob controller's cost where it shares its Job informer with the Job
//! controller, as in one kube-controller-manager. No figure is a
//! difference of two phases (until 2026-11-29 upstream's
//! figure was kube-controller-manager with both controllers less it with
//! the Job controller alone, and that difference moved from 7.5 to 4.3 ms
//! per firing between two runs, more than the gap being measured). Rounds
//! alternate the order (AB, BA, ...) so that a drift over the run (pods
//! piling up: no garbage collector runs) falls on both sides, and the
//! report gives the rounds' spread and a 95 % confidence interval of the
//! ratio ([`Spread`]), over the rounds after the warm-up ones
//! ([`counted`]). Both sides' processes start with their phase, so
//! their informers' start is before the window.
//!
//! The Job controller runs at `--job-controller-qps` (default 200): at
//! kube-controller-manager's own 20, the 200 Jobs of a slot ended 10-55 s
//! after their create, so each phase recorded part of the previous
//! phase's Jobs' ends and left part of its own to the next, by amounts
//! that varied from phase to phase. At 200 they end within seconds and a
//! phase pays for its own firings' whole life; each phase reports how many
//! of its Jobs had ended by the window's end ([`JobEnds`]).

use crate::cluster::{self, ClientLimits, LocalCluster};
use crate::mix::{self, Mix};
use crate::observe::{self, JobWatch, Observation, Process, Window};
use crate::{apimetrics, create};
use anyhow::Context;
use serde::{Deserialize, Serialize};
use shardcron::reconcile::CronJobKind;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// kube-controller-manager's `--controllers`: the Job controller all along,
/// the CronJob controller in a second process in upstream's phases.
const JOB_CONTROLLER_ONLY: &str = "job-controller";
const CRONJOB_CONTROLLER_ONLY: &str = "cronjob-controller";
/// A kube-controller-manager whose only controller keeps a Job informer and
/// does nothing with these Jobs (none has a TTL): what the CronJob
/// controller's process pays for being a process with its own Job informer,
/// which inside one kube-controller-manager it shares with the Job
/// controller.
const JOB_INFORMER_ONLY: &str = "ttl-after-finished-controller";
/// Seconds from a phase's start (its processes started) to its first slot.
const LEAD_SECONDS: i64 = 20;
/// Late Jobs still count this long after the last slot.
const TAIL: Duration = Duration::from_secs(30);
/// CronJobs per namespace.
const PER_NAMESPACE: usize = 50;
/// The Job-controller kube-controller-manager's burst at `qps`.
fn job_controller_burst(qps: u32) -> u32 {
    qps.saturating_mul(3).div_ceil(2)
}
/// The process name of the second kube-controller-manager in the report.
const CRONJOB_KCM: &str = "kube-controller-manager (CronJob controller)";
const JOB_INFORMER_KCM: &str = "kube-controller-manager (a Job informer)";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    Upstream,
    Shardcron,
}

/// One phase: who ran the CronJobs, and what the processes spent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PhaseCpu {
    pub round: usize,
    pub side: Side,
    /// Slots answered in the window.
    pub firings: usize,
    /// kube-controller-manager's CPU seconds over the window: its Job
    /// controller alone since 2026-11-29 (before, with the CronJob
    /// controller in upstream's phases).
    pub kcm_cpu_seconds: f64,
    /// The second kube-controller-manager's, running only the CronJob
    /// controller (upstream's phases; 0 in shardcron's).
    #[serde(default)]
    pub cronjob_kcm_cpu_seconds: f64,
    /// A third one beside it in upstream's phases, with only a Job informer
    /// ([`JOB_INFORMER_ONLY`]).
    #[serde(default)]
    pub job_informer_kcm_cpu_seconds: f64,
    /// shardcron's (0 in upstream's phase).
    pub shardcron_cpu_seconds: f64,
}

impl PhaseCpu {
    fn firings(&self) -> f64 {
        self.firings.max(1) as f64
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Phase {
    pub cpu: PhaseCpu,
    pub observation: Observation,
    /// shardcron's own counters over the phase (its requests by verb and
    /// code, its watch events by resource): where its CPU went.
    #[serde(default)]
    pub shardcron_counters: BTreeMap<String, f64>,
    /// How the Jobs of the phase's slots had ended by its window's end.
    #[serde(default)]
    pub job_ends: Option<JobEnds>,
}

/// The Jobs made for a phase's slots still listed at the end of its
/// window (a history limit deletes only ended ones): how many had ended
/// (a `completionTime`, or a `Failed` condition), and the longest any took
/// from its slot to its end.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobEnds {
    pub jobs: usize,
    pub ended: usize,
    pub latest_seconds: i64,
}

/// A Job as [`job_ends`] reads it: its slot and its end (unix seconds).
#[derive(Debug, Clone, Copy)]
pub struct JobLife {
    pub slot: i64,
    pub ended: Option<i64>,
}

/// [`JobEnds`] of the Jobs whose slot is in `[from, to]`.
pub fn job_ends(jobs: &[JobLife], from: i64, to: i64) -> JobEnds {
    let mut ends = JobEnds::default();
    for job in jobs.iter().filter(|j| (from..=to).contains(&j.slot)) {
        ends.jobs += 1;
        if let Some(ended) = job.ended {
            ends.ended += 1;
            ends.latest_seconds = ends.latest_seconds.max(ended - job.slot);
        }
    }
    ends
}

/// The Jobs of the namespaces starting with `prefix`, read now.
async fn job_lives(client: &kube::Client, prefix: &str) -> anyhow::Result<Vec<JobLife>> {
    use k8s_openapi::api::batch::v1::Job;
    let jobs = kube::Api::<Job>::all(client.clone())
        .list(&Default::default())
        .await?;
    Ok(jobs
        .items
        .iter()
        .filter(|job| {
            job.metadata
                .namespace
                .as_deref()
                .is_some_and(|ns| ns.starts_with(prefix))
        })
        .filter_map(|job| {
            // The controller's own reading of a Job: its slot, completion
            // and failure.
            let summary = shardcron::reconcile::JobSummary::from(job);
            Some(JobLife {
                slot: summary.scheduled?.as_second(),
                ended: summary
                    .completion_time
                    .or(summary.failed_at)
                    .map(|t| t.as_second()),
            })
        })
        .collect())
}

/// The counters of `/metrics` that say what a replica did.
const COUNTERS: [&str; 4] = [
    "shardcron_api_requests_total",
    "shardcron_watch_events_total",
    "shardcron_status_writes_given_way_total",
    "shardcron_events_recorded_total",
];

/// `COUNTERS`' series in a `/metrics` page.
fn counters(page: &str) -> BTreeMap<String, f64> {
    page.lines()
        .filter(|line| COUNTERS.iter().any(|c| line.starts_with(c)))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// How much each of `COUNTERS`' series grew between two `/metrics` pages
/// (those that grew).
fn counters_between(before: &str, after: &str) -> BTreeMap<String, f64> {
    let before = counters(before);
    counters(after)
        .into_iter()
        .filter_map(|(series, value)| {
            let delta = value - before.get(&series).copied().unwrap_or(0.0);
            (delta > 0.0).then_some((series, delta))
        })
        .collect()
}

/// The replica's requests (`shardcron_api_requests_total`, by series)
/// between two of its `/metrics` pages.
pub fn requests_between(before: &str, after: &str) -> BTreeMap<String, f64> {
    let mut grown = counters_between(before, after);
    grown.retain(|series, _| series.starts_with("shardcron_api_requests_total"));
    grown
}

/// One round's figures, in milliseconds of CPU per firing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundCost {
    pub round: usize,
    /// kube-controller-manager running only the CronJob controller.
    pub upstream_ms: f64,
    /// That less a kube-controller-manager with only a Job informer (the
    /// same minutes): the CronJob controller's cost inside a
    /// kube-controller-manager that runs it beside the Job controller.
    #[serde(default)]
    pub upstream_marginal_ms: f64,
    pub shardcron_ms: f64,
    /// kube-controller-manager's Job controller (both phases' base).
    pub kcm_base_ms: f64,
    pub ratio: f64,
    /// shardcron against `upstream_marginal_ms`.
    #[serde(default)]
    pub ratio_marginal: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FiringCostReport {
    pub cronjobs: usize,
    pub minutes: u32,
    pub phases: Vec<Phase>,
    /// Every round, the warm-up ones first.
    pub rounds: Vec<RoundCost>,
    /// The first rounds, run but not counted ([`counted`]).
    #[serde(default)]
    pub warmup_rounds: usize,
    /// Over the counted rounds: total extra CPU over total firings, each side.
    pub upstream_ms: f64,
    pub shardcron_ms: f64,
    pub ratio: f64,
    #[serde(default)]
    pub upstream_marginal_ms: f64,
    #[serde(default)]
    pub ratio_marginal: f64,
    /// The rounds' ratios: their spread and confidence interval.
    #[serde(default)]
    pub spread: Spread,
    #[serde(default)]
    pub spread_marginal: Spread,
    /// The Job controller's `--kube-api-qps` (reports before 2026-12-04:
    /// kube-controller-manager's default, 20).
    #[serde(default = "default_job_controller_qps")]
    pub job_controller_qps: u32,
    pub note: String,
}

fn default_job_controller_qps() -> u32 {
    20
}

/// How far apart the rounds' ratios are.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    pub rounds: usize,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// Half the width of the 95 % confidence interval of the mean
    /// (Student's t over the rounds; 0 with one round).
    pub ci95: f64,
}

/// Student's t at 97.5 % for 1 to 10 degrees of freedom (beyond: 2.2 to
/// 1.96, taken as 2.2).
const T975: [f64; 10] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
];

impl Spread {
    /// The spread of `values` (pure).
    pub fn of(values: &[f64]) -> Spread {
        let n = values.len();
        if n == 0 {
            return Spread::default();
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let ci95 = if n < 2 {
            0.0
        } else {
            let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
            let t = T975.get(n - 2).copied().unwrap_or(2.2);
            t * (variance / n as f64).sqrt()
        };
        Spread {
            rounds: n,
            mean,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            ci95,
        }
    }

    /// The interval's half-width as a share of the mean.
    pub fn relative(&self) -> f64 {
        if self.mean == 0.0 {
            0.0
        } else {
            self.ci95 / self.mean
        }
    }
}

/// Pairs each round's two phases (pure: the report's arithmetic).
pub fn costs(phases: &[PhaseCpu]) -> Vec<RoundCost> {
    let rounds = phases.iter().map(|p| p.round).max().map_or(0, |r| r + 1);
    (0..rounds)
        .filter_map(|round| {
            let of_round: Vec<PhaseCpu> = phases
                .iter()
                .filter(|p| p.round == round)
                .cloned()
                .collect();
            let has = |side| of_round.iter().any(|p| p.side == side);
            (has(Side::Upstream) && has(Side::Shardcron)).then(|| RoundCost {
                round,
                ..overall(&of_round)
            })
        })
        .collect()
}

/// The phases that count: those of the rounds after the first `warmup`.
///
/// Why a warm-up: each side's first phase on a fresh control plane cost
/// upstream's CronJob controller 16-19 % less than its later ones (5.97
/// against 6.90-7.25 ms per firing, less a Job informer, on 2026-12-04;
/// 4.95 against 5.43-6.00 on 2026-12-02), while shardcron's did not move:
/// the first round alone widened the interval of the ratio from ±9.1 % to
/// ±14.7 %. Pure.
pub fn counted(phases: &[PhaseCpu], warmup: usize) -> Vec<PhaseCpu> {
    phases
        .iter()
        .filter(|p| p.round >= warmup)
        .cloned()
        .collect()
}

/// All rounds as one: each side's CPU summed over its phases, over its
/// firings summed (`round` is the number of rounds).
pub fn overall(phases: &[PhaseCpu]) -> RoundCost {
    let sum = |side: Side, f: fn(&PhaseCpu) -> f64| -> f64 {
        phases.iter().filter(|p| p.side == side).map(f).sum()
    };
    let ms_per_firing = |side, f: fn(&PhaseCpu) -> f64| {
        1000.0 * sum(side, f) / sum(side, PhaseCpu::firings).max(1.0)
    };
    let kcm_base_ms = ms_per_firing(Side::Shardcron, |p| p.kcm_cpu_seconds);
    let upstream_ms = ms_per_firing(Side::Upstream, |p| p.cronjob_kcm_cpu_seconds);
    let upstream_marginal_ms =
        upstream_ms - ms_per_firing(Side::Upstream, |p| p.job_informer_kcm_cpu_seconds);
    let shardcron_ms = ms_per_firing(Side::Shardcron, |p| p.shardcron_cpu_seconds);
    RoundCost {
        round: phases.iter().map(|p| p.round + 1).max().unwrap_or(0),
        upstream_ms,
        shardcron_ms,
        kcm_base_ms,
        ratio: shardcron_ms / upstream_ms,
        upstream_marginal_ms,
        ratio_marginal: shardcron_ms / upstream_marginal_ms,
    }
}

/// How many rounds a run makes: `warmup` first, not counted, then
/// `counted`.
#[derive(Debug, Clone, Copy)]
pub struct Rounds {
    pub warmup: usize,
    pub counted: usize,
}

/// The order of the sides in `round`: AB, BA, AB, ...
pub fn order(round: usize) -> [Side; 2] {
    if round.is_multiple_of(2) {
        [Side::Upstream, Side::Shardcron]
    } else {
        [Side::Shardcron, Side::Upstream]
    }
}

pub async fn run(
    out: &Path,
    bin: &Path,
    count: usize,
    minutes: u32,
    rounds: Rounds,
    job_controller_qps: u32,
) -> anyhow::Result<FiringCostReport> {
    std::fs::create_dir_all(out)?;
    let mut cluster = LocalCluster::up(&out.join("cluster"), false, "", true).await?;
    let result = run_on(
        &mut cluster,
        bin,
        count,
        minutes,
        rounds,
        job_controller_qps,
    )
    .await;
    let report = cluster
        .finish(Vec::new(), result, &out.join("logs"), false)
        .await?;
    std::fs::write(
        out.join("firing-cost.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;
    std::fs::write(out.join("firing-cost.md"), markdown(&report))?;
    Ok(report)
}

async fn run_on(
    cluster: &mut LocalCluster,
    bin: &Path,
    count: usize,
    minutes: u32,
    rounds: Rounds,
    job_controller_qps: u32,
) -> anyhow::Result<FiringCostReport> {
    let client = cluster.client.clone();
    let job_qps = job_controller_qps.to_string();
    let job_burst = job_controller_burst(job_controller_qps).to_string();
    apimetrics::install_flow_schemas(&client).await?;
    let credentials = cluster.shardcron_credentials().await?;
    let group = "cost";
    let namespaces = count.div_ceil(PER_NAMESPACE).max(1);
    let plan = mix::plan(
        Mix::EveryMinute,
        count,
        namespaces,
        group,
        mix::Anchor::default(),
    );
    create::create(&client, &plan, 100.0).await?;
    let prefix = format!("{}{group}-", mix::NAMESPACE_PREFIX);
    let limits = ClientLimits {
        qps: 20.0,
        burst: 30,
    };
    // Upstream's CronJob controller at the replica's limits: the second
    // kube-controller-manager's command is the first's, whose QPS is the
    // Job controller's.
    let (cronjob_qps, cronjob_burst) = (limits.qps.to_string(), limits.burst.to_string());
    let mut phases = Vec::new();
    for round in 0..rounds.warmup + rounds.counted {
        for side in order(round) {
            eprintln!("firing-cost: round {round}, {side:?}");
            let kcm = Process {
                name: "kube-controller-manager".into(),
                pid: cluster.restart_kcm(&[
                    ("--controllers", JOB_CONTROLLER_ONLY),
                    ("--kube-api-qps", &job_qps),
                    ("--kube-api-burst", &job_burst),
                ])?,
            };
            let mut processes = vec![kcm];
            let mut extra_kcms = Vec::new();
            let replica = match side {
                Side::Upstream => {
                    for (name, controllers, file) in [
                        (CRONJOB_KCM, CRONJOB_CONTROLLER_ONLY, "cronjob"),
                        (JOB_INFORMER_KCM, JOB_INFORMER_ONLY, "job-informer"),
                    ] {
                        let log = cluster
                            .dir()
                            .join(format!("kube-controller-manager-{file}-round{round}.log"));
                        let child = cluster.start_kcm_standby(
                            &[
                                ("--controllers", controllers),
                                ("--leader-elect", "false"),
                                ("--kube-api-qps", &cronjob_qps),
                                ("--kube-api-burst", &cronjob_burst),
                            ],
                            &log,
                        )?;
                        processes.push(Process {
                            name: name.into(),
                            pid: child.id().with_context(|| format!("{name} exited"))?,
                        });
                        extra_kcms.push(child);
                    }
                    None
                }
                Side::Shardcron => {
                    let mut started = cluster
                        .start_shardcron(bin, 1, &credentials, limits, &format!("-round{round}"))
                        .await?;
                    let replica = started.pop().context("no replica started")?;
                    processes.push(Process {
                        name: "shardcron".into(),
                        pid: cluster::pid(&replica)?,
                    });
                    Some(replica)
                }
            };
            let before = replica
                .as_ref()
                .map(|r| r.metrics_text())
                .unwrap_or_default();
            let (from, to) = observe::whole_minutes(LEAD_SECONDS, minutes);
            let window = Window {
                from,
                to,
                tail: TAIL,
                prefix: &prefix,
                kind: CronJobKind::Batch,
                processes: &processes,
                big_tenant: None,
                done_after_jobs: None,
                failover: None,
            };
            let observation =
                observe::observe(&client, JobWatch::start(&client, &prefix), &window).await;
            let job_ends = match job_lives(&client, &prefix).await {
                Ok(lives) => Some(job_ends(&lives, from, to)),
                Err(error) => {
                    eprintln!("firing-cost: the phase's Jobs could not be read: {error:#}");
                    None
                }
            };
            let mut shardcron_counters = BTreeMap::new();
            if let Some(replica) = replica {
                shardcron_counters = counters_between(&before, &replica.metrics_text());
                cluster::stop(replica).await?;
            }
            for mut child in extra_kcms {
                child.kill().await?;
            }
            let observation = observation?;
            let cpu = |name: &str| {
                observation
                    .processes
                    .iter()
                    .filter(|p| p.name == name)
                    .map(|p| p.cpu_seconds)
                    // From 0.0: an empty f64 sum is -0.0.
                    .fold(0.0, |sum, cpu| sum + cpu)
            };
            let phase = Phase {
                cpu: PhaseCpu {
                    round,
                    side,
                    firings: observation.slots.answered,
                    kcm_cpu_seconds: cpu("kube-controller-manager"),
                    cronjob_kcm_cpu_seconds: cpu(CRONJOB_KCM),
                    job_informer_kcm_cpu_seconds: cpu(JOB_INFORMER_KCM),
                    shardcron_cpu_seconds: cpu("shardcron"),
                },
                observation,
                shardcron_counters,
                job_ends,
            };
            let s = &phase.observation.slots;
            eprintln!(
                "firing-cost: round {round}, {side:?}: {} of {} slots answered, {} missed, {} duplicates; \
                 Job controller {:.2} s, CronJob controller {:.2} s, a Job informer {:.2} s, shardcron {:.2} s",
                s.answered,
                s.expected,
                s.missed,
                s.duplicates,
                phase.cpu.kcm_cpu_seconds,
                phase.cpu.cronjob_kcm_cpu_seconds,
                phase.cpu.job_informer_kcm_cpu_seconds,
                phase.cpu.shardcron_cpu_seconds
            );
            phases.push(phase);
        }
    }
    let cpu: Vec<PhaseCpu> = phases.iter().map(|p| p.cpu.clone()).collect();
    let counted_cpu = counted(&cpu, rounds.warmup);
    let overall = overall(&counted_cpu);
    let counted_rounds = costs(&counted_cpu);
    let ratios: Vec<f64> = counted_rounds.iter().map(|r| r.ratio).collect();
    let marginal: Vec<f64> = counted_rounds.iter().map(|r| r.ratio_marginal).collect();
    Ok(FiringCostReport {
        cronjobs: count,
        minutes,
        phases,
        rounds: costs(&cpu),
        warmup_rounds: rounds.warmup,
        upstream_ms: overall.upstream_ms,
        shardcron_ms: overall.shardcron_ms,
        ratio: overall.ratio,
        upstream_marginal_ms: overall.upstream_marginal_ms,
        ratio_marginal: overall.ratio_marginal,
        spread: Spread::of(&ratios),
        spread_marginal: Spread::of(&marginal),
        job_controller_qps,
        note: "CPU per firing = user+system CPU from a phase's first slot to 30 s after its last, \
               over the slots answered. Upstream: a kube-controller-manager running only its \
               CronJob controller, whole process; its marginal cost: that less a \
               kube-controller-manager running only the TTL-after-finished controller (a Job \
               informer with nothing to do) in the same minutes. shardcron: its whole process. \
               Beside both, \
               kube-controller-manager with only its Job controller (restarted each phase). \
               Phases alternate on one control plane with the same CronJobs."
            .into(),
    })
}

pub fn markdown(report: &FiringCostReport) -> String {
    let mut text = format!(
        "# CPU per firing against upstream's\n\n{} CronJobs firing every minute, {} minutes per phase, \
         the Job controller at QPS {}.\n\n\
         | round | upstream, its own process (ms per firing) | upstream less a Job informer (ms per firing) | shardcron (ms per firing) | shardcron / upstream | shardcron / upstream less a Job informer | Job controller (ms per firing) |\n\
         |---|---|---|---|---|---|---|\n",
        report.cronjobs, report.minutes, report.job_controller_qps
    );
    for r in &report.rounds {
        let warmup = if r.round < report.warmup_rounds {
            " (warm-up, not counted)"
        } else {
            ""
        };
        text.push_str(&format!(
            "| {}{warmup} | {:.2} | {:.2} | {:.2} | {:.2}x | {:.2}x | {:.2} |\n",
            r.round,
            r.upstream_ms,
            r.upstream_marginal_ms,
            r.shardcron_ms,
            r.ratio,
            r.ratio_marginal,
            r.kcm_base_ms
        ));
    }
    text.push_str(&format!(
        "| all counted | {:.2} | {:.2} | {:.2} | **{:.2}x** | **{:.2}x** | |\n\n",
        report.upstream_ms,
        report.upstream_marginal_ms,
        report.shardcron_ms,
        report.ratio,
        report.ratio_marginal
    ));
    for (what, spread) in [
        ("shardcron / upstream", &report.spread),
        (
            "shardcron / upstream less a Job informer",
            &report.spread_marginal,
        ),
    ] {
        text.push_str(&format!(
            "The rounds' {what}: mean {:.3}x, 95 % confidence interval ±{:.3} (±{:.1} %), from {:.3}x to {:.3}x over {} rounds.\n\n",
            spread.mean,
            spread.ci95,
            100.0 * spread.relative(),
            spread.min,
            spread.max,
            spread.rounds
        ));
    }
    text.push_str("| round | side | slots | answered | missed | duplicates | Job controller CPU s | CronJob controller CPU s | a Job informer CPU s | shardcron CPU s | the CronJob controller's requests per firing | its slots' Jobs still listed at the window's end: ended of listed (latest end, s after its slot) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for p in &report.phases {
        let s = &p.observation.slots;
        let schema = apimetrics::schema_of(p.cpu.side == Side::Upstream);
        let requests = p.observation.api.get(schema).map_or(0.0, |l| l.requests);
        text.push_str(&format!(
            "| {} | {:?} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |\n",
            p.cpu.round,
            p.cpu.side,
            s.expected,
            s.answered,
            s.missed,
            s.duplicates,
            p.cpu.kcm_cpu_seconds,
            p.cpu.cronjob_kcm_cpu_seconds,
            p.cpu.job_informer_kcm_cpu_seconds,
            p.cpu.shardcron_cpu_seconds,
            requests / p.cpu.firings(),
            p.job_ends.as_ref().map_or("-".to_owned(), |e| format!(
                "{} of {} ({} s)",
                e.ended, e.jobs, e.latest_seconds
            ))
        ));
    }
    for p in report
        .phases
        .iter()
        .filter(|p| !p.shardcron_counters.is_empty())
    {
        text.push_str(&format!(
            "\nshardcron's counters per firing, round {}:\n\n",
            p.cpu.round
        ));
        for (series, value) in &p.shardcron_counters {
            text.push_str(&format!("- `{series}`: {:.2}\n", value / p.cpu.firings()));
        }
    }
    text.push_str(&format!("\n{}\n", report.note));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_from_a_metrics_page() {
        let page = "# HELP x\nshardcron_api_requests_total{verb=\"create\",code=\"201\"} 7\nshardcron_other 3\nshardcron_watch_events_total{resource=\"jobs\"} 12.5\n";
        let read = counters(page);
        assert_eq!(read.len(), 2);
        assert_eq!(
            read["shardcron_watch_events_total{resource=\"jobs\"}"],
            12.5
        );
    }

    /// `controller`: the CronJob controller's process (upstream; a Job
    /// informer's process beside it a quarter of that) or shardcron's,
    /// beside the Job controller's 3 s.
    fn phase(round: usize, side: Side, firings: usize, controller: f64) -> PhaseCpu {
        let upstream = side == Side::Upstream;
        PhaseCpu {
            round,
            side,
            firings,
            kcm_cpu_seconds: 3.0,
            cronjob_kcm_cpu_seconds: if upstream { controller } else { 0.0 },
            job_informer_kcm_cpu_seconds: if upstream { controller / 4.0 } else { 0.0 },
            shardcron_cpu_seconds: if upstream { 0.0 } else { controller },
        }
    }

    #[test]
    fn rounds_alternate_which_side_goes_first() {
        assert_eq!(order(0), [Side::Upstream, Side::Shardcron]);
        assert_eq!(order(1), [Side::Shardcron, Side::Upstream]);
        assert_eq!(order(2), order(0));
    }

    /// Two rounds: 0.5x, then 0.75x.
    fn two_rounds() -> [PhaseCpu; 4] {
        [
            // 1,000 firings each: the CronJob controller's process 2 s,
            // shardcron 1 s.
            phase(0, Side::Upstream, 1000, 2.0),
            phase(0, Side::Shardcron, 1000, 1.0),
            // Second round, fewer firings answered by upstream: per firing.
            phase(1, Side::Shardcron, 1000, 1.5),
            phase(1, Side::Upstream, 500, 1.0),
        ]
    }

    #[test]
    fn each_side_pays_its_own_process_per_firing() {
        let phases = two_rounds();
        let rounds = costs(&phases);
        assert_eq!(rounds.len(), 2);
        assert_eq!(rounds[0].kcm_base_ms, 3.0);
        assert_eq!(rounds[0].upstream_ms, 2.0);
        assert_eq!(rounds[0].shardcron_ms, 1.0);
        assert_eq!(rounds[0].ratio, 0.5);
        assert_eq!(rounds[1].upstream_ms, 2.0);
        assert_eq!(rounds[1].ratio, 0.75);
        // Less the Job informer's quarter: 1.5 ms.
        assert_eq!(rounds[0].upstream_marginal_ms, 1.5);
        assert!((rounds[0].ratio_marginal - 1.0 / 1.5).abs() < 1e-12);
        let all = overall(&phases);
        assert_eq!(all.round, 2);
        // 3 s over 1,500 firings; 2.5 s over 2,000.
        assert!((all.upstream_ms - 2.0).abs() < 1e-9);
        assert!((all.shardcron_ms - 1.25).abs() < 1e-9);
    }

    #[test]
    fn the_spread_of_the_rounds_is_their_range_and_a_t_interval() {
        assert_eq!(Spread::of(&[]), Spread::default());
        let one = Spread::of(&[0.5]);
        assert_eq!((one.mean, one.ci95, one.min, one.max), (0.5, 0.0, 0.5, 0.5));
        // Mean 0.5, sample deviation 0.1, three rounds: t(2) = 4.303.
        let three = Spread::of(&[0.4, 0.5, 0.6]);
        assert!((three.mean - 0.5).abs() < 1e-12);
        assert!((three.ci95 - 4.303 * 0.1 / 3f64.sqrt()).abs() < 1e-9);
        assert_eq!((three.min, three.max), (0.4, 0.6));
        assert!((three.relative() - three.ci95 / 0.5).abs() < 1e-12);
    }

    #[test]
    fn warm_up_rounds_are_run_but_not_counted() {
        let phases = two_rounds();
        let after_warmup = counted(&phases, 1);
        assert!(after_warmup.iter().all(|p| p.round == 1));
        assert_eq!(overall(&after_warmup).ratio, 0.75);
        assert_eq!(costs(&after_warmup).len(), 1);
        assert_eq!(counted(&phases, 0).len(), 4);
    }

    #[test]
    fn a_phases_job_ends_count_its_slots_jobs_only() {
        let life = |slot, ended| JobLife { slot, ended };
        let jobs = [
            // The previous phase's: not this one's.
            life(0, None),
            life(60, Some(75)),
            life(120, Some(164)),
            life(120, None),
            // After the window: not counted.
            life(180, Some(181)),
        ];
        assert_eq!(
            job_ends(&jobs, 60, 120),
            JobEnds {
                jobs: 3,
                ended: 2,
                latest_seconds: 44
            }
        );
        assert_eq!(job_controller_burst(200), 300);
        assert_eq!(job_controller_burst(1), 2);
    }

    #[test]
    fn a_round_without_both_sides_gives_no_figure() {
        assert!(costs(&[phase(0, Side::Upstream, 10, 1.0)]).is_empty());
    }
}
