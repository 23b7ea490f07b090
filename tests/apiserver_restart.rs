//! kube-apiserver restarted under three running replicas: their watches
//! resume, their Leases are renewed again, nothing is lost, nothing is
//! doubled, and every CronJob ends up on exactly one replica. Its own test
//! binary, so its own control plane: the restart would disturb other tests.

mod support;

use jiff::{Timestamp, ToSpan};
use shardcron_harness::net::http_get;
use std::process::Command;
use std::time::{Duration, Instant};
use support::cluster::Cluster;
use support::fleet::*;

#[tokio::test(flavor = "multi_thread")]
async fn the_replicas_ride_out_an_apiserver_restart() {
    let fleet = Fleet::new("apiserver-restart", 3, 6).await;
    fleet.all_slots_through(fleet.first_slot).await;

    let down = Instant::now();
    let status = Command::new(support::repo_root().join("deploy/local/restart"))
        .arg("--dir")
        .arg(Cluster::shared().dir())
        .args(["--down-for", "5", "kube-apiserver"])
        .status()
        .expect("run deploy/local/restart");
    assert!(status.success(), "deploy/local/restart failed");
    let back = down.elapsed();

    // Two more slots after the restart, each exactly once.
    let last = next_minute(Timestamp::now()) + 60.seconds();
    let slots = fleet.all_slots_through(last).await;
    let converged = fleet.converged(Duration::from_secs(60)).await;
    let max_delay = slots.iter().map(Slot::delay).max().unwrap_or(0);
    fleet.figure(&format!(
        "kube-apiserver down for 5 s (back after {:.1} s): {} slots, none lost or doubled, max delay {max_delay} s; converged {:.1} s after",
        back.as_secs_f64(),
        slots.len(),
        converged.as_secs_f64()
    ));
    for replica in fleet.live() {
        let (code, _) = http_get(replica.health, "/readyz").unwrap();
        assert_eq!(code, 200, "{} not ready", replica.replica);
    }
}
