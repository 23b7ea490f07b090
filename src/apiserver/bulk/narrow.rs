//! One gained CronJob read on its own, with its Jobs: at a take-over, the
//! gained CronJobs that fall due first ([`crate::shard::standby`]) are
//! read so, while the bulk load ([`super::load`]) brings the rest.
//!
//! As consistent as the bulk load: a GET without `resourceVersion` (a
//! quorum read) and LISTs without one, all made after the ring changed, so
//! never older than what the previous owner wrote before it let the key
//! go. The Jobs first, then the CronJob, as in the bulk load: the actor
//! then knows every Job the CronJob had when it was read (later ones come
//! through the Job watch, which selects the gained buckets by then).

use super::{LoadError, Loaded, list_all};
use crate::apiserver::deadline;
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::lean_job::LeanJob;
use crate::apiserver::watch::{JobFacts, cronjob_api};
use crate::bucket::{self, Bucket};
use crate::reconcile::{CronJobKind, CronJobKinds};
use kube::Client;
use kube::api::Api;

/// Reads the CronJob `key` (of bucket `bucket`) and the Jobs it controls:
/// those labelled with its bucket and, with `unlabelled`, those without the
/// label. `None` if the CronJob is gone (the watch tells its deletion).
/// Each request within the list deadline; a read whose connection failed
/// before any answer is made again at once, once
/// ([`LoadError::connection_failed`]): otherwise it waited for the next
/// rescan (5 s), and at a take-over of a few keys the bulk load brought
/// the key first (one of nine, under the suite's load: a pooled
/// connection the server had closed).
pub async fn load_key(
    client: Client,
    key: &str,
    bucket: Bucket,
    kinds: CronJobKinds,
    unlabelled: bool,
) -> Result<Option<Loaded>, LoadError> {
    match read_key(client.clone(), key, bucket, kinds, unlabelled).await {
        Err(error) if error.connection_failed() => {
            tracing::debug!(cronjob = %key, %error, "reading a gained CronJob alone failed on its connection; reading it again");
            read_key(client, key, bucket, kinds, unlabelled).await
        }
        read => read,
    }
}

async fn read_key(
    client: Client,
    key: &str,
    bucket: Bucket,
    kinds: CronJobKinds,
    unlabelled: bool,
) -> Result<Option<Loaded>, LoadError> {
    let (kind, namespace, name) = CronJobKind::parse_key(key);
    let jobs_api: Api<LeanJob> = Api::namespaced(client.clone(), namespace);
    let mut selectors = vec![bucket::label_selector(&[bucket])];
    if unlabelled {
        selectors.push(bucket::unlabelled_selector());
    }
    let mut jobs: Vec<JobFacts> = Vec::new();
    for labels in &selectors {
        list_all(jobs_api.clone(), Some(labels), |page: Vec<LeanJob>| {
            jobs.extend(page.into_iter().map(|job| JobFacts::of(job, kinds)));
            std::future::ready(())
        })
        .await?;
    }
    let cronjobs = cronjob_api(client, kind, Some(namespace));
    let Some(cronjob) = deadline::within(deadline::GET, cronjobs.get_opt(name))
        .await
        .map_err(LoadError::Deadline)??
    else {
        return Ok(None);
    };
    let cronjob = LeanCronJob {
        kind,
        ..crate::apiserver::watch::without_managed_fields(cronjob)
    };
    let uid = cronjob.metadata.uid.clone().unwrap_or_default();
    jobs.retain(|job| job.owner_uid.as_deref() == Some(uid.as_str()));
    Ok(Some(Loaded {
        cronjobs: vec![cronjob],
        jobs,
        jobs_done: false,
    }))
}
