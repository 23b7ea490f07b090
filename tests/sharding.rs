//! Fault tests of the sharded controller: several `shardcron run` replicas
//! (separate processes, each as the controller's ServiceAccount) share one
//! ring over a steady load of CronJobs firing every minute, and one fault
//! is injected per test. After each, the invariants are checked from the
//! API server's own records: no two Jobs for one CronJob and slot, a Job
//! for every slot in the window, and (from every replica's `/debug/shards`)
//! each CronJob run by exactly one live replica. Figures are printed and
//! appended to target/test-figures/sharding.txt.
//!
//! The API server restart is in tests/apiserver_restart.rs (its own
//! control plane).

mod support;

use jiff::{Timestamp, ToSpan};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams};
use shardcron_harness::cluster::CONTROLLER_NAMESPACE;
use shardcron_harness::net::http_get;
use shardcron_harness::replica::Signal;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use support::fleet::*;

/// Enough that every replica of three owns some: with 12, one of them owned
/// none in about 1 run in 100 ((2/3)^12), and the test had nothing to fault.
const CRONJOBS: usize = 24;

/// Delay of a slot no fault touched. What it tells apart is a slot held by
/// the fault, which waits for the faulted replica's Lease (15 s) at least;
/// how late an undisturbed slot is on a loaded machine is the load test's
/// figure, not this test's: `cargo suite` runs this binary beside others
/// whose slots fall due at the same second of each minute, on 2 cores, and
/// 6-7 s were seen on a fresh machine at a load average of 5.6
/// (creationTimestamp has 1 s resolution).
const UNDISTURBED: i64 = 10;

fn max_delay<'a>(slots: impl IntoIterator<Item = &'a Slot>) -> i64 {
    slots.into_iter().map(Slot::delay).max().unwrap_or(0)
}

/// The slots of `minute` of the CronJobs named in `cronjobs`.
fn slots_of<'a>(
    slots: &'a [Slot],
    minute: Timestamp,
    cronjobs: &BTreeSet<String>,
) -> Vec<&'a Slot> {
    slots
        .iter()
        .filter(|s| s.scheduled == minute && cronjobs.contains(&s.cronjob))
        .collect()
}

/// Job creates the replica has sent; panics if its metrics cannot be read,
/// so that a check built on it cannot pass on an empty answer.
fn creates(replica: &support::controller::Controller) -> f64 {
    let (code, text) =
        http_get(replica.metrics, "/metrics").expect("the replica's /metrics must answer");
    assert_eq!(code, 200, "/metrics: {text}");
    // The request counter has no line before the first request; the skew
    // histogram always has: it shows the page really was the metrics.
    assert!(
        text.contains("# TYPE shardcron_job_creation_skew_seconds histogram"),
        "not the controller's metrics: {text}"
    );
    text.lines()
        .filter(|l| l.starts_with("shardcron_api_requests_total{verb=\"create\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The sum and count of one of the replica's histograms; panics if its
/// metrics cannot be read.
fn histogram(replica: &support::controller::Controller, name: &str) -> (f64, f64) {
    let text = replica.metrics_text();
    shardcron_harness::histogram(&text, name)
        .unwrap_or_else(|| panic!("no {name}_sum and _count on /metrics: {text}"))
}

/// How long after the Lease duration a killed replica's CronJobs may
/// resume: its Lease seen expired, the view published, the slot's
/// decision. Alone about 0-1 s; `cargo suite` runs this beside the load
/// and fault lanes on 2 cores, where 2 s was once too little (19 s), and
/// a clean clone's suite reached 20 s (2026-12-03: keys the bulk load
/// brought 6 s after the take-over).
const TAKEOVER_SLACK: u64 = 8;

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_replicas_cronjobs_resume_within_the_lease_duration() {
    let mut fleet = Fleet::new("shard-sigkill", 3, CRONJOBS).await;
    // Each replica's first watches started at the versions it read at
    // start, its loads reading its share: no CronJob or Job list through
    // them (one re-list after a watch error is let pass).
    let listed: f64 = ["cronjobs", "jobs"]
        .iter()
        .flat_map(|resource| {
            fleet.replicas.iter().map(move |replica| {
                replica.metric(&format!(
                    "shardcron_watch_relists_total{{resource=\"{resource}\"}}"
                ))
            })
        })
        .sum();
    assert!(listed <= 1.0, "the first watches listed {listed} times");
    let victim = 1;
    let at = at_second(50, Duration::from_secs(5)).await;
    let affected = fleet.keys_of(victim);
    let survivors = [0, 2];
    // Every CronJob a replica would gain if one peer died is on standby
    // somewhere: the victim's are on the survivors'.
    let on_standby: f64 = survivors
        .iter()
        .map(|&r| fleet.replicas[r].metric("shardcron_standby_cronjobs"))
        .sum();
    let killed = Timestamp::now();
    fleet.replicas[victim].kill();
    let slot = next_minute(at);

    let slots = fleet.all_slots_through(slot + 60.seconds()).await;
    let (hit, spared): (Vec<&Slot>, Vec<&Slot>) = slots
        .iter()
        .filter(|s| s.scheduled == slot)
        .partition(|s| affected.contains(&s.cronjob));
    let resumed = hit
        .iter()
        .map(|s| s.created.as_second() - killed.as_second())
        .max()
        .unwrap_or(0);
    fleet.figure(&format!(
        "killed r1 owning {} of {CRONJOBS}; its slot resumed {resumed} s after the kill (bound {} s), max delay {} s; others' max delay {} s",
        affected.len(),
        LEASE.as_secs() + TAKEOVER_SLACK,
        max_delay(hit.iter().copied()),
        max_delay(spared.iter().copied())
    ));
    assert!(!affected.is_empty(), "r1 owned nothing");
    assert!(
        resumed <= (LEASE.as_secs() + TAKEOVER_SLACK) as i64,
        "{hit:?}"
    );
    assert!(
        max_delay(spared.iter().copied()) <= UNDISTURBED,
        "{spared:?}"
    );
    assert!(hit.iter().all(|s| s.created_by != "r1"));
    // Every-minute CronJobs are all due at the take-over: the survivors
    // read each on its own, ahead of the bulk load.
    let read_alone: f64 = survivors
        .iter()
        .map(|&r| fleet.replicas[r].metric("shardcron_keys_read_alone_total"))
        .sum();
    fleet.figure(&format!(
        "standby before the kill: {on_standby} on the survivors; read alone at the take-over: {read_alone}"
    ));
    assert!(on_standby >= affected.len() as f64, "{on_standby}");
    assert!(read_alone >= affected.len() as f64, "{read_alone}");
    // Their slot fell due before they started here, but they were read
    // after the dead peer's Lease expired, so after its last write: no
    // CronJob is read again before its slot (that read is for keys moved
    // off a live owner, docs/sharding.md, step 4).
    let rereads: f64 = survivors
        .iter()
        .flat_map(|&r| {
            ["unchanged", "newer"].map(|found| {
                fleet.replicas[r].metric(&format!(
                    "shardcron_handoff_rereads_total{{found=\"{found}\"}}"
                ))
            })
        })
        .sum();
    assert_eq!(rereads, 0.0, "read again at a take-over from a dead peer");
    fleet.converged(Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_replica_writes_nothing_for_the_keys_it_lost() {
    let fleet = Fleet::new("shard-sigstop", 3, CRONJOBS).await;
    let victim = &fleet.replicas[1];
    let at = at_second(45, Duration::from_secs(5)).await;
    let lost = fleet.keys_of(1);
    let creates_before = creates(victim);
    victim.signal(Signal::Stop);
    let frozen = Instant::now();
    // Frozen across the next slot, for twice the Lease duration.
    tokio::time::sleep(2 * LEASE).await;
    victim.signal(Signal::Cont);
    let frozen_for = frozen.elapsed();
    let woke = Timestamp::now();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let creates_after_waking = creates(victim) - creates_before;

    let slot = next_minute(at);
    let slots = fleet.all_slots_through(slot + 60.seconds()).await;
    let during: Vec<&Slot> = slots.iter().filter(|s| s.scheduled == slot).collect();
    fleet.figure(&format!(
        "r1 frozen {:.0} s over a slot; {} of its {} CronJobs taken over, max delay {} s; create requests by r1 in the 10 s after waking: {creates_after_waking}",
        frozen_for.as_secs_f64(),
        during.iter().filter(|s| lost.contains(&s.cronjob)).count(),
        lost.len(),
        max_delay(during.iter().copied()),
    ));
    assert!(!lost.is_empty(), "r1 owned nothing");
    assert_eq!(
        creates_after_waking, 0.0,
        "the woken replica tried to create Jobs (the slot it slept through)"
    );
    assert!(
        during.iter().all(|s| s.created_by != "r1"),
        "r1 created a Job while frozen or just after: {during:?} (woke at {woke})"
    );
    fleet.converged(Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_cut_from_the_api_server_stops_acting_and_is_replaced() {
    let mut fleet = Fleet::new("shard-cut", 2, CRONJOBS).await;
    let proxy = fleet.add_behind_proxy().await;
    let at = at_second(40, Duration::from_secs(5)).await;
    let lost = fleet.keys_of(2);
    proxy.cut();
    let cut = Instant::now();
    let fenced = support::eventually("r2 to stop acting", Duration::from_secs(20), || async {
        let report = fleet.replicas[2].shards()?;
        (!report.lease_valid).then(|| cut.elapsed())
    })
    .await;
    let slot = next_minute(at);
    let slots = fleet.all_slots_through(slot).await;
    let during: Vec<&Slot> = slots.iter().filter(|s| s.scheduled == slot).collect();
    proxy.restore();
    let restored = Instant::now();
    let rejoined = fleet.converged(Duration::from_secs(60)).await;
    fleet.figure(&format!(
        "r2 cut: stopped acting {:.1} s after the cut (renew deadline 10 s); its {} CronJobs' slot max delay {} s; rejoined {:.1} s after the proxy came back",
        fenced.as_secs_f64(),
        lost.len(),
        max_delay(during.iter().filter(|s| lost.contains(&s.cronjob)).copied()),
        restored.elapsed().as_secs_f64().min(rejoined.as_secs_f64()),
    ));
    assert!(!lost.is_empty(), "r2 owned nothing");
    assert!(fenced <= Duration::from_secs(12), "fenced after {fenced:?}");
    assert!(during.iter().all(|s| s.created_by != "r2"), "{during:?}");
    assert!(
        max_delay(during.iter().copied()) <= UNDISTURBED,
        "{during:?}"
    );
    let next = next_minute(Timestamp::now() + 5.seconds());
    fleet.all_slots_through(next).await;
}

/// A black hole, not a reset: the proxy goes silent both ways for twice the
/// Lease duration, over a slot, then lets new connections through while the
/// old ones stay silent. Only the replica's own deadlines can find it (the
/// proxy's kernel still answers keepalive).
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_behind_a_black_hole_says_so_and_serves_again_after() {
    let mut fleet = Fleet::new("shard-stall", 2, CRONJOBS).await;
    let proxy = fleet.add_behind_proxy().await;
    let at = at_second(40, Duration::from_secs(5)).await;
    let lost = fleet.keys_of(2);
    proxy.stall();
    let stalled = Instant::now();
    let unready = support::eventually("r2's /readyz to fail", Duration::from_secs(20), || async {
        let (code, _) = http_get(fleet.replicas[2].health, "/readyz").ok()?;
        (code == 503).then(|| stalled.elapsed())
    })
    .await;
    let slot = next_minute(at);
    let slots = fleet.all_slots_through(slot).await;
    let during: Vec<&Slot> = slots.iter().filter(|s| s.scheduled == slot).collect();
    tokio::time::sleep((2 * LEASE).saturating_sub(stalled.elapsed())).await;
    let (code, _) = http_get(fleet.replicas[2].health, "/readyz").expect("r2 answers");
    assert_eq!(code, 503, "r2 claimed to be ready behind the black hole");
    proxy.restore();
    let healed = Instant::now();
    let rejoined = fleet.converged(Duration::from_secs(120)).await;
    let next = next_minute(Timestamp::now() + 5.seconds());
    let slots = fleet.all_slots_through(next).await;
    let after: Vec<&Slot> = slots.iter().filter(|s| s.scheduled == next).collect();
    let (live, why) = http_get(fleet.replicas[2].health, "/healthz").expect("r2 answers");
    fleet.figure(&format!(
        "r2 behind a black hole for {:.0} s: /readyz failed {:.1} s in (renew deadline 10 s); its {} CronJobs' slot max delay {} s; rejoined {:.1} s after the heal; next slot max delay {} s",
        (healed - stalled).as_secs_f64(),
        unready.as_secs_f64(),
        lost.len(),
        max_delay(during.iter().filter(|s| lost.contains(&s.cronjob)).copied()),
        rejoined.as_secs_f64(),
        max_delay(after.iter().copied()),
    ));
    assert!(!lost.is_empty(), "r2 owned nothing");
    assert!(
        unready <= Duration::from_secs(12),
        "unready after {unready:?}"
    );
    assert!(during.iter().all(|s| s.created_by != "r2"), "{during:?}");
    assert!(
        max_delay(during.iter().copied()) <= UNDISTURBED,
        "{during:?}"
    );
    assert!(
        after.iter().any(|s| s.created_by == "r2"),
        "r2 serves nothing after the heal: {after:?}"
    );
    assert!(max_delay(after.iter().copied()) <= UNDISTURBED, "{after:?}");
    assert_eq!(live, 200, "r2's /healthz after the heal: {why}");
}

/// A second process started with a running replica's id (a pod recreated
/// while its predecessor is only partitioned, two pods of one ordinal, a
/// mistake): it waits while the first renews the Lease, never acts beside
/// it, and takes over only once the first has stopped renewing.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_process_with_a_replicas_id_waits_for_the_first() {
    let mut fleet = Fleet::new("shard-twin", 2, CRONJOBS).await;
    let mut twin = fleet.prepare(1).await;
    let twin_log = twin.spec().log.with_extension("twin.log");
    twin.spec_mut().log = twin_log;
    twin.launch();
    let at = at_second(40, Duration::from_secs(5)).await;
    let slot = next_minute(at);
    // Through a slot and 10 s past it, the twin is never ready.
    while Timestamp::now() < slot + 10.seconds() {
        if let Ok((code, _)) = http_get(twin.health, "/readyz") {
            assert_ne!(code, 200, "the twin is ready while r1 still renews");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let slots = fleet.all_slots_through(slot).await;
    let twin_creates = creates(&twin);
    fleet.replicas[1].kill();
    let killed = Instant::now();
    twin.wait_ready().await;
    let took_over = killed.elapsed();
    fleet.replicas[1] = twin;
    fleet.converged(Duration::from_secs(60)).await;
    let next = next_minute(Timestamp::now() + 5.seconds());
    let after = fleet.all_slots_through(next).await;
    fleet.figure(&format!(
        "a twin of r1 beside it over a slot: {} create requests, slot max delay {} s; ready {:.1} s after r1 was killed (Lease {} s); {} slots in all, none twice",
        twin_creates as u64,
        max_delay(slots.iter().filter(|s| s.scheduled == slot)),
        took_over.as_secs_f64(),
        LEASE.as_secs(),
        after.len(),
    ));
    assert_eq!(twin_creates, 0.0, "the twin created Jobs beside r1");
    assert!(
        max_delay(slots.iter().filter(|s| s.scheduled == slot)) <= UNDISTURBED,
        "{slots:?}"
    );
}

/// Each CronJob's per-CronJob series (`shardcron_cronjob_*`) on exactly
/// one live replica: they move with the key and are never exported twice.
async fn each_cronjobs_series_are_exported_once(fleet: &Fleet) {
    support::eventually(
        "each CronJob's series on exactly one replica",
        Duration::from_secs(20),
        || async {
            let mut seen = std::collections::HashMap::<String, usize>::new();
            for replica in fleet.live() {
                let text = http_get(replica.debug, "/metrics/cronjobs")
                    .map(|(_, body)| body)
                    .unwrap_or_default();
                for line in text
                    .lines()
                    .filter(|l| l.starts_with("shardcron_cronjob_active_jobs{"))
                {
                    if let Some(name) = line
                        .split("cronjob=\"")
                        .nth(1)
                        .and_then(|rest| rest.split('"').next())
                    {
                        *seen.entry(name.to_owned()).or_default() += 1;
                    }
                }
            }
            (seen.len() == CRONJOBS && seen.values().all(|&n| n == 1)).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn scaling_1_3_5_2_keeps_every_slot_once() {
    let mut fleet = Fleet::new("shard-scale", 1, CRONJOBS).await;
    let mut figures = Vec::new();
    for target in [3usize, 5, 2] {
        at_second(15, Duration::from_secs(1)).await;
        let before = fleet.owners();
        let started = Instant::now();
        while fleet.live().count() < target {
            fleet.add().await;
        }
        let running: Vec<usize> = (0..fleet.replicas.len())
            .filter(|&i| fleet.replicas[i].is_running())
            .collect();
        for &i in running.iter().skip(target) {
            let status = fleet.replicas[i].stop().await.expect("running");
            assert!(status.success(), "r{i} exited with {status}");
        }
        let converged = fleet.converged(Duration::from_secs(60)).await;
        let took = started.elapsed().max(converged);
        let after = fleet.owners();
        let moved = after
            .iter()
            .filter(|(k, o)| before.get(*k) != Some(o))
            .count();
        figures.push(format!(
            "-> {target}: converged in {:.1} s, {moved} of {CRONJOBS} CronJobs moved",
            took.as_secs_f64(),
        ));
        let slot = next_minute(Timestamp::now());
        fleet.all_slots_through(slot).await;
        each_cronjobs_series_are_exported_once(&fleet).await;
    }
    let slots = fleet.slots().await;
    // The losing side of each hand-off, as the replicas still running saw it.
    let (mut publish_seconds, mut publications) = (0.0, 0.0);
    for replica in fleet.live() {
        let (sum, count) = histogram(replica, "shardcron_handoff_publish_seconds");
        publish_seconds += sum;
        publications += count;
    }
    assert!(publications > 0.0, "every ring change publishes a view");
    fleet.figure(&format!(
        "scale 1 -> 3 -> 5 -> 2 with {CRONJOBS} CronJobs: {}; {} slots, max delay {} s; \
         ring change to publication: {:.3} s on average over {publications} changes",
        figures.join("; "),
        slots.len(),
        max_delay(&slots),
        publish_seconds / publications,
    ));
    assert!(max_delay(&slots) <= UNDISTURBED, "{slots:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_restart_hands_off_at_once() {
    let mut fleet = Fleet::new("shard-rolling", 3, CRONJOBS).await;
    let mut handoffs = Vec::new();
    for i in 0..3 {
        // A leave near a whole minute waits it out (the next test).
        clear_of_a_whole_minute().await;
        let stopped = Instant::now();
        let status = fleet.replicas[i].stop().await.expect("running");
        assert!(status.success(), "r{i} exited with {status}");
        let handoff = fleet.converged(Duration::from_secs(30)).await;
        handoffs.push(handoff.min(stopped.elapsed()));
        fleet.replicas[i].launch();
        fleet.replicas[i].wait_ready().await;
        fleet.converged(Duration::from_secs(30)).await;
    }
    let last = next_minute(Timestamp::now());
    let slots = fleet.all_slots_through(last).await;
    let worst = handoffs.iter().max().copied().unwrap_or_default();
    fleet.figure(&format!(
        "rolling restart of 3: hand-offs {:?} (Lease duration {} s); {} slots, max delay {} s",
        handoffs
            .iter()
            .map(|d| format!("{:.1} s", d.as_secs_f64()))
            .collect::<Vec<_>>(),
        LEASE.as_secs(),
        slots.len(),
        max_delay(&slots)
    ));
    assert!(
        worst < Duration::from_secs(5),
        "a hand-off waited {worst:?}"
    );
    assert!(max_delay(&slots) <= UNDISTURBED, "{slots:?}");
}

/// Keys move off a live replica only away from whole minutes, when cron's
/// slots fall: a replica stopped 7 s before one runs its CronJobs' slots
/// of that minute itself and exits only once its peers have published 5
/// s past it; a replica started 10 s before one has its first view held
/// likewise, so its new CronJobs' slots of that minute are written by
/// their old owners. Without the hold, at this size, both moves take well
/// under a second and those slots change hands before the minute. (A slot
/// the old owner had not written by the end of the hold, on a loaded
/// machine, is the new owner's after it: allowed.)
#[tokio::test(flavor = "multi_thread")]
async fn moves_wait_out_a_whole_minute() {
    use shardcron::shard::ownership::HOLD_AFTER_MINUTE;
    let hold_after = (HOLD_AFTER_MINUTE.as_secs() as i64).seconds();
    let mut fleet = Fleet::new("shard-minute", 3, CRONJOBS).await;
    let stopped = at_second(53, Duration::from_secs(5)).await;
    let leaver = fleet.keys_of(1);
    let status = fleet.replicas[1].stop().await.expect("running");
    let exited = Timestamp::now();
    assert!(status.success(), "r1 exited with {status}");
    let left_in = next_minute(stopped);
    let left = fleet.all_slots_through(left_in).await;
    let leaving = slots_of(&left, left_in, &leaver);
    fleet.converged(Duration::from_secs(30)).await;

    let started = at_second(50, Duration::from_secs(1)).await;
    fleet.replicas[1].launch();
    fleet.replicas[1].wait_ready().await;
    let ready = Timestamp::now();
    fleet.converged(Duration::from_secs(40)).await;
    let joined = fleet.keys_of(1);
    let joined_in = next_minute(started);
    let back = fleet.all_slots_through(joined_in).await;
    let joining = slots_of(&back, joined_in, &joined);
    fleet.figure(&format!(
        "r1 stopped at {stopped}, exited at {exited}: {} of its {} slots of {left_in} its own, max delay {} s; \
         started at {started}, ready at {ready}: {} of its {} new CronJobs' slots of {joined_in} by their old owners, max delay {} s",
        leaving.iter().filter(|s| s.created_by == "r1").count(),
        leaving.len(),
        max_delay(leaving.iter().copied()),
        joining.iter().filter(|s| s.created_by != "r1").count(),
        joining.len(),
        max_delay(joining.iter().copied()),
    ));
    assert!(!leaver.is_empty() && !joined.is_empty(), "r1 owned nothing");
    assert!(
        exited >= left_in + hold_after,
        "r1 let go at {exited}, inside the hold"
    );
    let moved_before = |minute: Timestamp, s: &Slot| s.created < minute + hold_after;
    assert!(
        leaving
            .iter()
            .all(|s| s.created_by == "r1" || !moved_before(left_in, s)),
        "the leaver's slots of the minute: {leaving:?}"
    );
    assert!(
        joining
            .iter()
            .all(|s| s.created_by != "r1" || !moved_before(joined_in, s)),
        "the joiner's new CronJobs' slots of the minute: {joining:?}"
    );
    assert!(max_delay(&left) <= UNDISTURBED, "{left:?}");
    assert!(max_delay(&back) <= UNDISTURBED, "{back:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_deleted_by_hand_is_recreated_and_nobody_takes_over() {
    let fleet = Fleet::new("shard-lease-deleted", 3, CRONJOBS).await;
    let leases: Api<Lease> = Api::namespaced(fleet.admin.clone(), CONTROLLER_NAMESPACE);
    let name = format!("{}.r1", fleet.ns.name);
    let at = at_second(40, Duration::from_secs(5)).await;
    let owned = fleet.keys_of(1);
    leases
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete r1's Lease");
    let deleted = Instant::now();
    let recreated = support::eventually("r1's Lease again", Duration::from_secs(10), || async {
        leases
            .get_opt(&name)
            .await
            .ok()
            .flatten()
            .map(|_| deleted.elapsed())
    })
    .await;
    let slot = next_minute(at);
    let slots = fleet.all_slots_through(slot).await;
    let during: Vec<&Slot> = slots.iter().filter(|s| s.scheduled == slot).collect();
    fleet.figure(&format!(
        "r1's Lease deleted: re-created after {:.1} s; slot max delay {} s",
        recreated.as_secs_f64(),
        max_delay(during.iter().copied())
    ));
    let by_r1: BTreeSet<&str> = during
        .iter()
        .filter(|s| s.created_by == "r1")
        .map(|s| s.cronjob.as_str())
        .collect();
    assert_eq!(
        by_r1,
        owned.iter().map(String::as_str).collect(),
        "r1 kept its CronJobs"
    );
    assert!(
        max_delay(during.iter().copied()) <= UNDISTURBED,
        "{during:?}"
    );
    fleet.converged(Duration::from_secs(30)).await;
}

/// Jobs that complete while the ring changes around them reach their
/// CronJobs' status: a replica joining and another leaving restart every
/// replica's bucket-selected watches (new selectors, new lists), and no
/// completion may fall between an old watch and its successor. The local
/// API server shards CronJob watches (`ShardedListAndWatch`), so the
/// replicas' CronJob watches restart too.
#[tokio::test(flavor = "multi_thread")]
async fn completions_across_selector_changes_reach_the_status() {
    completions_across_selector_changes("shard-selector", &[]).await;
}

/// The same where the replicas do not ask the server to shard CronJobs (as
/// on a server without the gate): only the Job watches follow the ring.
#[tokio::test(flavor = "multi_thread")]
async fn completions_across_selector_changes_reach_the_status_without_server_shards() {
    completions_across_selector_changes("shard-selector-off", &["--server-side-shards=off"]).await;
}

async fn completions_across_selector_changes(test: &str, replica_args: &[&str]) {
    let mut fleet = Fleet::empty_with(test, replica_args).await;
    fleet.add().await;
    fleet.add().await;
    // Pods run 20 s (kwok): the slot's Jobs are running when the ring changes.
    let spec =
        serde_json::json!({"successfulJobsHistoryLimit": 100, "failedJobsHistoryLimit": 100});
    let pods = serde_json::json!({"shardcron.test/run-for": "20s"});
    fleet
        .create_cronjobs(CRONJOBS, |name| {
            support::scenario::cronjob(name, "*/1 * * * *", spec.clone(), pods.clone())
        })
        .await;
    let slot = fleet.first_slot;
    fleet.all_slots_through(slot).await;
    // The Jobs end about 21 s after the slot: the watches restart as they do.
    at_second(19, Duration::ZERO).await;
    let changes_from = Instant::now();
    let before = fleet.owners();
    fleet.add().await;
    let status = fleet.replicas[0].stop().await.expect("r0 running");
    assert!(status.success(), "r0 exited with {status}");
    let changed_in = changes_from.elapsed();
    fleet.converged(Duration::from_secs(60)).await;
    let moved = fleet
        .owners()
        .iter()
        .filter(|(k, o)| before.get(*k) != Some(o))
        .count();

    // Each CronJob's Job for the slot completes (kube-controller-manager's
    // Job controller sets completionTime: on a loaded machine it may lag by
    // minutes, which is none of ours); its CronJob must then list it no
    // more and show its completion as lastSuccessfulTime.
    let cronjobs: Api<CronJob> = Api::namespaced(fleet.admin.clone(), &fleet.ns.name);
    let job_names: Vec<(String, String)> = fleet
        .names
        .iter()
        .map(|name| (name.clone(), format!("{name}-{}", slot.as_second() / 60)))
        .collect();
    let jobs = fleet.jobs.clone();
    let completions = support::eventually_explained(
        "every Job of the slot to complete",
        Duration::from_secs(300),
        || async {
            let listed = jobs
                .list(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            let mut completed = Vec::new();
            for (name, job_name) in &job_names {
                let job = listed
                    .items
                    .iter()
                    .find(|j| j.metadata.name.as_deref() == Some(job_name.as_str()))
                    .ok_or_else(|| format!("no Job {job_name}"))?;
                let done = job
                    .status
                    .as_ref()
                    .and_then(|s| s.completion_time.as_ref())
                    .ok_or_else(|| format!("{job_name} without completionTime"))?;
                completed.push((name.clone(), job_name.clone(), done.0));
            }
            Ok(completed)
        },
    )
    .await;
    let last_completed = completions
        .iter()
        .map(|(_, _, completed)| *completed)
        .max()
        .unwrap_or(slot);
    // The ring has converged: each CronJob's owner stays put from here.
    let owners = fleet.owners();
    support::eventually_explained(
        "every completion of the slot in its CronJob's status",
        Duration::from_secs(90),
        || async {
            for (name, job_name, completed) in &completions {
                let status = cronjobs
                    .get(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .status
                    .unwrap_or_default();
                let still_active = status
                    .active
                    .iter()
                    .flatten()
                    .any(|r| r.name.as_deref() == Some(job_name.as_str()));
                let succeeded = status.last_successful_time.as_ref().map(|t| t.0);
                if still_active || succeeded.is_none_or(|t| t < *completed) {
                    return Err(format!(
                        "{name} (owner {:?}): {job_name} completed at {completed}, \
                         status {status:?}",
                        owners.get(name.as_str())
                    ));
                }
            }
            Ok(())
        },
    )
    .await;
    fleet.all_slots_through(slot + 60.seconds()).await;
    fleet.figure(&format!(
        "a join and a leave within {:.1} s while {CRONJOBS} Jobs ran; {moved} CronJobs moved; \
         the last Job completed {} s after the slot and every completion reached its \
         CronJob's status",
        changed_in.as_secs_f64(),
        last_completed.as_second() - slot.as_second()
    ));
}

/// The admin commands as an operator runs them, against 3 replicas "in
/// pods": the CLI reads the ring's Leases and reaches each replica through
/// the API server's port-forward (kube-apiserver to kwok, the pods'
/// kubelet, whose PortForward leads to the replica's process), with the
/// operator's own token and RBAC. Without `pods/portforward` it says so.
/// `status` follows NOT_OWNER to each CronJob's owner, which is the
/// replica that runs it per `/debug/shards`; `ring` and `queues` answer;
/// when the owner of a watched CronJob stops, `status --watch` finds the
/// new owner and prints its decisions, its next create among them, which
/// its journal then holds for `status` and `explain --live`.
#[tokio::test(flavor = "multi_thread")]
async fn the_admin_commands_reach_replicas_through_the_api_server_and_follow_a_cronjob() {
    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
    use kube::api::PostParams;
    use serde_json::json;
    use std::io::BufRead as _;
    use support::rbac::{Grant, account_kubeconfig};
    let mut fleet = Fleet::new_in_pods("admin-follow", 3, 6).await;
    let cluster = support::cluster::Cluster::shared();
    let ns = fleet.ns.name.clone();
    let operator = account_kubeconfig(
        &fleet.admin,
        cluster,
        &ns,
        "operator",
        Grant::ClusterRole("view"),
    )
    .await;
    let kubeconfig = operator.to_string_lossy().into_owned();
    let ring = fleet.replicas[0].ring.clone();
    let cli = |command: &[&str]| {
        let mut args = command.to_vec();
        args.extend(["--kubeconfig", &kubeconfig, "--ring", &ring]);
        args.extend(["--output", "json"]);
        support::shardcron(&args)
    };

    // No pods/portforward yet: the API server refuses, and the CLI says so.
    let refused = cli(&["status", &format!("{ns}/c00")]);
    assert!(!refused.status.success());
    let said = support::stderr(&refused);
    assert!(
        said.contains("port-forward to pod") && said.contains("pods/portforward"),
        "{said}"
    );

    // deploy/kubernetes/admin-rbac.yaml's roles, bound as an operator would.
    // In the controller's namespace, where the replicas' pods are.
    let port_forward_name = format!("{ns}-operator-port-forward");
    let port_forward: Role = serde_json::from_value(json!({
        "metadata": {"name": port_forward_name},
        "rules": [{"apiGroups": [""], "resources": ["pods/portforward"], "verbs": ["get", "create"]}]
    }))
    .expect("a Role");
    Api::<Role>::namespaced(fleet.admin.clone(), CONTROLLER_NAMESPACE)
        .create(&PostParams::default(), &port_forward)
        .await
        .expect("create the Role");
    let subjects = json!([{"kind": "ServiceAccount", "name": "operator", "namespace": ns}]);
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": port_forward_name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": port_forward_name},
        "subjects": subjects,
    }))
    .expect("a RoleBinding");
    Api::<RoleBinding>::namespaced(fleet.admin.clone(), CONTROLLER_NAMESPACE)
        .create(&PostParams::default(), &binding)
        .await
        .expect("bind it");
    let operator_binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": format!("{ns}-operator")},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "shardcron-admin-operator"},
        "subjects": subjects,
    }))
    .expect("a ClusterRoleBinding");
    let cluster_bindings = Api::<ClusterRoleBinding>::all(fleet.admin.clone());
    cluster_bindings
        .create(&PostParams::default(), &operator_binding)
        .await
        .expect("bind shardcron-admin-operator");

    let owner_by_cli = |name: &str| {
        let out = cli(&["status", &format!("{ns}/{name}")]);
        if !out.status.success() {
            eprintln!("status {name}: {}", support::stderr(&out));
        }
        out.status.success().then(|| {
            let answer: serde_json::Value =
                serde_json::from_str(&support::stdout(&out)).expect("JSON");
            answer["owner"].as_str().unwrap_or_default().to_owned()
        })
    };
    let check = |fleet: &Fleet| {
        let owners = fleet.owners();
        let mut hops = 0;
        for name in &fleet.names {
            let found = owner_by_cli(name);
            if found.as_deref() != owners.get(name).map(String::as_str) {
                return None;
            }
            hops += usize::from(found.as_deref() != Some("r0"));
        }
        Some(hops)
    };
    let followed = support::eventually(
        "every CronJob's owner found through the port-forwards (once RBAC takes effect)",
        Duration::from_secs(30),
        || async { check(&fleet) },
    )
    .await;
    assert!(
        followed > 0,
        "every CronJob was on r0: nothing was followed"
    );

    let out = cli(&["ring"]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let answer: serde_json::Value = serde_json::from_str(&support::stdout(&out)).expect("JSON");
    assert_eq!(answer["view"], json!(["r0", "r1", "r2"]), "{answer}");
    let out = cli(&["queues", "--replica", "r1"]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let answer: serde_json::Value = serde_json::from_str(&support::stdout(&out)).expect("JSON");
    assert_eq!(answer["replica"], "r1", "{answer}");
    assert_eq!(answer["classes"][1]["class"], "create_job", "{answer}");

    // Watch c00 from well before its next slot; stop its owner meanwhile.
    support::eventually(
        "a moment well before the next slot",
        Duration::from_secs(60),
        || async {
            (3..=20)
                .contains(&(Timestamp::now().as_second() % 60))
                .then_some(())
        },
    )
    .await;
    let watched = fleet.names[0].clone();
    let before = fleet.owners()[&watched].clone();
    let mut watch = std::process::Command::new(env!("CARGO_BIN_EXE_shardcron"))
        .args(["status", &format!("{ns}/{watched}"), "--watch"])
        .args(["--kubeconfig", &kubeconfig, "--ring", &ring])
        .args(["--output", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run shardcron status --watch");
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let stdout = watch.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    let first = lines
        .recv_timeout(Duration::from_secs(30))
        .expect("the status before the watch");
    assert!(
        first.contains(&format!("\"owner\":\"{before}\"")),
        "{first}"
    );
    let index: usize = before.trim_start_matches('r').parse().expect("rN");
    fleet.replicas[index].stop().await;
    fleet.converged(Duration::from_secs(60)).await;
    let after = fleet.owners()[&watched].clone();
    let followed = lines
        .recv_timeout(Duration::from_secs(90))
        .expect("the follow line");
    let followed: serde_json::Value = serde_json::from_str(&followed).expect("JSON");
    assert_eq!(
        followed,
        json!({"followed": {"from": before, "to": after}}),
        "the watch followed {watched} to its new owner"
    );
    // The new owner's decisions, until its next slot's create (a Job
    // completing, say, may be decided first on a loaded machine).
    let deadline = Instant::now() + Duration::from_secs(100);
    let decision = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .expect("the new owner's create within 100 s");
        let decision: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        if decision["outcome"] == "created" {
            break decision;
        }
    };
    let _ = watch.kill();
    let _ = watch.wait();

    // The new owner's journal has it too, with the event it recorded.
    let out = cli(&["status", &format!("{ns}/{watched}")]);
    let answer: serde_json::Value = serde_json::from_str(&support::stdout(&out)).expect("JSON");
    let recent = answer["recentDecisions"].as_array().expect("decisions");
    assert!(
        recent
            .iter()
            .any(|d| d["createdJob"] == decision["createdJob"]
                && d["events"].as_array().is_some_and(|e| e
                    .iter()
                    .any(|e| e.as_str().is_some_and(|e| e.contains("SuccessfulCreate"))))),
        "{answer}"
    );
    // explain --live: the owner's dry run and the same journal.
    let out = cli(&["explain", "--live", &format!("{ns}/{watched}")]);
    assert!(out.status.success(), "{}", support::stderr(&out));
    let answer: serde_json::Value = serde_json::from_str(&support::stdout(&out)).expect("JSON");
    assert_eq!(answer["owner"], json!(after), "{answer}");
    assert!(
        answer["wouldDecide"]
            .as_array()
            .is_some_and(|steps| !steps.is_empty())
            && answer["recentDecisions"]
                .as_array()
                .is_some_and(|recent| recent
                    .iter()
                    .any(|d| d["createdJob"] == decision["createdJob"])),
        "{answer}"
    );
    let _ = cluster_bindings
        .delete(&format!("{ns}-operator"), &DeleteParams::default())
        .await;
    let _ = std::fs::remove_file(operator);
}
