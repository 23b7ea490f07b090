//! kube-apiserver's view of each client: requests and their latency, split
//! by FlowSchema.
//!
//! The API server labels its API Priority and Fairness metrics with the
//! FlowSchema a request matched, so the loadtest installs one FlowSchema per
//! controller identity (same priority level as the built-in schema that
//! would otherwise match, so nothing is reprioritized) and reads
//! `apiserver_flowcontrol_dispatched_requests_total`,
//! `apiserver_flowcontrol_request_execution_seconds`,
//! `apiserver_flowcontrol_request_wait_duration_seconds` (time queued by APF)
//! and `apiserver_flowcontrol_rejected_requests_total` (429s) before and
//! after a run.

use anyhow::Context;
use k8s_openapi::api::flowcontrol::v1::FlowSchema;
use kube::api::{Api, PostParams};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

const UPSTREAM_CRONJOB_SCHEMA: &str = "loadtest-upstream-cronjob";
const SHARDCRON_SCHEMA: &str = "loadtest-shardcron";

/// (FlowSchema name, ServiceAccount namespace, ServiceAccount name,
/// priority level): the controllers' identities.
pub const CLIENTS: [(&str, &str, &str, &str); 3] = [
    // kube-controller-manager runs --use-service-account-credentials: its
    // CronJob controller is this ServiceAccount (built-in schema
    // kube-system-service-accounts, priority workload-high).
    (
        UPSTREAM_CRONJOB_SCHEMA,
        "kube-system",
        "cronjob-controller",
        "workload-high",
    ),
    (
        "loadtest-job-controller",
        "kube-system",
        "job-controller",
        "workload-high",
    ),
    // shardcron's ServiceAccount (built-in schema service-accounts,
    // priority workload-low).
    (
        SHARDCRON_SCHEMA,
        "shardcron-system",
        "shardcron",
        "workload-low",
    ),
];

/// The FlowSchema a controller's requests match: upstream's CronJob
/// controller, or shardcron.
pub fn schema_of(upstream: bool) -> &'static str {
    if upstream {
        UPSTREAM_CRONJOB_SCHEMA
    } else {
        SHARDCRON_SCHEMA
    }
}

/// Installs the FlowSchemas of `CLIENTS` (already present: left as is).
pub async fn install_flow_schemas(client: &kube::Client) -> anyhow::Result<()> {
    let api: Api<FlowSchema> = Api::all(client.clone());
    for (name, namespace, account, level) in CLIENTS {
        let schema: FlowSchema = serde_json::from_value(serde_json::json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
            "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {
                "matchingPrecedence": 500,
                "priorityLevelConfiguration": {"name": level},
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{
                    "subjects": [{"kind": "ServiceAccount", "serviceAccount": {"namespace": namespace, "name": account}}],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]
                }]
            }
        }))?;
        match api.create(&PostParams::default(), &schema).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating FlowSchema {name}")),
        }
    }
    Ok(())
}

/// Requests and their cost at the API server for one FlowSchema.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientLoad {
    pub requests: f64,
    pub execution_seconds: f64,
    /// Time the dispatched requests spent queued by APF before executing
    /// (absent in reports written before it was recorded).
    #[serde(default)]
    pub wait_seconds: f64,
    /// Requests APF turned away with 429 (queue full, timed out in queue).
    #[serde(default)]
    pub rejected: f64,
}

/// Per-FlowSchema counters at one moment.
pub type Snapshot = BTreeMap<String, ClientLoad>;

pub async fn snapshot(client: &kube::Client) -> anyhow::Result<Snapshot> {
    Ok(parse(&metrics_text(client).await?))
}

async fn metrics_text(client: &kube::Client) -> anyhow::Result<String> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    client
        .request_text(request)
        .await
        .context("GET /metrics from kube-apiserver")
}

/// What kube-apiserver sent and created, every client summed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerTotals {
    /// Watch event bytes sent to every watcher, by `group/resource`
    /// (`apiserver_watch_events_sizes_sum`).
    pub watch_bytes: BTreeMap<String, f64>,
    /// Jobs created (POST answered 201): the firings.
    pub job_creates: f64,
}

impl ServerTotals {
    pub async fn read(client: &kube::Client) -> anyhow::Result<Self> {
        Ok(Self::parse(&metrics_text(client).await?))
    }

    pub fn parse(text: &str) -> Self {
        let mut out = Self::default();
        for (series, value) in samples(text) {
            if series.starts_with("apiserver_watch_events_sizes_sum{") {
                // The label is `resource` since 1.31, `kind` before.
                let what = label(series, "resource").or_else(|| label(series, "kind"));
                let key = format!(
                    "{}/{}",
                    label(series, "group").unwrap_or(""),
                    what.unwrap_or("")
                );
                *out.watch_bytes.entry(key).or_default() += value;
            } else if series.starts_with("apiserver_request_total{")
                && label(series, "verb") == Some("POST")
                && label(series, "resource") == Some("jobs")
                && label(series, "subresource").unwrap_or("").is_empty()
                && label(series, "code") == Some("201")
            {
                out.job_creates += value;
            }
        }
        out
    }

    /// `self - before`.
    pub fn since(&self, before: &Self) -> Self {
        Self {
            watch_bytes: self
                .watch_bytes
                .iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v - before.watch_bytes.get(k).copied().unwrap_or(0.0),
                    )
                })
                .collect(),
            job_creates: self.job_creates - before.job_creates,
        }
    }
}

/// Each sample of Prometheus text: its series (name and labels) and value.
fn samples(text: &str) -> impl Iterator<Item = (&str, f64)> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series, value.parse::<f64>().ok()?))
        })
}

/// Reads the counters from Prometheus text, summed over the other labels.
pub fn parse(text: &str) -> Snapshot {
    let mut out = Snapshot::new();
    for (series, value) in samples(text) {
        let Some(schema) = label(series, "flow_schema") else {
            continue;
        };
        let entry = out.entry(schema.to_owned()).or_default();
        if series.starts_with("apiserver_flowcontrol_dispatched_requests_total{") {
            entry.requests += value;
        } else if series.starts_with("apiserver_flowcontrol_request_execution_seconds_sum{") {
            entry.execution_seconds += value;
        } else if series.starts_with("apiserver_flowcontrol_request_wait_duration_seconds_sum{") {
            entry.wait_seconds += value;
        } else if series.starts_with("apiserver_flowcontrol_rejected_requests_total{") {
            entry.rejected += value;
        }
    }
    out
}

fn label<'a>(series: &'a str, name: &str) -> Option<&'a str> {
    let start = series.find(&format!("{name}=\""))? + name.len() + 2;
    let len = series[start..].find('"')?;
    Some(&series[start..start + len])
}

/// `after - before` for every schema that did some work or was turned away.
pub fn delta(before: &Snapshot, after: &Snapshot) -> Snapshot {
    after
        .iter()
        .filter_map(|(schema, a)| {
            let b = before.get(schema).copied().unwrap_or_default();
            let d = ClientLoad {
                requests: a.requests - b.requests,
                execution_seconds: a.execution_seconds - b.execution_seconds,
                wait_seconds: a.wait_seconds - b.wait_seconds,
                rejected: a.rejected - b.rejected,
            };
            (d.requests > 0.0 || d.rejected > 0.0).then(|| (schema.clone(), d))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_summed_per_flow_schema_and_differenced() {
        let before = parse(
            "# HELP x\n\
             apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"loadtest-shardcron\",priority_level=\"workload-low\"} 10\n\
             apiserver_flowcontrol_request_execution_seconds_sum{flow_schema=\"loadtest-shardcron\",priority_level=\"workload-low\",type=\"regular\"} 0.5\n",
        );
        let after = parse(
            "apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"loadtest-shardcron\",priority_level=\"workload-low\"} 30\n\
             apiserver_flowcontrol_request_execution_seconds_sum{flow_schema=\"loadtest-shardcron\",priority_level=\"workload-low\",type=\"regular\"} 1.5\n\
             apiserver_flowcontrol_request_execution_seconds_sum{flow_schema=\"loadtest-shardcron\",priority_level=\"workload-low\",type=\"watch\"} 0.25\n\
             apiserver_flowcontrol_request_wait_duration_seconds_sum{execute=\"true\",flow_schema=\"loadtest-shardcron\",priority_level=\"workload-low\"} 2\n\
             apiserver_flowcontrol_request_wait_duration_seconds_sum{execute=\"false\",flow_schema=\"loadtest-shardcron\",priority_level=\"workload-low\"} 0.5\n\
             apiserver_flowcontrol_rejected_requests_total{flow_schema=\"loadtest-shardcron\",priority_level=\"workload-low\",reason=\"time-out\"} 3\n\
             apiserver_flowcontrol_rejected_requests_total{flow_schema=\"loadtest-shardcron\",priority_level=\"workload-low\",reason=\"queue-full\"} 4\n\
             apiserver_flowcontrol_dispatched_requests_total{flow_schema=\"exempt\",priority_level=\"exempt\"} 0\n\
             apiserver_flowcontrol_rejected_requests_total{flow_schema=\"global-default\",priority_level=\"global-default\",reason=\"queue-full\"} 1\n",
        );
        let d = delta(&before, &after);
        assert_eq!(
            d.keys().collect::<Vec<_>>(),
            ["global-default", "loadtest-shardcron"],
            "schemas neither served nor turned away are left out"
        );
        assert_eq!(
            d["loadtest-shardcron"],
            ClientLoad {
                requests: 20.0,
                execution_seconds: 1.25,
                wait_seconds: 2.5,
                rejected: 7.0,
            }
        );
        assert_eq!(d["global-default"].rejected, 1.0);
    }

    #[test]
    fn the_servers_totals_are_its_watch_bytes_by_resource_and_its_job_creates() {
        let before = ServerTotals::parse(
            "apiserver_watch_events_sizes_sum{group=\"batch\",resource=\"cronjobs\",version=\"v1\"} 100\n\
             apiserver_request_total{code=\"201\",group=\"batch\",resource=\"jobs\",subresource=\"\",verb=\"POST\",version=\"v1\"} 2\n",
        );
        let after = ServerTotals::parse(
            "apiserver_watch_events_sizes_sum{group=\"batch\",resource=\"cronjobs\",version=\"v1\"} 350\n\
             apiserver_watch_events_sizes_sum{group=\"shardcron.io\",kind=\"CronJob\",version=\"v1\"} 7\n\
             apiserver_watch_events_sizes_count{group=\"batch\",resource=\"cronjobs\",version=\"v1\"} 9\n\
             apiserver_request_total{code=\"201\",group=\"batch\",resource=\"jobs\",subresource=\"\",verb=\"POST\",version=\"v1\"} 12\n\
             apiserver_request_total{code=\"409\",group=\"batch\",resource=\"jobs\",subresource=\"\",verb=\"POST\",version=\"v1\"} 5\n\
             apiserver_request_total{code=\"201\",group=\"\",resource=\"events\",subresource=\"\",verb=\"POST\",version=\"v1\"} 50\n",
        );
        let d = after.since(&before);
        assert_eq!(d.job_creates, 10.0);
        assert_eq!(d.watch_bytes["batch/cronjobs"], 250.0);
        assert_eq!(d.watch_bytes["shardcron.io/CronJob"], 7.0);
        assert_eq!(d.watch_bytes.len(), 2);
    }
}
