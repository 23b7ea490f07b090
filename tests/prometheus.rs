//! The shipped monitoring in a real Prometheus (`deploy/local/up
//! --with-prometheus`): it scrapes every replica's metrics port as the
//! ServiceAccount the shipped RBAC names, with the shipped alert rules.
//!
//! - Every CronJob's series is there once, from its owner, with the value
//!   the schedule gives.
//! - A namespace whose Jobs the API server refuses (a ResourceQuota of no
//!   Jobs) makes `ShardcronCronJobMissedSchedule` fire for exactly its
//!   CronJobs, and it resolves once they run again. The rule's bounds (300 s
//!   late, for 2 m) are scaled down to 20 s and 10 s for the test; its
//!   expression is the shipped one.
//! - An owner stopped (SIGSTOP): its targets go down, its peer takes its
//!   CronJobs over, and no slot is missed, so no alert: with shards, one
//!   replica's death is not an outage.
//! - Prometheus with a tenant's token is refused (403) by every replica.
//!
//! On a control plane of its own: Prometheus is started with it.

mod support;

use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;
use support::cluster::Cluster;
use support::fleet::Fleet;
use support::prometheus::Prometheus;
use support::rbac::{Grant, account_kubeconfig, token};
use support::scenario::cronjob;
use support::{eventually, repo_root};

const ALERT: &str = "ShardcronCronJobMissedSchedule";

/// The CronJobs of `namespace` the alert fires for now.
fn firing(prometheus: &Prometheus, namespace: &str) -> BTreeSet<String> {
    prometheus
        .query(&format!(
            "ALERTS{{alertname=\"{ALERT}\",alertstate=\"firing\",namespace=\"{namespace}\"}}"
        ))
        .into_iter()
        .filter_map(|(labels, _)| labels["cronjob"].as_str().map(str::to_owned))
        .collect()
}

/// The shipped rules, `ALERT`'s bounds scaled down.
fn load_rules_scaled(prometheus: &Prometheus) {
    let shipped = std::fs::read_to_string(repo_root().join("deploy/monitoring/alerts.yaml"))
        .expect("read deploy/monitoring/alerts.yaml");
    let at = shipped
        .find(&format!("- alert: {ALERT}"))
        .expect("the rule in alerts.yaml");
    let (before, rule) = shipped.split_at(at);
    let end = rule[1..].find("- alert:").map_or(rule.len(), |e| e + 1);
    let (rule, after) = rule.split_at(end);
    for bound in ["> 300\n", "for: 2m\n"] {
        assert_eq!(rule.matches(bound).count(), 1, "{bound:?} in {rule}");
    }
    let scaled = rule
        .replace("> 300\n", "> 20\n")
        .replace("for: 2m\n", "for: 10s\n");
    prometheus.load_rules(&format!("{before}{scaled}{after}"));
}

const CRONJOBS: usize = 10;

/// The hour of `cNN`'s daily run; `None` for the every-minute ones.
fn daily_hour(name: &str) -> Option<i64> {
    name.strip_prefix('c')
        .and_then(|n| n.parse().ok())
        .filter(|n| *n < 6)
}

/// The next run of `0 H * * *` (UTC) after `now`, in seconds.
fn next_daily(hour: i64, now: i64) -> i64 {
    let day = now - now.rem_euclid(86_400);
    let today = day + hour * 3_600;
    if today > now { today } else { today + 86_400 }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shipped_rules_fire_in_a_real_prometheus_for_exactly_the_cronjobs_that_miss() {
    let cluster = Cluster::with_prometheus();
    let prometheus = Prometheus::of(cluster);
    let admin = cluster.admin().await;

    // A namespace whose Jobs the API server refuses, served by the fleet too.
    let refused = cluster.namespace("prometheus-refused").await;
    let mut fleet = Fleet::empty_with("prometheus", &["--namespace", &refused.name]).await;
    fleet.add().await;
    fleet.add().await;
    for replica in &fleet.replicas {
        prometheus.scrape(&replica.replica, replica.secure_metrics.port());
    }
    // c00..c05 daily at hour 0..5 (their next run is known exactly),
    // c06..c09 every minute.
    fleet
        .create_cronjobs(CRONJOBS, |name| {
            let schedule = match daily_hour(name) {
                Some(hour) => format!("0 {hour} * * *"),
                None => "* * * * *".to_owned(),
            };
            cronjob(name, &schedule, json!({}), json!({}))
        })
        .await;
    let ns = fleet.ns.name.clone();

    let quota: k8s_openapi::api::core::v1::ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "no-jobs"},
        "spec": {"hard": {"count/jobs.batch": "0"}}
    }))
    .expect("a ResourceQuota");
    let quotas = kube::Api::namespaced(admin.clone(), &refused.name);
    quotas
        .create(&Default::default(), &quota)
        .await
        .expect("create the quota");
    let missing: BTreeSet<String> = ["q0", "q1", "q2"].map(str::to_owned).into();
    let cronjobs =
        kube::Api::<k8s_openapi::api::batch::v1::CronJob>::namespaced(admin.clone(), &refused.name);
    for name in &missing {
        cronjobs
            .create(
                &Default::default(),
                &cronjob(name, "* * * * *", json!({}), json!({})),
            )
            .await
            .expect("create a CronJob");
    }

    // Both paths of both replicas scraped as the shipped RBAC allows.
    eventually("every target up", Duration::from_secs(60), || async {
        let targets = prometheus.targets();
        (targets.len() == 4 && targets.iter().all(|t| t.2 == "up")).then_some(())
    })
    .await;

    // Every CronJob's wake-up, once, from its owner, as its schedule says.
    let owners = fleet.owners();
    eventually(
        "each CronJob's series from its owner",
        Duration::from_secs(60),
        || async {
            let series = prometheus.query(&format!(
                "shardcron_cronjob_next_schedule_time_seconds{{namespace=\"{ns}\"}}"
            ));
            let now = jiff::Timestamp::now().as_second();
            let names: Vec<String> = series
                .iter()
                .filter_map(|(l, _)| l["cronjob"].as_str().map(str::to_owned))
                .collect();
            let right = series.len() == CRONJOBS
                && names.iter().collect::<BTreeSet<_>>().len() == names.len()
                && series.iter().all(|(labels, value)| {
                    let name = labels["cronjob"].as_str().unwrap_or_default();
                    let owner = labels["replica"].as_str().unwrap_or_default();
                    let expected = match daily_hour(name) {
                        Some(hour) => *value as i64 == next_daily(hour, now),
                        // Next minute (or the one just passed, if the
                        // scrape came before it ran).
                        None => (*value as i64) % 60 == 0 && (*value as i64 - now).abs() <= 61,
                    };
                    expected && owners.get(name).map(String::as_str) == Some(owner)
                });
            right.then_some(())
        },
    )
    .await;
    assert_eq!(
        owners.values().collect::<BTreeSet<_>>().len(),
        2,
        "both replicas own some: {owners:?}"
    );

    // The refused namespace's CronJobs miss: the alert fires for them, and
    // for nothing that runs.
    load_rules_scaled(&prometheus);
    eventually(
        "the alert firing for the refused CronJobs",
        Duration::from_secs(150),
        || async {
            assert!(
                firing(&prometheus, &ns).is_empty(),
                "an alert for a CronJob that runs"
            );
            (firing(&prometheus, &refused.name) == missing).then_some(())
        },
    )
    .await;
    quotas
        .delete("no-jobs", &Default::default())
        .await
        .expect("delete the quota");
    eventually(
        "the alert resolved once they run",
        Duration::from_secs(180),
        || async { firing(&prometheus, &refused.name).is_empty().then_some(()) },
    )
    .await;

    // An owner stops: its targets go down, its peer takes its CronJobs, no
    // slot is missed.
    let stopped = fleet.replicas[0].replica.clone();
    fleet.replicas[0].signal(shardcron_harness::replica::Signal::Stop);
    let survivor = fleet.replicas[1].replica.clone();
    eventually(
        "the stopped owner's targets down, its CronJobs' series from its peer",
        Duration::from_secs(90),
        || async {
            let down = prometheus
                .targets()
                .iter()
                .filter(|t| t.2 == "down")
                .count();
            let series = prometheus.query(&format!(
                "shardcron_cronjob_next_schedule_time_seconds{{namespace=\"{ns}\",replica=\"{survivor}\"}}"
            ));
            (down == 2 && series.len() == CRONJOBS).then_some(())
        },
    )
    .await;
    // A minute's slot passes after the takeover: still nothing missed.
    let until = std::time::Instant::now() + Duration::from_secs(75);
    while std::time::Instant::now() < until {
        assert!(
            firing(&prometheus, &ns).is_empty(),
            "{stopped}'s CronJobs missed a slot"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    fleet.replicas[0].signal(shardcron_harness::replica::Signal::Cont);

    // Prometheus with a tenant's token: every replica refuses it.
    account_kubeconfig(&admin, cluster, &ns, "tenant", Grant::ClusterRole("view")).await;
    let tenant = token(&admin, &ns, "tenant", &[]).await;
    let own = std::fs::read_to_string(prometheus.dir.join("token")).expect("the token");
    std::fs::write(prometheus.dir.join("token"), tenant).expect("write the token");
    eventually(
        "every scrape refused with the tenant's token",
        Duration::from_secs(60),
        || async {
            let targets = prometheus.targets();
            (targets.len() == 4 && targets.iter().all(|t| t.2 == "down" && t.3.contains("403")))
                .then_some(())
        },
    )
    .await;
    std::fs::write(prometheus.dir.join("token"), own).expect("restore the token");
}
