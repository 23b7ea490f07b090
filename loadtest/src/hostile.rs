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

use crate::mix::Planned;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// What the flood sent.
#[derive(Debug, Default, Clone, Copy)]
pub struct Flooded {
    pub run_now: u64,
    pub large_annotations: u64,
    pub refused: u64,
}

/// Bytes of the invalid value each large-annotation patch writes.
pub const LARGE_VALUE_BYTES: usize = 200_000;

/// Floods `cronjobs` (the hostile tenant's, batch/v1) from now until
/// `until_ms` (unix milliseconds).
pub async fn flood(client: &kube::Client, cronjobs: &[Planned], until_ms: i64) -> Flooded {
    let mut flooded = Flooded::default();
    if cronjobs.is_empty() {
        return flooded;
    }
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
