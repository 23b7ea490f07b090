//! S7, a million CronJobs: shardcron with N replicas on a kept data set
//! (`crate::dataset`, brought back with `deploy/local/up --etcd-from`).
//!
//! Each run: the control plane restored (timed) and left until it is
//! quiet ([`QUIET_CPU`] for 30 s: kube-controller-manager's informers
//! read every CronJob once it starts), N replicas started
//! together (until every one is ready: all its CronJobs armed), 20 s to
//! settle, then whole minutes of slots watched. One second before the
//! middle slot, the first replica gets SIGKILL: the report gives how long
//! the survivors took to run every CronJob again (their `/debug/shards`),
//! and the slots from then on of the CronJobs it owned beside the others'.
//! Once they do, the victim starts again (a new process with its id, a
//! join of a quarter): how long until it runs its share, the fewest
//! CronJobs running at any moment sampled meanwhile (a warm join keeps its
//! share running on the survivors while it loads), and its CronJobs' slots
//! from then on. Then (unless `--no-rolling-restart`) a rolling restart:
//! each replica in turn stopped by SIGTERM and started again, the next
//! only once it runs its share, and every CronJob's slots meanwhile.
//! Per replica, over the minutes before the kill: objects and bytes its
//! watches received, CPU, resident memory and the CronJobs it owned.
//! Beside them, what the control plane itself holds: kube-apiserver's and
//! etcd's resident memory and etcd's database size.

use crate::cluster::{self, LocalCluster};
use crate::compare::{Scenario, Settings, Variant};
use crate::dataset::{self, Shape};
use crate::mix::{self, Anchor, NAMESPACE_PREFIX};
use crate::observe::{self, JobWatch};
use crate::procstat;
use crate::report::{MIB, ms};
use crate::scaleout::{ReplicaFigures, WindowStart};
use crate::slots::{self, CronJobSeen, JobSeen, SlotSummary, percentile};
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use shardcron_harness::Replica;
use shardcron_harness::cluster::UpOptions;
use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// After every replica is ready, this long passes before the window opens.
const SETTLE: Duration = Duration::from_secs(20);
/// Before the replicas start, kube-apiserver and kube-controller-manager
/// together use less than this many CPU seconds a second over
/// [`QUIET_WINDOWS`] windows of [`QUIET_WINDOW`] in a row (waited for at
/// most [`QUIET_WITHIN`]): the controller manager's own start (its garbage
/// collector's and quota controller's informers reading 10^6 CronJobs,
/// about 70 s alone) had overlapped the replicas' first loads by chance,
/// 55 s in one run and 106-124 s in the next of the same build. One quiet
/// window was not enough: the manager can be quiet for 5 s before those
/// lists start (2026-12-02: two runs of four started the replicas after
/// 5 s, and the manager's caches synced 3.5 minutes later, beside the
/// loads, against about 70 s alone in the other two).
const QUIET_CPU: f64 = 0.3;
const QUIET_WINDOW: Duration = Duration::from_secs(5);
const QUIET_WINDOWS: u32 = 6;
const QUIET_WITHIN: Duration = Duration::from_secs(300);
/// The longest the survivors may take to run the victim's CronJobs.
const REARM_WITHIN: Duration = Duration::from_secs(900);

/// What the kill cost.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Handover {
    pub victim: String,
    /// CronJobs the victim ran just before the kill.
    pub victim_cronjobs: usize,
    /// From the kill until the survivors run every CronJob (the sum of
    /// their running actors is the count and none waits); `None`: not
    /// within [`REARM_WITHIN`].
    pub rearm_seconds: Option<f64>,
    /// What the survivors' `/debug/shards` said meanwhile, each change once.
    #[serde(default)]
    pub steps: Vec<HandoverStep>,
    /// The slot one second after the kill (unix seconds).
    pub kill_slot: i64,
    /// The victim's CronJobs' slots from `kill_slot` to the window's end.
    pub victim_slots: SlotSummary,
    /// Everyone else's, over the same minutes.
    pub others_slots: SlotSummary,
    /// CronJob watches kube-apiserver closed from the kill until the
    /// survivors ran everything (or gave up): [`terminated_cronjob_watchers`].
    #[serde(default)]
    pub terminated_watchers: f64,
    /// The victim started again once the survivors ran everything.
    #[serde(default)]
    pub rejoin: Option<Rejoin>,
    /// Then every replica restarted gracefully, one after the other.
    #[serde(default)]
    pub rolling: Option<RollingRestart>,
    /// kube-apiserver's resident high-water mark at the end (after the
    /// rejoin and any rolling restart): its peak in the steady figures is
    /// read before the kill, and the take-over's and rollout's loads go
    /// higher (0: not read, a run of an earlier harness).
    #[serde(default)]
    pub apiserver_peak_rss_bytes: u64,
}

/// Every replica stopped by SIGTERM and started again, one at a time, each
/// running its share again before the next is stopped.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RollingRestart {
    /// The first SIGTERM and the last replica's return (unix seconds).
    pub started_at: i64,
    pub ended_at: i64,
    pub steps: Vec<RestartStep>,
    /// Every CronJob's slots from the first one after the first SIGTERM to
    /// the last one before the end, plus a minute.
    pub slots: SlotSummary,
}

/// One replica's turn in a rolling restart.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RestartStep {
    pub replica: String,
    /// When it was sent SIGTERM (unix seconds; 0 in runs before 2026-11-29).
    #[serde(default)]
    pub stopped_at: i64,
    /// From SIGTERM until it exited (0).
    pub stop_seconds: f64,
    /// From its start until it ran its share ([`wait_for_share`]); `None`:
    /// not within [`REARM_WITHIN`].
    pub back_seconds: Option<f64>,
    /// From its start until its `/readyz` answered 200, which a rollout
    /// waits for before it stops the next replica (the share armed and,
    /// joining serving peers, the standby entries loaded); `None`: not
    /// within [`REARM_WITHIN`], or not measured (runs before 2026-11-29).
    #[serde(default)]
    pub ready_seconds: Option<f64>,
    pub fewest_running: usize,
}

/// The victim's return: a join of about a quarter of the CronJobs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Rejoin {
    /// When it was started (unix seconds).
    pub started_at: i64,
    /// From its start until it runs CronJobs, every CronJob runs once in
    /// all and none waits; `None`: not within [`REARM_WITHIN`].
    pub seconds: Option<f64>,
    /// The fewest CronJobs running (all replicas' `/debug/shards`, read one
    /// after the other every 500 ms) at any sample meanwhile.
    pub fewest_running: usize,
    /// CronJobs it ran at the end.
    pub cronjobs: usize,
    /// Their slots from the first one after its start to the window's end.
    pub slots: SlotSummary,
}

/// A control plane process, read at the end of the steady minutes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PlaneFigures {
    pub apiserver_rss_bytes: u64,
    pub apiserver_peak_rss_bytes: u64,
    pub etcd_rss_bytes: u64,
    /// `etcd_mvcc_db_total_size_in_bytes`.
    pub etcd_db_bytes: f64,
    /// CronJob watches kube-apiserver had closed since it started:
    /// [`terminated_cronjob_watchers`].
    #[serde(default)]
    pub terminated_watchers: f64,
}

/// One variant's run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MillionRun {
    pub variant: String,
    pub replicas: usize,
    pub cronjobs: usize,
    /// `deploy/local/up --etcd-from` until the control plane served.
    pub restore_seconds: f64,
    /// From then until kube-apiserver and kube-controller-manager were
    /// quiet ([`QUIET_CPU`] over [`QUIET_WINDOWS`] windows), before the
    /// replicas started.
    #[serde(default)]
    pub settle_seconds: f64,
    /// From the replicas' start until every one was ready.
    pub ready_seconds: f64,
    /// Slots due in `[window_from, window_to]` (unix seconds) are counted.
    pub window_from: i64,
    pub window_to: i64,
    /// The steady minutes' length, over which the replicas are measured
    /// (from the window's start to the kill, or to its end).
    pub steady_seconds: f64,
    /// Per replica over the steady minutes; `ready_seconds` is the run's.
    pub per_replica: Vec<ReplicaFigures>,
    /// CronJobs each replica owned at the end of the steady minutes.
    pub owned: Vec<usize>,
    pub plane: PlaneFigures,
    /// The slots before the kill (all of them when nothing is killed).
    pub steady_slots: SlotSummary,
    pub handover: Option<Handover>,
    pub watch_errors: usize,
}

impl MillionRun {
    /// Resident bytes per CronJob, all replicas together.
    pub fn bytes_per_cronjob(&self) -> f64 {
        let rss: u64 = self.per_replica.iter().map(|r| r.rss_bytes).sum();
        rss as f64 / self.cronjobs.max(1) as f64
    }
}

/// `/debug/shards`, the part a run reads.
#[derive(Debug, Deserialize)]
struct ShardCounts {
    running: usize,
    waiting: usize,
    owned: usize,
    #[serde(default)]
    waiting_for: BTreeMap<String, usize>,
    #[serde(default)]
    loads_in_flight: usize,
    #[serde(default)]
    keys: Option<Vec<String>>,
}

/// The survivors together at one moment of a hand-off.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HandoverStep {
    /// Seconds since the kill (the first moment this state was seen).
    pub at_seconds: f64,
    pub running: usize,
    pub owned: usize,
    /// Waiting keys by what they wait for (`/debug/shards`' `waiting_for`).
    pub waiting_for: BTreeMap<String, usize>,
    pub loads_in_flight: usize,
}

impl HandoverStep {
    fn of(at_seconds: f64, survivors: &[ShardCounts]) -> Self {
        let mut waiting_for = BTreeMap::new();
        for survivor in survivors {
            for (reason, keys) in &survivor.waiting_for {
                *waiting_for.entry(reason.clone()).or_default() += keys;
            }
        }
        Self {
            at_seconds,
            running: survivors.iter().map(|s| s.running).sum(),
            owned: survivors.iter().map(|s| s.owned).sum(),
            waiting_for,
            loads_in_flight: survivors.iter().map(|s| s.loads_in_flight).sum(),
        }
    }

    /// The same state, whenever it was seen.
    fn same_as(&self, other: &Self) -> bool {
        Self {
            at_seconds: 0.0,
            ..self.clone()
        } == Self {
            at_seconds: 0.0,
            ..other.clone()
        }
    }
}

/// Runs S7 with each variant, each on the data set brought back afresh.
pub async fn run(
    scenario: &Scenario,
    variants: &[Variant],
    settings: &Settings,
) -> anyhow::Result<Vec<MillionRun>> {
    if variants.contains(&Variant::Upstream) {
        bail!("S7 measures shardcron's replicas: pass shardcron-N controllers only");
    }
    std::fs::create_dir_all(&settings.out)?;
    let shape = Shape {
        mix: scenario.mix,
        count: scenario.count,
        namespaces: scenario.namespaces,
    };
    let data = dataset::ensure(shape, dataset::MAKE_QPS, &settings.out).await?;
    let mut runs = Vec::new();
    for variant in variants {
        let Variant::Shardcron(n) = *variant else {
            continue;
        };
        let kept = settings.out.join(format!("{variant}.json"));
        if settings.resume
            && let Some(run) = std::fs::read(&kept)
                .ok()
                .and_then(|b| serde_json::from_slice::<MillionRun>(&b).ok())
                .filter(|r| r.cronjobs == scenario.count)
        {
            runs.push(run);
            continue;
        }
        eprintln!("million: {variant} on {} CronJobs", scenario.count);
        let started = Instant::now();
        let options = UpOptions {
            without_jaeger: true,
            etcd_from: Some(data.clone()),
            sharded_watch: settings.sharded_watch,
            ..UpOptions::default()
        };
        let cluster =
            LocalCluster::up_with(&settings.out.join(format!("cluster-{variant}")), options)
                .await?;
        let restore_seconds = started.elapsed().as_secs_f64();
        let result = run_on(&cluster, scenario, n, settings, restore_seconds).await;
        let run = cluster
            .finish(
                Vec::new(),
                result,
                &settings.out.join(format!("logs-{variant}")),
                settings.keep_logs,
            )
            .await?;
        eprintln!("million: {}", line(&run));
        std::fs::write(&kept, serde_json::to_vec_pretty(&run)?)?;
        runs.push(run);
    }
    Ok(runs)
}

async fn run_on(
    cluster: &LocalCluster,
    scenario: &Scenario,
    n: usize,
    settings: &Settings,
    restore_seconds: f64,
) -> anyhow::Result<MillionRun> {
    let credentials = cluster.shardcron_credentials().await?;
    let watch = JobWatch::start(&cluster.client, NAMESPACE_PREFIX);
    let settle_seconds = wait_for_a_quiet_plane(cluster).await?;
    let started = Instant::now();
    let mut replicas = cluster
        .start_shardcron(
            &settings.shardcron_bin,
            n,
            &credentials,
            settings.limits,
            "",
        )
        .await?;
    let ready_seconds = started.elapsed().as_secs_f64();
    let outcome = watch_and_kill(
        cluster,
        scenario,
        &mut replicas,
        ready_seconds,
        settings.rolling_restart,
    )
    .await;
    let mut stopped = Ok(());
    for replica in replicas.into_iter().filter(Replica::is_running) {
        stopped = stopped.and(cluster::stop(replica).await);
    }
    let (mut run, kill) = outcome?;
    stopped?;
    run.restore_seconds = restore_seconds;
    run.settle_seconds = settle_seconds;

    let (jobs, watch_errors) = watch.take();
    run.watch_errors = watch_errors;
    // The data set was made from exactly this plan (its key pins the shape),
    // so the CronJobs need not be listed again.
    let cronjobs: Vec<CronJobSeen> = mix::plan(
        scenario.mix,
        scenario.count,
        scenario.namespaces,
        "a",
        Anchor::default(),
    )
    .into_iter()
    .map(|p| CronJobSeen {
        namespace: p.namespace,
        name: p.name,
        schedule: p.schedule,
        spread_offset: 0,
    })
    .collect();
    match kill {
        None => {
            run.steady_slots = slots::summarize(&cronjobs, &jobs, run.window_from, run.window_to)?;
        }
        Some(mut kill) => {
            run.steady_slots = slots::summarize(
                &cronjobs,
                &jobs,
                run.window_from,
                kill.handover.kill_slot - 1,
            )?;
            if let Some(rejoin) = &mut kill.handover.rejoin {
                let back = |namespace: &str, name: &str| {
                    kill.rejoin_keys.contains(&format!("{namespace}/{name}"))
                };
                let theirs: Vec<CronJobSeen> = cronjobs
                    .iter()
                    .filter(|c| back(&c.namespace, &c.name))
                    .cloned()
                    .collect();
                let their_jobs: Vec<JobSeen> = jobs
                    .iter()
                    .filter(|j| back(&j.namespace, &j.cronjob))
                    .cloned()
                    .collect();
                let first_slot = (rejoin.started_at / 60 + 1) * 60;
                rejoin.slots = slots::summarize(&theirs, &their_jobs, first_slot, run.window_to)?;
            }
            if let Some(rolling) = &mut kill.handover.rolling {
                let (from, to) = rolling_window(rolling);
                rolling.slots = slots::summarize(&cronjobs, &jobs, from, to)?;
            }
            let victim =
                |namespace: &str, name: &str| kill.keys.contains(&format!("{namespace}/{name}"));
            let (victims, others): (Vec<CronJobSeen>, Vec<CronJobSeen>) = cronjobs
                .into_iter()
                .partition(|c| victim(&c.namespace, &c.name));
            // Each side's Jobs only: another side's would count as off schedule.
            let (victim_jobs, other_jobs): (Vec<JobSeen>, Vec<JobSeen>) = jobs
                .into_iter()
                .partition(|j| victim(&j.namespace, &j.cronjob));
            kill.handover.victim_slots = slots::summarize(
                &victims,
                &victim_jobs,
                kill.handover.kill_slot,
                run.window_to,
            )?;
            kill.handover.others_slots =
                slots::summarize(&others, &other_jobs, kill.handover.kill_slot, run.window_to)?;
            run.handover = Some(kill.handover);
        }
    }
    Ok(run)
}

/// The kill and the rejoin, while their slots are not yet summarized.
struct Kill {
    handover: Handover,
    keys: HashSet<String>,
    rejoin_keys: HashSet<String>,
}

/// Watches the window's minutes, kills the first replica one second
/// before the middle slot (when there is a survivor), and measures.
async fn watch_and_kill(
    cluster: &LocalCluster,
    scenario: &Scenario,
    replicas: &mut [Replica],
    ready_seconds: f64,
    rolling: bool,
) -> anyhow::Result<(MillionRun, Option<Kill>)> {
    tokio::time::sleep(SETTLE).await;
    let (window_from, window_to) = observe::whole_minutes(5, scenario.minutes);
    let kill_slot =
        (replicas.len() > 1).then(|| window_from + 60 * i64::from(scenario.minutes / 2));
    let steady_end_ms = kill_slot.unwrap_or(window_to + 60) * 1000 - 1000;
    let pids: Vec<u32> = replicas
        .iter()
        .map(cluster::pid)
        .collect::<Result<_, _>>()?;
    observe::sleep_until_ms(window_from * 1000).await;
    let starts: Vec<WindowStart> = replicas
        .iter()
        .zip(&pids)
        .map(|(replica, pid)| WindowStart::read(replica, *pid))
        .collect::<Result<_, _>>()?;
    // Read just before the kill (or the window's end): the steady figures.
    observe::sleep_until_ms(steady_end_ms - 2000).await;
    let steady_seconds = (observe::unix_ms() - window_from * 1000) as f64 / 1000.0;
    let mut per_replica = Vec::new();
    let mut owned = Vec::new();
    let mut victim_keys = HashSet::new();
    for (i, replica) in replicas.iter().enumerate() {
        per_replica.push(ReplicaFigures::measure(
            replica,
            pids[i],
            &starts[i],
            steady_seconds,
            ready_seconds,
        )?);
        let wanted_keys = i == 0 && kill_slot.is_some();
        let shards: ShardCounts = replica
            .debug_json(if wanted_keys {
                "/debug/shards?keys=true"
            } else {
                "/debug/shards"
            })
            .with_context(|| format!("{}'s /debug/shards", replica.id()))?;
        owned.push(shards.owned);
        if wanted_keys {
            victim_keys = shards.keys.unwrap_or_default().into_iter().collect();
        }
    }
    let plane = plane_figures(cluster).await?;
    let run = MillionRun {
        variant: format!("shardcron-{}", replicas.len()),
        replicas: replicas.len(),
        cronjobs: scenario.count,
        restore_seconds: 0.0,
        settle_seconds: 0.0,
        ready_seconds,
        window_from,
        window_to,
        steady_seconds,
        per_replica,
        owned,
        plane,
        steady_slots: SlotSummary::default(),
        handover: None,
        watch_errors: 0,
    };
    let Some(kill_slot) = kill_slot else {
        observe::sleep_until_ms((window_to + 60) * 1000).await;
        return Ok((run, None));
    };
    observe::sleep_until_ms(steady_end_ms).await;
    let victim = replicas[0].id().to_owned();
    replicas[0].kill();
    let killed = Instant::now();
    eprintln!(
        "million: killed {victim} (it ran {} CronJobs)",
        victim_keys.len()
    );
    let mut rearm_seconds = None;
    let mut steps: Vec<HandoverStep> = Vec::new();
    while killed.elapsed() < REARM_WITHIN {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let Some(counts) = shards_of(&replicas[1..]) else {
            continue;
        };
        let step = HandoverStep::of(killed.elapsed().as_secs_f64(), &counts);
        if steps.last().is_none_or(|last| !last.same_as(&step)) {
            steps.push(step);
        }
        if counts.iter().map(|s| s.running).sum::<usize>() == scenario.count
            && counts.iter().all(|s| s.waiting == 0)
        {
            rearm_seconds = Some(killed.elapsed().as_secs_f64());
            break;
        }
    }
    eprintln!("million: the survivors ran every CronJob again after {rearm_seconds:?} s");
    let terminated_watchers =
        terminated_cronjob_watchers(&cluster.client).await? - run.plane.terminated_watchers;
    let (rejoin, rejoin_keys) = rejoin(replicas, scenario.count).await?;
    // The slots after the kill, and a minute for the late ones.
    observe::sleep_until_ms((window_to + 60) * 1000).await;
    let rolling = if rolling {
        let restart = rolling_restart(replicas, scenario.count).await?;
        // Its last minute's slots, and a minute for the late ones.
        observe::sleep_until_ms(rolling_window(&restart).1 * 1000 + 60_000).await;
        Some(restart)
    } else {
        None
    };
    let apiserver_peak_rss_bytes = procstat::sample(cluster.pid("kube-apiserver")?)?.peak_rss_bytes;
    let handover = Handover {
        victim,
        victim_cronjobs: victim_keys.len(),
        rearm_seconds,
        steps,
        kill_slot,
        victim_slots: SlotSummary::default(),
        others_slots: SlotSummary::default(),
        terminated_watchers,
        rejoin: Some(rejoin),
        rolling,
        apiserver_peak_rss_bytes,
    };
    Ok((
        run,
        Some(Kill {
            handover,
            keys: victim_keys,
            rejoin_keys,
        }),
    ))
}

/// Every one of `replicas`' `/debug/shards`, if every one answers.
fn shards_of(replicas: &[Replica]) -> Option<Vec<ShardCounts>> {
    replicas
        .iter()
        .map(|r| r.debug_json("/debug/shards"))
        .collect()
}

/// Follows every replica's `/debug/shards` until `replicas[i]` (just
/// started) runs its share: it runs CronJobs, every CronJob runs once in
/// all, and no replica has a key waiting. Returns how long that took
/// (`None`: not within [`REARM_WITHIN`]) and the fewest CronJobs running
/// at any sample meanwhile.
async fn wait_for_share(replicas: &[Replica], i: usize, count: usize) -> (Option<f64>, usize) {
    let started = Instant::now();
    let mut fewest_running = usize::MAX;
    while started.elapsed() < REARM_WITHIN {
        tokio::time::sleep(Duration::from_millis(500)).await;
        // The others must answer; the started one's debug port comes later.
        let others: Vec<&Replica> = (replicas.iter().enumerate())
            .filter(|(j, _)| *j != i)
            .map(|(_, r)| r)
            .collect();
        let Some(others) = others
            .iter()
            .map(|r| r.debug_json::<ShardCounts>("/debug/shards"))
            .collect::<Option<Vec<_>>>()
        else {
            continue;
        };
        let back: Option<ShardCounts> = replicas[i].debug_json("/debug/shards");
        let running = others.iter().map(|s| s.running).sum::<usize>()
            + back.as_ref().map_or(0, |b| b.running);
        fewest_running = fewest_running.min(running);
        if back
            .as_ref()
            .is_some_and(|b| b.running > 0 && b.waiting == 0)
            && running == count
            && others.iter().all(|s| s.waiting == 0)
        {
            return (Some(started.elapsed().as_secs_f64()), fewest_running);
        }
    }
    (None, fewest_running)
}

/// Starts the killed replica (`replicas[0]`) again and follows every
/// replica's `/debug/shards` until it runs its share; returns the figures
/// (slots not yet summarized) and the keys it ran at the end.
async fn rejoin(
    replicas: &mut [Replica],
    count: usize,
) -> anyhow::Result<(Rejoin, HashSet<String>)> {
    let started_at = observe::unix_ms() / 1000;
    replicas[0].launch()?;
    let (seconds, fewest_running) = wait_for_share(replicas, 0, count).await;
    eprintln!(
        "million: {} ran its share again after {seconds:?} s (fewest running meanwhile {fewest_running})",
        replicas[0].id()
    );
    let keys: HashSet<String> = replicas[0]
        .debug_json::<ShardCounts>("/debug/shards?keys=true")
        .and_then(|s| s.keys)
        .unwrap_or_default()
        .into_iter()
        .collect();
    let rejoin = Rejoin {
        started_at,
        seconds,
        fewest_running,
        cronjobs: keys.len(),
        slots: SlotSummary::default(),
    };
    Ok((rejoin, keys))
}

/// The slots a rolling restart is judged on (unix seconds, both
/// included): from the first after its first SIGTERM to the first after
/// its end.
fn rolling_window(rolling: &RollingRestart) -> (i64, i64) {
    (
        (rolling.started_at / 60 + 1) * 60,
        (rolling.ended_at / 60 + 1) * 60,
    )
}

/// Restarts every replica gracefully, one after the other (SIGTERM, exit
/// 0, started again), each running its share again before the next is
/// stopped, as a Deployment's rolling update with `maxUnavailable: 1`
/// does; slots not yet summarized. It starts, as a rollout of a healthy
/// Deployment, with every replica ready: the replica started again after
/// the kill may not be yet, and a SIGTERM 3 s after it took its share back
/// (`s7-full-standby-stops`) measured that join's hand-back, not the
/// restart.
async fn rolling_restart(replicas: &mut [Replica], count: usize) -> anyhow::Result<RollingRestart> {
    for replica in replicas.iter_mut() {
        replica
            .wait_ready(REARM_WITHIN)
            .await
            .with_context(|| format!("{} ready before the rolling restart", replica.id()))?;
    }
    let started_at = observe::unix_ms() / 1000;
    let mut steps = Vec::new();
    for i in 0..replicas.len() {
        let stopping = Instant::now();
        let stopped_at = observe::unix_ms() / 1000;
        cluster::stop_gracefully(&mut replicas[i]).await?;
        let stop_seconds = stopping.elapsed().as_secs_f64();
        let launched = Instant::now();
        replicas[i].launch()?;
        let (back_seconds, fewest_running) = wait_for_share(replicas, i, count).await;
        // As a rollout: the next replica is stopped once this one is ready.
        let ready_seconds = match replicas[i].wait_ready(REARM_WITHIN).await {
            Ok(_) => Some(launched.elapsed().as_secs_f64()),
            Err(error) => {
                eprintln!("million: rolling restart: {error:#}");
                None
            }
        };
        eprintln!(
            "million: rolling restart: {} stopped in {stop_seconds:.1} s, ran its share again after {back_seconds:?} s, ready after {ready_seconds:?} s (fewest running meanwhile {fewest_running})",
            replicas[i].id()
        );
        steps.push(RestartStep {
            replica: replicas[i].id().to_owned(),
            stopped_at,
            stop_seconds,
            back_seconds,
            ready_seconds,
            fewest_running,
        });
    }
    Ok(RollingRestart {
        started_at,
        ended_at: observe::unix_ms() / 1000,
        steps,
        slots: SlotSummary::default(),
    })
}

/// Waits until the control plane is quiet ([`QUIET_CPU`] over
/// [`QUIET_WINDOWS`] windows in a row); how long it took.
async fn wait_for_a_quiet_plane(cluster: &LocalCluster) -> anyhow::Result<f64> {
    let started = Instant::now();
    let cpu = || -> anyhow::Result<f64> {
        let apiserver = procstat::sample(cluster.pid("kube-apiserver")?)?;
        let manager = procstat::sample(cluster.pid("kube-controller-manager")?)?;
        Ok(apiserver.cpu_seconds + manager.cpu_seconds)
    };
    let mut quiet_windows = 0;
    loop {
        let before = cpu()?;
        tokio::time::sleep(QUIET_WINDOW).await;
        let rate = (cpu()? - before) / QUIET_WINDOW.as_secs_f64();
        let waited = started.elapsed();
        quiet_windows = if rate < QUIET_CPU {
            quiet_windows + 1
        } else {
            0
        };
        if quiet_windows >= QUIET_WINDOWS || waited >= QUIET_WITHIN {
            eprintln!(
                "million: the control plane used {rate:.2} CPU s a second after {:.0} s; starting the replicas",
                waited.as_secs_f64()
            );
            return Ok(waited.as_secs_f64());
        }
    }
}

/// kube-apiserver's and etcd's memory, etcd's database size.
async fn plane_figures(cluster: &LocalCluster) -> anyhow::Result<PlaneFigures> {
    let apiserver = procstat::sample(cluster.pid("kube-apiserver")?)?;
    let etcd = procstat::sample(cluster.pid("etcd")?)?;
    let port = cluster
        .env("SHARDCRON_ETCD_PORT")
        .context("no SHARDCRON_ETCD_PORT in the cluster's env file")?;
    let (_, metrics) =
        shardcron_harness::net::http_get(format!("127.0.0.1:{port}").parse()?, "/metrics")
            .context("etcd's /metrics")?;
    let etcd_db_bytes =
        shardcron_harness::replica::sample(&metrics, "etcd_mvcc_db_total_size_in_bytes")
            .unwrap_or(0.0);
    Ok(PlaneFigures {
        apiserver_rss_bytes: apiserver.rss_bytes,
        apiserver_peak_rss_bytes: apiserver.peak_rss_bytes,
        etcd_rss_bytes: etcd.rss_bytes,
        etcd_db_bytes,
        terminated_watchers: terminated_cronjob_watchers(&cluster.client).await?,
    })
}

/// kube-apiserver's `apiserver_terminated_watchers_total` for batch/v1
/// CronJobs: watches it closed because their queue of changes stayed full,
/// which a streaming list's initial events cause (it takes none of its
/// queue until they are sent: `src/apiserver/bulk/`). Absent until the
/// first one: 0.
async fn terminated_cronjob_watchers(client: &kube::Client) -> anyhow::Result<f64> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let page = client
        .request_text(request)
        .await
        .context("GET /metrics from kube-apiserver")?;
    Ok(shardcron_harness::replica::sample(
        &page,
        r#"apiserver_terminated_watchers_total{group="batch",resource="cronjobs"}"#,
    )
    .unwrap_or(0.0))
}

/// One run in a line, for the progress log.
pub fn line(run: &MillionRun) -> String {
    let rearm = run
        .handover
        .as_ref()
        .and_then(|h| h.rearm_seconds)
        .map_or_else(|| "-".to_owned(), |s| format!("{s:.1} s"));
    format!(
        "{}: restored in {:.0} s, quiet after {:.0} s more, ready in {:.1} s, {:.0} bytes per CronJob, largest replica {:.0} MiB, kube-apiserver {:.0} MiB, {} of {} steady slots missed, re-armed after {rearm}",
        run.variant,
        run.restore_seconds,
        run.settle_seconds,
        run.ready_seconds,
        run.bytes_per_cronjob(),
        run.per_replica
            .iter()
            .map(|r| r.rss_bytes)
            .max()
            .unwrap_or(0) as f64
            / MIB,
        run.plane.apiserver_rss_bytes as f64 / MIB,
        run.steady_slots.missed,
        run.steady_slots.expected,
    )
}

fn skew(summary: &SlotSummary) -> String {
    let s = |p| ms(percentile(&summary.skews_ms, p));
    format!("{} / {} / {}", s(50.0), s(99.0), s(100.0))
}

/// S7's tables: the runs side by side, then the hand-offs.
pub fn markdown(scenario: &Scenario, runs: &[MillionRun]) -> String {
    let mut out = format!(
        "# S7: {} CronJobs ({:?} mix, {} namespaces), {} minutes watched\n\n",
        scenario.count, scenario.mix, scenario.namespaces, scenario.minutes
    );
    out.push_str("| replicas | restored s | ready s | RSS largest MiB | RSS sum MiB | bytes per CronJob | owned largest / mean | CronJob objects largest | CPU ms/s largest | kube-apiserver RSS MiB (peak) | etcd RSS MiB | etcd db MiB | steady slots | missed | duplicates | skew p50 / p99 / max s |\n");
    out.push_str(
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for run in runs {
        let rss_max = run
            .per_replica
            .iter()
            .map(|r| r.rss_bytes)
            .max()
            .unwrap_or(0);
        let rss_sum: u64 = run.per_replica.iter().map(|r| r.rss_bytes).sum();
        let owned_max = run.owned.iter().copied().max().unwrap_or(0);
        let owned_mean = run.owned.iter().sum::<usize>() as f64 / run.owned.len().max(1) as f64;
        let objects = run
            .per_replica
            .iter()
            .map(|r| r.events.get("cronjobs").copied().unwrap_or(0.0))
            .fold(0.0, f64::max);
        let cpu = run.per_replica.iter().map(|r| r.cpu).fold(0.0, f64::max);
        let s = &run.steady_slots;
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.1} | {:.0} | {:.0} | {:.0} | {:.2} | {:.0} | {:.1} | {:.0} ({:.0}) | {:.0} | {:.0} | {} | {} | {} | {} |",
            run.replicas,
            run.restore_seconds,
            run.ready_seconds,
            rss_max as f64 / MIB,
            rss_sum as f64 / MIB,
            run.bytes_per_cronjob(),
            owned_max as f64 / owned_mean.max(1.0),
            objects,
            cpu * 1000.0,
            run.plane.apiserver_rss_bytes as f64 / MIB,
            run.plane.apiserver_peak_rss_bytes as f64 / MIB,
            run.plane.etcd_rss_bytes as f64 / MIB,
            run.plane.etcd_db_bytes / MIB,
            s.expected,
            s.missed,
            s.duplicates,
            skew(s),
        );
    }
    out.push_str("\n| replicas | killed | its CronJobs | survivors ran them all after s | its slots after | missed | duplicates | skew p50 / p99 / max s | the others' slots | missed | skew p50 / p99 / max s | CronJob watches the server closed (run, hand-off) |\n");
    out.push_str("|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---|---|\n");
    for run in runs {
        let Some(h) = &run.handover else { continue };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0}, {:.0} |",
            run.replicas,
            h.victim,
            h.victim_cronjobs,
            h.rearm_seconds
                .map_or_else(|| "not within 900".to_owned(), |s| format!("{s:.1}")),
            h.victim_slots.expected,
            h.victim_slots.missed,
            h.victim_slots.duplicates,
            skew(&h.victim_slots),
            h.others_slots.expected,
            h.others_slots.missed,
            skew(&h.others_slots),
            run.plane.terminated_watchers,
            h.terminated_watchers,
        );
    }
    let rejoins: Vec<(&MillionRun, &Handover, &Rejoin)> = runs
        .iter()
        .filter_map(|run| {
            let h = run.handover.as_ref()?;
            Some((run, h, h.rejoin.as_ref()?))
        })
        .collect();
    if !rejoins.is_empty() {
        out.push_str("\n| replicas | started again | its CronJobs | ran its share after s | fewest running meanwhile | its slots after | missed | duplicates | skew p50 / p99 / max s |\n");
        out.push_str("|---:|---|---:|---:|---:|---:|---:|---:|---|\n");
    }
    for (run, h, r) in rejoins {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} of {} | {} | {} | {} | {} |",
            run.replicas,
            h.victim,
            r.cronjobs,
            r.seconds
                .map_or_else(|| "not within 900".to_owned(), |s| format!("{s:.1}")),
            r.fewest_running,
            run.cronjobs,
            r.slots.expected,
            r.slots.missed,
            r.slots.duplicates,
            skew(&r.slots),
        );
    }
    for run in runs {
        let Some(h) = run
            .handover
            .as_ref()
            .filter(|h| h.apiserver_peak_rss_bytes > 0)
        else {
            continue;
        };
        let _ = writeln!(
            out,
            "\nkube-apiserver's peak RSS over the whole run, the take-over{} included: {:.0} MiB",
            if h.rolling.is_some() {
                " and the rolling restart"
            } else {
                ""
            },
            h.apiserver_peak_rss_bytes as f64 / MIB,
        );
    }
    for run in runs {
        let Some(rolling) = run.handover.as_ref().and_then(|h| h.rolling.as_ref()) else {
            continue;
        };
        let _ = writeln!(
            out,
            "\nA rolling restart of the {} replicas (SIGTERM, back, the next), {} s: {} slots, {} missed, {} duplicates, skew p50 / p99 / max {} s\n",
            run.replicas,
            rolling.ended_at - rolling.started_at,
            rolling.slots.expected,
            rolling.slots.missed,
            rolling.slots.duplicates,
            skew(&rolling.slots),
        );
        out.push_str(
            "| replica | stopped in s | ran its share again after s | ready after s | fewest running meanwhile |\n",
        );
        out.push_str("|---|---:|---:|---:|---:|\n");
        let seconds = |s: Option<f64>| s.map_or_else(|| "-".to_owned(), |s| format!("{s:.1}"));
        for step in &rolling.steps {
            let _ = writeln!(
                out,
                "| {} | {:.1} | {} | {} | {} of {} |",
                step.replica,
                step.stop_seconds,
                seconds(step.back_seconds),
                seconds(step.ready_seconds),
                step.fewest_running,
                run.cronjobs,
            );
        }
        if let Some(start) = rolling.steps.first().map(|s| s.stopped_at) {
            let stops: Vec<String> = (rolling.steps.iter())
                .map(|s| format!("{} at +{} s", s.replica, s.stopped_at - start))
                .collect();
            let _ = writeln!(
                out,
                "\nSIGTERM: {}. Latest slots (slot in unix seconds): {}",
                stops.join(", "),
                rolling
                    .slots
                    .latest_examples
                    .iter()
                    .take(8)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
    }
    for run in runs {
        let Some(h) = run.handover.as_ref().filter(|h| !h.steps.is_empty()) else {
            continue;
        };
        let _ = writeln!(
            out,
            "\nThe survivors of {} replicas after the kill (each change of their `/debug/shards`):\n",
            run.replicas
        );
        // At most about 40 lines (the JSON has every step), the last one too.
        let stride = (h.steps.len() / 40).max(1);
        let last = h.steps.len() - 1;
        for step in h
            .steps
            .iter()
            .enumerate()
            .filter(|(i, _)| i % stride == 0 || *i == last)
            .map(|(_, step)| step)
        {
            let _ = writeln!(
                out,
                "- {:.1} s: {} of {} owned running, loads in flight {}, waiting {:?}",
                step.at_seconds, step.running, step.owned, step.loads_in_flight, step.waiting_for
            );
        }
    }
    out
}

/// Writes `report.json` and `report.md` to `out`.
pub fn write(out: &Path, scenario: &Scenario, runs: &[MillionRun]) -> anyhow::Result<()> {
    crate::report::write_runs(out, scenario, runs, &markdown(scenario, runs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(rss_mib: u64, cronjob_objects: f64) -> ReplicaFigures {
        ReplicaFigures {
            rss_bytes: rss_mib << 20,
            events: [("cronjobs".to_owned(), cronjob_objects)].into(),
            ..ReplicaFigures::default()
        }
    }

    #[test]
    fn the_tables_give_the_sum_per_cronjob_and_the_handover() {
        let run = MillionRun {
            variant: "shardcron-2".into(),
            replicas: 2,
            cronjobs: 1 << 20,
            per_replica: vec![replica(600, 500_000.0), replica(400, 520_000.0)],
            owned: vec![600, 400],
            handover: Some(Handover {
                victim: "shardcron-0".into(),
                victim_cronjobs: 600,
                rearm_seconds: Some(21.25),
                victim_slots: SlotSummary {
                    expected: 3,
                    answered: 3,
                    skews_ms: vec![100, 200, 19_000],
                    ..SlotSummary::default()
                },
                apiserver_peak_rss_bytes: 12 << 30,
                ..Handover::default()
            }),
            ..MillionRun::default()
        };
        // 1,000 MiB over 2^20 CronJobs.
        assert_eq!(run.bytes_per_cronjob(), 1000.0);
        let table = markdown(
            &Scenario::new(crate::compare::ScenarioName::S7, crate::compare::Mode::Ci),
            &[run],
        );
        assert!(
            table.contains("| 2 | 0 | 0.0 | 600 | 1000 | 1000 | 1.20 | 520000 |"),
            "{table}"
        );
        assert!(
            table.contains("| 2 | shardcron-0 | 600 | 21.2 | 3 | 0 | 0 | 0.20 / 19.00 / 19.00 |"),
            "{table}"
        );
        assert!(
            table.contains("peak RSS over the whole run, the take-over included: 12288 MiB"),
            "{table}"
        );
    }
}
