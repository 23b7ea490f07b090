//! Bulk loads of the CronJobs (and their Jobs) a replica gains in a
//! rebalance: streaming lists where the server has them, else paginated
//! LISTs, filtered as they come in, rather than one GET per CronJob.
//!
//! Either way the read is consistent: no older than the moment of asking,
//! so never older than what the previous owner wrote before it let the key
//! go. (A `resourceVersion=0` read from the watch cache could be.) A
//! streaming list is a watch with `sendInitialEvents=true`, no
//! `resourceVersion` and `resourceVersionMatch=NotOlderThan`, ended at its
//! `k8s.io/initial-events-end` bookmark; a paginated one has no
//! `resourceVersion` on its first page, and later pages are read at the
//! first page's snapshot.
//!
//! Why streaming first: kube-apiserver 1.36 serves a paginated LIST with a
//! selector from its watch cache by walking the cache from the page's start
//! to the end and filtering (`apiserver_cache_list_fetched_objects_total`
//! grew by about 500,000 per page of 500 at 10^6 CronJobs), so a load of
//! N CronJobs in pages costs O(N^2 / page) on the server: with a million
//! CronJobs, four replicas' loads at start had not finished after ten
//! minutes (docs/performance.md, S7). A streaming list walks it once.
//!
//! A streaming list is not read by the server while it sends: kube-apiserver
//! (1.36, `cacheWatcher.processInterval`) sends a watch's initial events
//! before it takes any of the changes queued for that watch meanwhile, and
//! closes a watch whose queue (at most 100 CronJob changes) stays full
//! ("Forcing watcher close due to unresponsiveness"). So under a steady
//! stream of status writes, a list that takes longer than about 100 of them
//! is cut: in S7's hand-off (10^6 CronJobs), loads of 84,000-92,000
//! CronJobs took 35 s under the survivors' relists and were cut after
//! 26-30 s. A load is therefore split by buckets into lists of about
//! [`LIST_TARGET`] CronJobs (where the server shards CronJob lists), and a
//! list the server cut is read again, up to [`LIST_ATTEMPTS`] times.
//!
//! The list and the watch race each other; the supervisor lets a watch copy
//! win over a listed one and ignores listed objects the watch saw deleted
//! meanwhile.

use super::bucket::BUCKETS;
use super::lean_cronjob::LeanCronJob;
use super::lean_job::LeanJob;
use super::watch::JobFacts;
use crate::reconcile::{CronJobKind, CronJobKinds};
use futures::TryStreamExt as _;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// Objects per page.
const PAGE: u32 = 500;

/// CronJobs a load asks for in one list, about: short enough that a
/// streaming list ends before the server cuts it (a few seconds even on a
/// busy server; see the module's comment), long enough that a small
/// cluster's load stays one list.
pub const LIST_TARGET: usize = 10_000;

/// Reads of one list, the first included, when the server cuts a streaming
/// list before its end; then the load fails (and the supervisor retries it).
pub const LIST_ATTEMPTS: u32 = 3;

/// How many buckets' CronJobs one list of a load asks for, from the
/// density the replica knows (`cronjobs` over `buckets`, both what it owns
/// now): about [`LIST_TARGET`] CronJobs. Knowing nothing (a replica that
/// owns nothing yet), every bucket in one list.
pub fn buckets_per_list(cronjobs: usize, buckets: usize) -> usize {
    if cronjobs == 0 || buckets == 0 {
        return usize::from(BUCKETS);
    }
    (LIST_TARGET * buckets / cronjobs).clamp(1, usize::from(BUCKETS))
}

/// One page of a bulk load: the gained CronJobs or the Jobs they control.
#[derive(Debug, Default)]
pub struct Loaded {
    pub cronjobs: Vec<LeanCronJob>,
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
    Api(#[from] kube::Error),
    #[error("listing a page: {0}")]
    Deadline(super::deadline::Elapsed),
    #[error("the streaming list ended before its initial-events-end bookmark")]
    EndedEarly,
}

/// What a load lists, and what the server is asked to filter it by (the
/// client filters by ownership anyway, so a server that ignores a selector
/// costs only bytes).
#[derive(Debug, Clone)]
pub struct LoadSelectors {
    /// The lists of CronJobs: for each served kind, where the server shards
    /// that kind's lists ([`super::sharded`]), the gained buckets' hash
    /// ranges, [`buckets_per_list`] buckets a list; else one list of every
    /// CronJob of the kind (`None`).
    pub cronjobs: Vec<(CronJobKind, Option<String>)>,
    /// One list of Jobs per label selector ([`super::bucket`]: the gained
    /// buckets, and the unlabelled); empty: one list of every Job.
    pub jobs: Vec<String>,
    /// Streaming lists (the server has them: the watches use them too);
    /// else paginated.
    pub streaming: bool,
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

/// The server's timeout of a streaming list, seconds.
const STREAM_TIMEOUT_SECONDS: u32 = 3600;

/// The annotation of the bookmark that ends a streaming list's initial
/// events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

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
/// most [`LIST_ATTEMPTS`] times. Returns the objects kept by the read that
/// reached the end.
async fn read_list<K, Taken>(
    api: Api<K>,
    labels: Option<&str>,
    streaming: bool,
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
            Err(error) => return Err(error),
        }
    }
}

/// Hands `deliver`, page by page, the CronJobs of `namespaces` (`None`:
/// all) whose UID `owned` accepts, then the Jobs they control, asking the
/// server for what `selectors` select.
/// Each page is handed over as soon as it is read: a load of 100,000
/// CronJobs never holds more than a page of them decoded.
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
    let kinds = CronJobKinds::of(selectors.cronjobs.iter().map(|(kind, _)| *kind));
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
        for (kind, shards) in &selectors.cronjobs {
            let kind = *kind;
            let cronjob_client = match shards {
                Some(selector) => super::sharded::client_with_shard_selector(&client, selector),
                None => client.clone(),
            };
            let cronjobs = super::watch::cronjob_api(cronjob_client, kind, namespace.as_deref());
            counts.cronjobs += read_list(
                cronjobs,
                None,
                selectors.streaming,
                |page: Vec<LeanCronJob>| {
                    let cronjobs: Vec<LeanCronJob> = page
                        .into_iter()
                        .filter(|cronjob| cronjob.metadata.uid.as_deref().is_some_and(&owned))
                        .map(|cronjob| LeanCronJob { kind, ..cronjob })
                        .collect();
                    let kept = cronjobs.len();
                    let taken = deliver(Loaded {
                        cronjobs,
                        jobs: Vec::new(),
                    });
                    (kept, taken)
                },
            )
            .await?;
        }
        for labels in &job_selectors {
            counts.jobs += read_list(
                jobs.clone(),
                *labels,
                selectors.streaming,
                |page: Vec<LeanJob>| {
                    let jobs: Vec<JobFacts> = page
                        .into_iter()
                        .map(|job| JobFacts::of(job, kinds))
                        .filter(|facts| facts.owner_uid.as_deref().is_some_and(&owned))
                        .collect();
                    let kept = jobs.len();
                    let taken = deliver(Loaded {
                        cronjobs: Vec::new(),
                        jobs,
                    });
                    (kept, taken)
                },
            )
            .await?;
        }
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::scripted::{self, Answer};
    use serde_json::{Value, json};

    fn list(kind: &str, items: Vec<Value>, next: &str) -> Answer {
        Answer::Json(
            200,
            json!({
                "kind": format!("{kind}List"), "apiVersion": "batch/v1",
                "metadata": {"resourceVersion": "7", "continue": next},
                "items": items,
            }),
        )
    }

    fn cronjob(namespace: &str, name: &str) -> Value {
        json!({
            "metadata": {"namespace": namespace, "name": name, "uid": format!("uid-{name}"),
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {}}}},
        })
    }

    fn job(name: &str, owner: Option<(&str, &str)>) -> Value {
        let owners: Vec<Value> = owner
            .map(|(kind, name)| {
                json!({"apiVersion": "batch/v1", "kind": kind, "name": name,
                       "uid": format!("uid-{name}"), "controller": true})
            })
            .into_iter()
            .collect();
        json!({
            "metadata": {"namespace": "a", "name": name, "uid": format!("uid-{name}"),
                         "ownerReferences": owners},
            "spec": {"template": {}},
        })
    }

    /// The CronJobs' names and the Jobs' UIDs the pages delivered, once
    /// checked that no CronJob kept its managedFields (dropped as pages
    /// arrive).
    fn delivered(pages: &[Loaded]) -> (Vec<&str>, Vec<&str>) {
        let cronjobs = pages.iter().flat_map(|p| &p.cronjobs);
        assert!(
            cronjobs
                .clone()
                .all(|c| c.metadata.managed_fields.is_none())
        );
        (
            cronjobs
                .map(|c| c.metadata.name.as_deref().unwrap_or_default())
                .collect(),
            pages
                .iter()
                .flat_map(|p| &p.jobs)
                .map(|j| &*j.uid)
                .collect(),
        )
    }

    /// Runs a load of every namespace owning the names that start with
    /// `keep`; what was delivered and what was asked.
    async fn load_with(
        script: impl Fn(&scripted::Request) -> Answer + Send + Sync + 'static,
    ) -> (Result<LoadCounts, LoadError>, Vec<Loaded>, Vec<String>) {
        load_streaming_or_not(false, script).await
    }

    async fn load_streaming_or_not(
        streaming: bool,
        script: impl Fn(&scripted::Request) -> Answer + Send + Sync + 'static,
    ) -> (Result<LoadCounts, LoadError>, Vec<Loaded>, Vec<String>) {
        let (client, asked) = scripted::client(script);
        let mut pages = Vec::new();
        let result = load(
            client,
            &[None],
            &LoadSelectors {
                cronjobs: vec![(CronJobKind::Batch, None)],
                jobs: Vec::new(),
                streaming,
            },
            |uid| uid.starts_with("uid-keep"),
            |page| {
                pages.push(page);
                async {}
            },
        )
        .await;
        (result, pages, asked.all())
    }

    #[tokio::test]
    async fn a_load_reads_every_page_and_hands_over_only_what_this_replica_owns() {
        let (result, pages, asked) = load_with(|request| {
            let uri = &request.uri;
            if uri.starts_with("/apis/batch/v1/cronjobs") && !uri.contains("continue=") {
                list(
                    "CronJob",
                    vec![cronjob("a", "keep-1"), cronjob("a", "drop-1")],
                    "next-page",
                )
            } else if uri.starts_with("/apis/batch/v1/cronjobs") {
                list("CronJob", vec![cronjob("b", "keep-2")], "")
            } else {
                list(
                    "Job",
                    vec![
                        job("keep-1-100", Some(("CronJob", "keep-1"))),
                        job("drop-1-100", Some(("CronJob", "drop-1"))),
                        job("keep-by-hand", None),
                        job("keep-1-by-a-set", Some(("ReplicaSet", "keep-1"))),
                    ],
                    "",
                )
            }
        })
        .await;
        let counts = result.expect("the load succeeds");
        assert_eq!((counts.cronjobs, counts.jobs), (2, 1));
        assert_eq!(
            delivered(&pages),
            (vec!["keep-1", "keep-2"], vec!["uid-keep-1-100"])
        );
        // Every page is consistent: the first names no version (never the
        // watch cache's possibly older `0`), a continued one is read at the
        // first page's snapshot.
        assert_eq!(asked.len(), 3, "{asked:?}");
        assert!(asked[0].contains("limit=500"), "{asked:?}");
        assert!(asked[1].contains("continue=next-page"), "{asked:?}");
        assert!(
            asked.iter().all(|a| !a.contains("resourceVersion")),
            "{asked:?}"
        );
        assert!(asked[2].starts_with("GET /apis/batch/v1/jobs?"));
    }

    fn added(object: Value) -> Value {
        json!({"type": "ADDED", "object": object})
    }

    fn bookmark(end: bool) -> Value {
        let annotations = if end {
            json!({"k8s.io/initial-events-end": "true"})
        } else {
            json!({})
        };
        json!({"type": "BOOKMARK", "object": {"kind": "CronJob", "apiVersion": "batch/v1",
               "metadata": {"resourceVersion": "9", "annotations": annotations}}})
    }

    #[tokio::test]
    async fn a_streaming_load_is_a_consistent_watch_read_to_its_end_bookmark() {
        let (result, pages, asked) = load_streaming_or_not(true, |request| {
            if request.uri.starts_with("/apis/batch/v1/cronjobs") {
                Answer::Events(vec![
                    added(cronjob("a", "keep-1")),
                    bookmark(false),
                    added(cronjob("a", "drop-1")),
                    added(cronjob("b", "keep-2")),
                    bookmark(true),
                    // After the end: not part of the load.
                    added(cronjob("c", "keep-3")),
                ])
            } else {
                Answer::Events(vec![
                    added(job("keep-1-100", Some(("CronJob", "keep-1")))),
                    bookmark(true),
                ])
            }
        })
        .await;
        let counts = result.expect("the load succeeds");
        assert_eq!((counts.cronjobs, counts.jobs), (2, 1));
        assert_eq!(
            delivered(&pages),
            (vec!["keep-1", "keep-2"], vec!["uid-keep-1-100"])
        );
        // A consistent read: initial events, NotOlderThan, and an empty
        // resourceVersion (never the watch cache's possibly older `0`).
        assert_eq!(asked.len(), 2, "{asked:?}");
        for query in &asked {
            for wanted in [
                "watch=true",
                "sendInitialEvents=true",
                "resourceVersionMatch=NotOlderThan",
                "allowWatchBookmarks=true",
            ] {
                assert!(query.contains(wanted), "{wanted} in {query}");
            }
            assert!(query.ends_with("&resourceVersion="), "{query}");
        }
    }

    #[tokio::test]
    async fn a_streaming_list_cut_before_its_bookmark_is_read_again_then_fails() {
        let (result, _, asked) = load_streaming_or_not(true, |_| {
            Answer::Events(vec![added(cronjob("a", "keep-1"))])
        })
        .await;
        assert!(matches!(result, Err(LoadError::EndedEarly)), "{result:?}");
        assert_eq!(asked.len(), LIST_ATTEMPTS as usize, "{asked:?}");
    }

    #[tokio::test]
    async fn a_streaming_list_cut_once_counts_only_the_read_that_reached_its_end() {
        let cronjob_lists = std::sync::atomic::AtomicUsize::new(0);
        let (result, pages, asked) = load_streaming_or_not(true, move |request| {
            if !request.uri.starts_with("/apis/batch/v1/cronjobs") {
                return Answer::Events(vec![bookmark(true)]);
            }
            let mut events = vec![added(cronjob("a", "keep-1")), added(cronjob("a", "keep-2"))];
            // The first read is cut after its first object.
            if cronjob_lists.fetch_add(1, std::sync::atomic::Ordering::Relaxed) == 0 {
                events.truncate(1);
            } else {
                events.push(bookmark(true));
            }
            Answer::Events(events)
        })
        .await;
        let counts = result.expect("the second read reaches the end");
        assert_eq!((counts.cronjobs, counts.jobs), (2, 0));
        // The cut read's partial page is not handed over (had it been, keep-1
        // would come twice: the supervisor keeps the newer copy).
        assert_eq!(delivered(&pages).0, vec!["keep-1", "keep-2"]);
        assert_eq!(asked.len(), 3, "{asked:?}");
    }

    #[test]
    fn a_list_asks_for_about_ten_thousand_cronjobs_or_everything_when_nothing_is_known() {
        let all = usize::from(BUCKETS);
        for (cronjobs, buckets, per_list) in [
            // Nothing owned yet: one list.
            (0, 0, all),
            (0, 256, all),
            // A small cluster: one list.
            (1_000, 1_024, all),
            (9_000, 256, 284),
            // 10^6 over four replicas: ~977 a bucket, 10 buckets a list.
            (250_000, 256, 10),
            // Denser than the target per bucket: one bucket a list.
            (50_000, 4, 1),
        ] {
            assert_eq!(
                buckets_per_list(cronjobs, buckets),
                per_list,
                "{cronjobs} over {buckets}"
            );
        }
    }

    #[tokio::test]
    async fn a_failed_page_ends_the_load_with_the_servers_error() {
        let (result, _, asked) = load_with(|request| {
            let uri = &request.uri;
            if uri.starts_with("/apis/batch/v1/cronjobs") {
                list("CronJob", vec![cronjob("a", "keep-1")], "")
            } else {
                scripted::status(500, "InternalError")
            }
        })
        .await;
        match result {
            Err(LoadError::Api(kube::Error::Api(status))) => assert_eq!(status.code, 500),
            other => panic!("expected the server's 500, got {other:?}"),
        }
        assert_eq!(asked.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_page_ends_the_load_at_its_deadline() {
        let started = tokio::time::Instant::now();
        let (result, pages, _) = load_with(|_| Answer::Silence).await;
        assert!(matches!(result, Err(LoadError::Deadline(_))), "{result:?}");
        assert!(pages.is_empty());
        assert_eq!(started.elapsed(), crate::apiserver::deadline::LIST_PAGE);
    }
}
