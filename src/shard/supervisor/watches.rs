//! The CronJob and Job watches of each scope, shaped by the ring: a
//! replica receives the Jobs of the buckets it owns (a label selector) and,
//! where the API server shards watches, only the CronJobs of those buckets
//! and of its standby ones ([`crate::shard::standby`]).
//!
//! Each scope runs three watches:
//! - Jobs labelled with an owned bucket (`shardcron.io/bucket in (...)`),
//!   restarted with a new selector whenever the owned buckets change;
//! - Jobs without the label (made before shardcron took over, or by hand
//!   with a CronJob as controller), unfiltered: every replica reads them
//!   and routes them by their controller's UID, as before (only where
//!   batch/v1 CronJobs are served: see [`Watches::watches_unlabelled_jobs`]);
//! - CronJobs, one watch per served kind: sharded by the server (the owned
//!   and the standby buckets) and restarted with the ring where it can
//!   ([`crate::apiserver::sharded`]), all of them otherwise.
//!
//! A restarted watch starts from where the watch it replaces had delivered
//! (`crate::apiserver::resume`: the changes since then under the new
//! selector; the gained buckets' objects come with the bulk load), or lists
//! again if that watch had delivered nothing since its list, or the server
//! no longer has that version. The first ring's sharded watches start at
//! the latest versions read when the replica started, before any load
//! ([`Watches::read_first_versions`]): the first loads read the owned
//! buckets, a standby load the standby ones, and nothing is read twice. Its events carry a generation, and the
//! supervisor drops those of a watch it has replaced (the old watch may
//! still have events in the mailbox, a re-list's end among them, which
//! would otherwise count the new list's objects as deleted). A restart
//! does not hold any decision: the Jobs of the buckets a replica keeps were
//! selected before and after, and those of the buckets it gains come with
//! the bulk load, which the protocol waits for.

use super::Supervisor;
use super::intake::{CronJobWatch, JobStream, JobWatch};
use crate::apiserver::bulk::ListReads;
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::apiserver::resume::Position;
use crate::apiserver::watch::{self, JobFacts, LatestVersions, ListStrategy};
use crate::bucket::{self, Bucket};
use crate::reconcile::{CronJobKind, CronJobKinds};
use crate::telemetry::Metrics;
use actix::dev::Request;
use actix::prelude::*;
use futures::FutureExt as _;
use kube::Client;
use kube::runtime::watcher::Event;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// What a replica's watches are made with.
#[derive(Clone)]
pub struct WatchSetup {
    pub client: Client,
    pub strategy: ListStrategy,
    pub metrics: Arc<Metrics>,
    /// The CronJobs served (batch/v1's, the shardcron.io CRD's, or both),
    /// each with whether the API server filters its CronJobs by
    /// `shardSelector` (Kubernetes 1.36 does for batch/v1, not for custom
    /// resources).
    pub kinds: Vec<ServedKind>,
    /// The loads read batch/v1 CronJobs in protobuf (`--api-protobuf`).
    pub protobuf: bool,
}

/// One kind of CronJob a replica serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServedKind {
    pub kind: CronJobKind,
    pub server_shards: bool,
}

/// A running watch, its generation, and how far it has delivered.
struct Running {
    generation: u64,
    task: JoinHandle<()>,
    position: Position,
}

/// The watches of one scope.
#[derive(Default)]
struct ScopeWatches {
    /// One per served kind, in [`WatchSetup::kinds`]' order.
    cronjobs: Vec<Option<Running>>,
    labelled_jobs: Option<Running>,
    unlabelled_jobs: Option<JoinHandle<()>>,
}

/// Every scope's watches; without a setup (the supervisor's tests feed
/// the watch messages themselves), none runs and every generation is 0.
#[derive(Default)]
pub(super) struct Watches {
    setup: Option<WatchSetup>,
    scopes: Vec<ScopeWatches>,
    /// The buckets the current selectors name: the owned ones (the Jobs'
    /// label selector), and those with the standby ones (the CronJobs'
    /// shard selector).
    buckets: Option<(Vec<Bucket>, Vec<Bucket>)>,
    /// Where the first ring's watches start, if read before it came
    /// ([`Watches::read_first_versions`]); taken by the first reshape.
    first_versions: Option<LatestVersions>,
    /// How many CronJobs the server held when the first versions were
    /// read, if it said: kept for sizing the first loads' lists.
    cronjobs_at_start: Option<usize>,
}

/// What a reshape started.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Reshaped {
    /// The CronJob watches list every watched bucket again (every served
    /// kind sharded by the server, and no watch to resume), so that nothing
    /// more need be read for the standby buckets.
    pub(super) lists_every_watched_bucket: bool,
    /// The first ring's watches that started at versions read before any
    /// load (the labelled Jobs', the CronJobs' of these kinds): they list
    /// nothing, and count as listed (the loads read what they would have).
    pub(super) labelled_jobs_at_first_version: bool,
    pub(super) cronjobs_at_first_version: Vec<CronJobKind>,
}

/// Hands a Job watch's events to the supervisor, tagged.
fn send_jobs(
    to: &Addr<Supervisor>,
    scope: usize,
    stream: JobStream,
    generation: u64,
) -> impl FnMut(Event<JobFacts>) -> Request<Supervisor, JobWatch> + Send + 'static {
    let to = to.clone();
    move |event| {
        to.send(JobWatch {
            scope,
            stream,
            generation,
            event,
        })
    }
}

/// Hands a CronJob watch's events to the supervisor, tagged.
fn send_cronjobs(
    to: &Addr<Supervisor>,
    scope: usize,
    kind: CronJobKind,
    generation: u64,
) -> impl FnMut(Event<LeanCronJob>) -> Request<Supervisor, CronJobWatch> + Send + 'static {
    let to = to.clone();
    move |event| {
        to.send(CronJobWatch {
            scope,
            kind,
            generation,
            event,
        })
    }
}

fn current(running: &Option<Running>) -> u64 {
    running.as_ref().map_or(0, |r| r.generation)
}

/// Ends `old` and starts the next generation with `start(generation,
/// where)`: from where `old` had delivered, if it had; the first one (no
/// `old`) from `first`, if given; else with a list.
fn restart(
    old: &mut Option<Running>,
    first: Option<String>,
    start: impl FnOnce(u64, watch::Start) -> JoinHandle<()>,
) {
    let generation = current(old) + 1;
    let from = match old {
        Some(running) => running.position.get(),
        None => first,
    };
    if let Some(old) = old.take() {
        old.task.abort();
    }
    let position = Position::default();
    let task = start(
        generation,
        watch::Start {
            from,
            position: position.clone(),
        },
    );
    *old = Some(Running {
        generation,
        task,
        position,
    });
}

impl Watches {
    pub(super) fn new(setup: Option<WatchSetup>, scopes: usize) -> Self {
        Self {
            setup,
            scopes: (0..scopes).map(|_| ScopeWatches::default()).collect(),
            buckets: None,
            first_versions: None,
            cronjobs_at_start: None,
        }
    }

    /// Reads where the first ring's watches will start (the latest
    /// resourceVersions of the CronJobs the server shards and of the Jobs),
    /// so that they list nothing: at 10^6 CronJobs each replica read its
    /// share twice at start, in its bulk load and in its watches' lists
    /// (docs/performance.md, S7). Read before the supervisor handles
    /// anything, so that the first loads read after these versions. `None`
    /// without a setup.
    pub(super) fn read_first_versions(
        &self,
        namespaces: &[Option<String>],
    ) -> Option<impl Future<Output = LatestVersions> + 'static> {
        let setup = self.setup.clone()?;
        let namespace = namespaces.first().cloned().flatten();
        let sharded: Vec<CronJobKind> = (setup.kinds.iter())
            .filter(|k| k.server_shards)
            .map(|k| k.kind)
            .collect();
        Some(
            async move { watch::latest_versions(&setup.client, &sharded, namespace.as_deref()).await },
        )
    }

    /// Keeps `versions` for the first ring's watches, unless they started.
    pub(super) fn set_first_versions(&mut self, versions: LatestVersions) {
        self.cronjobs_at_start = versions.cronjob_count;
        if self.buckets.is_none() {
            tracing::info!(?versions, "the first watches will start at these versions");
            self.first_versions = Some(versions);
        }
    }

    /// The kinds served (batch/v1 alone, without a setup). Borrowed: it is
    /// asked on every CronJob event.
    pub(super) fn served(&self) -> &[ServedKind] {
        const BATCH_ONLY: &[ServedKind] = &[ServedKind {
            kind: CronJobKind::Batch,
            server_shards: false,
        }];
        match &self.setup {
            Some(setup) => &setup.kinds,
            None => BATCH_ONLY,
        }
    }

    /// The watches' lists stream (`sendInitialEvents`), so bulk loads can
    /// too. Without a setup, no.
    pub(super) fn streams(&self) -> bool {
        self.setup
            .as_ref()
            .is_some_and(|setup| setup.strategy == ListStrategy::Streaming)
    }

    /// How many CronJobs the server held at the start, if it said
    /// ([`Self::read_first_versions`]).
    pub(super) fn cronjobs_at_start(&self) -> Option<usize> {
        self.cronjobs_at_start
    }

    /// How the loads read their lists.
    pub(super) fn list_reads(&self) -> ListReads {
        ListReads {
            from_cache: self.streams(),
            protobuf: self.setup.as_ref().is_some_and(|setup| setup.protobuf),
        }
    }

    pub(super) fn kinds(&self) -> CronJobKinds {
        CronJobKinds::of(self.served().iter().map(|s| s.kind))
    }

    /// Whether Jobs without the bucket label are watched: only batch/v1's
    /// CronJobs have Jobs shardcron did not make (made before it took over,
    /// or by `kubectl create job --from=cronjob/...`). Every Job of a
    /// shardcron.io CronJob is made by shardcron, labelled; beside
    /// kube-controller-manager, the unlabelled ones are its Jobs, which no
    /// replica should read.
    pub(super) fn watches_unlabelled_jobs(&self) -> bool {
        self.kinds().contains(CronJobKind::Batch)
    }

    /// Whether an event of generation `generation` comes from the scope's
    /// current CronJob watch of `kind`.
    pub(super) fn is_current_cronjob_watch(
        &self,
        scope: usize,
        kind: CronJobKind,
        generation: u64,
    ) -> bool {
        let Some(index) = self.served().iter().position(|s| s.kind == kind) else {
            return false;
        };
        self.scopes
            .get(scope)
            .is_some_and(|s| current(s.cronjobs.get(index).unwrap_or(&None)) == generation)
    }

    /// Whether an event of `stream`, generation `generation`, comes from
    /// the scope's current Job watch of that stream.
    pub(super) fn is_current_job_watch(
        &self,
        scope: usize,
        stream: JobStream,
        generation: u64,
    ) -> bool {
        self.scopes.get(scope).is_some_and(|s| match stream {
            JobStream::Labelled => current(&s.labelled_jobs) == generation,
            JobStream::Unlabelled => generation == 0,
        })
    }

    /// Starts the watches that do not depend on the ring: the unlabelled
    /// Jobs', and the CronJobs' where the server does not shard them.
    pub(super) fn start(&mut self, namespaces: &[Option<String>], to: &Addr<Supervisor>) {
        let Some(setup) = self.setup.clone() else {
            return;
        };
        let unlabelled = self.watches_unlabelled_jobs();
        let kinds = self.kinds();
        for (scope, namespace) in namespaces.iter().enumerate() {
            let watches = &mut self.scopes[scope];
            watches.cronjobs = setup.kinds.iter().map(|_| None).collect();
            if unlabelled {
                let mut send = send_jobs(to, scope, JobStream::Unlabelled, 0);
                watches.unlabelled_jobs = Some(watch::jobs(
                    setup.client.clone(),
                    kinds,
                    namespace.as_deref(),
                    setup.strategy,
                    &bucket::unlabelled_selector(),
                    watch::Start::default(),
                    "unlabelled_jobs",
                    setup.metrics.clone(),
                    move |event| send(event).map(drop),
                ));
            }
            for (served, running) in setup.kinds.iter().zip(&mut watches.cronjobs) {
                if served.server_shards {
                    continue;
                }
                let mut send = send_cronjobs(to, scope, served.kind, 1);
                let position = Position::default();
                let task = watch::cronjobs(
                    setup.client.clone(),
                    served.kind,
                    namespace.as_deref(),
                    setup.strategy,
                    None,
                    watch::Start {
                        from: None,
                        position: position.clone(),
                    },
                    setup.metrics.clone(),
                    move |event| send(event).map(drop),
                );
                *running = Some(Running {
                    generation: 1,
                    task,
                    position,
                });
            }
        }
    }

    /// The owned buckets are now `buckets`, and `standby` the buckets on
    /// standby ([`crate::shard::standby`]): restarts the watches whose
    /// selectors name them (the Jobs' the owned ones, the CronJobs' both;
    /// none if the sets are the same, or nothing is owned: a replica
    /// owning nothing keeps what it had until it owns something).
    /// The first ring's watches start at the first versions, if read
    /// ([`Self::read_first_versions`]).
    pub(super) fn reshape(
        &mut self,
        buckets: Vec<Bucket>,
        standby: &crate::shard::standby::BucketSet,
        namespaces: &[Option<String>],
        to: &Addr<Supervisor>,
    ) -> Reshaped {
        let Some(setup) = self.setup.clone() else {
            return Reshaped::default();
        };
        let mut watched = buckets.clone();
        watched.extend(standby.buckets());
        watched.sort_unstable();
        watched.dedup();
        let shape = (buckets, watched);
        if shape.0.is_empty() || self.buckets.as_ref() == Some(&shape) {
            return Reshaped::default();
        }
        let first = self.first_versions.take().unwrap_or_default();
        let mut reshaped = Reshaped::default();
        let owned_changed = self.buckets.as_ref().is_none_or(|(b, _)| *b != shape.0);
        let watched_changed = self.buckets.as_ref().is_none_or(|(_, w)| *w != shape.1);
        let (buckets, watched) = &shape;
        let labels = bucket::label_selector(buckets);
        let shards = bucket::shard_selector(watched);
        tracing::info!(
            buckets = buckets.len(),
            standby_buckets = watched.len() - buckets.len(),
            label_selector_bytes = labels.len(),
            shard_selector_bytes = shards.as_ref().map_or(0, String::len),
            server_shards = ?setup.kinds,
            "watching the owned buckets"
        );
        let kinds = self.kinds();
        let mut all_list = watched_changed && setup.kinds.iter().all(|k| k.server_shards);
        for (scope, namespace) in namespaces.iter().enumerate() {
            let watches = &mut self.scopes[scope];
            all_list &= watches
                .cronjobs
                .iter()
                .all(|running| running.as_ref().is_none_or(|r| r.position.get().is_none()));
            if owned_changed {
                let first = first.jobs.clone();
                reshaped.labelled_jobs_at_first_version =
                    first.is_some() && watches.labelled_jobs.is_none();
                restart(&mut watches.labelled_jobs, first, |generation, start| {
                    let mut send = send_jobs(to, scope, JobStream::Labelled, generation);
                    watch::jobs(
                        setup.client.clone(),
                        kinds,
                        namespace.as_deref(),
                        setup.strategy,
                        &labels,
                        start,
                        "jobs",
                        setup.metrics.clone(),
                        move |event| send(event).map(drop),
                    )
                });
            }
            for (served, running) in setup.kinds.iter().zip(&mut watches.cronjobs) {
                if !served.server_shards || !watched_changed {
                    continue;
                }
                let first = first.cronjobs(served.kind);
                all_list &= running.is_some() || first.is_none();
                if first.is_some() && running.is_none() && scope == 0 {
                    reshaped.cronjobs_at_first_version.push(served.kind);
                }
                restart(running, first, |generation, start| {
                    let mut send = send_cronjobs(to, scope, served.kind, generation);
                    watch::cronjobs(
                        setup.client.clone(),
                        served.kind,
                        namespace.as_deref(),
                        setup.strategy,
                        shards.as_deref(),
                        start,
                        setup.metrics.clone(),
                        move |event| send(event).map(drop),
                    )
                });
            }
        }
        self.buckets = Some(shape);
        reshaped.lists_every_watched_bucket = all_list;
        reshaped
    }
}
