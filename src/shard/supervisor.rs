//! The supervisor: the shell around the ownership protocol
//! ([`super::ownership`]). It turns the watch streams into inputs of the
//! protocol, carries out its commands (start, stop and spawn CronJob
//! actors, publish the view, load gained keys in bulk), and routes every
//! event to the actor it concerns. It reads the clock once per message.
//!
//! It runs on the System's thread; actors run on one Arbiter per core,
//! assigned in turn. A Job is routed by its controller reference (kind
//! CronJob, by UID, as upstream's `resolveControllerRef`); a Job whose
//! CronJob has no actor yet is parked (see [`super::jobs`]) and handed over
//! when the actor starts. No actor decides anything before the first lists
//! of both CronJobs and Jobs are complete, as upstream waits for its
//! informers' caches. Events of CronJobs the ring gives to others are
//! dropped, so memory follows the owned share.

use super::boot_clock::BootInstant;
use super::debug::{DebugShards, ShardReport};
use super::fence::{FenceState, SharedFence};
use super::jobs::{JobIndex, JobRoute};
use super::lease::{Keeper, KeeperReport};
use super::membership::LeaseObservation;
use super::ownership::{self, Command, Input, Ownership};
use super::relist::Relist;
use super::ring::Ring;
use crate::actor::apply::Shared;
use crate::actor::cronjob::{CronJobActor, Report, Update};
use crate::kube::bulk::{self, LoadCounts, Loaded};
use crate::kube::watch::JobFacts;
use crate::telemetry::http::Readiness;
use crate::telemetry::metrics::{MoveDirection, MovedLabels, OwnedLabels, OwnedState};
use ::kube::Client;
use ::kube::runtime::watcher::Event;
use actix::prelude::*;
use futures::FutureExt as _;
use k8s_openapi::api::batch::v1::CronJob;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument as _;

/// How long a graceful stop waits for decisions in flight.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often membership is re-judged (Leases expire without an event).
const TICK: Duration = Duration::from_secs(1);

/// An event of the CronJob watch of scope number `scope`.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct CronJobWatch {
    pub scope: usize,
    pub event: Event<CronJob>,
}

/// An event of the Job watch of scope number `scope`.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct JobWatch {
    pub scope: usize,
    pub event: Event<JobFacts>,
}

/// An event of the ring's Lease watch.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct LeaseWatch(pub Event<(String, LeaseObservation)>);

/// SIGTERM: stop every actor (letting decisions in flight finish), release
/// the Lease, then end the process.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// A page of a bulk load.
#[derive(Message)]
#[rtype(result = "()")]
struct LoadPage(Loaded);

/// A bulk load finished.
#[derive(Message)]
#[rtype(result = "()")]
struct LoadDone(Result<LoadCounts, bulk::LoadError>);

/// Where one watched scope (a namespace, or all) stands.
#[derive(Default)]
struct ScopeState {
    namespace: Option<String>,
    cronjobs_listed: bool,
    jobs_listed: bool,
    cronjobs: Relist<String>,
    jobs: Relist<String>,
}

impl ScopeState {
    fn covers(&self, namespace: &str) -> bool {
        self.namespace.as_deref().is_none_or(|n| n == namespace)
    }
}

/// What the supervisor needs to take part in the ring.
pub struct ShardSetup {
    pub me: String,
    pub ring_name: String,
    pub fence: SharedFence,
    pub keeper: Keeper,
    /// For bulk loads.
    pub client: Client,
}

struct Running {
    uid: String,
    addr: Addr<CronJobActor>,
}

pub struct Supervisor {
    shared: Arc<Shared>,
    arbiters: Vec<ArbiterHandle>,
    next_arbiter: usize,
    scopes: Vec<ScopeState>,
    leases: Relist<String>,
    ownership: Ownership,
    setup: ShardSetup,
    actors: HashMap<String, Running>,
    keys_by_uid: HashMap<String, String>,
    jobs: JobIndex,
    /// UIDs (CronJobs and Jobs) the watch saw deleted while a load was in flight.
    tombstones: HashSet<String>,
    readiness: Arc<Readiness>,
}

impl Supervisor {
    /// `scopes`: the namespaces watched (`None`: all), in the order of the
    /// scope numbers the watch messages carry.
    pub fn new(
        shared: Arc<Shared>,
        arbiters: Vec<ArbiterHandle>,
        scopes: Vec<Option<String>>,
        readiness: Arc<Readiness>,
        setup: ShardSetup,
    ) -> Self {
        Self {
            ownership: Ownership::new(setup.me.clone(), setup.keeper.incarnation()),
            shared,
            arbiters,
            next_arbiter: 0,
            scopes: scopes
                .into_iter()
                .map(|namespace| ScopeState {
                    namespace,
                    ..ScopeState::default()
                })
                .collect(),
            leases: Relist::default(),
            setup,
            actors: HashMap::new(),
            keys_by_uid: HashMap::new(),
            jobs: JobIndex::default(),
            tombstones: HashSet::new(),
            readiness,
        }
    }

    fn key_of(cronjob: &CronJob) -> String {
        let namespace = cronjob.metadata.namespace.as_deref().unwrap_or_default();
        let name = cronjob.metadata.name.as_deref().unwrap_or_default();
        format!("{namespace}/{name}")
    }

    /// Feeds the protocol one input and carries out what it answers.
    /// `spawning`: the CronJob a [`Command::Spawn`] is about.
    fn step(
        &mut self,
        input: Input,
        now: Instant,
        ctx: &mut Context<Self>,
        mut spawning: Option<CronJob>,
    ) {
        let mut queue = std::collections::VecDeque::from(self.ownership.on(input, now));
        while let Some(command) = queue.pop_front() {
            match command {
                Command::Spawn { key } => {
                    if !self.spawn(&key, spawning.take()) {
                        queue.extend(self.ownership.on(Input::SpawnFailed { key }, now));
                    }
                }
                Command::Start { key, waited } => {
                    if let Some(running) = self.actors.get(&key) {
                        running.addr.do_send(Update::Start);
                    }
                    self.shared
                        .metrics
                        .handoff_wait
                        .observe(waited.as_secs_f64());
                }
                Command::Stop { key } => {
                    if let Some(running) = self.actors.remove(&key) {
                        running.addr.do_send(Update::Stop);
                        self.keys_by_uid.remove(&running.uid);
                    }
                }
                Command::RingChanged { target, lost } => self.ring_changed(target, lost),
                Command::Publish(publication) => self.setup.keeper.publish(publication),
                Command::Load {
                    target,
                    previous,
                    delay,
                } => {
                    if delay.is_zero() {
                        self.load(target, previous, ctx);
                    } else {
                        ctx.run_later(delay, move |supervisor, ctx| {
                            supervisor.load(target, previous, ctx)
                        });
                    }
                }
                Command::RejoinFence => self.setup.fence.lock().rejoin(),
                Command::SetReady => self.readiness.set_ready(),
                Command::ReleaseAndExit => {
                    tracing::info!("every actor stopped; releasing the Lease");
                    let keeper = self.setup.keeper.clone();
                    let system = System::current();
                    tokio::spawn(async move {
                        keeper.release().await;
                        system.stop();
                    });
                }
            }
        }
        self.update_gauges();
    }

    /// Starts an actor for `key`, waiting for its start; false if the
    /// CronJob cannot be run.
    fn spawn(&mut self, key: &str, cronjob: Option<CronJob>) -> bool {
        let Some(cronjob) = cronjob else {
            return false;
        };
        let uid = cronjob.metadata.uid.clone().unwrap_or_default();
        let children = self.jobs.claim(&uid);
        let actor = match CronJobActor::new(&cronjob, children, self.shared.clone()) {
            Ok(actor) => actor,
            Err(error) => {
                tracing::warn!(cronjob = %key, %error, "not running an unusable CronJob");
                return false;
            }
        };
        let arbiter = &self.arbiters[self.next_arbiter % self.arbiters.len()];
        self.next_arbiter = self.next_arbiter.wrapping_add(1);
        let addr = CronJobActor::start_in_arbiter(arbiter, move |_| actor);
        self.keys_by_uid.insert(uid.clone(), key.to_owned());
        self.actors.insert(key.to_owned(), Running { uid, addr });
        true
    }

    fn ring_changed(&mut self, target: Option<Arc<Ring>>, lost: usize) {
        let metrics = &self.shared.metrics;
        metrics
            .keys_moved
            .get_or_create(&MovedLabels {
                direction: MoveDirection::Lost,
            })
            .inc_by(lost as u64);
        metrics
            .ring_members
            .set(target.as_ref().map_or(0, |t| t.members().len()) as i64);
        if let Some(target) = &target {
            metrics.rebalances.inc();
            // A span per transition (in traces when exporting): who is in
            // the ring, what this replica lost; the bulk load of what it
            // gained is its own span, `shard.load`.
            let view = super::handoff::encode_view(target);
            let _transition = tracing::info_span!(
                "shard.rebalance",
                shard.ring = %self.setup.ring_name,
                shard.members = %view,
                shard.view_digest = %super::handoff::view_digest(&view),
                shard.keys_lost = lost,
            )
            .entered();
        }
        let ownership = &self.ownership;
        self.jobs
            .retain_owners(|namespace, name| ownership.owns(namespace, name));
    }

    fn on_cronjob(&mut self, cronjob: CronJob, now: Instant, ctx: &mut Context<Self>) {
        let key = Self::key_of(&cronjob);
        let uid = cronjob.metadata.uid.clone().unwrap_or_default();
        if self.ownership.has(&key, &uid) {
            if let Some(running) = self.actors.get(&key) {
                running.addr.do_send(Update::CronJob(Box::new(cronjob)));
            }
            return;
        }
        self.step(Input::CronJobSeen { key, uid }, now, ctx, Some(cronjob));
    }

    fn on_cronjob_deleted(&mut self, cronjob: &CronJob, now: Instant, ctx: &mut Context<Self>) {
        if self.ownership.loads_in_flight() > 0
            && let Some(uid) = &cronjob.metadata.uid
        {
            self.tombstones.insert(uid.clone());
        }
        let key = Self::key_of(cronjob);
        self.step(Input::CronJobGone { key }, now, ctx, None);
    }

    fn on_job(&mut self, mut job: JobFacts, relisted: bool) {
        if let Some(owner) = &job.owner_name
            && !self.ownership.owns(&job.namespace, owner)
        {
            // Not ours: forget it (withdrawing it from an actor that had it).
            job.owner_uid = None;
            job.owner_name = None;
        }
        let keys = &self.keys_by_uid;
        for route in self.jobs.apply(job, |owner| keys.contains_key(owner)) {
            self.send(route, relisted);
        }
    }

    fn on_job_deleted(&mut self, uid: &str) {
        if self.ownership.loads_in_flight() > 0 {
            self.tombstones.insert(uid.to_owned());
        }
        let keys = &self.keys_by_uid;
        if let Some(route) = self.jobs.delete(uid, |owner| keys.contains_key(owner)) {
            self.send(route, false);
        }
    }

    fn send(&self, route: JobRoute, relisted: bool) {
        let (owner_uid, update) = match route {
            JobRoute::Deliver { owner_uid, job } => (owner_uid, Update::Job { job, relisted }),
            JobRoute::Withdraw { owner_uid, job_uid } => {
                (owner_uid, Update::JobGone { uid: job_uid })
            }
        };
        if let Some(running) = self
            .keys_by_uid
            .get(&owner_uid)
            .and_then(|key| self.actors.get(key))
        {
            running.addr.do_send(update);
        }
    }

    /// Once every scope has listed both kinds, the protocol may start actors.
    fn maybe_sync(&mut self, now: Instant, ctx: &mut Context<Self>) {
        if self
            .scopes
            .iter()
            .all(|s| s.cronjobs_listed && s.jobs_listed)
        {
            tracing::info!(owned = self.actors.len(), "initial lists synced");
            self.step(Input::ListsSynced, now, ctx, None);
        }
    }

    fn update_gauges(&self) {
        let metrics = &self.shared.metrics;
        let (owned, waiting) = self.ownership.counts();
        metrics.actors.set(self.actors.len() as i64);
        metrics
            .owned
            .get_or_create(&OwnedLabels {
                state: OwnedState::Waiting,
            })
            .set(waiting as i64);
        metrics
            .owned
            .get_or_create(&OwnedLabels {
                state: OwnedState::Running,
            })
            .set((owned - waiting) as i64);
    }

    /// Judges the fence and lets the protocol re-judge the membership.
    fn tick(&mut self, ctx: &mut Context<Self>) {
        let now = Instant::now();
        let fence = self.setup.fence.lock().check(BootInstant::now());
        self.readiness.tick(
            now,
            fence == FenceState::Valid,
            self.ownership.oldest_stop(),
        );
        self.shared
            .metrics
            .lease_valid
            .set(i64::from(fence == FenceState::Valid));
        self.step(Input::Tick { fence }, now, ctx, None);
    }

    /// Loads, in bulk, the CronJobs owned under `target` but not under
    /// `previous` (all owned if `None`).
    fn load(&mut self, target: Arc<Ring>, previous: Option<Arc<Ring>>, ctx: &mut Context<Self>) {
        let me = self.setup.me.clone();
        let client = self.setup.client.clone();
        let namespaces: Vec<Option<String>> =
            self.scopes.iter().map(|s| s.namespace.clone()).collect();
        let to = ctx.address();
        let span = tracing::info_span!(
            "shard.load",
            shard.cronjobs_gained = tracing::field::Empty,
            shard.jobs_gained = tracing::field::Empty,
        );
        tokio::spawn(
            async move {
                let gained = |namespace: &str, name: &str| {
                    target.owner(namespace, name) == Some(me.as_str())
                        && previous
                            .as_ref()
                            .is_none_or(|p| p.owner(namespace, name) != Some(me.as_str()))
                };
                let deliver = |page| to.send(LoadPage(page)).map(drop);
                let result = bulk::load(client, &namespaces, gained, deliver).await;
                if let Ok(counts) = &result {
                    let span = tracing::Span::current();
                    span.record("shard.cronjobs_gained", counts.cronjobs);
                    span.record("shard.jobs_gained", counts.jobs);
                }
                to.do_send(LoadDone(result));
            }
            .instrument(span),
        );
    }
}

impl Actor for Supervisor {
    // Watchers `send` and wait for each event to be handled: a list of
    // 100,000 objects streams through instead of piling up decoded.
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(TICK, |supervisor, ctx| supervisor.tick(ctx));
    }
}

impl Handler<CronJobWatch> for Supervisor {
    type Result = ();

    fn handle(&mut self, message: CronJobWatch, ctx: &mut Self::Context) {
        let now = Instant::now();
        let scope = message.scope;
        match message.event {
            Event::Apply(cronjob) => self.on_cronjob(cronjob, now, ctx),
            Event::Delete(cronjob) => self.on_cronjob_deleted(&cronjob, now, ctx),
            Event::Init => self.scopes[scope].cronjobs.begin(),
            Event::InitApply(cronjob) => {
                self.scopes[scope].cronjobs.saw(&Self::key_of(&cronjob));
                self.on_cronjob(cronjob, now, ctx);
            }
            Event::InitDone => {
                let in_scope = &self.scopes[scope];
                let known: Vec<&String> = self
                    .actors
                    .keys()
                    .filter(|key| in_scope.covers(ownership::split_key(key).0))
                    .collect();
                let gone = self.scopes[scope].cronjobs.finish(known);
                for key in gone {
                    self.step(Input::CronJobGone { key }, now, ctx, None);
                }
                self.scopes[scope].cronjobs_listed = true;
                self.maybe_sync(now, ctx);
                crate::memory::release_free_pages();
            }
        }
    }
}

impl Handler<JobWatch> for Supervisor {
    type Result = ();

    fn handle(&mut self, message: JobWatch, ctx: &mut Self::Context) {
        let scope = message.scope;
        match message.event {
            Event::Apply(job) => self.on_job(job, false),
            Event::Delete(job) => self.on_job_deleted(&job.uid),
            Event::Init => self.scopes[scope].jobs.begin(),
            Event::InitApply(job) => {
                self.scopes[scope].jobs.saw(&job.uid);
                self.on_job(job, true);
            }
            Event::InitDone => {
                let ScopeState {
                    namespace, jobs, ..
                } = &mut self.scopes[scope];
                let known = self
                    .jobs
                    .uids_in(|ns| namespace.as_deref().is_none_or(|n| n == ns));
                let gone = jobs.finish(known);
                for uid in gone {
                    self.on_job_deleted(&uid);
                }
                self.scopes[scope].jobs_listed = true;
                self.maybe_sync(Instant::now(), ctx);
                crate::memory::release_free_pages();
            }
        }
    }
}

impl Handler<LeaseWatch> for Supervisor {
    type Result = ();

    fn handle(&mut self, LeaseWatch(event): LeaseWatch, ctx: &mut Self::Context) {
        let now = Instant::now();
        let inputs = match event {
            Event::Apply((name, lease)) => vec![Input::LeaseSeen { name, lease }],
            Event::Delete((name, _)) => vec![Input::LeaseDeleted { name }],
            Event::Init => {
                self.leases.begin();
                vec![]
            }
            Event::InitApply((name, lease)) => {
                self.leases.saw(&name);
                vec![Input::LeaseSeen { name, lease }]
            }
            Event::InitDone => {
                let known = self.ownership.lease_names();
                let gone = self.leases.finish(&known);
                gone.into_iter()
                    .map(|name| Input::LeaseDeleted { name })
                    .chain([Input::LeasesListed])
                    .collect()
            }
        };
        for input in inputs {
            self.step(input, now, ctx, None);
        }
        self.tick(ctx);
    }
}

impl Handler<LoadPage> for Supervisor {
    type Result = ();

    /// The CronJobs' pages come first, the Jobs' after. No actor starts
    /// before the whole load is done (the protocol waits for every load),
    /// so a Job routed to an actor that already exists counts as much as
    /// one claimed when it is spawned. What the watch delivered meanwhile
    /// is newer or as new: it wins.
    fn handle(&mut self, LoadPage(page): LoadPage, ctx: &mut Self::Context) {
        let now = Instant::now();
        for cronjob in page.cronjobs {
            let uid = cronjob.metadata.uid.as_deref().unwrap_or_default();
            if !self.tombstones.contains(uid) && !self.actors.contains_key(&Self::key_of(&cronjob))
            {
                self.on_cronjob(cronjob, now, ctx);
            }
        }
        for job in page.jobs {
            if !self.tombstones.contains(&job.uid) && !self.jobs.knows(&job.uid) {
                self.on_job(job, false);
            }
        }
    }
}

impl Handler<LoadDone> for Supervisor {
    type Result = ();

    fn handle(&mut self, LoadDone(result): LoadDone, ctx: &mut Self::Context) {
        let ok = match result {
            Ok(counts) => {
                tracing::info!(
                    cronjobs = counts.cronjobs,
                    jobs = counts.jobs,
                    "loaded gained CronJobs"
                );
                self.shared
                    .metrics
                    .keys_moved
                    .get_or_create(&MovedLabels {
                        direction: MoveDirection::Gained,
                    })
                    .inc_by(counts.cronjobs as u64);
                true
            }
            Err(error) => {
                tracing::warn!(%error, "bulk load of gained CronJobs failed; retrying");
                false
            }
        };
        self.step(Input::LoadDone { ok }, Instant::now(), ctx, None);
        if self.ownership.loads_in_flight() == 0 {
            self.tombstones.clear();
            crate::memory::release_free_pages();
        }
    }
}

impl Handler<Report> for Supervisor {
    type Result = ();

    fn handle(&mut self, report: Report, ctx: &mut Self::Context) {
        let input = match report {
            Report::Armed { key } => Input::ActorArmed { key },
            Report::Stopped { key, uid } => Input::ActorStopped { key, uid },
        };
        self.step(input, Instant::now(), ctx, None);
    }
}

impl Handler<KeeperReport> for Supervisor {
    type Result = ();

    fn handle(&mut self, report: KeeperReport, _: &mut Self::Context) {
        let KeeperReport::Usurped { incarnation } = report;
        tracing::error!(
            replica = %self.setup.me,
            other = %incarnation,
            "another process took this replica's Lease (two replicas with one id?); stopping"
        );
        for running in self.actors.values() {
            running.addr.do_send(Update::Stop);
        }
        System::current().stop_with_code(1);
    }
}

impl Handler<Shutdown> for Supervisor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        if matches!(
            self.ownership.phase(),
            ownership::Phase::ShuttingDown | ownership::Phase::Exited
        ) {
            return;
        }
        tracing::info!(actors = self.actors.len(), "stopping every actor");
        // Stopping actors report back; the Lease is released once all have.
        ctx.run_later(STOP_GRACE, |_, _| {
            tracing::warn!("decisions still in flight after the grace period; exiting");
            System::current().stop();
        });
        self.step(Input::Shutdown, Instant::now(), ctx, None);
    }
}

impl Handler<DebugShards> for Supervisor {
    type Result = MessageResult<DebugShards>;

    fn handle(&mut self, message: DebugShards, _: &mut Self::Context) -> Self::Result {
        let lease_valid = self.setup.fence.lock().may_act(BootInstant::now());
        let report = self
            .ownership
            .report(Instant::now(), lease_valid, message.keys);
        MessageResult(ShardReport {
            ring: self.setup.ring_name.clone(),
            jobs_remembered: self.jobs.len(),
            ..report
        })
    }
}
