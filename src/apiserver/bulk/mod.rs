//! Bulk loads of the CronJobs (and their Jobs) a replica gains in a
//! rebalance: read from kube-apiserver's watch cache where it serves
//! consistent reads, else by paginated LISTs, filtered as they come in,
//! rather than one GET per CronJob.
//!
//! Every read is no older than the moment of asking, so never older than
//! what the previous owner wrote before it let the key go. (A plain
//! `resourceVersion=0` read from the watch cache could be.) From the cache:
//! batch/v1 CronJobs in protobuf by one LIST each, without pages, at a
//! `resourceVersion` read consistently at the load's start with
//! `resourceVersionMatch=NotOlderThan` ([`protobuf`]); the Jobs, and the
//! CronJobs as JSON, by streaming lists (a watch with
//! `sendInitialEvents=true`, no `resourceVersion` and
//! `resourceVersionMatch=NotOlderThan`, ended at its
//! `k8s.io/initial-events-end` bookmark). A paginated LIST has no
//! `resourceVersion` on its first page; later pages are read at the first
//! page's snapshot.
//!
//! Why not pages: kube-apiserver 1.36 serves a paginated LIST with a
//! selector from its watch cache by walking the cache from the page's start
//! to the end and filtering (`apiserver_cache_list_fetched_objects_total`
//! grew by about 500,000 per page of 500 at 10^6 CronJobs), so a load of
//! N CronJobs in pages costs O(N^2 / page) on the server: with a million
//! CronJobs, four replicas' loads at start had not finished after ten
//! minutes (docs/performance.md, S7). A streaming list or an unpaged LIST
//! walks it once. An unpaged LIST must not be a consistent read itself:
//! when the cache is behind, the server answers one from etcd, in a single
//! range of every object; at a version, it refuses instead ([`cache_behind`]),
//! and the load reads by pages.
//!
//! Why a LIST rather than a streaming list where the answer can be decoded
//! as it arrives (protobuf): kube-apiserver (1.36,
//! `cacheWatcher.processInterval`) sends a watch's initial events before it
//! takes any of the changes queued for that watch meanwhile, and closes a
//! watch whose queue stays full ("Forcing watcher close due to
//! unresponsiveness"): 10 to 100 changes, by the size of the cache's
//! history (`suggestedWatchChannelSize`); 10 in S7's cold start (its
//! kube-apiserver at `-v=1` logs `len(c.input) = 10`). So a streaming list that runs
//! long under a steady stream of status writes, or starts while the server
//! is too busy to send its first events, is cut: in S7's hand-off (10^6
//! CronJobs), loads of 84,000-92,000 CronJobs were cut after 26-30 s; at a
//! cold start, the slots' status writes cut two replicas' first lists of a
//! quarter of the data set three times each, at the same instants
//! (loadtest/report/HISTORY.md). A LIST is no watch: nothing ends it but
//! the request timeout (60 s by default). A load is still split by buckets
//! into lists (where the server shards CronJob lists) of about
//! [`WHOLE_LIST_TARGET`] CronJobs for a LIST, well within that timeout,
//! and of [`LIST_TARGET`] for a streaming list, so that a cut costs one
//! list's re-read, not the whole load's. A list of several buckets the
//! server cut is read again as two lists of half its buckets each, after
//! [`CUT_PAUSE`] (the server is busy: a shorter list is likelier to end
//! before the next cut); a list of one bucket (or of every CronJob) up to
//! [`LIST_ATTEMPTS`] times. In S7's rolling restart a peer's whole load
//! failed after three cuts of one list of ten buckets and was read again
//! from its Jobs: its slots waited 40-45 s (loadtest/report/HISTORY.md).
//!
//! The list and the watch race each other; the supervisor lets a watch copy
//! win over a listed one and ignores listed objects the watch saw deleted
//! meanwhile.

use super::lean_cronjob::LeanCronJob;
use super::lean_job::LeanJob;
use super::watch::{INITIAL_EVENTS_END, JobFacts};
use crate::bucket;
use crate::reconcile::{CronJobKind, CronJobKinds};
use futures::TryStreamExt as _;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// Before a list the server cut is read again (split or not).
pub const CUT_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// One page of a bulk load: the gained CronJobs or the Jobs they control.
#[derive(Debug, Default)]
pub struct Loaded {
    pub cronjobs: Vec<LeanCronJob>,
    pub jobs: Vec<JobFacts>,
    /// Every Job of the load has been handed over (in this page or before
    /// it); its CronJobs follow. Set on one page of each load, empty
    /// otherwise.
    pub jobs_done: bool,
}

/// How many objects a bulk load handed over, all pages together.
#[derive(Debug, Default, Clone, Copy)]
pub struct LoadCounts {
    pub cronjobs: usize,
    pub jobs: usize,
}

/// What a load lists, and what the server is asked to filter it by (the
/// client filters by ownership anyway, so a server that ignores a selector
/// costs only bytes).
#[derive(Debug, Clone)]
pub struct LoadSelectors {
    /// The lists of CronJobs: for each served kind, where the server shards
    /// that kind's lists ([`super::sharded`]), the gained buckets,
    /// [`buckets_per_list`] buckets a list; else one list of every CronJob
    /// of the kind.
    pub cronjobs: Vec<CronJobList>,
    /// One list of Jobs per label selector ([`crate::bucket`]: the gained
    /// buckets, and the unlabelled); empty: one list of every Job.
    pub jobs: Vec<String>,
    pub reads: ListReads,
}

/// Reads every object of `api` (that `labels` selects, if any), by a
/// streaming list or by pages, handing them to `page` a page at a time.
async fn read_all<K, Taken>(
    api: Api<K>,
    labels: Option<&str>,
    streaming: bool,
    page: impl FnMut(Vec<K>) -> Taken,
) -> Result<(), LoadError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    Taken: Future<Output = ()>,
{
    if streaming {
        stream_all(api, labels, page).await
    } else {
        list_all(api, labels, page).await
    }
}

/// Reads every object of `api` (that `labels` selects) by a streaming list,
/// handing them (without managedFields) to `page` [`PAGE`] at a time and
/// waiting for it before reading on; each event must come within the list
/// deadline. Ends at the bookmark that marks the initial events' end.
/// (kube-runtime's watcher streams its lists with `resourceVersion=0`, a
/// read that may be older than the previous owner's last write: not used.)
async fn stream_all<K, Taken>(
    api: Api<K>,
    labels: Option<&str>,
    mut page: impl FnMut(Vec<K>) -> Taken,
) -> Result<(), LoadError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    Taken: Future<Output = ()>,
{
    // The server ends a watch after its timeout; the initial events of a
    // large load may take minutes (the deadline per event still catches a
    // silent server).
    let mut params = WatchParams::default()
        .initial_events()
        .timeout(STREAM_TIMEOUT_SECONDS);
    if let Some(labels) = labels {
        params = params.labels(labels);
    }
    // No resourceVersion: a consistent read.
    let events = super::deadline::within(super::deadline::LIST_PAGE, api.watch(&params, ""))
        .await
        .map_err(LoadError::Deadline)??;
    let mut events = std::pin::pin!(events);
    let mut held = Vec::new();
    loop {
        let event = super::deadline::within(super::deadline::LIST_PAGE, events.try_next())
            .await
            .map_err(LoadError::Deadline)??;
        match event {
            Some(WatchEvent::Added(object) | WatchEvent::Modified(object)) => {
                held.push(super::watch::without_managed_fields(object));
                if held.len() >= PAGE as usize {
                    page(std::mem::take(&mut held)).await;
                }
            }
            Some(WatchEvent::Bookmark(bookmark))
                if bookmark
                    .metadata
                    .annotations
                    .get(INITIAL_EVENTS_END)
                    .is_some_and(|v| v == "true") =>
            {
                page(held).await;
                return Ok(());
            }
            // Other bookmarks; a deletion cannot come before the end of the
            // initial events.
            Some(WatchEvent::Bookmark(_) | WatchEvent::Deleted(_)) => {}
            Some(WatchEvent::Error(status)) => {
                return Err(LoadError::Api(kube::Error::Api(status)));
            }
            None => return Err(LoadError::EndedEarly),
        }
    }
}

/// Lists every page of `api` (of the objects `labels` selects, if any),
/// each within the list deadline, handing each page's objects (without
/// managedFields) to `page` and waiting for it before asking for the next.
pub async fn list_all<K, Taken>(
    api: Api<K>,
    labels: Option<&str>,
    mut page: impl FnMut(Vec<K>) -> Taken,
) -> Result<(), LoadError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    Taken: Future<Output = ()>,
{
    let mut params = ListParams {
        limit: Some(PAGE),
        label_selector: labels.map(str::to_owned),
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
            Some(token) => params.continue_token = Some(token),
            None => return Ok(()),
        }
    }
}

/// Reads one list of a load with [`read_all`], handing each page to `take`,
/// which says how many of its objects it kept; again from the start when
/// the server cut a streaming list before its end (the objects handed over
/// twice are harmless: the supervisor keeps the newer copy of each), at
/// most [`LIST_ATTEMPTS`] times, and by pages when the server's watch cache
/// is too far behind to stream it ([`cache_behind`]). Returns the objects
/// kept by the read that reached the end.
async fn read_list<K, Taken>(
    api: Api<K>,
    labels: Option<&str>,
    mut streaming: bool,
    mut take: impl FnMut(Vec<K>) -> (usize, Taken),
) -> Result<usize, LoadError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
    Taken: Future<Output = ()>,
{
    let mut attempt = 1;
    loop {
        let mut kept = 0;
        let read = read_all(api.clone(), labels, streaming, |page| {
            let (count, taken) = take(page);
            kept += count;
            taken
        })
        .await;
        match read {
            Ok(()) => return Ok(kept),
            Err(LoadError::EndedEarly) if attempt < LIST_ATTEMPTS => {
                tracing::info!(
                    attempt,
                    delivered = kept,
                    "the server cut a streaming list of a load before its end; reading it again"
                );
                attempt += 1;
            }
            Err(LoadError::Api(ref error)) if streaming && cache_behind(error) => {
                tracing::info!(
                    "the server's watch cache is behind: reading this list of a load by pages"
                );
                streaming = false;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Hands `deliver`, page by page, the Jobs controlled by CronJobs of
/// `namespaces` (`None`: all) whose UID `owned` accepts, then a page that
/// says so ([`Loaded::jobs_done`]), then those CronJobs, asking the server
/// for what `selectors` select.
/// Each page is handed over as soon as it is read: a load of 100,000
/// CronJobs never holds more than a page of them decoded.
///
/// Jobs first, so that a gained CronJob can start the moment its own page
/// arrives: its actor then knows every Job it had at the load's start
/// (those created later come through the Job watch), where before every
/// gained key waited for the whole load (at 10^6 CronJobs, a quarter's
/// load took 35-45 s; docs/sharding.md).
pub async fn load<Taken>(
    client: Client,
    namespaces: &[Option<String>],
    selectors: &LoadSelectors,
    owned: impl Fn(&str) -> bool,
    mut deliver: impl FnMut(Loaded) -> Taken,
) -> Result<LoadCounts, LoadError>
where
    Taken: Future<Output = ()>,
{
    let mut counts = LoadCounts::default();
    let kinds = CronJobKinds::of(selectors.cronjobs.iter().map(|list| list.kind));
    let job_selectors: Vec<Option<&str>> = if selectors.jobs.is_empty() {
        vec![None]
    } else {
        selectors.jobs.iter().map(|s| Some(s.as_str())).collect()
    };
    for namespace in namespaces {
        let jobs: Api<LeanJob> = match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        for labels in &job_selectors {
            counts.jobs += read_list(
                jobs.clone(),
                *labels,
                selectors.reads.from_cache,
                |page: Vec<LeanJob>| {
                    let jobs: Vec<JobFacts> = page
                        .into_iter()
                        .map(|job| JobFacts::of(job, kinds))
                        .filter(|facts| facts.owner_uid.as_deref().is_some_and(&owned))
                        .collect();
                    let kept = jobs.len();
                    let taken = deliver(Loaded {
                        jobs,
                        ..Loaded::default()
                    });
                    (kept, taken)
                },
            )
            .await?;
        }
    }
    deliver(Loaded {
        jobs_done: true,
        ..Loaded::default()
    })
    .await;
    counts.cronjobs = load_cronjobs(
        client,
        namespaces,
        &selectors.cronjobs,
        selectors.reads,
        owned,
        |cronjobs| {
            deliver(Loaded {
                cronjobs,
                ..Loaded::default()
            })
        },
    )
    .await?;
    Ok(counts)
}

/// Hands `deliver`, page by page, the CronJobs of `namespaces` (`None`:
/// all) whose UID `keep` accepts, read by `lists`; returns how many it
/// kept. A list the server cut is split ([`CUT_PAUSE`], [`split_on_cut`]);
/// from the first the server's watch cache is too far behind to stream
/// ([`cache_behind`]), the lists are read by pages.
/// The CronJob half of [`load`], and the whole of a standby load
/// ([`crate::shard::standby`]).
pub async fn load_cronjobs<Taken>(
    client: Client,
    namespaces: &[Option<String>],
    lists: &[CronJobList],
    mut reads: ListReads,
    keep: impl Fn(&str) -> bool,
    mut deliver: impl FnMut(Vec<LeanCronJob>) -> Taken,
) -> Result<usize, LoadError>
where
    Taken: Future<Output = ()>,
{
    let mut kept_all = 0;
    for namespace in namespaces {
        // Last in, first out: a cut list's halves are read before the
        // lists after it, in bucket order.
        let mut to_read: Vec<(CronJobList, u32)> =
            lists.iter().rev().map(|list| (list.clone(), 1)).collect();
        let mut version: Option<String> = None;
        while let Some((list, attempt)) = to_read.pop() {
            let kind = list.kind;
            let cronjob_client = match list.buckets.as_deref().and_then(bucket::shard_selector) {
                Some(selector) => super::sharded::client_with_shard_selector(&client, &selector),
                None => client.clone(),
            };
            let mut kept = 0;
            let take = |page: Vec<LeanCronJob>| {
                let cronjobs: Vec<LeanCronJob> = page
                    .into_iter()
                    .filter(|cronjob| cronjob.metadata.uid.as_deref().is_some_and(&keep))
                    .map(|cronjob| LeanCronJob { kind, ..cronjob })
                    .collect();
                kept += cronjobs.len();
                deliver(cronjobs)
            };
            let read = if reads.protobuf && kind == CronJobKind::Batch {
                // Read once for the namespace's lists: each is then no
                // older than the load's start. A cluster-wide load reads it
                // in one namespace: the server walks the objects it lists.
                if reads.from_cache && version.is_none() {
                    let at = super::question_namespace(namespace.as_deref());
                    let api = super::watch::cronjob_api(client.clone(), kind, Some(at));
                    version = super::deadline::within(
                        super::deadline::LIST_PAGE,
                        super::watch::latest_version(&api),
                    )
                    .await
                    .map_err(LoadError::Deadline)??;
                    if version.is_none() {
                        tracing::info!(
                            "the server gave no resourceVersion to list at: reading the load's CronJobs by pages"
                        );
                        reads.from_cache = false;
                    }
                }
                let version = version.as_deref().filter(|_| reads.from_cache);
                protobuf::read_cronjobs(&cronjob_client, namespace.as_deref(), version, take).await
            } else {
                let cronjobs =
                    super::watch::cronjob_api(cronjob_client, kind, namespace.as_deref());
                read_all(cronjobs, None, reads.from_cache, take).await
            };
            match read {
                Ok(()) => kept_all += kept,
                Err(LoadError::EndedEarly) => {
                    let again = split_on_cut(list, attempt).ok_or(LoadError::EndedEarly)?;
                    tracing::info!(
                        attempt,
                        delivered = kept,
                        lists = again.len(),
                        "the server cut a list of CronJobs before its end; reading it again"
                    );
                    tokio::time::sleep(CUT_PAUSE).await;
                    to_read.extend(again.into_iter().rev());
                }
                Err(LoadError::Api(ref error)) if reads.from_cache && cache_behind(error) => {
                    tracing::info!(
                        "the server's watch cache is behind: reading the load's CronJobs by pages"
                    );
                    reads.from_cache = false;
                    to_read.push((list, attempt));
                }
                Err(error) => return Err(error),
            }
        }
    }
    Ok(kept_all)
}

mod lists;
mod protobuf;
pub use lists::{
    CronJobList, LIST_ATTEMPTS, LIST_TARGET, ListReads, LoadError, WHOLE_LIST_TARGET,
    buckets_per_list, buckets_per_list_knowing, even_per_list, list_target, split_on_cut,
};
use lists::{PAGE, STREAM_TIMEOUT_SECONDS, cache_behind};

pub mod narrow;

#[cfg(test)]
mod tests;
