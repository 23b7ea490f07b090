//! Bulk loads of the CronJobs (and their Jobs) a replica gains in a
//! rebalance: paginated LISTs served from the API server's watch cache
//! (`resourceVersion=0`), filtered as they stream in, rather than one GET
//! per CronJob.
//!
//! A cache-served list may be older than what the watch has delivered; the
//! supervisor therefore lets a watch copy win over a listed one and ignores
//! listed objects the watch saw deleted meanwhile.

use super::watch::JobFacts;
use ::kube::api::{Api, ListParams, VersionMatch};
use ::kube::{Client, Resource};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// Objects per page.
const PAGE: u32 = 500;

/// What a bulk load found.
#[derive(Debug, Default)]
pub struct Loaded {
    pub cronjobs: Vec<CronJob>,
    pub jobs: Vec<JobFacts>,
}

async fn list_all<K>(api: Api<K>, mut keep: impl FnMut(K)) -> Result<(), ::kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut params = ListParams {
        limit: Some(PAGE),
        resource_version: Some("0".to_owned()),
        version_match: Some(VersionMatch::NotOlderThan),
        ..ListParams::default()
    };
    loop {
        let page = api.list(&params).await?;
        let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
        page.items
            .into_iter()
            .map(super::watch::without_managed_fields)
            .for_each(&mut keep);
        match next {
            // A continued page is read at the first page's snapshot.
            Some(token) => {
                params.continue_token = Some(token);
                params.resource_version = None;
                params.version_match = None;
            }
            None => return Ok(()),
        }
    }
}

/// The CronJobs of `namespaces` (`None`: all) that `owned(namespace, name)`
/// accepts, with the Jobs they control.
pub async fn load(
    client: Client,
    namespaces: &[Option<String>],
    owned: impl Fn(&str, &str) -> bool,
) -> Result<Loaded, ::kube::Error> {
    let mut loaded = Loaded::default();
    for namespace in namespaces {
        let (cronjobs, jobs): (Api<CronJob>, Api<Job>) = match namespace {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
            None => (Api::all(client.clone()), Api::all(client.clone())),
        };
        list_all(cronjobs, |cronjob: CronJob| {
            let meta = &cronjob.metadata;
            if owned(
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default(),
            ) {
                loaded.cronjobs.push(cronjob);
            }
        })
        .await?;
        list_all(jobs, |job: Job| {
            let facts = JobFacts::from(job);
            if facts
                .owner_name
                .as_deref()
                .is_some_and(|owner| owned(&facts.namespace, owner))
            {
                loaded.jobs.push(facts);
            }
        })
        .await?;
    }
    Ok(loaded)
}
