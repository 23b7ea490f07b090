//! The local Prometheus (`deploy/local/up --with-prometheus`): its HTTP API,
//! its scrape targets and its rule files, for the tests that read the
//! shipped monitoring in it (tests/prometheus.rs, tests/alerts_soak.rs).

use super::cluster::Cluster;
use serde_json::{Value, json};
use std::path::PathBuf;

/// The local Prometheus' HTTP API.
pub struct Prometheus {
    pub url: String,
    pub dir: PathBuf,
}

impl Prometheus {
    pub fn of(cluster: &Cluster) -> Prometheus {
        let url = cluster
            .env("SHARDCRON_PROMETHEUS_URL")
            .expect("a control plane with --with-prometheus")
            .to_owned();
        Prometheus {
            url,
            dir: cluster.dir().join("prometheus"),
        }
    }

    fn get(&self, path: &str, query: Option<&str>) -> Value {
        let mut curl = std::process::Command::new("curl");
        curl.args(["-sS", "--max-time", "10", "-G"])
            .arg(format!("{}{path}", self.url));
        if let Some(query) = query {
            curl.arg("--data-urlencode").arg(format!("query={query}"));
        }
        let out = curl.output().expect("run curl");
        serde_json::from_str(&super::stdout(&out))
            .unwrap_or_else(|e| panic!("{path}: {e}: {}", super::stderr(&out)))
    }

    /// An instant query's samples: (labels, value).
    pub fn query(&self, query: &str) -> Vec<(Value, f64)> {
        let answer = self.get("/api/v1/query", Some(query));
        answer["data"]["result"]
            .as_array()
            .unwrap_or_else(|| panic!("{query}: {answer}"))
            .iter()
            .map(|sample| {
                let value = sample["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN);
                (sample["metric"].clone(), value)
            })
            .collect()
    }

    /// Each scrape target (both paths of every replica): (instance, job,
    /// health, last error).
    pub fn targets(&self) -> Vec<(String, String, String, String)> {
        let answer = self.get("/api/v1/targets", None);
        answer["data"]["activeTargets"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|t| {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
                (
                    text(&t["labels"]["instance"]),
                    text(&t["labels"]["job"]),
                    text(&t["health"]),
                    text(&t["lastError"]),
                )
            })
            .collect()
    }

    /// Scrapes `replica`'s metrics port (both paths), labelled `replica`.
    pub fn scrape(&self, replica: &str, port: u16) {
        let target =
            json!([{"targets": [format!("127.0.0.1:{port}")], "labels": {"replica": replica}}]);
        let path = self.dir.join("targets").join(format!("{replica}.json"));
        std::fs::write(&path, target.to_string()).expect("write a target file");
    }

    /// Replaces the rule file with `rules` and has Prometheus re-read it.
    pub fn load_rules(&self, rules: &str) {
        std::fs::write(self.dir.join("rules/alerts.yaml"), rules).expect("write the rules");
        let out = std::process::Command::new("curl")
            .args(["-sS", "-f", "-X", "POST"])
            .arg(format!("{}/-/reload", self.url))
            .output()
            .expect("run curl");
        assert!(out.status.success(), "reload: {}", super::stderr(&out));
    }
}
