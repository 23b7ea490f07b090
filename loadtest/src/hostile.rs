//! S8's hostile neighbour: one tenant that patches its own CronJobs as
//! fast as its rights let it, while quiet tenants' slots are measured.
//!
//! Every second, a tenth of the flood's CronJobs get a new run-now request
//! (each CronJob one every 10 s, the controller's minimum interval: the
//! most Jobs a tenant can get from it), and one of them a new
//! 200,000-byte invalid opt-in value (control characters: an escaped
//! copy of the whole value in each decision's record and Event grew a
//! replica by hundreds of MiB before it was bounded). Bounded: it stops at
//! `until_ms`, one patch at a time, each with the client's own deadline.
//!
//! Beside the flood, two attacks on what a replica keeps ([`attacks`]):
//! [`BIG_TEMPLATES`] CronJobs whose Job templates carry
//! [`BIG_TEMPLATE_BYTES`] of text that does not compress (a replica kept
//! every template: +108 MiB per 100), and a namespace of the tenant's with
//! [`DOOMED_JOBS`] Jobs made by hand that claim its CronJob (each an
//! `UnexpectedJob` Event waiting to be sent; since 2026-12-02 only the
//! first 25 of one CronJob's, its Events' budget as upstream's), deleted
//! halfway through.

use crate::mix::Planned;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// What the flood sent.
#[derive(Debug, Default, Clone, Copy)]
pub struct Flooded {
    pub run_now: u64,
    pub large_annotations: u64,
    pub refused: u64,
    /// CronJobs with a big template created.
    pub big_templates: u64,
    /// Jobs made by hand in the namespace then deleted.
    pub doomed_jobs: u64,
    /// Whether that namespace's deletion was accepted.
    pub doomed_deleted: bool,
}

/// CronJobs of the hostile tenant whose templates are big.
pub const BIG_TEMPLATES: usize = 100;
/// Bytes of text that does not compress in each big template.
pub const BIG_TEMPLATE_BYTES: usize = 1_000_000;
/// Jobs made by hand in the namespace the tenant deletes.
pub const DOOMED_JOBS: usize = 2_000;

/// Bytes of the invalid value each large-annotation patch writes.
pub const LARGE_VALUE_BYTES: usize = 200_000;

/// Floods `cronjobs` (the hostile tenant's, batch/v1) from now until
/// `until_ms` (unix milliseconds), and makes the [`attacks`] meanwhile
/// if `attacking`.
pub async fn flood(
    client: &kube::Client,
    cronjobs: &[Planned],
    until_ms: i64,
    attacking: bool,
) -> Flooded {
    let Some(first) = cronjobs.first() else {
        return Flooded::default();
    };
    let (mut flooded, attacked) = tokio::join!(patches(client, cronjobs, until_ms), async {
        if attacking {
            attacks(client, &first.namespace, until_ms).await
        } else {
            (0, 0, false)
        }
    });
    (
        flooded.big_templates,
        flooded.doomed_jobs,
        flooded.doomed_deleted,
    ) = attacked;
    flooded
}

/// The run-now and large-annotation patches.
async fn patches(client: &kube::Client, cronjobs: &[Planned], until_ms: i64) -> Flooded {
    let mut flooded = Flooded::default();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    let mut round = 0usize;
    while crate::observe::unix_ms() < until_ms {
        tick.tick().await;
        let now = jiff::Timestamp::now().to_string();
        for (i, cronjob) in cronjobs.iter().enumerate() {
            if i % 10 != round % 10 {
                continue;
            }
            let patch = json!({"metadata": {"annotations": {shardcron::reconcile::RUN_NOW_ANNOTATION: now}}});
            match patch_one(client, cronjob, &patch).await {
                Ok(()) => flooded.run_now += 1,
                Err(()) => flooded.refused += 1,
            }
        }
        let target = &cronjobs[round % cronjobs.len()];
        // A new value every time (a patch that changes nothing is no new
        // resourceVersion): the round's digit first.
        let value: String = std::iter::once(char::from(b'0' + (round % 10) as u8))
            .chain(std::iter::repeat_n('\u{1}', LARGE_VALUE_BYTES - 1))
            .collect();
        let patch = json!({"metadata": {"annotations": {shardcron::reconcile::FALL_BACK_ANNOTATION: value}}});
        match patch_one(client, target, &patch).await {
            Ok(()) => flooded.large_annotations += 1,
            Err(()) => flooded.refused += 1,
        }
        round += 1;
    }
    flooded
}

/// Creates the big-template CronJobs in `namespace`, then a namespace of
/// its own with [`DOOMED_JOBS`] Jobs claiming its CronJob, deleted halfway
/// from now to `until_ms`. Answers what it made: (big templates, Jobs,
/// deleted). Failures are counted out, never fatal: the scenario measures
/// the quiet tenants.
async fn attacks(client: &kube::Client, namespace: &str, until_ms: i64) -> (u64, u64, bool) {
    use futures::StreamExt;
    use k8s_openapi::api::batch::v1::{CronJob, Job};
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{DeleteParams, PostParams};
    let halfway = crate::observe::unix_ms() + (until_ms - crate::observe::unix_ms()) / 2;
    let cronjob = |name: &str, namespace: &str, env: serde_json::Value| -> Option<CronJob> {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedule": "0 0 1 1 *", "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "env": env}]
            }}}}}
        }))
        .ok()
    };
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), namespace);
    let big_templates = futures::stream::iter(0..BIG_TEMPLATES)
        .map(|i| {
            let noise = shardcron_harness::incompressible_text(BIG_TEMPLATE_BYTES, i as u64 + 1);
            let object = cronjob(
                &format!("big-{i:03}"),
                namespace,
                json!([{"name": "NOISE", "value": noise}]),
            );
            let cronjobs = cronjobs.clone();
            async move {
                match object {
                    Some(object) => cronjobs
                        .create(&PostParams::default(), &object)
                        .await
                        .is_ok(),
                    None => false,
                }
            }
        })
        .buffer_unordered(4)
        .filter(|created| std::future::ready(*created))
        .count()
        .await as u64;
    // Outside the load test's namespace prefix: its Jobs are no slots.
    let doomed = format!("hostile-doomed-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Option<Namespace> = serde_json::from_value(json!({"metadata": {"name": doomed}})).ok();
    let Some(ns) = ns else {
        return (big_templates, 0, false);
    };
    if namespaces
        .create(&PostParams::default(), &ns)
        .await
        .is_err()
    {
        return (big_templates, 0, false);
    }
    let claimed = match cronjob("claimed", &doomed, json!([])) {
        Some(object) => Api::<CronJob>::namespaced(client.clone(), &doomed)
            .create(&PostParams::default(), &object)
            .await
            .ok(),
        None => None,
    };
    let uid = claimed.and_then(|c| c.metadata.uid).unwrap_or_default();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &doomed);
    let label = shardcron::bucket::Bucket::of(&uid).label_value();
    let doomed_jobs = futures::stream::iter(0..DOOMED_JOBS)
        .map(|i| {
            let job: Option<Job> = serde_json::from_value(json!({
                "metadata": {
                    "name": format!("claimed-by-hand-{i}"),
                    "labels": {shardcron::bucket::LABEL: label},
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                                         "name": "claimed", "uid": uid, "controller": true}],
                },
                "spec": {"suspend": true, "template": {"spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox"}]
                }}},
            }))
            .ok();
            let jobs = jobs.clone();
            async move {
                match job {
                    Some(job) => jobs.create(&PostParams::default(), &job).await.is_ok(),
                    None => false,
                }
            }
        })
        .buffer_unordered(32)
        .filter(|created| std::future::ready(*created))
        .count()
        .await as u64;
    crate::observe::sleep_until_ms(halfway).await;
    let deleted = namespaces
        .delete(&doomed, &DeleteParams::default())
        .await
        .is_ok();
    (big_templates, doomed_jobs, deleted)
}

async fn patch_one(
    client: &kube::Client,
    cronjob: &Planned,
    patch: &serde_json::Value,
) -> Result<(), ()> {
    let api: Api<k8s_openapi::api::batch::v1::CronJob> =
        Api::namespaced(client.clone(), &cronjob.namespace);
    let params = PatchParams::default();
    let patch = Patch::Merge(patch);
    let sent = api.patch(&cronjob.name, &params, &patch);
    match tokio::time::timeout(std::time::Duration::from_secs(10), sent).await {
        Ok(Ok(_)) => Ok(()),
        _ => Err(()),
    }
}
