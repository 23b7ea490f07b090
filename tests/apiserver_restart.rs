//! kube-apiserver restarted under the running controller: its watches
//! resume, nothing is lost, nothing is doubled. Its own test binary, so its
//! own control plane: the restart would disturb other tests.

mod support;

use serde_json::json;
use std::process::Command;
use std::time::Duration;
use support::cluster::Cluster;
use support::eventually;
use support::scenario::*;

#[tokio::test(flavor = "multi_thread")]
async fn the_controller_rides_out_an_apiserver_restart() {
    let s = scenario("apiserver-restart").await;
    s.create(&cronjob("steady", "*/1 * * * *", json!({}), json!({})))
        .await;
    eventually("the first Job", ONE_SLOT, || async {
        (!s.all_jobs().await.is_empty()).then_some(())
    })
    .await;

    let status = Command::new(support::repo_root().join("deploy/local/restart"))
        .arg("--dir")
        .arg(Cluster::shared().dir())
        .args(["--down-for", "5", "kube-apiserver"])
        .status()
        .expect("run deploy/local/restart");
    assert!(status.success(), "deploy/local/restart failed");

    // The watches resumed: a CronJob created after the restart runs, and
    // the first one keeps its slots.
    s.create(&cronjob("after", "*/1 * * * *", json!({}), json!({})))
        .await;
    let jobs = eventually(
        "a Job of each CronJob after the restart",
        TWO_SLOTS,
        || async {
            let jobs = s.all_jobs().await;
            let of = |cronjob: &str| {
                jobs.iter()
                    .filter(|j| name_of(j).starts_with(&format!("{cronjob}-")))
                    .count()
            };
            (of("steady") >= 2 && of("after") >= 1).then_some(jobs)
        },
    )
    .await;
    let steady: Vec<_> = jobs
        .iter()
        .filter(|j| name_of(j).starts_with("steady-"))
        .cloned()
        .collect();
    assert_one_job_per_slot("steady", &steady);
    // No slot lost: consecutive minutes from the first.
    let mut minutes: Vec<i64> = steady
        .iter()
        .map(|j| scheduled_time(j).as_second() / 60)
        .collect();
    minutes.sort();
    for pair in minutes.windows(2) {
        assert_eq!(pair[1] - pair[0], 1, "a slot was lost: {minutes:?}");
    }
    // Still ready, and it noticed the outage.
    let (code, _) = support::controller::http_get(s.controller.health, "/readyz").unwrap();
    assert_eq!(code, 200);
    tokio::time::sleep(Duration::from_secs(1)).await;
}
