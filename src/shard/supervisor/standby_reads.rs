//! The standby CronJobs ([`crate::shard::standby`]) in the shell: kept
//! from the CronJob watch (which, where the server shards, selects the
//! standby buckets too), from the stop reports of actors whose keys went
//! to a peer, and from a standby load of the other buckets newly on
//! standby, once the share is armed and its own loads are done (readiness
//! waits for it when joining serving peers); at a take-over, the
//! gained CronJobs due first are read one by one
//! ([`crate::apiserver::bulk::narrow`]), then again every
//! [`standby::RESCAN`] while the bulk load runs.

use super::Supervisor;
use super::due_reads::DueReads;
use super::intake::Source;
use crate::apiserver::bulk::{self, LoadError, Loaded, narrow};
use crate::apiserver::lean_cronjob::LeanCronJob;
use crate::bucket::Bucket;
use crate::reconcile::{LookInput, next_look};
use crate::shard::ownership::Epoch;
use crate::shard::ring::Ring;
use crate::shard::standby::{self, BucketSet, Standby};
use actix::prelude::*;
use futures::{FutureExt as _, StreamExt as _};
use std::sync::Arc;

/// Gained CronJobs read one by one at once, at most.
const NARROW_CONCURRENCY: usize = 16;

/// After a failed standby load, the next try.
const STANDBY_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// How long readiness waits for the standby load after the share is armed,
/// at most ([`Supervisor::ready_once_on_standby`]): a standby load of
/// about 250,000 CronJobs took 100-140 s in one S7 rolling restart and
/// more than 180 s in another, beside the other replicas' loads. With the
/// 60-130 s before the share is armed, a replica is ready within a
/// Deployment's default progress deadline (600 s).
pub(super) const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// How long a replica's standby load waits after its share is armed at a
/// start of the whole ring: every replica's first load reads its quarter
/// at once, the server's CPU is what they wait for (a LIST costs it a walk
/// of its whole cache, then each CronJob sent), and a standby load of a
/// quarter more from the first replica armed takes it from the last ones
/// (in one S7 cold start the first was armed 74 s after its start and
/// read its standby quarter while the last loaded until 90 s; not
/// measured against the wait). A peer that dies meanwhile has
/// its keys loaded, as without standby. Joining serving peers, a replica
/// loads standby at once: its readiness waits for it.
pub(super) const STANDBY_WAIT_AT_RING_START: std::time::Duration =
    std::time::Duration::from_secs(30);

/// What the supervisor keeps for the standby CronJobs.
#[derive(Debug, Default)]
pub(super) struct StandbyState {
    /// Off (`--shard-standby=false`): no standby bucket, no read alone.
    pub(super) enabled: bool,
    pub(super) index: Standby,
    /// Buckets newly on standby whose CronJobs are still to be read.
    pending: BucketSet,
    /// Owned buckets whose every CronJob has had an actor here since the
    /// last loads ended: when such a bucket goes to a peer and stays on
    /// standby here, its stopping actors' reports fill its entries
    /// ([`Supervisor::keep_stopped_on_standby`]) and it is not read again.
    /// In a rolling restart every peer gives back, as a replica returns,
    /// the quarter it held while that replica was away: read again, it was
    /// a standby load of about 80,000 CronJobs per peer at 10^6, still in
    /// flight (and given way) when the next replica left.
    with_actors: BucketSet,
    /// Every owned actor has made its first decision (the protocol's
    /// readiness): standby loads may run.
    share_armed: bool,
    /// At a start of the whole ring, until [`STANDBY_WAIT_AT_RING_START`]
    /// after the share is armed: no standby load yet.
    waits_for_peers_first_loads: bool,
    /// Whether, at its first ring, a live peer had published a view of
    /// another ring: this replica joined peers that were serving (a
    /// restart, a scale-out), not a start of the whole ring,
    /// and its readiness waits for its standby load ([`READY_WAIT`]).
    joined_serving: Option<bool>,
    /// The standby load in flight, if any.
    loading: Option<StandbyLoad>,
    /// Standby loads asked for, to tell the current one's end from an
    /// aborted one's.
    loads_asked: u64,
    /// The gained keys read on their own.
    due: DueReads,
}

impl StandbyState {
    pub(super) fn new(enabled: bool) -> Self {
        Self {
            enabled,
            ..Self::default()
        }
    }

    /// The CronJob watch lists every standby bucket (a first ring): no
    /// standby load is needed. At 10^6 CronJobs a standby load beside that
    /// list read 250,000 CronJobs more per replica while the replicas came
    /// up (ready 195 s, was 180 s). Its entries arrive with the list, so
    /// until the loads are next idle they cannot tell the keys due soon.
    pub(super) fn listed_by_the_watch(&mut self) {
        self.pending = BucketSet::default();
        self.due.unknown_until_loads_idle(true);
    }
}

/// A standby load in flight: its number, its buckets, its task.
#[derive(Debug)]
struct StandbyLoad {
    id: u64,
    buckets: BucketSet,
    task: tokio::task::JoinHandle<()>,
}

/// A gained CronJob read on its own.
#[derive(Message)]
#[rtype(result = "()")]
struct KeyReadDone {
    key: Arc<str>,
    bucket: Bucket,
    /// The epoch it was asked for in.
    epoch: Epoch,
    result: Result<Option<Loaded>, LoadError>,
}

/// A page of a standby load.
#[derive(Message)]
#[rtype(result = "()")]
struct StandbyPage(Vec<LeanCronJob>);

/// Standby load number `id` ended.
#[derive(Message)]
#[rtype(result = "()")]
struct StandbyLoadDone {
    id: u64,
    result: Result<usize, LoadError>,
}

impl Supervisor {
    /// A CronJob the watch or a standby load showed: kept if its bucket is
    /// on standby here and it is not owned.
    pub(super) fn keep_on_standby(&mut self, key: &str, cronjob: &LeanCronJob) {
        let Some(uid) = cronjob.metadata.uid.as_deref() else {
            return;
        };
        let bucket = Bucket::of(uid);
        if !self.standby.index.covers(bucket) || self.ownership.owns(uid) {
            return;
        }
        let spec = &cronjob.spec;
        let look = next_look(
            LookInput {
                meta: &cronjob.metadata,
                schedule: &spec.schedule,
                time_zone: spec.time_zone.as_deref(),
                suspend: spec.suspend == Some(true),
                starting_deadline_seconds: spec.starting_deadline_seconds,
                status: cronjob.status.as_ref(),
            },
            self.actor_services.clock.now(),
            &self.actor_services.default_zone,
        );
        self.standby.index.record(key, bucket, look);
    }

    /// The ring acted on is now `target`: the standby buckets follow it
    /// (the gained buckets' entries stay until their load is done: their
    /// urgent keys are read from them). Returns the standby buckets, which
    /// the CronJob watch selects too.
    pub(super) fn follow_ring_on_standby(&mut self, target: &Ring) -> BucketSet {
        let me = self.setup.me.as_str();
        let buckets = if self.standby.enabled {
            standby::standby_buckets(target, me)
        } else {
            BucketSet::default()
        };
        // Before the entries follow the ring: were the gained buckets'
        // entries all loaded? Not if a standby load of one is pending or in
        // flight, nor if one was owned and its actors' stop reports (its
        // entries) are not all in: gained back, they are dropped.
        let standby = &self.standby;
        let loading = standby.loading.as_ref().map(|load| &load.buckets);
        let ownership = &self.ownership;
        let stopping: BucketSet = ownership.stopping_buckets().collect();
        let unknown = target.buckets_of(me).into_iter().any(|b| {
            ownership.gained_now(b)
                && (!standby.index.covers(b)
                    || standby.pending.contains(b)
                    || loading.is_some_and(|l| l.contains(b))
                    || stopping.contains(b))
        });
        self.standby.due.unknown_until_loads_idle(unknown);
        let added = self
            .standby
            .index
            .set_buckets(buckets.clone(), |b| target.owner_of(b) == Some(me));
        let with_actors = &self.standby.with_actors;
        self.standby.pending = (self.standby.pending.buckets().into_iter())
            .chain(added.into_iter().filter(|b| !with_actors.contains(*b)))
            .filter(|b| buckets.contains(*b))
            .collect();
        self.standby.with_actors = (self.standby.with_actors.buckets().into_iter())
            .filter(|b| target.owner_of(*b) == Some(me))
            .collect();
        // A standby load of buckets no longer all on standby stops (those
        // still on standby are read again once the loads are idle): in
        // S7's rolling restart each peer went on reading the buckets it
        // had on standby while a replica was away, about 80,000 CronJobs
        // dropped as read, beside the returning replica's own loads.
        let outdated = (self.standby.loading.as_ref())
            .is_some_and(|load| load.buckets.buckets().iter().any(|b| !buckets.contains(*b)));
        if outdated {
            self.abandon_standby_load("its buckets left standby");
        }
        let serving = self.ownership.joins_a_running_ring(target, super::now());
        self.standby.joined_serving.get_or_insert(serving);
        buckets
    }

    pub(super) fn standby_report(&self) -> crate::shard::debug::StandbyReport {
        let loading = self.standby.loading.as_ref();
        crate::shard::debug::StandbyReport {
            entries: self.standby.index.len(),
            buckets_to_read: self.standby.pending.len() + loading.map_or(0, |l| l.buckets.len()),
            loading: loading.is_some(),
        }
    }

    /// An actor stopped: when its key went to a peer and is on standby
    /// here, the instant it would next have needed its controller is kept
    /// (not for a deleted CronJob: its entry went with the delete).
    pub(super) fn keep_stopped_on_standby(
        &mut self,
        key: &str,
        uid: &str,
        next_look: Option<jiff::Timestamp>,
    ) {
        if self.ownership.owns(uid) || self.deletions.cronjob_deleted(uid) {
            return;
        }
        self.standby.index.record(key, Bucket::of(uid), next_look);
    }

    /// Reads on their own the gained keys that need their controller
    /// within [`standby::HORIZON_SECONDS`], soonest first; looks again
    /// every [`standby::RESCAN`] while a load of gained keys is in flight.
    pub(super) fn read_due(&mut self, ctx: &mut Context<Self>) {
        if self.ownership.target().is_none() {
            return;
        }
        let until = self.horizon();
        let ownership = &self.ownership;
        let due = self.standby.index.take_due(
            |b| ownership.owns_bucket(b),
            until,
            standby::MAX_NARROW_PER_ROUND,
        );
        self.standby.due.started(due.len());
        if !due.is_empty() {
            tracing::debug!(keys = due.len(), "reading the gained CronJobs due first");
            let client = self.setup.client.clone();
            let kinds = self.watches.kinds();
            let unlabelled = self.watches.watches_unlabelled_jobs();
            let to = ctx.address();
            let epoch = self.ownership.epoch();
            tokio::spawn(futures::stream::iter(due).for_each_concurrent(
                NARROW_CONCURRENCY,
                move |(key, bucket)| {
                    let (client, to) = (client.clone(), to.clone());
                    async move {
                        let read = narrow::load_key(client, &key, bucket, kinds, unlabelled);
                        // Told even if the read panicked: the reads in
                        // flight are counted.
                        let result = std::panic::AssertUnwindSafe(read)
                            .catch_unwind()
                            .await
                            .unwrap_or(Err(LoadError::Panicked));
                        // The supervisor gone: nothing to tell.
                        let done = KeyReadDone {
                            key,
                            bucket,
                            epoch,
                            result,
                        };
                        let _ = to.send(done).await;
                    }
                },
            ));
        }
        self.tell_due_read(ctx);
        if self.ownership.loads_in_flight() > 0 && self.standby.due.arm_rescan() {
            ctx.run_later(standby::RESCAN, |supervisor, ctx| {
                supervisor.standby.due.rescan_ran();
                if supervisor.ownership.loads_in_flight() > 0 {
                    supervisor.read_due(ctx);
                }
            });
        }
    }

    /// Tells the protocol, once per epoch, that every gained key due within
    /// [`standby::HORIZON_SECONDS`] has been read on its own while loads
    /// are in flight: a ring leaving out a leaver may publish then, and
    /// the leaver let go ([`crate::shard::ownership::Input::DueKeysRead`]).
    /// Not when the entries cannot tell ([`DueReads::may_tell`], standby off).
    fn tell_due_read(&mut self, ctx: &mut Context<Self>) {
        let epoch = self.ownership.epoch();
        let standby = &self.standby;
        if !standby.enabled || !standby.due.may_tell(epoch) || self.ownership.loads_in_flight() == 0
        {
            return;
        }
        let until = self.horizon();
        let ownership = &self.ownership;
        if standby.index.any_due(|b| ownership.owns_bucket(b), until) {
            return;
        }
        self.standby.due.told(epoch);
        ctx.notify(DueKeysRead(epoch));
    }

    /// The end of the window in which gained keys are read on their own.
    fn horizon(&self) -> jiff::Timestamp {
        self.actor_services
            .clock
            .now()
            .saturating_add(jiff::SignedDuration::from_secs(standby::HORIZON_SECONDS))
            .unwrap_or(jiff::Timestamp::MAX)
    }

    /// The loads of gained keys are done: their standby entries go (they
    /// are actors here), and the buckets newly on standby are read.
    pub(super) fn loads_idle_on_standby(&mut self, ctx: &mut Context<Self>) {
        self.standby.due.loads_idle();
        let ownership = &self.ownership;
        self.standby
            .index
            .forget_owned(|b| ownership.owns_bucket(b));
        self.standby.with_actors = (ownership.target().into_iter())
            .flat_map(|ring| ring.buckets_of(&self.setup.me))
            .collect();
        self.load_standby(ctx);
    }

    /// Every owned actor is armed (the protocol's readiness): the standby
    /// load starts, and the replica is ready now or once it is done.
    pub(super) fn share_armed(&mut self, ctx: &mut Context<Self>) {
        self.standby.share_armed = true;
        if self.standby.joined_serving == Some(false) {
            self.standby.waits_for_peers_first_loads = true;
            ctx.run_later(STANDBY_WAIT_AT_RING_START, |supervisor, ctx| {
                supervisor.standby.waits_for_peers_first_loads = false;
                supervisor.load_standby(ctx);
            });
        }
        self.load_standby(ctx);
        self.ready_once_on_standby();
        ctx.run_later(READY_WAIT, |supervisor, _| {
            if !supervisor.setup.readiness.is_ready() {
                tracing::warn!(wait = ?READY_WAIT, "the standby load is not done; ready without it");
                supervisor.setup.readiness.set_ready();
            }
        });
    }

    /// Ready (`/readyz`, which a rollout waits for before it stops the
    /// next replica) once the own share is armed and, when this replica
    /// joined peers that were serving, its standby entries are loaded: a
    /// rolling restart that stopped the next replica at once found the
    /// one just back with none, and the slots of the leaver's keys that
    /// fell on it waited for its bulk load (S7). A first start of the
    /// whole ring arms every key first and loads standby after.
    pub(super) fn ready_once_on_standby(&mut self) {
        let standby = &self.standby;
        let waits = standby.joined_serving == Some(true)
            && (standby.loading.is_some() || !standby.pending.is_empty());
        if standby.share_armed && !waits && !self.setup.readiness.is_ready() {
            tracing::info!(
                standby = standby.index.len(),
                "the share is armed and the standby entries loaded; ready"
            );
            self.setup.readiness.set_ready();
        }
    }

    /// Reads the CronJobs of the buckets newly on standby (one load at a
    /// time, none while gained keys load: those come first; none before
    /// the share is armed: at 10^6 CronJobs a standby load beside the
    /// first decisions of a replica's quarter of a million actors slowed
    /// them, and the server cut its lists; at a start of the whole ring,
    /// none until [`STANDBY_WAIT_AT_RING_START`] after that).
    pub(super) fn load_standby(&mut self, ctx: &mut Context<Self>) {
        if self.standby.loading.is_some()
            || self.standby.pending.is_empty()
            || self.ownership.loads_in_flight() > 0
            || !self.standby.share_armed
            || self.standby.waits_for_peers_first_loads
        {
            return;
        }
        let buckets = std::mem::take(&mut self.standby.pending);
        let gained = buckets.buckets();
        let owned_buckets =
            (self.ownership.target()).map_or(0, |t| t.buckets_of(&self.setup.me).len());
        let lists = self.cronjob_lists(&gained, owned_buckets);
        self.standby.loads_asked += 1;
        let id = self.standby.loads_asked;
        let client = self.setup.client.clone();
        let namespaces = self.namespaces();
        let reads = self.watches.list_reads();
        let to = ctx.address();
        let wanted = buckets.clone();
        let task = tokio::spawn(async move {
            let result = bulk::load_cronjobs(
                client,
                &namespaces,
                &lists,
                reads,
                |uid| wanted.contains(Bucket::of(uid)),
                |page| to.send(StandbyPage(page)).map(drop),
            )
            .await;
            to.do_send(StandbyLoadDone { id, result });
        });
        self.standby.loading = Some(StandbyLoad { id, buckets, task });
    }

    /// A load of gained keys starts: a standby load in flight is
    /// abandoned (its buckets read again after), so that the gained keys'
    /// lists have the server to themselves. In S7's rolling restart, three
    /// standby loads of 160,000-180,000 CronJobs beside the peers' loads of
    /// a leaver's keys made those take 45-65 s.
    pub(super) fn preempt_standby_load(&mut self) {
        self.abandon_standby_load("it gives way to a load of gained CronJobs");
    }

    /// The standby load in flight, if any, stops; its buckets still on
    /// standby are queued again.
    fn abandon_standby_load(&mut self, why: &'static str) {
        let Some(load) = self.standby.loading.take() else {
            return;
        };
        load.task.abort();
        tracing::info!(buckets = load.buckets.len(), why, "a standby load stops");
        self.requeue_standby(&load.buckets);
    }

    /// `buckets`' CronJobs are read again, those still on standby.
    fn requeue_standby(&mut self, buckets: &BucketSet) {
        for bucket in buckets.buckets() {
            if self.standby.index.covers(bucket) {
                self.standby.pending.insert(bucket);
            }
        }
    }

    /// A page of a bulk load, or a key read alone: the Jobs first (a Job of
    /// a CronJob with no actor yet is parked until its actor is spawned and
    /// claims it), then the CronJobs.
    ///
    /// A CronJob the watch delivered first is not necessarily newer than
    /// the load's: a watch that comes back after a silence or a cut
    /// replays the events it missed, in order, after the ring changed, so
    /// it may spawn the actor from a version older than this consistent
    /// read (without the previous owner's last `lastScheduleTime`). The
    /// loaded version therefore goes to that actor too, which keeps the
    /// newer of the two by resourceVersion ([`crate::actor::cronjob::Update::CronJob`]). Only a
    /// CronJob whose UID differs from the actor's (deleted and re-created)
    /// is left to the watch, which will tell the deletion.
    pub(super) fn take_loaded(&mut self, page: Loaded, source: Source, ctx: &mut Context<Self>) {
        let now = super::now();
        for job in page.jobs {
            if !self.deletions.during_load(&job.uid) && !self.for_actors.jobs.knows(&job.uid) {
                self.on_job(job, false, ctx);
            }
        }
        for cronjob in page.cronjobs {
            let uid = cronjob.metadata.uid.as_deref().unwrap_or_default();
            if self.deletions.during_load(uid) {
                continue;
            }
            let key = cronjob.key();
            self.standby.index.forget(&key);
            // `on_cronjob` hands a known CronJob to its actor as the watch's
            // versions are handed.
            match self.ownership.uid_of(&key) {
                Some(known) if **known != *uid && self.actors.contains_key(known) => {}
                _ => self.on_cronjob(cronjob, source, now, ctx),
            }
        }
    }
}

impl Handler<KeyReadDone> for Supervisor {
    type Result = ();

    fn handle(&mut self, done: KeyReadDone, ctx: &mut Self::Context) {
        let KeyReadDone {
            key,
            bucket,
            epoch,
            result,
        } = done;
        self.standby.due.ended();
        match result {
            Ok(Some(page)) => {
                self.actor_services.metrics.keys_read_alone.inc();
                self.take_loaded(page, Source::ReadAlone(epoch), ctx);
            }
            // Gone: the watch tells its deletion.
            Ok(None) => {}
            // Read again at the next rescan, unless the bulk load has
            // brought it by then (a leave waits for it meanwhile): at 10^6
            // CronJobs that load takes a minute or more.
            Err(error) => {
                if self.ownership.loads_in_flight() > 0 {
                    self.standby.index.due_again(key.clone(), bucket);
                }
                tracing::debug!(cronjob = %key, %error, "reading a gained CronJob alone failed; reading it again at the next rescan");
            }
        }
        self.tell_due_read(ctx);
    }
}

/// Every gained key due soon has been read on its own, in this epoch.
#[derive(Message)]
#[rtype(result = "()")]
struct DueKeysRead(Epoch);

impl Handler<DueKeysRead> for Supervisor {
    type Result = ();

    fn handle(&mut self, DueKeysRead(epoch): DueKeysRead, ctx: &mut Self::Context) {
        self.step(
            crate::shard::ownership::Input::DueKeysRead { epoch },
            super::now(),
            ctx,
            None,
        );
    }
}

impl Handler<StandbyPage> for Supervisor {
    type Result = ();

    fn handle(&mut self, StandbyPage(page): StandbyPage, _: &mut Self::Context) {
        for cronjob in page {
            if !self
                .deletions
                .during_load(cronjob.metadata.uid.as_deref().unwrap_or_default())
            {
                let key = cronjob.key();
                self.keep_on_standby(&key, &cronjob);
            }
        }
    }
}

impl Handler<StandbyLoadDone> for Supervisor {
    type Result = ();

    fn handle(&mut self, StandbyLoadDone { id, result }: StandbyLoadDone, ctx: &mut Self::Context) {
        // An abandoned load's end (its buckets were queued again).
        let Some(load) = self.standby.loading.take_if(|load| load.id == id) else {
            return;
        };
        let buckets = load.buckets;
        match result {
            Ok(count) => {
                tracing::info!(
                    buckets = buckets.len(),
                    cronjobs = count,
                    standby = self.standby.index.len(),
                    "loaded the CronJobs newly on standby"
                );
            }
            Err(error) => {
                tracing::warn!(%error, "loading the CronJobs newly on standby failed; retrying");
                self.requeue_standby(&buckets);
                ctx.run_later(STANDBY_RETRY, |supervisor, ctx| {
                    supervisor.load_standby(ctx)
                });
                return;
            }
        }
        self.load_standby(ctx);
        self.ready_once_on_standby();
        crate::memory::release_free_pages();
    }
}
