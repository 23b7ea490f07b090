//! Moving between releases and controllers (docs/upgrading.md).
//!
//! - A rolling upgrade from the previous release (deploy/local/previous-release,
//!   built from this repository's history by deploy/local/build-release) to
//!   this build, one replica at a time, then a rollback the same way, under
//!   24 CronJobs firing every minute, a third of them keeping no Job
//!   (history limits 0, `ttlSecondsAfterFinished: 0`), Forbid and Replace
//!   among them: every slot runs exactly once, and each hand-off ends
//!   within the Lease and 2 s. The ring stays mixed about four minutes
//!   each way (30 s after each replacement besides the replacements'
//!   own minutes); `SHARDCRON_UPGRADE_MIXED_SECONDS=300` keeps it mixed
//!   more than ten (docs/testing.md has that run's figure).
//! - A live peer that speaks no ring protocol version in common with the
//!   ring: it is named in the metric and an Event within a minute, left
//!   out of the ring, and no new CronJob starts until it is gone.
//! - `shardcron zone-check` lists the CronJobs whose slots move between
//!   kube-controller-manager's zone and shardcron's, from the API server.

mod support;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use shardcron::shard::protocol::{PROTOCOLS_ANNOTATION, VIEW_PROTOCOL_ANNOTATION};
use shardcron_harness::cluster::CONTROLLER_NAMESPACE;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::eventually;
use support::fleet::*;
use support::jobs_seen::{Record, tally, watch_jobs};
use support::scenario::{cronjob, mixed};

const REPLICAS: usize = 3;
const CRONJOBS: usize = 24;

/// Replaces replica `index` with one running `binary`: a graceful stop (its
/// CronJobs handed off), then a start; returns how long the ring took to
/// converge without it, the hand-off.
async fn replace(fleet: &mut Fleet, index: usize, binary: &Path) -> Duration {
    clear_of_a_whole_minute().await;
    let stopped = Instant::now();
    let status = fleet.replicas[index].stop().await.expect("running");
    assert!(status.success(), "r{index} exited with {status}");
    let handoff = fleet.converged(Duration::from_secs(60)).await;
    let handoff = handoff.min(stopped.elapsed());
    fleet.replicas[index].spec_mut().bin = binary.to_owned();
    fleet.replicas[index].launch();
    fleet.replicas[index].wait_ready().await;
    fleet.converged(Duration::from_secs(60)).await;
    handoff
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_upgrade_from_the_previous_release_and_back_runs_every_slot_once() {
    let previous = support::previous_release();
    let current = PathBuf::from(env!("CARGO_BIN_EXE_shardcron"));
    let mut fleet = Fleet::empty("upgrade").await;
    let seen = Arc::new(Mutex::new(Record::default()));
    watch_jobs(fleet.jobs.clone(), seen.clone());
    for index in 0..REPLICAS {
        let mut replica = fleet.prepare(index).await;
        replica.spec_mut().bin = previous.clone();
        replica.launch();
        replica.wait_ready().await;
        fleet.replicas.push(replica);
    }
    fleet.create_cronjobs(CRONJOBS, mixed).await;

    let mixed_for = Duration::from_secs(
        std::env::var("SHARDCRON_UPGRADE_MIXED_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(30),
    );
    let mut handoffs = Vec::new();
    for (binary, to) in [
        (&current, "this build"),
        (&previous, "the previous release"),
    ] {
        for index in 0..REPLICAS {
            let handoff = replace(&mut fleet, index, binary).await;
            println!("r{index} to {to}: hand-off {handoff:?}");
            handoffs.push(handoff);
            // A whole minute's slot with the ring mixed (longer, for the
            // record: SHARDCRON_UPGRADE_MIXED_SECONDS).
            tokio::time::sleep(mixed_for).await;
        }
    }

    let tally = tally(&seen, &fleet.names, fleet.first_slot).await;
    let worst = handoffs.iter().max().copied().unwrap_or_default();
    fleet.figure(&format!(
        "previous release to this build and back, 3 replicas one at a time: {} slots of {CRONJOBS} CronJobs: {} twice, {} missing; hand-offs max {:.1} s",
        tally.slots,
        tally.twice.len(),
        tally.missing.len(),
        worst.as_secs_f64(),
    ));
    assert_eq!(
        tally.relists, 0,
        "the Job watch re-listed: Jobs may have been missed"
    );
    assert!(tally.twice.is_empty(), "slots run twice: {:?}", tally.twice);
    assert!(
        tally.missing.is_empty(),
        "slots never run: {:?}",
        tally.missing
    );
    assert!(
        worst <= LEASE + Duration::from_secs(2),
        "a hand-off took {worst:?}: {handoffs:?}"
    );
}

/// Keeps a Lease for member `name` of `ring` alive (renewed every 3 s) that
/// speaks only protocol version 99 and publishes a view in it, until the
/// returned task is aborted.
fn incompatible_peer(leases: Api<Lease>, ring: &str, name: &str) -> tokio::task::JoinHandle<()> {
    let lease_name = format!("{ring}.{name}");
    let manifest = json!({
        "metadata": {
            "name": lease_name,
            "labels": {"shardcron.io/ring": ring},
            "annotations": {
                PROTOCOLS_ANNOTATION: "99",
                VIEW_PROTOCOL_ANNOTATION: "99",
                "shardcron.io/view": format!("r0,r1,{name}"),
                "shardcron.io/build": "9.9.9 from-the-future",
            },
        },
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 15},
    });
    tokio::spawn(async move {
        let lease: Lease = serde_json::from_value(manifest).expect("a Lease");
        leases
            .create(&PostParams::default(), &lease)
            .await
            .expect("create the peer's Lease");
        loop {
            tokio::time::sleep(Duration::from_secs(3)).await;
            let renew = json!({"spec": {"renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Timestamp::now())}});
            let _ = leases
                .patch(&lease_name, &PatchParams::default(), &Patch::Merge(&renew))
                .await;
        }
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_peer_with_no_protocol_in_common_is_reported_and_left_out() {
    let fleet = Fleet::new("incompatible", 2, 4).await;
    let ring = fleet.ns.name.clone();
    let leases: Api<Lease> = Api::namespaced(fleet.admin.clone(), CONTROLLER_NAMESPACE);
    let peer = incompatible_peer(leases.clone(), &ring, "alien");

    let seen = Instant::now();
    eventually(
        "both replicas report the peer",
        Duration::from_secs(60),
        || async {
            fleet
                .live()
                .all(|r| r.metric("shardcron_ring_incompatible_peers") == 1.0)
                .then_some(())
        },
    )
    .await;
    let reported = seen.elapsed();
    let events: Api<Event> = Api::namespaced(fleet.admin.clone(), CONTROLLER_NAMESPACE);
    let lease_name = format!("{ring}.alien");
    eventually(
        "an IncompatiblePeer Event on its Lease",
        Duration::from_secs(30),
        || async {
            let list = events.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("IncompatiblePeer")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(&lease_name)
                        && e.note
                            .as_deref()
                            .is_some_and(|n| n.contains("9.9.9 from-the-future"))
                })
                .then_some(())
        },
    )
    .await;
    // Left out of the ring: the ring is still the two replicas, and every
    // CronJob already running keeps its one owner.
    fleet.converged(Duration::from_secs(30)).await;

    // Its view claims every CronJob: a new one starts nowhere, through a
    // whole minute's slot.
    let cronjobs: Api<CronJob> = Api::namespaced(fleet.admin.clone(), &fleet.ns.name);
    cronjobs
        .create(
            &PostParams::default(),
            &cronjob("late", "*/1 * * * *", json!({}), json!({})),
        )
        .await
        .expect("create CronJob");
    let slot = next_minute(Timestamp::now());
    let after_slot = slot.as_second() - Timestamp::now().as_second() + 5;
    tokio::time::sleep(Duration::from_secs(after_slot.max(0) as u64)).await;
    let owners = fleet.owners();
    assert!(
        !owners.contains_key("late"),
        "late started while the peer claims it: {owners:?}"
    );
    let jobs = fleet
        .jobs
        .list(&ListParams::default())
        .await
        .expect("list Jobs");
    let late: Vec<_> = jobs
        .items
        .iter()
        .filter_map(|job| job.metadata.name.as_deref())
        .filter(|name| name.starts_with("late-"))
        .collect();
    assert!(
        late.is_empty(),
        "late ran at {slot} while the peer claims it: {late:?}"
    );

    // Gone: the CronJob starts, the metric clears.
    peer.abort();
    leases
        .delete(&lease_name, &DeleteParams::default())
        .await
        .expect("delete the peer's Lease");
    eventually(
        "late runs on one replica",
        Duration::from_secs(60),
        || async { fleet.owners().contains_key("late").then_some(()) },
    )
    .await;
    eventually("the metric clears", Duration::from_secs(30), || async {
        fleet
            .live()
            .all(|r| r.metric("shardcron_ring_incompatible_peers") == 0.0)
            .then_some(())
    })
    .await;
    fleet.figure(&format!(
        "a peer speaking only protocol 99: reported by both replicas in {:.1} s",
        reported.as_secs_f64()
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn zone_check_lists_the_cronjobs_whose_slots_move() {
    let cluster = support::cluster::Cluster::shared();
    let ns = cluster.namespace("zone-check").await;
    let cronjobs: Api<CronJob> = Api::namespaced(cluster.admin().await, &ns.name);
    let zoned = cronjob(
        "zoned",
        "0 * * * *",
        json!({"timeZone": "Asia/Kolkata"}),
        json!({}),
    );
    for made in [
        cronjob("hourly", "0 * * * *", json!({}), json!({})),
        cronjob("often", "*/1 * * * *", json!({}), json!({})),
        zoned,
    ] {
        cronjobs
            .create(&PostParams::default(), &made)
            .await
            .expect("create CronJob");
    }
    let kubeconfig = cluster.kubeconfig_path();
    let output = support::shardcron(&[
        "zone-check",
        "--from-zone",
        "Asia/Kolkata",
        "-n",
        &ns.name,
        "--kubeconfig",
        &kubeconfig.to_string_lossy(),
        "--output",
        "json",
    ]);
    assert!(output.status.success(), "{}", support::stderr(&output));
    let listed: serde_json::Value = serde_json::from_str(&support::stdout(&output)).expect("JSON");
    let names: Vec<&str> = listed
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|m| m["cronjob"].as_str())
        .collect();
    assert_eq!(names, [format!("{}/hourly", ns.name)]);
    let bad = support::shardcron(&["zone-check", "--from-zone", "Mars/Olympus"]);
    assert_eq!(bad.status.code(), Some(2), "{}", support::stderr(&bad));
    assert!(
        support::stderr(&bad).contains("--from-zone"),
        "{}",
        support::stderr(&bad)
    );
}
