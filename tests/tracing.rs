//! Traces end to end: the controller exports OTLP to the Jaeger that
//! deploy/local/up runs (kube-apiserver sends its own spans there too), and
//! the test reads them back through Jaeger's HTTP query API. And with the
//! collector down, the controller goes on creating Jobs on time.

mod support;

use serde_json::{Value, json};
use shardcron_harness::net::http_get;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;
use support::cluster::Cluster;
use support::eventually;
use support::scenario::*;

const TRACEPARENT: &str = "shardcron.io/traceparent";

fn jaeger() -> SocketAddr {
    let url = Cluster::shared()
        .env("SHARDCRON_JAEGER_URL")
        .expect("deploy/local/up ran Jaeger (SHARDCRON_JAEGER_URL in DIR/env)");
    url.trim_start_matches("http://")
        .parse()
        .expect("Jaeger's address")
}

fn otlp_endpoint() -> String {
    Cluster::shared()
        .env("SHARDCRON_OTLP_ENDPOINT")
        .expect("SHARDCRON_OTLP_ENDPOINT in DIR/env")
        .to_owned()
}

/// `GET path` on Jaeger's query API, as JSON (None until it answers 200).
fn query(path: &str) -> Option<Value> {
    match http_get(jaeger(), path) {
        Ok((200, body)) => serde_json::from_str(&body).ok(),
        _ => None,
    }
}

fn tags(span: &Value) -> HashMap<String, Value> {
    span["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| Some((t["key"].as_str()?.to_owned(), t["value"].clone())))
        .collect()
}

fn service_of<'a>(trace: &'a Value, span: &Value) -> &'a str {
    let process = span["processID"].as_str().unwrap_or_default();
    trace["processes"][process]["serviceName"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_firing_is_one_trace_from_the_timer_into_kube_apiserver() {
    let endpoint = otlp_endpoint();
    let s = scenario_with("trace-firing", &["--otlp-endpoint", &endpoint]).await;
    let controller = &s.controller;
    let cronjob = s
        .create(&cronjob("traced", "*/1 * * * *", json!({}), json!({})))
        .await;
    let job = eventually("the first Job", ONE_SLOT, || async {
        s.all_jobs().await.into_iter().next()
    })
    .await;
    let traceparent = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TRACEPARENT))
        .cloned()
        .expect("the Job names its trace");
    let trace_id = traceparent
        .split('-')
        .nth(1)
        .expect("W3C traceparent")
        .to_owned();

    // The batch processor exports every few seconds.
    let trace = eventually(
        "the firing's trace in Jaeger",
        Duration::from_secs(60),
        || {
            let trace_id = trace_id.clone();
            async move {
                let found = query(&format!("/api/traces/{trace_id}"))?;
                let trace = found["data"][0].clone();
                let names: Vec<&str> = trace["spans"]
                    .as_array()?
                    .iter()
                    .filter_map(|s| s["operationName"].as_str())
                    .collect();
                (names.contains(&"cronjob.fire") && names.contains(&"kube.request"))
                    .then_some(trace)
            }
        },
    )
    .await;
    let spans = trace["spans"].as_array().expect("spans");
    let named = |name: &str| -> Vec<&Value> {
        spans
            .iter()
            .filter(|s| s["operationName"] == name)
            .collect()
    };
    let fire = named("cronjob.fire")[0];
    let fire_tags = tags(fire);
    assert_eq!(service_of(&trace, fire), "shardcron");
    assert_eq!(fire_tags["k8s.namespace.name"], json!(s.ns.name));
    assert_eq!(fire_tags["k8s.cronjob.name"], json!("traced"));
    assert_eq!(
        fire_tags["k8s.cronjob.uid"],
        json!(cronjob.metadata.uid.clone().unwrap())
    );
    assert_eq!(fire_tags["cronjob.decision"], json!("created"));
    assert_eq!(fire_tags["shardcron.replica"], json!("r0"));
    assert_eq!(fire_tags["cronjob.concurrency_policy"], json!("Allow"));
    let scheduled = scheduled_time(&job).to_string();
    assert_eq!(fire_tags["cronjob.scheduled_time"], json!(scheduled));
    assert!(fire_tags.contains_key("cronjob.skew_ms"), "{fire_tags:?}");
    let create = named("kube.request")
        .into_iter()
        .find(|s| tags(s).get("k8s.verb") == Some(&json!("create")))
        .expect("a kube.request span for the create");
    let create_tags = tags(create);
    assert_eq!(create_tags["http.response.status_code"], json!("201"));
    assert_eq!(create_tags["gateway.priority"], json!("create_job"));
    assert!(
        create_tags.contains_key("gateway.wait_ms"),
        "{create_tags:?}"
    );
    assert!(
        create_tags.contains_key("gateway.queued_ahead"),
        "{create_tags:?}"
    );
    let create_span_id = create["spanID"].as_str().unwrap().to_owned();

    // kube-apiserver's span for the POST: in the same trace if it trusts the
    // caller's context, else (a ServiceAccount is not in system:masters) in
    // its own trace with a link (FOLLOWS_FROM) to our request span.
    let apiserver = eventually(
        "kube-apiserver's span for the create",
        Duration::from_secs(60),
        || {
            let (trace_id, create_span_id, ns) =
                (trace_id.clone(), create_span_id.clone(), s.ns.name.clone());
            let same = trace.clone();
            async move {
                let in_trace = same["spans"].as_array()?.iter().find(|span| {
                    service_of(&same, span) == "apiserver"
                        && span["operationName"]
                            .as_str()
                            .is_some_and(|n| n.starts_with("POST") && n.contains("/jobs"))
                });
                if let Some(span) = in_trace {
                    return Some(("parent", span.clone()));
                }
                let found = query(&format!(
                    "/api/traces?service=apiserver&operation={}&limit=200&lookback=1h",
                    "POST%20%2Fapis%2Fbatch%2Fv1%2Fnamespaces%2F%7B%3Anamespace%7D%2Fjobs"
                ))?;
                found["data"].as_array()?.iter().find_map(|trace| {
                    trace["spans"].as_array()?.iter().find_map(|span| {
                        let linked = span["references"].as_array()?.iter().any(|r| {
                            r["traceID"] == json!(trace_id) && r["spanID"] == json!(create_span_id)
                        });
                        let ours = tags(span)
                            .get("http.target")
                            .or(tags(span).get("url.path"))
                            .and_then(|t| t.as_str().map(|t| t.contains(&ns)))
                            .unwrap_or(true);
                        (linked && ours).then(|| ("link", span.clone()))
                    })
                })
            }
        },
    )
    .await;
    // The skew histogram points at the trace; the log lines name it.
    assert!(
        controller
            .metrics_text()
            .contains(&format!("trace_id=\"{trace_id}\"")),
        "no exemplar for the trace"
    );
    assert!(
        controller
            .log_text()
            .contains(&format!("trace_id={trace_id}")),
        "no log line names the trace"
    );
    println!(
        "kube-apiserver's span {:?} joins the firing's trace by {}",
        apiserver.1["operationName"], apiserver.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_the_collector_down_jobs_are_still_created_on_time() {
    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let endpoint = format!("http://{closed}");
    let s = scenario_with("trace-collector-down", &["--otlp-endpoint", &endpoint]).await;
    let controller = &s.controller;
    s.create(&cronjob("untraced", "*/1 * * * *", json!({}), json!({})))
        .await;
    let job = eventually("the first Job", ONE_SLOT, || async {
        s.all_jobs().await.into_iter().next()
    })
    .await;
    let created = job.metadata.creation_timestamp.as_ref().unwrap().0;
    let skew = created.as_second() - scheduled_time(&job).as_second();
    assert!(skew <= 2, "created {skew} s after its slot");
    let dropped = eventually(
        "dropped spans counted",
        Duration::from_secs(120),
        || async {
            let n = controller.metric("shardcron_trace_spans_dropped_total");
            (n > 0.0).then_some(n)
        },
    )
    .await;
    println!("collector down: Job created {skew} s after its slot; {dropped} spans dropped");
    let (code, _) = http_get(controller.health, "/readyz").unwrap();
    assert_eq!(code, 200);
}
