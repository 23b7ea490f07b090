//! The move from kube-controller-manager's CronJob controller to shardcron
//! and back, as docs/upgrading.md tells it, on a control plane of its own
//! whose kube-controller-manager runs its CronJob controller at first.
//!
//! Each switch straddles a slot: the controller going away stops ten
//! seconds before it, the one coming starts five seconds after it, so that
//! slot falls due while neither runs, and the one that starts runs it late
//! from the status the other wrote (`lastScheduleTime`). Under 25 CronJobs
//! firing every minute, a third of the 24 [`mixed`] ones keeping no Job
//! (history limits 0, `ttlSecondsAfterFinished: 0`: a slot's Job name no
//! longer guards a second run), Forbid and Replace among the rest, one
//! spread, every Job recorded from a watch:
//! every slot runs exactly once, each by the controller the steps say.
//!
//! Then the mistake users will make: shardcron started again while
//! kube-controller-manager's CronJob controller runs. A CronJob spread by
//! `shardcron.io/spread` gets its Job from upstream at the slot, before
//! shardcron's offset, without shardcron's bucket label: shardcron says so
//! within the minute (`shardcron_jobs_created_elsewhere_total`, a
//! `JobCreatedElsewhere` Warning), and no slot of a CronJob whose Jobs
//! outlive the overlap runs twice.

mod support;

use jiff::{Timestamp, ToSpan};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use shardcron::reconcile::{Options, SPREAD_ANNOTATION};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::cluster::Cluster;
use support::eventually;
use support::fleet::Fleet;
use support::jobs_seen::{Record, tally, watch_jobs};
use support::scenario::{cronjob, keeps_no_job_in_mix, mixed};

const REPLICAS: usize = 2;
const CRONJOBS: usize = 24;
/// The spread CronJob's window: its offset, picked between 5 and 40 s,
/// leaves upstream's create first and shardcron's within the minute.
const SPREAD: &str = "50s";

/// A CronJob spread over [`SPREAD`] whose offset in `namespace` is 5 to
/// 40 s (the offset hashes the namespace and the name: the first such name).
fn spread_cronjob(namespace: &str) -> CronJob {
    let annotations = BTreeMap::from([(SPREAD_ANNOTATION.to_owned(), SPREAD.to_owned())]);
    let options = Options::from_annotations(Some(&annotations));
    let name = (0..)
        .map(|i| format!("spread{i}"))
        .find(|name| (5..=40).contains(&options.spread_offset(namespace, name)))
        .expect("a name with such an offset");
    let mut cronjob = cronjob(
        &name,
        "*/1 * * * *",
        json!({"successfulJobsHistoryLimit": 100, "failedJobsHistoryLimit": 100}),
        json!({}),
    );
    cronjob.metadata.annotations = Some(annotations);
    cronjob
}

async fn sleep_until(t: Timestamp) {
    let wait = t.duration_since(Timestamp::now());
    tokio::time::sleep(wait.try_into().unwrap_or_default()).await;
}

/// kube-controller-manager's `--controllers` without its CronJob
/// controller, and with it (as its recorded command line quotes them).
const WITHOUT_CRONJOB: &str = r"\*\,-cronjob-controller";
const WITH_CRONJOB: &str = r"\*";

/// The slots before `until` that shardcron ran (`shardcron`), or
/// kube-controller-manager (which writes no `shardcron.io/created-by`).
fn slots_by(record: &Record, shardcron: bool, until: Timestamp) -> Vec<Timestamp> {
    let mut slots: Vec<Timestamp> = record
        .slots
        .iter()
        .filter(|((_, slot), _)| *slot < until)
        .filter(|(_, jobs)| jobs.values().any(|j| j.created_by.is_empty() != shardcron))
        .map(|((_, slot), _)| *slot)
        .collect();
    slots.sort();
    slots.dedup();
    slots
}

#[tokio::test(flavor = "multi_thread")]
async fn the_move_from_kube_controller_managers_controller_and_back_runs_every_slot_once() {
    let cluster = Cluster::shared_beside_upstream();
    assert!(
        cluster.runs_upstream_cronjob(),
        "this test starts beside kube-controller-manager's CronJob controller"
    );
    let mut fleet = Fleet::empty_on(cluster, "switch", &[]).await;
    let seen = Arc::new(Mutex::new(Record::default()));
    watch_jobs(fleet.jobs.clone(), seen.clone());
    fleet.create_cronjobs_unwatched(CRONJOBS, mixed).await;
    let spread = spread_cronjob(&fleet.ns.name);
    let spread_name = spread.metadata.name.clone().expect("a name");
    Api::<CronJob>::namespaced(fleet.admin.clone(), &fleet.ns.name)
        .create(&PostParams::default(), &spread)
        .await
        .expect("create the spread CronJob");
    fleet.names.push(spread_name.clone());
    // The slots: upstream alone, neither, shardcron alone, neither,
    // upstream alone, both.
    let slot = |n: i64| fleet.first_slot + (60 * n).seconds();
    let [s0, s1, s2, s3, s4, s5] = [0, 1, 2, 3, 4, 5].map(slot);

    // Over: ten seconds before the second slot kube-controller-manager
    // restarts without its CronJob controller (step 2), and five seconds
    // after it shardcron starts (step 3).
    sleep_until(s0 + 50.seconds()).await;
    cluster
        .restart_kcm(&[("--controllers", WITHOUT_CRONJOB)])
        .expect("restart kube-controller-manager without its CronJob controller");
    sleep_until(s1 + 5.seconds()).await;
    for _ in 0..REPLICAS {
        fleet.add().await;
    }

    // Back: ten seconds before the fourth slot shardcron's replicas stop
    // together (each releases its Lease), and five seconds after it
    // kube-controller-manager restarts with its CronJob controller.
    sleep_until(s2 + 50.seconds()).await;
    let stops = fleet.replicas.iter_mut().map(|replica| replica.stop());
    for status in futures::future::join_all(stops).await {
        let status = status.expect("running");
        assert!(status.success(), "a replica exited with {status}");
    }
    sleep_until(s3 + 5.seconds()).await;
    cluster
        .restart_kcm(&[("--controllers", WITH_CRONJOB)])
        .expect("restart kube-controller-manager with its CronJob controller");

    // Both at once: shardcron again, five seconds after the fifth slot,
    // with kube-controller-manager's CronJob controller on.
    sleep_until(s4 + 5.seconds()).await;
    for replica in &mut fleet.replicas {
        replica.launch();
        replica.wait_ready().await;
    }
    let events: Api<Event> = Api::namespaced(fleet.admin.clone(), &fleet.ns.name);
    let selector = format!("involvedObject.kind=CronJob,involvedObject.name={spread_name}");
    eventually(
        "a JobCreatedElsewhere Warning within the overlap's first minute",
        Duration::from_secs((s5.as_second() + 60 - Timestamp::now().as_second()).max(1) as u64),
        || async {
            let list = events
                .list(&ListParams::default().fields(&selector))
                .await
                .ok()?;
            list.items
                .iter()
                .any(|e| e.reason.as_deref() == Some("JobCreatedElsewhere"))
                .then_some(())
        },
    )
    .await;
    let told = Timestamp::now();
    let found: f64 = fleet
        .live()
        .map(|r| r.metric("shardcron_jobs_created_elsewhere_total"))
        .sum();
    assert!(found >= 1.0, "no replica counted a Job made elsewhere");

    let tally = tally(&seen, &fleet.names, s0).await;
    let record = seen.lock().expect("record");
    let by_shardcron = slots_by(&record, true, s5);
    let by_upstream = slots_by(&record, false, s5);
    fleet.figure(&format!(
        "kube-controller-manager to shardcron and back, then both from {s5}: {} slots of {} CronJobs: {} twice, {} missing; latest {:?} s; before the overlap shardcron ran {by_shardcron:?}, upstream {by_upstream:?}; the overlap told after {} s ({found} Jobs made elsewhere)",
        tally.slots,
        fleet.names.len(),
        tally.twice.len(),
        tally.missing.len(),
        tally.delays.iter().max(),
        told.as_second() - s5.as_second(),
    ));
    assert_eq!(
        tally.relists, 0,
        "the Job watch re-listed: Jobs may have been missed"
    );
    // Twice only where both ran and the Job was gone before the slower
    // controller's create: a CronJob that keeps no Job, in the overlap.
    let twice: Vec<_> = tally
        .twice
        .iter()
        .filter(|((name, slot), _)| !(keeps_no_job_in_mix(name) && *slot >= s5))
        .collect();
    assert!(twice.is_empty(), "slots run twice: {twice:?}");
    assert!(
        tally.missing.is_empty(),
        "slots never run: {:?}",
        tally.missing
    );
    // Each controller ran the slots between its start and its stop: the
    // slot that fell due while neither ran, by the one that started.
    assert_eq!(by_shardcron, [s1, s2], "shardcron's slots");
    assert_eq!(by_upstream, [s0, s3, s4], "kube-controller-manager's slots");
}
