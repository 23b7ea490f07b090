//! Creating a plan's namespaces and CronJobs at a steady rate.

use crate::mix::{Planned, namespaces_of};
use anyhow::Context;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use shardcron::reconcile::CronJobKind;
use std::time::{Duration, Instant};

/// The API a CronJob of `kind` is read and written at (batch/v1, or the
/// CRD `cronjobs.shardcron.io/v1` of managed control planes).
pub fn resource(kind: CronJobKind) -> ApiResource {
    ApiResource {
        group: kind.group().into(),
        version: kind.version().into(),
        api_version: kind.api_version().into(),
        kind: CronJobKind::KIND.into(),
        plural: CronJobKind::PLURAL.into(),
    }
}

/// The Job template of every loadtest CronJob: one pod that kwok completes
/// after about a second, or the plan's `run_for` (deploy/local/kwok-stages.yaml).
/// With `spread_seconds`, the CronJob spreads its slots over that window
/// (`shardcron.io/spread`; kube-controller-manager ignores it).
fn cronjob(
    planned: &Planned,
    spread_seconds: u32,
    kind: CronJobKind,
) -> anyhow::Result<DynamicObject> {
    let annotations = match spread_seconds {
        0 => serde_json::json!({}),
        s => serde_json::json!({shardcron::reconcile::SPREAD_ANNOTATION: format!("{s}s")}),
    };
    let pod_annotations = match &planned.run_for {
        Some(run_for) => serde_json::json!({"shardcron.test/run-for": run_for}),
        None => serde_json::json!({}),
    };
    let policy = if planned.forbid { "Forbid" } else { "Allow" };
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": kind.api_version(),
        "kind": CronJobKind::KIND,
        "metadata": {"name": planned.name, "namespace": planned.namespace, "annotations": annotations},
        "spec": {
            "schedule": planned.schedule,
            "startingDeadlineSeconds": planned.starting_deadline_seconds,
            "concurrencyPolicy": policy,
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 1,
            "jobTemplate": {"spec": {"template": {
                "metadata": {"annotations": pod_annotations},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": ["true"]}]
                }
            }}}
        }
    }))?)
}

/// Creates the plan's namespaces, then its CronJobs at `qps` (objects that
/// exist already are left alone), printing progress to stderr.
pub async fn create(client: &kube::Client, plan: &[Planned], qps: f64) -> anyhow::Result<()> {
    create_as(client, plan, qps, 0, CronJobKind::Batch).await
}

/// [`create`], each CronJob of `kind`, spread over `spread_seconds` (0:
/// none).
pub async fn create_as(
    client: &kube::Client,
    plan: &[Planned],
    qps: f64,
    spread_seconds: u32,
    kind: CronJobKind,
) -> anyhow::Result<()> {
    let resource = resource(kind);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in namespaces_of(plan) {
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
        ignore_exists(namespaces.create(&PostParams::default(), &ns).await)
            .with_context(|| format!("creating namespace {name}"))?;
    }
    let started = Instant::now();
    let mut last_progress = Instant::now();
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / qps.max(0.1)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    // Each create is its own task, so the rate holds when the API server
    // takes longer than the interval to answer; at most MAX_IN_FLIGHT at
    // once, so a rate the API server cannot take slows the creation down
    // instead of opening ever more connections (open-loop at 1,500/s on
    // 2 cores failed with connect errors and 429s, measured).
    let mut in_flight = tokio::task::JoinSet::new();
    let mut done = 0usize;
    for planned in plan {
        ticks.tick().await;
        while in_flight.len() >= MAX_IN_FLIGHT {
            if let Some(result) = in_flight.join_next().await {
                result??;
                done += 1;
            }
        }
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &planned.namespace, &resource);
        let object = cronjob(planned, spread_seconds, kind)?;
        let what = format!("creating CronJob {}/{}", planned.namespace, planned.name);
        in_flight.spawn(async move {
            ignore_exists(api.create(&PostParams::default(), &object).await).context(what)
        });
        while let Some(result) = in_flight.try_join_next() {
            result??;
            done += 1;
        }
        if last_progress.elapsed() >= Duration::from_secs(5) {
            last_progress = Instant::now();
            progress(done, plan.len(), started);
        }
    }
    while let Some(result) = in_flight.join_next().await {
        result??;
        done += 1;
    }
    progress(done, plan.len(), started);
    Ok(())
}

/// Creates in flight at once, at most.
const MAX_IN_FLIGHT: usize = 128;

fn progress(done: usize, total: usize, started: Instant) {
    let rate = done as f64 / started.elapsed().as_secs_f64().max(0.001);
    eprintln!("create: {done}/{total} CronJobs ({rate:.0}/s)");
}

fn ignore_exists<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error),
    }
}
