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

/// One page of a bulk load: the gained CronJobs or the Jobs they control.
#[derive(Debug, Default)]
pub struct Loaded {
    pub cronjobs: Vec<CronJob>,
    pub jobs: Vec<JobFacts>,
}

/// How many objects a bulk load handed over, all pages together.
#[derive(Debug, Default, Clone, Copy)]
pub struct LoadCounts {
    pub cronjobs: usize,
    pub jobs: usize,
}

/// Why a bulk load stopped.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Api(#[from] ::kube::Error),
    #[error("listing a page: {0}")]
    Deadline(super::deadline::Elapsed),
}

/// Lists every page of `api`, handing each page's objects (without
/// managedFields) to `page` and waiting for it before asking for the next.
async fn list_all<K, Taken>(
    api: Api<K>,
    mut page: impl FnMut(Vec<K>) -> Taken,
) -> Result<(), LoadError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    Taken: Future<Output = ()>,
{
    let mut params = ListParams {
        limit: Some(PAGE),
        resource_version: Some("0".to_owned()),
        version_match: Some(VersionMatch::NotOlderThan),
        ..ListParams::default()
    };
    loop {
        let list = super::deadline::within(super::deadline::LIST_PAGE, api.list(&params))
            .await
            .map_err(LoadError::Deadline)??;
        let next = list.metadata.continue_.clone().filter(|c| !c.is_empty());
        page(
            list.items
                .into_iter()
                .map(super::watch::without_managed_fields)
                .collect(),
        )
        .await;
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

/// Hands `deliver`, page by page, the CronJobs of `namespaces` (`None`:
/// all) that `owned(namespace, name)` accepts, then the Jobs they control.
/// Each page is handed over as soon as it is read: a load of 100,000
/// CronJobs never holds more than a page of them decoded.
pub async fn load<Taken>(
    client: Client,
    namespaces: &[Option<String>],
    owned: impl Fn(&str, &str) -> bool,
    mut deliver: impl FnMut(Loaded) -> Taken,
) -> Result<LoadCounts, LoadError>
where
    Taken: Future<Output = ()>,
{
    let mut counts = LoadCounts::default();
    for namespace in namespaces {
        let (cronjobs, jobs): (Api<CronJob>, Api<Job>) = match namespace {
            Some(ns) => (
                Api::namespaced(client.clone(), ns),
                Api::namespaced(client.clone(), ns),
            ),
            None => (Api::all(client.clone()), Api::all(client.clone())),
        };
        list_all(cronjobs, |page: Vec<CronJob>| {
            let cronjobs: Vec<CronJob> = page
                .into_iter()
                .filter(|cronjob| {
                    let meta = &cronjob.metadata;
                    owned(
                        meta.namespace.as_deref().unwrap_or_default(),
                        meta.name.as_deref().unwrap_or_default(),
                    )
                })
                .collect();
            counts.cronjobs += cronjobs.len();
            deliver(Loaded {
                cronjobs,
                jobs: Vec::new(),
            })
        })
        .await?;
        list_all(jobs, |page: Vec<Job>| {
            let jobs: Vec<JobFacts> = page
                .into_iter()
                .map(JobFacts::from)
                .filter(|facts| {
                    facts
                        .owner_name
                        .as_deref()
                        .is_some_and(|owner| owned(&facts.namespace, owner))
                })
                .collect();
            counts.jobs += jobs.len();
            deliver(Loaded {
                cronjobs: Vec::new(),
                jobs,
            })
        })
        .await?;
    }
    Ok(counts)
}
