//! Watches on CronJobs, Jobs and the ring's Leases, as kube-runtime watchers
//! (and on the namespaces' deletions, for the write gateway: [`namespaces`]).
//!
//! Each watch runs as a task on the multi-threaded runtime and hands its
//! events to a callback (the supervisor's mailbox), reading the next event
//! only once the last was taken: a list of 100,000 objects then streams
//! through a few at a time rather than piling up decoded in the mailbox
//! (which, once freed, an allocator may keep resident). Should the
//! receiver fall far behind, the server ends the watch and kube-runtime
//! resumes it from the last resourceVersion seen, so nothing is lost. A
//! watch that replaces another (a ring change) starts from where that one
//! was, without a list, when it can ([`super::resume`]). The watcher re-lists on
//! 410 Gone and after errors (with kube-runtime's default backoff); a
//! re-list shows up as `Init` .. `InitApply`* .. `InitDone`, which the
//! receiver uses to drop objects that disappeared while it was not looking.
//! Where the server answers one ([`list_strategy`]), the initial list is a
//! streaming list with bookmarks.
//!
//! A watch whose connection goes silent (a black hole: no reset, no close)
//! is found by kube-runtime's idle timeout, the watch's server-side timeout
//! plus 5 s, after which it is resumed on a new connection; re-establishing
//! it is bounded by the client's deadline on response headers
//! ([`super::deadline::RESPONSE_HEADERS`]). The ring's Leases are watched
//! with a server-side timeout of [`LEASE_WATCH_TIMEOUT_SECONDS`]: every
//! replica renews every few seconds, so a Lease watch silent for longer is
//! dead, and a replica that cannot see its peers cannot hand keys back to
//! them (it waits for the echo of its own publication). CronJobs and Jobs
//! keep the server's default (290 s, found silent after 295 s): their
//! initial list, streamed through the same watch, must fit in it at 10^5
//! objects, and a stale CronJob or Job watch only delays what the actors
//! learn, never who may act.

mod list_strategy;
pub mod namespaces;

pub use list_strategy::{INITIAL_EVENTS_END, ListStrategy, server_streams_lists};

use super::lean_cronjob::LeanCronJob;
use super::lean_job::LeanJob;
use super::resume::{self, Position};
use crate::reconcile::{CronJobKind, CronJobKinds, JobSummary};
use crate::telemetry::Metrics;
use crate::telemetry::metrics::ResourceLabels;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::WatchParams;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// The server-side timeout of the Lease watch: the server ends it after this
/// long and it is resumed from the last resourceVersion; a watch silent for
/// 5 s longer is dead and re-established.
pub const LEASE_WATCH_TIMEOUT_SECONDS: u32 = 15;

/// What the supervisor needs to route a Job: its controller, if that is a
/// CronJob. The Job itself (as a [`LeanJob`]) rides along and is summarized
/// ([`JobFacts::summary`]) only if its CronJob is owned by this replica, so
/// the other replicas' Jobs cost neither a summary nor memory.
#[derive(Debug, Clone)]
pub struct JobFacts {
    pub namespace: String,
    pub uid: String,
    /// The UID of its controller, if that is a CronJob (upstream's
    /// `resolveControllerRef` checks the kind, then the UID); the ring
    /// keys on it.
    pub owner_uid: Option<String>,
    /// Whether it carries the bucket label (any value): the labelled Job
    /// watch selects it, not the unlabelled one.
    pub labelled: bool,
    pub job: Box<LeanJob>,
}

impl JobFacts {
    pub fn summary(&self) -> JobSummary {
        JobSummary::from(&*self.job)
    }
}

/// A batch/v1 CronJob's view of a Job.
impl From<LeanJob> for JobFacts {
    fn from(job: LeanJob) -> Self {
        Self::of(job, CronJobKinds::of([CronJobKind::Batch]))
    }
}

impl JobFacts {
    /// The facts of `job` for a controller serving `kinds`: a Job whose
    /// controller is a CronJob of another API has no owner here.
    pub fn of(job: LeanJob, kinds: CronJobKinds) -> Self {
        let owner = crate::reconcile::controller_in(&job.metadata)
            .filter(|r| r.kind == CronJobKind::KIND && kinds.serving(&r.api_version).is_some());
        Self {
            namespace: job.metadata.namespace.clone().unwrap_or_default(),
            uid: job.metadata.uid.clone().unwrap_or_default(),
            owner_uid: owner.map(|r| r.uid.clone()),
            labelled: job
                .metadata
                .labels
                .as_ref()
                .is_some_and(|labels| labels.contains_key(crate::bucket::LABEL)),
            job: Box::new(job),
        }
    }
}

fn api<K>(client: Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    }
}

/// The CronJobs of `kind` in one namespace (or all).
pub(crate) fn cronjob_api(
    client: Client,
    kind: CronJobKind,
    namespace: Option<&str>,
) -> Api<LeanCronJob> {
    match namespace {
        Some(namespace) => Api::namespaced_with(client, namespace, &kind),
        None => Api::all_with(client, &kind),
    }
}

/// Drops `metadata.managedFields`, which the controller never reads: for a
/// CronJob it is a JSON tree of every field set, as large as the rest of
/// the object once decoded.
pub(crate) fn without_managed_fields<K: Resource>(mut object: K) -> K {
    object.meta_mut().managed_fields = None;
    object
}

/// Where a watch starts: with a list, or from where the watch it replaces
/// was ([`super::resume`]); and the [`Position`] it keeps up to date.
#[derive(Debug, Clone, Default)]
pub struct Start {
    pub from: Option<String>,
    pub position: Position,
}

/// Runs a watch until the process ends, handing each event, mapped by
/// `map`, to `deliver` and waiting for it to be taken before reading on,
/// so that a list of many objects is never held decoded all at once.
/// Resumed (`start.from`), it lists only once it cannot go on from there.
fn spawn_watch<K, T, Delivered>(
    api: Api<K>,
    config: watcher::Config,
    start: Start,
    resource: &'static str,
    metrics: Arc<Metrics>,
    map: impl Fn(K) -> T + Send + Sync + 'static,
    mut deliver: impl FnMut(Event<T>) -> Delivered + Send + 'static,
) -> JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    T: Send + 'static,
    Delivered: Future<Output = ()> + Send,
{
    let map = move |object: K| map(without_managed_fields(object));
    let map_event = move |event: Event<K>| match event {
        Event::Apply(o) => Event::Apply(map(o)),
        Event::Delete(o) => Event::Delete(map(o)),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(map(o)),
        Event::InitDone => Event::InitDone,
    };
    let labels = ResourceLabels { resource };
    let Start { from, position } = start;
    tokio::spawn(async move {
        let received = metrics.watch_events.get_or_create(&labels).clone();
        if let Some(from) = from {
            tracing::info!(resource, %from, "watching from a resourceVersion, without a list (where the watch it replaces was, or the first version read)");
            let params = WatchParams {
                label_selector: config.label_selector.clone(),
                field_selector: config.field_selector.clone(),
                timeout: config.timeout,
                bookmarks: true,
                ..WatchParams::default()
            };
            // Only changes come: `Apply` and `Delete`.
            let ended = resume::watch_from(&api, &params, from, &position, |event| {
                received.inc();
                deliver(map_event(event))
            })
            .await;
            tracing::info!(resource, %ended, "a resumed watch lists again");
        }
        let mut events = watcher::watcher(api, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    let version = match &event {
                        Event::Init => {
                            metrics.watch_restarts.get_or_create(&labels).inc();
                            position.listing();
                            None
                        }
                        Event::InitDone => None,
                        Event::InitApply(_) => {
                            received.inc();
                            None
                        }
                        Event::Apply(o) | Event::Delete(o) => {
                            received.inc();
                            o.meta().resource_version.clone()
                        }
                    };
                    deliver(map_event(event)).await;
                    position.delivered(version.as_deref());
                }
                Err(error) => tracing::warn!(resource, %error, "watch failed; retrying"),
            }
        }
    })
}

/// `read` within a list page's deadline: the supervisor waits for these
/// reads before anything else, and the client's own deadline covers only
/// the response's headers, not a body that stalls after them.
async fn bounded<T>(
    read: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, String> {
    match super::deadline::within(super::deadline::LIST_PAGE, read).await {
        Ok(answer) => answer.map_err(|error| error.to_string()),
        Err(elapsed) => Err(elapsed.to_string()),
    }
}

/// The resourceVersion of a consistent read of `api` (a list of one
/// object's metadata, no `resourceVersion`: the latest), if the server
/// gives one: a watch started from it misses no change made after any read
/// asked for later.
pub(crate) async fn latest_version<K>(api: &Api<K>) -> Result<Option<String>, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    Ok(latest_read(api).await?.0)
}

/// [`latest_version`], and how many objects `api` lists, if the server
/// says: a list without a selector counts what its first page left out
/// (`remainingItemCount`), and a list with no page after the first holds
/// them all.
async fn latest_read<K>(api: &Api<K>) -> Result<(Option<String>, Option<usize>), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let list = api
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await?;
    let last_page = list.metadata.continue_.as_deref().is_none_or(str::is_empty);
    let left = match list.metadata.remaining_item_count {
        Some(left) => usize::try_from(left).ok(),
        None => last_page.then_some(0),
    };
    let count = left.map(|left| left + list.items.len());
    let version = list.metadata.resource_version.filter(|v| !v.is_empty());
    Ok((version, count))
}

/// The latest resourceVersions of the CronJobs of each kind in `kinds` and
/// of the Jobs, read in `namespace` (or all; the Jobs' in
/// [`super::question_namespace`]: nothing counts them): where a replica's
/// first watches start, instead of listing what its first bulk loads read
/// anyway. A kind whose version cannot be read is left out (its watch
/// lists). The same reads count the CronJobs.
pub async fn latest_versions(
    client: &Client,
    kinds: &[CronJobKind],
    namespace: Option<&str>,
) -> LatestVersions {
    let mut versions = LatestVersions::default();
    for &kind in kinds {
        match bounded(latest_read(&cronjob_api(client.clone(), kind, namespace))).await {
            Ok((version, count)) => {
                if let Some(version) = version {
                    versions.cronjobs.push((kind, version));
                }
                if let Some(count) = count {
                    *versions.cronjob_count.get_or_insert(0) += count;
                }
            }
            Err(error) => {
                tracing::warn!(%error, ?kind, "could not read the CronJobs' latest resourceVersion; the first watch lists")
            }
        }
    }
    let jobs_namespace = super::question_namespace(namespace);
    match bounded(latest_version(&api::<LeanJob>(
        client.clone(),
        Some(jobs_namespace),
    )))
    .await
    {
        Ok(version) => versions.jobs = version,
        Err(error) => {
            tracing::warn!(%error, "could not read the Jobs' latest resourceVersion; the first watch lists")
        }
    }
    versions
}

/// Where first watches may start ([`latest_versions`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LatestVersions {
    pub cronjobs: Vec<(CronJobKind, String)>,
    pub jobs: Option<String>,
    /// How many CronJobs of those kinds the server held, if it said: what
    /// the first load's lists are sized by ([`crate::apiserver::bulk::buckets_per_list`]).
    pub cronjob_count: Option<usize>,
}

impl LatestVersions {
    pub fn cronjobs(&self, kind: CronJobKind) -> Option<String> {
        self.cronjobs
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, version)| version.clone())
    }
}

/// `client`, its response bytes counted as `resource`'s
/// (`shardcron_watch_bytes_total`).
fn counting(client: &Client, metrics: &Metrics, resource: &'static str) -> Client {
    let bytes = metrics
        .watch_bytes
        .get_or_create(&ResourceLabels { resource })
        .clone();
    super::counted::client_counting_bytes(client, bytes)
}

/// Watches the CronJobs of `kind` in one namespace (or all); with
/// `shard_selector`, only those the server's sharded watch selects
/// ([`super::sharded`]).
#[allow(clippy::too_many_arguments)]
pub fn cronjobs<Delivered: Future<Output = ()> + Send>(
    client: Client,
    kind: CronJobKind,
    namespace: Option<&str>,
    strategy: ListStrategy,
    shard_selector: Option<&str>,
    start: Start,
    metrics: Arc<Metrics>,
    deliver: impl FnMut(Event<LeanCronJob>) -> Delivered + Send + 'static,
) -> JoinHandle<()> {
    let client = match shard_selector {
        Some(selector) => super::sharded::client_with_shard_selector(&client, selector),
        None => client,
    };
    let resource = cronjob_resource(kind);
    spawn_watch(
        cronjob_api(counting(&client, &metrics, resource), kind, namespace),
        strategy.config(),
        start,
        resource,
        metrics,
        move |mut cronjob: LeanCronJob| {
            cronjob.kind = kind;
            cronjob
        },
        deliver,
    )
}

/// The `resource` label of a CronJob watch's metrics.
fn cronjob_resource(kind: CronJobKind) -> &'static str {
    match kind {
        CronJobKind::Batch => "cronjobs",
        CronJobKind::Shardcron => "cronjobs.shardcron.io",
    }
}

/// Watches the Jobs in one namespace (or all) that `selector` selects
/// ([`crate::bucket`]: the owned buckets, or no bucket), as [`JobFacts`]
/// for CronJobs of `kinds`; `resource` names the watch in the metrics.
#[allow(clippy::too_many_arguments)]
pub fn jobs<Delivered: Future<Output = ()> + Send>(
    client: Client,
    kinds: CronJobKinds,
    namespace: Option<&str>,
    strategy: ListStrategy,
    selector: &str,
    start: Start,
    resource: &'static str,
    metrics: Arc<Metrics>,
    deliver: impl FnMut(Event<JobFacts>) -> Delivered + Send + 'static,
) -> JoinHandle<()> {
    spawn_watch(
        api::<LeanJob>(counting(&client, &metrics, resource), namespace),
        strategy.config().labels(selector),
        start,
        resource,
        metrics,
        move |job| JobFacts::of(job, kinds),
        deliver,
    )
}

/// Watches the Leases of one ring (label selector `selector`) in `namespace`,
/// each turned by `observe` into what the caller keeps of it.
pub fn leases<Observed, Delivered>(
    client: Client,
    namespace: &str,
    selector: &str,
    metrics: Arc<Metrics>,
    observe: fn(Lease) -> Observed,
    deliver: impl FnMut(Event<Observed>) -> Delivered + Send + 'static,
) -> JoinHandle<()>
where
    Observed: Send + 'static,
    Delivered: Future<Output = ()> + Send,
{
    // On the shared client itself: the watch that membership, and so every
    // hand-off, depends on gets no layer it does not need.
    spawn_watch(
        Api::<Lease>::namespaced(client, namespace),
        watcher::Config::default()
            .labels(selector)
            .any_semantic()
            .timeout(LEASE_WATCH_TIMEOUT_SECONDS),
        Start::default(),
        "leases",
        metrics,
        observe,
        deliver,
    )
}

#[cfg(test)]
mod tests;
