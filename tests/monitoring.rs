//! deploy/monitoring: the alert rules pass Prometheus' own rule validation
//! (promtool's: YAML, fields, PromQL, templates), every dashboard query
//! parses as PromQL, and every metric either queries is one the controller
//! exports, so neither can drift from the code. Read with Prometheus'
//! parsers through `promcheck` (deploy/local/promcheck, built by
//! deploy/local/build); the exported names come from the controller's own
//! registry. The rules' unit tests (deploy/monitoring/alerts_test.yaml) run
//! in the pinned `promtool`, and every rule has tests both ways.

mod support;

use std::collections::BTreeSet;
use std::path::Path;
use support::{local_binary, repo_root};

const RULES: &str = "deploy/monitoring/alerts.yaml";
const DASHBOARD: &str = "deploy/monitoring/dashboard.json";
const RULE_TESTS: &str = "deploy/monitoring/alerts_test.yaml";

/// Every series name the controller's `/metrics` can carry, from the
/// registry itself.
fn exported() -> BTreeSet<String> {
    shardcron::telemetry::Metrics::new()
        .series_names()
        .into_iter()
        .collect()
}

/// What `promcheck KIND FILE` says: the metric names the file queries, or
/// its errors.
fn queried(kind: &str, file: &Path) -> Result<(usize, Vec<String>), String> {
    let out = std::process::Command::new(local_binary("promcheck"))
        .args([kind, &file.to_string_lossy()])
        .output()
        .expect("run promcheck");
    if !out.status.success() {
        return Err(support::stderr(&out));
    }
    let answer: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("promcheck prints JSON");
    let names = answer["names"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    Ok((answer["queries"].as_u64().unwrap_or(0) as usize, names))
}

/// Names the rules read from kube-apiserver's own metrics (stable ones).
const FROM_KUBE_APISERVER: [&str; 1] = [
    // ShardcronAdminAPIUnavailable: the aggregator's view of the APIService.
    "aggregator_unavailable_apiservice",
];

/// The names in `file` that neither the controller nor kube-apiserver
/// exports.
fn unknown(kind: &str, file: &Path) -> Vec<String> {
    let mut exported = exported();
    exported.extend(FROM_KUBE_APISERVER.map(str::to_owned));
    let (queries, names) = queried(kind, file).unwrap_or_else(|e| panic!("{e}"));
    assert!(queries > 0, "{} has no queries", file.display());
    names
        .into_iter()
        .filter(|n| !exported.contains(n))
        .collect()
}

#[test]
fn the_controller_exports_the_per_cronjob_families() {
    let exported = exported();
    for name in [
        "shardcron_cronjob_next_schedule_time_seconds",
        "shardcron_cronjob_last_schedule_time_seconds",
        "shardcron_cronjob_last_successful_time_seconds",
        "shardcron_cronjob_last_failed_time_seconds",
        "shardcron_cronjob_active_jobs",
        "shardcron_cronjob_suspended",
        "shardcron_cronjob_skipped_slots_total",
        "shardcron_job_creation_skew_seconds_bucket",
        "shardcron_job_policy_wait_seconds_bucket",
        "shardcron_cronjob_forbid_held_since_seconds",
    ] {
        assert!(exported.contains(name), "{name} not in {exported:?}");
    }
}

#[test]
fn the_alert_rules_validate_and_query_only_exported_metrics() {
    let file = repo_root().join(RULES);
    assert_eq!(unknown("rules", &file), Vec::<String>::new());
}

#[test]
fn the_dashboards_queries_parse_and_query_only_exported_metrics() {
    let file = repo_root().join(DASHBOARD);
    assert_eq!(unknown("dashboard", &file), Vec::<String>::new());
}

/// The check finds what it is for: a renamed metric, a query that does not
/// parse, a rule without an expression.
#[test]
fn a_misspelt_metric_or_a_broken_query_is_caught() {
    let dir = std::env::temp_dir().join(format!("shardcron-monitoring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let rules = std::fs::read_to_string(repo_root().join(RULES)).expect("the rules");
    let renamed = dir.join("renamed.yaml");
    std::fs::write(
        &renamed,
        rules.replace(
            "shardcron_cronjob_next_schedule_time_seconds",
            "shardcron_cronjob_next_schedule_time",
        ),
    )
    .expect("write");
    assert_eq!(
        unknown("rules", &renamed),
        ["shardcron_cronjob_next_schedule_time"]
    );
    let broken = dir.join("broken.yaml");
    std::fs::write(
        &broken,
        "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: rate(shardcron_actors[5m]\n",
    )
    .expect("write");
    let error = queried("rules", &broken).expect_err("a query that does not parse");
    assert!(error.contains("unclosed left parenthesis"), "{error}");
    let empty = dir.join("empty.yaml");
    std::fs::write(
        &empty,
        "groups:\n  - name: g\n    rules:\n      - alert: A\n",
    )
    .expect("write");
    assert!(queried("rules", &empty).is_err());
    let dashboard = std::fs::read_to_string(repo_root().join(DASHBOARD)).expect("the dashboard");
    let bad_panel = dir.join("dashboard.json");
    std::fs::write(
        &bad_panel,
        dashboard.replacen("sum by (reason) (rate(", "sum by (reason) (rate((", 1),
    )
    .expect("write");
    assert!(queried("dashboard", &bad_panel).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// What `promtool test rules FILE` says, and whether every test passed.
fn promtool_test(file: &Path) -> (bool, String) {
    let out = std::process::Command::new(local_binary("promtool"))
        .args(["test", "rules", &file.to_string_lossy()])
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn every_rule_fires_for_its_cause_and_stays_silent_for_its_look_alikes() {
    let (passed, text) = promtool_test(&repo_root().join(RULE_TESTS));
    assert!(passed, "{text}");
    // Both ways, for every rule: an evaluation where it fires, and one
    // where it does not (no alert at all, or fewer alerts than the test
    // has look-alike series).
    let rules: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(repo_root().join(RULES)).expect("rules"))
            .expect("YAML");
    let tests: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo_root().join(RULE_TESTS)).expect("rule tests"),
    )
    .expect("YAML");
    let mut fires = BTreeSet::new();
    let mut silent = BTreeSet::new();
    for test in tests["tests"].as_sequence().expect("tests") {
        let series = test["input_series"].as_sequence().map_or(0, Vec::len);
        for eval in test["alert_rule_test"]
            .as_sequence()
            .expect("alert_rule_test")
        {
            let name = eval["alertname"].as_str().expect("alertname").to_owned();
            let expected = eval["exp_alerts"].as_sequence().map_or(0, Vec::len);
            if expected > 0 {
                fires.insert(name.clone());
            }
            if expected == 0 || expected < series {
                silent.insert(name);
            }
        }
    }
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            let name = rule["alert"].as_str().expect("an alert");
            assert!(fires.contains(name), "no test shows {name} firing");
            assert!(silent.contains(name), "no test shows {name} silent");
        }
    }
}

/// The tests catch what they are for: the Stuck rule as it was (any Forbid
/// skip in the last hour while a Job runs) fires on the demo's forbid
/// sample, and the tests say so.
#[test]
fn a_rule_that_cries_wolf_fails_its_tests() {
    let dir = std::env::temp_dir().join(format!("shardcron-rule-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let rules = std::fs::read_to_string(repo_root().join(RULES)).expect("the rules");
    let wolf = rules.replace(
        "time() - max by (namespace, cronjob, group) (shardcron_cronjob_forbid_held_since_seconds) > 3600",
        "max by (namespace, cronjob, group) (shardcron_cronjob_forbid_held_since_seconds) > 0",
    );
    assert_ne!(wolf, rules, "the Stuck rule's expression moved");
    std::fs::write(dir.join("alerts.yaml"), wolf).expect("write");
    std::fs::copy(repo_root().join(RULE_TESTS), dir.join("alerts_test.yaml")).expect("copy");
    let (passed, text) = promtool_test(&dir.join("alerts_test.yaml"));
    assert!(!passed, "{text}");
    assert!(text.contains("ShardcronCronJobStuck"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
