//! The shipped alert rules on a healthy ring, in a real Prometheus: the
//! demo's samples (deploy/local/samples.yaml: every minute, Forbid behind
//! 90 s Jobs, Replace, a zone, a CronJob whose Jobs fail) plus a spread, a
//! catch-up and a suspended CronJob, served by three replicas, one killed
//! mid-way and started again, scraped as the shipped RBAC allows, with
//! every shipped rule, its `for` divided by 4 but not below a minute (so
//! that a rule which would cry wolf within an hour does so here) and MissedSchedule's lateness
//! with it (300 s to 75 s). Nothing may fire but what is meant to:
//! ShardcronCronJobFailing for `flaky`, whose Jobs fail.
//!
//! On a control plane of its own: Prometheus is started with it.

mod support;

use k8s_openapi::api::batch::v1::CronJob;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use support::cluster::Cluster;
use support::fleet::Fleet;
use support::prometheus::Prometheus;
use support::{eventually, repo_root};

/// The alert meant to fire, and for what.
const MEANT: (&str, &str) = ("ShardcronCronJobFailing", "flaky");

/// A duration of the rules (`10m`, `1h`, `90s`) divided by 4, never below
/// a minute: a replica started again under its own name holds no valid
/// Lease until its old one expires (15 s, which the soak does not scale)
/// and it rejoins, a healthy look-alike that a 15 s LeaseInvalid would page
/// for under the suite's load; and a range shorter than a minute holds too
/// few scrapes.
fn scaled(duration: &str) -> Option<String> {
    let unit = match duration.chars().last()? {
        's' => 1,
        'm' => 60,
        'h' => 3_600,
        _ => return None,
    };
    let count: u64 = duration[..duration.len() - 1].parse().ok()?;
    Some(format!("{}s", (count * unit / 4).max(60)))
}

/// Each range selector of `line` (`[10m]`) scaled as its `for`: a rule
/// whose `for` outlasts its window (HighSkew's 15 m over 10 m, so that one
/// late slot cannot fire it alone) keeps that order.
fn scale_ranges(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']').map(|at| open + at) else {
            break;
        };
        out.push_str(&rest[..=open]);
        let inside = &rest[open + 1..close];
        out.push_str(&scaled(inside).unwrap_or_else(|| inside.to_owned()));
        out.push(']');
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// The shipped rules with every `for` and range divided by 4 (not below a
/// minute) and MissedSchedule's lateness with them.
fn scaled_rules() -> String {
    let shipped = std::fs::read_to_string(repo_root().join("deploy/monitoring/alerts.yaml"))
        .expect("read deploy/monitoring/alerts.yaml");
    let mut rules = Vec::new();
    for line in shipped.lines() {
        let line = match line.trim_start().strip_prefix("for: ") {
            Some(duration) => {
                let by_4 = scaled(duration).unwrap_or_else(|| panic!("a `for`: {line}"));
                line.replace(duration, &by_4)
            }
            None => scale_ranges(line).replace(
                "(shardcron_cronjob_next_schedule_time_seconds) > 300",
                "(shardcron_cronjob_next_schedule_time_seconds) > 75",
            ),
        };
        rules.push(line);
    }
    let rules = rules.join("\n");
    assert!(rules.contains("> 75"), "MissedSchedule's lateness moved");
    assert!(rules.contains("[150s]"), "HighSkew's 10 m window scaled");
    rules
}

/// The demo's sample CronJobs, and the look-alikes the demo lacks.
fn cronjobs() -> Vec<CronJob> {
    let samples = std::fs::read_to_string(repo_root().join("deploy/local/samples.yaml"))
        .expect("read deploy/local/samples.yaml");
    let mut cronjobs: Vec<CronJob> = serde_yaml_ng::Deserializer::from_str(&samples)
        .filter_map(|doc| {
            let value = serde_yaml_ng::Value::deserialize(doc).ok()?;
            (value["kind"].as_str() == Some("CronJob"))
                .then(|| serde_yaml_ng::from_value(value).expect("a CronJob"))
        })
        .collect();
    assert!(cronjobs.len() >= 5, "the demo's samples");
    let minutely = |name: &str, annotations: serde_json::Value, spec: serde_json::Value| {
        let mut cronjob = support::scenario::cronjob(name, "*/1 * * * *", spec, json!({}));
        cronjob.metadata.annotations = serde_json::from_value(annotations).expect("annotations");
        cronjob
    };
    // Each slot 0-49 s late on purpose (its offset).
    cronjobs.push(minutely(
        "spread",
        json!({"shardcron.io/spread": "50s"}),
        json!({}),
    ));
    // Five slots missed before its creation, run one after another.
    let missed_since = jiff::Timestamp::now() - jiff::SignedDuration::from_mins(5);
    cronjobs.push(minutely(
        "catch-up",
        json!({"shardcron.io/catch-up": "10m",
               "shardcron.io/last-schedule-time": missed_since.to_string()}),
        json!({}),
    ));
    cronjobs.push(minutely("suspended", json!({}), json!({"suspend": true})));
    cronjobs
}

use serde::Deserialize as _;

#[tokio::test(flavor = "multi_thread")]
async fn on_a_healthy_ring_only_the_alerts_meant_to_fire_do() {
    let cluster = Cluster::with_prometheus();
    let prometheus = Prometheus::of(cluster);
    let mut fleet = Fleet::empty("soak").await;
    for _ in 0..3 {
        fleet.add().await;
    }
    let replicas: BTreeSet<String> = fleet.replicas.iter().map(|r| r.replica.clone()).collect();
    for replica in &fleet.replicas {
        prometheus.scrape(&replica.replica, replica.secure_metrics.port());
    }
    let ns = fleet.ns.name.clone();
    let api = kube::Api::<CronJob>::namespaced(fleet.admin.clone(), &ns);
    for mut cronjob in cronjobs() {
        cronjob.metadata.namespace = Some(ns.clone());
        api.create(&Default::default(), &cronjob)
            .await
            .expect("create a CronJob");
    }
    prometheus.load_rules(&scaled_rules());
    eventually("every target up", Duration::from_secs(60), || async {
        let targets = prometheus.targets();
        (targets.len() == 6 && targets.iter().all(|t| t.2 == "up")).then_some(())
    })
    .await;

    let watcher = Watcher {
        prometheus: &prometheus,
        namespace: &ns,
        replicas: &replicas,
    };
    let mut seen = BTreeSet::new();
    // Three minutes as they are.
    watcher.watch(Duration::from_secs(180), &mut seen).await;
    // A replica killed: its share waits for its Lease, then moves.
    fleet.replicas[0].kill();
    watcher.watch(Duration::from_secs(60), &mut seen).await;
    // Started again: the ring grows back.
    fleet.replicas[0].launch();
    fleet.replicas[0].wait_ready().await;
    watcher.watch(Duration::from_secs(120), &mut seen).await;

    assert!(
        seen.contains(&(MEANT.0.to_owned(), MEANT.1.to_owned())),
        "{MEANT:?} never fired: {seen:?}"
    );
}

/// Watches the alerts that concern one ring.
struct Watcher<'a> {
    prometheus: &'a Prometheus,
    namespace: &'a str,
    replicas: &'a BTreeSet<String>,
}

impl Watcher<'_> {
    /// What fires that concerns this ring: its namespace's CronJobs, its
    /// replicas, and the rules over all replicas (no labels of either), as
    /// (alert, the CronJob or replica).
    fn firing(&self) -> BTreeSet<(String, String)> {
        self.prometheus
            .query("ALERTS{alertstate=\"firing\"}")
            .into_iter()
            .filter(|(labels, _)| {
                let namespace = labels["namespace"].as_str();
                let replica = labels["replica"].as_str();
                namespace == Some(self.namespace)
                    || replica.is_some_and(|r| self.replicas.contains(r))
                    || (namespace.is_none() && replica.is_none() && labels["instance"].is_null())
            })
            .map(|(labels, _)| {
                let text = |key: &str| labels[key].as_str().unwrap_or_default().to_owned();
                (
                    text("alertname"),
                    [text("cronjob"), text("replica")].concat(),
                )
            })
            .collect()
    }

    /// For `how_long`, every 5 s: nothing fires but the alert meant to;
    /// what fired joins `seen`.
    async fn watch(&self, how_long: Duration, seen: &mut BTreeSet<(String, String)>) {
        let until = Instant::now() + how_long;
        while Instant::now() < until {
            let now = self.firing();
            let unmeant: Vec<_> = now
                .iter()
                .filter(|(alert, subject)| (alert.as_str(), subject.as_str()) != MEANT)
                .collect();
            assert!(
                unmeant.is_empty(),
                "alerts a healthy ring must not raise: {unmeant:?}"
            );
            seen.extend(now);
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    }
}

#[test]
fn durations_and_ranges_scale_by_four_but_not_below_a_minute() {
    assert_eq!(scaled("10m").as_deref(), Some("150s"));
    assert_eq!(scaled("2m").as_deref(), Some("60s"), "never below a minute");
    assert_eq!(scaled("1h").as_deref(), Some("900s"));
    assert_eq!(scaled("soon"), None);
    assert_eq!(
        scale_ranges(r#"rate(x[10m]) > 30 and y{a="[b]"}"#),
        r#"rate(x[150s]) > 30 and y{a="[b]"}"#
    );
}
