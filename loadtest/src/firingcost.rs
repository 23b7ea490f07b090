//! CPU per firing against upstream's, measured like with like (issue 41's
//! method): one control plane, one set of every-minute CronJobs, and
//! phases that take turns on it:
//!
//! - **upstream**: kube-controller-manager running only its Job and CronJob
//!   controllers;
//! - **shardcron**: kube-controller-manager running only its Job controller,
//!   beside one shardcron replica.
//!
//! Upstream's cost per firing is kube-controller-manager's CPU per firing
//! in its phase less that in shardcron's phase of the same round (the Job
//! controller, its pods and its shared Job informer are in both);
//! shardcron's is its whole process's CPU per firing (against nothing).
//! Rounds alternate the order (AB, BA, ...) so that a drift over the run
//! (pods piling up: no garbage collector runs) falls on both sides.
//! kube-controller-manager restarts at each phase, so its informers' start
//! is before the window, as shardcron's is.

use crate::cluster::{self, ClientLimits, LocalCluster};
use crate::mix::{self, Mix};
use crate::observe::{self, JobWatch, Observation, Process, Window};
use crate::{apimetrics, create};
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// kube-controller-manager's `--controllers` in each phase (up's `%q`).
const UPSTREAM_CONTROLLERS: &str = r"job-controller\,cronjob-controller";
const JOB_CONTROLLER_ONLY: &str = "job-controller";
/// Seconds from a phase's start (its processes started) to its first slot.
const LEAD_SECONDS: i64 = 20;
/// Late Jobs still count this long after the last slot.
const TAIL: Duration = Duration::from_secs(30);
/// CronJobs per namespace.
const PER_NAMESPACE: usize = 50;

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
    /// kube-controller-manager's CPU seconds over the window.
    pub kcm_cpu_seconds: f64,
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
}

/// The counters of `/metrics` that say what a replica did.
const COUNTERS: [&str; 2] = [
    "shardcron_api_requests_total",
    "shardcron_watch_events_total",
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
    /// kube-controller-manager with the CronJob controller, less without.
    pub upstream_ms: f64,
    pub shardcron_ms: f64,
    /// kube-controller-manager's Job controller alone (both phases' base).
    pub kcm_base_ms: f64,
    pub ratio: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FiringCostReport {
    pub cronjobs: usize,
    pub minutes: u32,
    pub phases: Vec<Phase>,
    pub rounds: Vec<RoundCost>,
    /// Over all rounds: total extra CPU over total firings, each side.
    pub upstream_ms: f64,
    pub shardcron_ms: f64,
    pub ratio: f64,
    pub note: String,
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
    let upstream_ms = ms_per_firing(Side::Upstream, |p| p.kcm_cpu_seconds) - kcm_base_ms;
    let shardcron_ms = ms_per_firing(Side::Shardcron, |p| p.shardcron_cpu_seconds);
    RoundCost {
        round: phases.iter().map(|p| p.round + 1).max().unwrap_or(0),
        upstream_ms,
        shardcron_ms,
        kcm_base_ms,
        ratio: shardcron_ms / upstream_ms,
    }
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
    rounds: usize,
) -> anyhow::Result<FiringCostReport> {
    std::fs::create_dir_all(out)?;
    let mut cluster = LocalCluster::up(&out.join("cluster"), false, "").await?;
    let result = run_on(&mut cluster, bin, count, minutes, rounds).await;
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
    rounds: usize,
) -> anyhow::Result<FiringCostReport> {
    let client = cluster.client.clone();
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
    let mut phases = Vec::new();
    for round in 0..rounds {
        for side in order(round) {
            eprintln!("firing-cost: round {round}, {side:?}");
            let controllers = match side {
                Side::Upstream => UPSTREAM_CONTROLLERS,
                Side::Shardcron => JOB_CONTROLLER_ONLY,
            };
            let kcm = Process {
                name: "kube-controller-manager".into(),
                pid: cluster.restart_kcm(&[("--controllers", controllers)])?,
            };
            let mut processes = vec![kcm];
            let replica = match side {
                Side::Upstream => None,
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
                processes: &processes,
                big_tenant: None,
                done_after_jobs: None,
                failover: None,
            };
            let observation =
                observe::observe(&client, JobWatch::start(&client, &prefix), &window).await;
            let mut shardcron_counters = BTreeMap::new();
            if let Some(replica) = replica {
                shardcron_counters = counters_between(&before, &replica.metrics_text());
                cluster::stop(replica).await?;
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
                    shardcron_cpu_seconds: cpu("shardcron"),
                },
                observation,
                shardcron_counters,
            };
            let s = &phase.observation.slots;
            eprintln!(
                "firing-cost: round {round}, {side:?}: {} of {} slots answered, {} missed, {} duplicates; \
                 kube-controller-manager {:.2} s, shardcron {:.2} s",
                s.answered,
                s.expected,
                s.missed,
                s.duplicates,
                phase.cpu.kcm_cpu_seconds,
                phase.cpu.shardcron_cpu_seconds
            );
            phases.push(phase);
        }
    }
    let cpu: Vec<PhaseCpu> = phases.iter().map(|p| p.cpu.clone()).collect();
    let overall = overall(&cpu);
    Ok(FiringCostReport {
        cronjobs: count,
        minutes,
        phases,
        rounds: costs(&cpu),
        upstream_ms: overall.upstream_ms,
        shardcron_ms: overall.shardcron_ms,
        ratio: overall.ratio,
        note: "CPU per firing = user+system CPU from a phase's first slot to 30 s after its last, \
               over the slots answered. Upstream: kube-controller-manager with only its Job and \
               CronJob controllers, less kube-controller-manager with only its Job controller (the \
               shardcron phase of the same round). shardcron: its whole process. Phases alternate \
               on one control plane with the same CronJobs; each phase restarts kube-controller-manager."
            .into(),
    })
}

pub fn markdown(report: &FiringCostReport) -> String {
    let mut text = format!(
        "# CPU per firing against upstream's\n\n{} CronJobs firing every minute, {} minutes per phase.\n\n\
         | round | upstream (ms per firing) | shardcron (ms per firing) | shardcron / upstream | Job controller alone (ms per firing) |\n\
         |---|---|---|---|---|\n",
        report.cronjobs, report.minutes
    );
    for r in &report.rounds {
        text.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.2}x | {:.2} |\n",
            r.round, r.upstream_ms, r.shardcron_ms, r.ratio, r.kcm_base_ms
        ));
    }
    text.push_str(&format!(
        "| all | {:.2} | {:.2} | **{:.2}x** | |\n\n",
        report.upstream_ms, report.shardcron_ms, report.ratio
    ));
    text.push_str("| round | side | slots | answered | missed | duplicates | kube-controller-manager CPU s | shardcron CPU s | the CronJob controller's requests per firing |\n|---|---|---|---|---|---|---|---|---|\n");
    for p in &report.phases {
        let s = &p.observation.slots;
        let schema = apimetrics::schema_of(p.cpu.side == Side::Upstream);
        let requests = p.observation.api.get(schema).map_or(0.0, |l| l.requests);
        text.push_str(&format!(
            "| {} | {:?} | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |\n",
            p.cpu.round,
            p.cpu.side,
            s.expected,
            s.answered,
            s.missed,
            s.duplicates,
            p.cpu.kcm_cpu_seconds,
            p.cpu.shardcron_cpu_seconds,
            requests / p.cpu.firings()
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

    fn phase(round: usize, side: Side, firings: usize, kcm: f64, shardcron: f64) -> PhaseCpu {
        PhaseCpu {
            round,
            side,
            firings,
            kcm_cpu_seconds: kcm,
            shardcron_cpu_seconds: shardcron,
        }
    }

    #[test]
    fn rounds_alternate_which_side_goes_first() {
        assert_eq!(order(0), [Side::Upstream, Side::Shardcron]);
        assert_eq!(order(1), [Side::Shardcron, Side::Upstream]);
        assert_eq!(order(2), order(0));
    }

    #[test]
    fn upstream_pays_what_kube_controller_manager_spends_beyond_its_job_controller() {
        let phases = [
            // 1,000 firings each: KCM 5 s with the CronJob controller, 3 s
            // without; shardcron 1 s.
            phase(0, Side::Upstream, 1000, 5.0, 0.0),
            phase(0, Side::Shardcron, 1000, 3.0, 1.0),
            // Second round, fewer firings answered by upstream: per firing.
            phase(1, Side::Shardcron, 1000, 3.0, 1.5),
            phase(1, Side::Upstream, 500, 2.5, 0.0),
        ];
        let rounds = costs(&phases);
        assert_eq!(rounds.len(), 2);
        assert_eq!(rounds[0].kcm_base_ms, 3.0);
        assert_eq!(rounds[0].upstream_ms, 2.0);
        assert_eq!(rounds[0].shardcron_ms, 1.0);
        assert_eq!(rounds[0].ratio, 0.5);
        assert_eq!(rounds[1].upstream_ms, 2.0);
        assert_eq!(rounds[1].ratio, 0.75);
        let all = overall(&phases);
        assert_eq!(all.round, 2);
        // (5 + 2.5) s over 1,500 firings less 6 s over 2,000.
        assert!((all.upstream_ms - 2.0).abs() < 1e-9);
        assert!((all.shardcron_ms - 1.25).abs() < 1e-9);
    }

    #[test]
    fn a_round_without_both_sides_gives_no_figure() {
        assert!(costs(&[phase(0, Side::Upstream, 10, 1.0, 0.0)]).is_empty());
    }
}
