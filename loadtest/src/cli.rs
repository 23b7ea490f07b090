//! The command line: each subcommand, its flags and their parsers.

use crate::compare::{Mode, ScenarioName, Variant};
use crate::{dataset, mix, observe};
use clap::{Parser, Subcommand};
use shardcron::reconcile::CronJobKind;
use std::path::PathBuf;

#[derive(Parser)]
#[command(version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Creates CronJobs (and their namespaces, lt-<group>-<i>) in the
    /// cluster of $KUBECONFIG.
    Create {
        #[arg(long, value_enum)]
        mix: mix::Mix,
        #[arg(long)]
        count: usize,
        #[arg(long, default_value_t = 10)]
        namespaces: usize,
        #[arg(long, default_value = "a")]
        group: String,
        /// The minute of the hour of `herd` and `tenants`.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..60))]
        minute: u8,
        /// `daily` fires in none of this hour and the next two.
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..24))]
        hour: u8,
        /// CronJob creations per second.
        #[arg(long, default_value_t = 100.0)]
        qps: f64,
    },
    /// Prints the etcd data directory of a kept data set (S7's), making it
    /// first if it is not in the cache: a fresh control plane, the mix
    /// created at --qps, etcd stopped and its data moved to the cache.
    Dataset {
        #[arg(long, value_enum, default_value = "million")]
        mix: mix::Mix,
        #[arg(long, default_value_t = 1_000_000)]
        count: usize,
        #[arg(long, default_value_t = 1000)]
        namespaces: usize,
        /// CronJob creations per second (at most 128 in flight).
        #[arg(long, default_value_t = dataset::MAKE_QPS)]
        qps: f64,
    },
    /// Watches the loadtest CronJobs' Jobs for whole minutes (from the next
    /// minute boundary) and prints the observation as JSON.
    Observe {
        #[arg(long, default_value_t = 5)]
        minutes: u32,
        /// Seconds after the last slot that late Jobs still count.
        #[arg(long, default_value_t = 60)]
        tail: u64,
        /// A process to measure, as NAME=PID (repeat).
        #[arg(long = "process", value_parser = parse_process)]
        processes: Vec<observe::Process>,
    },
    /// Runs a scenario against each controller, each on a fresh local
    /// control plane, and writes report.{json,md} and PNG plots to --out.
    Compare {
        #[arg(long, value_enum)]
        scenario: ScenarioName,
        #[arg(long, value_enum, default_value = "short")]
        mode: Mode,
        /// Comma-separated: upstream, shardcron-N. Default: upstream,
        /// shardcron-1 and shardcron-3 (S4: upstream and shardcron-3, as a
        /// failover needs a replica to take over; S6: shardcron-1,
        /// shardcron-2 and shardcron-4; S8: shardcron-1 and shardcron-3).
        #[arg(long, value_delimiter = ',')]
        controllers: Vec<Variant>,
        /// Minute slots watched, instead of the mode's (S1 and S4, whose
        /// CronJobs fire every minute or every hour; S6 and S8: each run's
        /// window).
        #[arg(long)]
        minutes: Option<u32>,
        /// Client QPS of every controller (upstream's default: 20).
        #[arg(long, default_value_t = 20.0)]
        qps: f64,
        /// Client burst of every controller (upstream's default: 30).
        #[arg(long, default_value_t = 30)]
        burst: u32,
        /// CronJob creations per second while setting up (S7's data set is
        /// made at the `dataset` command's rate).
        #[arg(long, default_value_t = 200.0)]
        create_qps: f64,
        /// Default: loadtest/results/<scenario>-<mode>-qps<qps>.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Default: the `shardcron` next to this binary.
        #[arg(long)]
        shardcron_bin: Option<PathBuf>,
        /// Fail (exit 1) on any missed or duplicate slot.
        #[arg(long)]
        assert_complete: bool,
        /// Keep the runs already in --out (`<controller>.json`, same
        /// scenario size and client limits) and run only the others: a
        /// comparison cut short is finished where it stopped.
        #[arg(long)]
        resume: bool,
        /// Copy every run's logs (control plane and replicas) to
        /// `<out>/logs-<controller>`, not only a failed run's.
        #[arg(long)]
        keep_logs: bool,
        /// Herds (S2, S5) with shardcron: one more replica joins the ring
        /// 2 s into the herd; the report gives how long the hand-off took
        /// on the losing side (publication) and the gaining side (wait).
        #[arg(long)]
        join_during_herd: bool,
        /// S8 without its flood: the reference for the quiet tenants'
        /// figures (output under `<scenario>-<mode>-qps<qps>-no-flood`).
        #[arg(long)]
        no_flood: bool,
        /// S8's flood without the attacks on a replica's memory and
        /// backlog (megabyte templates, a deleted namespace): S8 as it was
        /// before them (output under `...-no-attacks`).
        #[arg(long)]
        no_attacks: bool,
        /// Every CronJob spread over this window (a Go duration, `5m`:
        /// the `shardcron.io/spread` annotation, which kube-controller-
        /// manager ignores); skew then counts from each CronJob's offset.
        #[arg(long, value_parser = spread_seconds)]
        spread: Option<u32>,
        /// S7 without its rolling restart (every replica stopped by
        /// SIGTERM and started again, one at a time, after the kill and
        /// the rejoin).
        #[arg(long)]
        no_rolling_restart: bool,
        /// kube-apiserver without `ShardedListAndWatch`, as on the clusters
        /// users run: each replica gets every CronJob (`...-unsharded`).
        #[arg(long)]
        without_sharded_watch: bool,
        /// The CronJobs shardcron serves: `batch` (batch/v1), or
        /// `shardcron`, the CRD of managed control planes (`deploy/managed`,
        /// the gate off: custom resources' watches are never sharded;
        /// output under `...-crd`). Upstream's runs stay batch/v1.
        #[arg(long, value_parser = cronjob_kind, default_value = "batch")]
        cronjob_kind: CronJobKind,
    },
    /// Tracing overhead: CPU per firing of a replica exporting every span
    /// versus one with tracing off, side by side on one control plane
    /// (with --variant: any flag's cost, the same way).
    Overhead {
        #[arg(long, default_value_t = 150)]
        count: usize,
        #[arg(long, default_value_t = 5)]
        minutes: u32,
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long)]
        shardcron_bin: Option<PathBuf>,
        /// Instead of tracing on against off: both untraced, the second
        /// with these extra arguments (e.g. "--threads 1").
        #[arg(long, allow_hyphen_values = true)]
        variant: Option<String>,
        /// Instead of tracing on against off: both untraced, the second
        /// running this build (a change against the build before it, side
        /// by side; with --variant, the variant's arguments too).
        #[arg(long)]
        variant_bin: Option<PathBuf>,
        /// Each side's CronJobs: `every-minute`, or `skipping` (a third of
        /// the slots skipped by Forbid and a starting deadline).
        #[arg(long, value_enum, default_value_t = mix::Mix::EveryMinute)]
        mix: mix::Mix,
    },
    /// CPU per firing against upstream's, like with like: on one control
    /// plane, beside kube-controller-manager with only its Job controller,
    /// phases take turns: a second kube-controller-manager with only its
    /// CronJob controller, then one shardcron replica (order alternating
    /// by round).
    FiringCost {
        #[arg(long, default_value_t = 200)]
        count: usize,
        /// Minute slots watched per phase.
        #[arg(long, default_value_t = 5)]
        minutes: u32,
        /// Rounds counted (each one phase of each side).
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        /// Rounds run first and not counted: each side's first phase on a
        /// fresh control plane is not like its later ones.
        #[arg(long, default_value_t = 1)]
        warmup_rounds: usize,
        /// The Job controller's `--kube-api-qps` (burst 1.5 times): high
        /// enough that a phase's Jobs end within it (at 20 they ended 10-55 s
        /// after their slot, each phase recording some of the previous
        /// phase's ends).
        #[arg(long, default_value_t = 200)]
        job_controller_qps: u32,
        /// Default: loadtest/results/firing-cost.
        #[arg(long)]
        out: Option<PathBuf>,
        #[arg(long)]
        shardcron_bin: Option<PathBuf>,
    },
}

pub fn parse_process(text: &str) -> Result<observe::Process, String> {
    let (name, pid) = text.split_once('=').ok_or("expected NAME=PID")?;
    let pid = pid.parse().map_err(|_| format!("not a pid: {pid:?}"))?;
    Ok(observe::Process {
        name: name.to_owned(),
        pid,
    })
}

/// `--cronjob-kind`: `batch` or `shardcron`.
pub fn cronjob_kind(name: &str) -> Result<CronJobKind, String> {
    CronJobKind::ALL
        .into_iter()
        .find(|kind| kind.name() == name)
        .ok_or_else(|| format!("'{name}' is neither batch nor shardcron"))
}

/// `--spread`: a Go duration of 1 s to a day, in whole seconds.
pub fn spread_seconds(value: &str) -> Result<u32, String> {
    let nanos = shardcron::schedule::parse_go_duration(value).map_err(|e| e.to_string())?;
    u32::try_from(nanos / 1_000_000_000)
        .ok()
        .filter(|s| (1..=86_400).contains(s))
        .ok_or_else(|| format!("{value:?}: a duration from 1s to 24h"))
}
