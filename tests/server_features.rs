//! What a replica chooses from the API server's answers, on whatever
//! server this binary's control plane runs (`cargo suite` runs it on the
//! oldest minor with `WatchList` off; `cargo suite --matrix` on every
//! supported server): streaming lists where the server streams them,
//! paginated lists where it refuses; server-sharded CronJob watches where
//! kube-apiserver's `ShardedListAndWatch` gate is on (batch/v1 only: custom
//! resources are not sharded), unsharded otherwise. Either way a CronJob of
//! each kind fires.

mod support;

use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;
use std::time::Duration;
use support::cluster::Cluster;
use support::controller::Controller;
use support::{eventually, first_job_named};

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_uses_what_the_server_has_and_falls_back_where_it_has_not() {
    let cluster = Cluster::shared();
    let streams = cluster.env("SHARDCRON_WATCH_LIST") != Some("0");
    let gate = cluster.env("SHARDCRON_SHARDED_WATCH") == Some("1");
    let client = cluster.admin().await;
    let resource = support::crd::install(&client).await;
    support::crd::grant_the_controller(&client).await;
    let ns = cluster.namespace("server-features").await;
    let template = json!({"spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}});
    for (api_version, name) in [("batch/v1", "batch"), ("shardcron.io/v1", "crd")] {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": api_version, "kind": "CronJob", "metadata": {"name": name},
            "spec": {"schedule": "*/1 * * * *", "jobTemplate": template}
        }))
        .expect("a CronJob");
        let resource = if name == "crd" {
            resource.clone()
        } else {
            kube::api::ApiResource::erase::<k8s_openapi::api::batch::v1::CronJob>(&())
        };
        Api::<DynamicObject>::namespaced_with(client.clone(), &ns.name, &resource)
            .create(&PostParams::default(), &object)
            .await
            .expect("create the CronJob");
    }

    let mut controller =
        Controller::start_with(cluster, &ns.name, &["--cronjob-kinds=batch,shardcron"]).await;
    let jobs: Api<Job> = Api::namespaced(client, &ns.name);
    for name in ["batch-", "crd-"] {
        eventually(
            &format!("the Job of CronJob {name}"),
            Duration::from_secs(150),
            || first_job_named(&jobs, name),
        )
        .await;
    }
    let log = without_colours(&controller.log_text());
    controller.stop().await;
    let started = log
        .lines()
        .find(|line| line.contains("controller started"))
        .expect("the replica's start line");
    let strategy = if streams { "Streaming" } else { "Paginated" };
    assert!(
        started.contains(&format!("strategy={strategy}")),
        "lists: {started}"
    );
    assert!(
        started.contains(&format!("kind: Batch, server_shards: {gate}")),
        "batch/v1 sharded by the server exactly where the gate is on: {started}"
    );
    assert!(
        started.contains("kind: Shardcron, server_shards: false"),
        "custom resources are never sharded by the server: {started}"
    );
}

/// `text` without ANSI colour sequences (`ESC [ ... m`), which the text
/// log puts around field names.
fn without_colours(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}
