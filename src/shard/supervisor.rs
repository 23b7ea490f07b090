//! The supervisor: turns the watch streams into CronJob actors for the
//! CronJobs this replica owns, routes every event to the actor it concerns,
//! and moves ownership when the ring changes.
//!
//! It runs on the System's thread; actors run on one Arbiter per core,
//! assigned in turn. A Job is routed by its controller reference (kind
//! CronJob, by UID, as upstream's `resolveControllerRef`); a Job whose
//! CronJob has no actor yet is parked (see [`super::jobs`]) and handed over
//! when the actor starts. No actor decides anything before the first lists
//! of both CronJobs and Jobs are complete, as upstream waits for its
//! informers' caches.
//!
//! Ownership (DESIGN.md, "Sharding protocol"; the rules are the pure
//! [`super::handoff`]): the ring is built from the live members of the
//! Lease watch plus this replica while its fence is open. Events of
//! CronJobs the ring gives to others are dropped, so memory follows the
//! owned share. On a change of ring the supervisor stops the actors of lost
//! keys, waits until they have stopped, publishes the new view on its
//! Lease, loads the gained keys in bulk, and starts each one when no live
//! peer's view still claims it. If its fence lapses it stops every actor
//! and rejoins from scratch.

use super::boot_clock::BootInstant;
use super::fence::{Fence, FenceState, SharedFence};
use super::handoff::{self, KeyDecision, Peer, ViewRings};
use super::jobs::{JobIndex, JobRoute};
use super::lease::{Keeper, KeeperReport};
use super::membership::{LeaseObservation, Membership};
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
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument as _;

/// How long a graceful stop waits for decisions in flight.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often membership is re-judged (Leases expire without an event).
const TICK: Duration = Duration::from_secs(1);
/// Before retrying a failed bulk load.
const LOAD_RETRY: Duration = Duration::from_secs(2);

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

struct Running {
    uid: String,
    addr: Addr<CronJobActor>,
    started: bool,
}

/// Where one watched scope (a namespace, or all) stands.
#[derive(Default)]
struct ScopeState {
    namespace: Option<String>,
    cronjobs_listed: bool,
    jobs_listed: bool,
    /// During a (re)list: the keys / Job UIDs seen so far.
    relisting_cronjobs: Option<HashSet<String>>,
    relisting_jobs: Option<HashSet<String>>,
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

/// The ring as this replica sees it.
struct Sharding {
    setup: ShardSetup,
    membership: Membership,
    rings: ViewRings,
    leases_listed: bool,
    relisting_leases: Option<HashSet<String>>,
    /// The ring this replica acts on; `None` while it acts on nothing
    /// (starting, or rejoining after its fence lapsed).
    target: Option<Arc<Ring>>,
    /// The view asked of the keeper for `target` (once lost keys stopped).
    published: Option<String>,
    /// The fence lapsed: stopping everything before rejoining.
    recovering: bool,
    loads_in_flight: usize,
    /// UIDs (CronJobs and Jobs) the watch saw deleted while a load was in flight.
    tombstones: HashSet<String>,
}

impl Sharding {
    fn owns(&self, namespace: &str, name: &str) -> bool {
        let me = self.setup.me.as_str();
        self.target
            .as_ref()
            .is_some_and(|ring| ring.owner(namespace, name) == Some(me))
    }

    fn fence(&self) -> std::sync::MutexGuard<'_, Fence> {
        self.setup.fence.lock()
    }
}

pub struct Supervisor {
    shared: Arc<Shared>,
    arbiters: Vec<ArbiterHandle>,
    next_arbiter: usize,
    scopes: Vec<ScopeState>,
    actors: HashMap<String, Running>,
    keys_by_uid: HashMap<String, String>,
    /// Actors told to stop that have not reported back: key -> the CronJob's
    /// UID and when the stop was asked (`/healthz` judges the oldest).
    stopping: HashMap<String, (String, Instant)>,
    /// Owned keys whose actor waits for the hand-off, since when.
    waiting_since: HashMap<String, Instant>,
    jobs: JobIndex,
    /// The first lists of every scope are complete.
    synced: bool,
    /// Actors whose first decision is still to come (readiness).
    not_yet_armed: HashSet<String>,
    readiness: Arc<Readiness>,
    sharding: Sharding,
    shutting_down: bool,
    exiting: bool,
}

impl Supervisor {
    /// `scopes`: the namespaces watched (`None`: all), in the order of the
    /// scope numbers the watch messages carry.
    pub fn new(
        shared: Arc<Shared>,
        arbiters: Vec<ArbiterHandle>,
        scopes: Vec<Option<String>>,
        readiness: Arc<Readiness>,
        shard: ShardSetup,
    ) -> Self {
        Self {
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
            actors: HashMap::new(),
            keys_by_uid: HashMap::new(),
            stopping: HashMap::new(),
            waiting_since: HashMap::new(),
            jobs: JobIndex::default(),
            synced: false,
            not_yet_armed: HashSet::new(),
            readiness,
            sharding: Sharding {
                setup: shard,
                membership: Membership::default(),
                rings: ViewRings::default(),
                leases_listed: false,
                relisting_leases: None,
                target: None,
                published: None,
                recovering: false,
                loads_in_flight: 0,
                tombstones: HashSet::new(),
            },
            shutting_down: false,
            exiting: false,
        }
    }

    fn key_of(cronjob: &CronJob) -> (String, &str, &str) {
        let namespace = cronjob.metadata.namespace.as_deref().unwrap_or_default();
        let name = cronjob.metadata.name.as_deref().unwrap_or_default();
        (format!("{namespace}/{name}"), namespace, name)
    }

    fn split_key(key: &str) -> (&str, &str) {
        key.split_once('/').unwrap_or((key, ""))
    }

    fn on_cronjob(&mut self, cronjob: CronJob) {
        let (key, namespace, name) = Self::key_of(&cronjob);
        if !self.sharding.owns(namespace, name) {
            return;
        }
        let uid = cronjob.metadata.uid.clone().unwrap_or_default();
        match self.actors.get(&key) {
            Some(running) if running.uid == uid => {
                running.addr.do_send(Update::CronJob(Box::new(cronjob)));
                return;
            }
            // Deleted and re-created while the watch was away.
            Some(_) => self.stop_actor(&key),
            None => {}
        }
        if self.shutting_down || self.sharding.recovering {
            return;
        }
        let children = self.jobs.claim(&uid);
        let shared = self.shared.clone();
        let arbiter = &self.arbiters[self.next_arbiter % self.arbiters.len()];
        self.next_arbiter = self.next_arbiter.wrapping_add(1);
        let actor = match CronJobActor::new(&cronjob, children, shared) {
            Ok(actor) => actor,
            Err(error) => {
                tracing::warn!(cronjob = %key, %error, "not running an unusable CronJob");
                return;
            }
        };
        let addr = CronJobActor::start_in_arbiter(arbiter, move |_| actor);
        self.not_yet_armed.insert(key.clone());
        self.waiting_since.insert(key.clone(), Instant::now());
        self.keys_by_uid.insert(uid.clone(), key.clone());
        self.actors.insert(
            key.clone(),
            Running {
                uid,
                addr,
                started: false,
            },
        );
        self.start_waiting(Some(&key));
    }

    fn stop_actor(&mut self, key: &str) {
        if let Some(running) = self.actors.remove(key) {
            running.addr.do_send(Update::Stop);
            self.keys_by_uid.remove(&running.uid);
            self.stopping
                .insert(key.to_owned(), (running.uid, Instant::now()));
        }
        self.waiting_since.remove(key);
        self.not_yet_armed.remove(key);
        self.check_ready();
    }

    fn on_job(&mut self, mut job: JobFacts, relisted: bool) {
        if let Some(owner) = &job.owner_name
            && !self.sharding.owns(&job.namespace, owner)
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
        if self.sharding.loads_in_flight > 0 {
            self.sharding.tombstones.insert(uid.to_owned());
        }
        let keys = &self.keys_by_uid;
        if let Some(route) = self.jobs.delete(uid, |owner| keys.contains_key(owner)) {
            self.send(route, false);
        }
    }

    fn on_cronjob_deleted(&mut self, cronjob: &CronJob) {
        if self.sharding.loads_in_flight > 0
            && let Some(uid) = &cronjob.metadata.uid
        {
            self.sharding.tombstones.insert(uid.clone());
        }
        self.stop_actor(&Self::key_of(cronjob).0);
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

    /// Once every scope has listed both kinds: start what may start.
    fn maybe_sync(&mut self) {
        if self.synced
            || !self
                .scopes
                .iter()
                .all(|s| s.cronjobs_listed && s.jobs_listed)
        {
            return;
        }
        self.synced = true;
        tracing::info!(owned = self.actors.len(), "initial lists synced");
        self.start_waiting(None);
    }

    /// The live peers with the rings of their views, and our own view as
    /// the Lease watch last showed it.
    fn peers(&mut self, now: Instant) -> (Vec<Peer>, Option<String>) {
        let sharding = &mut self.sharding;
        let me = sharding.setup.me.as_str();
        let mut own = None;
        let mut peers = Vec::new();
        for (member, view) in sharding.membership.live_views(now) {
            if member == me {
                own = view.map(str::to_owned);
            } else {
                peers.push(Peer {
                    name: member.to_owned(),
                    ring: view.map(|v| sharding.rings.ring(v)),
                });
            }
        }
        (peers, own)
    }

    /// Starts the waiting actors the hand-off rule lets run: only `key`, or all.
    fn start_waiting(&mut self, key: Option<&str>) {
        let sharding = &self.sharding;
        let Some(target) = sharding.target.clone() else {
            return;
        };
        if !self.synced
            || self.shutting_down
            || sharding.recovering
            || sharding.loads_in_flight > 0
            || sharding.published.is_none()
            || self.waiting_since.is_empty()
        {
            return;
        }
        let now = Instant::now();
        let (peers, own_view) = self.peers(now);
        let me = self.sharding.setup.me.clone();
        let candidates: Vec<String> = match key {
            Some(key) if self.waiting_since.contains_key(key) => vec![key.to_owned()],
            Some(_) => return,
            None => self.waiting_since.keys().cloned().collect(),
        };
        for key in candidates {
            let (namespace, name) = Self::split_key(&key);
            match handoff::decide(&me, namespace, name, &target, own_view.as_deref(), &peers) {
                KeyDecision::Run => {
                    let Some(running) = self.actors.get_mut(&key) else {
                        continue;
                    };
                    running.started = true;
                    running.addr.do_send(Update::Start);
                    if let Some(since) = self.waiting_since.remove(&key) {
                        self.shared
                            .metrics
                            .handoff_wait
                            .observe(now.duration_since(since).as_secs_f64());
                    }
                }
                // Own view not back yet: the same for every key.
                KeyDecision::WaitForOwnView => break,
                KeyDecision::WaitFor(_) | KeyDecision::NotOurs => {}
            }
        }
        self.update_gauges();
    }

    fn update_gauges(&self) {
        let metrics = &self.shared.metrics;
        let waiting = self.waiting_since.len() as i64;
        metrics.actors.set(self.actors.len() as i64);
        metrics
            .owned
            .get_or_create(&OwnedLabels {
                state: OwnedState::Waiting,
            })
            .set(waiting);
        metrics
            .owned
            .get_or_create(&OwnedLabels {
                state: OwnedState::Running,
            })
            .set(self.actors.len() as i64 - waiting);
    }

    /// Re-judges the fence and the membership; moves to a new ring if the
    /// live set changed. Called on every Lease event and every tick.
    fn rebalance(&mut self, ctx: &mut Context<Self>) {
        if self.shutting_down {
            return;
        }
        let now = Instant::now();
        let state = self.sharding.fence().check(BootInstant::now());
        let oldest_stop = self.stopping.values().map(|(_, since)| *since).min();
        self.readiness
            .tick(now, state == FenceState::Valid, oldest_stop);
        self.shared
            .metrics
            .lease_valid
            .set(i64::from(state == FenceState::Valid));
        match state {
            FenceState::Lapsed => {
                if !self.sharding.recovering {
                    tracing::warn!(
                        actors = self.actors.len(),
                        "own Lease not renewed within the renew deadline: stopping every actor"
                    );
                    self.sharding.recovering = true;
                    self.sharding.target = None;
                    self.sharding.published = None;
                    self.shared.metrics.ring_members.set(0);
                    for key in self.actors.keys().cloned().collect::<Vec<_>>() {
                        self.stop_actor(&key);
                    }
                    self.jobs.retain_owners(|_, _| false);
                }
                if self.stopping.is_empty() {
                    tracing::info!("every actor stopped; rejoining the ring");
                    self.sharding.fence().rejoin();
                    self.sharding.recovering = false;
                }
                self.update_gauges();
                return;
            }
            FenceState::Waiting => return,
            FenceState::Valid => {}
        }
        if !self.sharding.leases_listed {
            return;
        }
        self.sharding.membership.prune(now);
        let mut live = self.sharding.membership.live(now);
        live.insert(self.sharding.setup.me.clone());
        let changed = self.sharding.target.as_ref().is_none_or(|ring| {
            !ring
                .members()
                .iter()
                .map(|m| &**m)
                .eq(live.iter().map(String::as_str))
        });
        if changed {
            self.move_to(live, ctx);
        }
        if self.sharding.published.is_none()
            && self.stopping.is_empty()
            && let Some(target) = &self.sharding.target
        {
            let view = handoff::encode_view(target);
            tracing::info!(view = %view, digest = %handoff::view_digest(&view), "publishing view");
            self.sharding.setup.keeper.publish(view.clone());
            self.sharding.published = Some(view);
        }
        self.start_waiting(None);
        self.check_ready();
    }

    /// The live set changed: stop lost keys, load gained ones.
    fn move_to(&mut self, live: BTreeSet<String>, ctx: &mut Context<Self>) {
        let target = Arc::new(Ring::new(live.iter().map(String::as_str)));
        let previous = self.sharding.target.replace(target.clone());
        self.sharding.published = None;
        let metrics = &self.shared.metrics;
        metrics.rebalances.inc();
        metrics.ring_members.set(target.members().len() as i64);
        let lost: Vec<String> = self
            .actors
            .keys()
            .filter(|key| {
                let (namespace, name) = Self::split_key(key);
                !self.sharding.owns(namespace, name)
            })
            .cloned()
            .collect();
        // A span per transition (in traces when exporting): who is in the
        // ring, what this replica lost; the bulk load of what it gained is
        // its own span, `shard.load`.
        let _transition = tracing::info_span!(
            "shard.rebalance",
            shard.ring = %self.sharding.setup.ring_name,
            shard.members = ?live,
            shard.view_digest = %handoff::view_digest(&handoff::encode_view(&target)),
            shard.keys_lost = lost.len(),
        )
        .entered();
        tracing::info!(
            members = ?live,
            lost = lost.len(),
            "ring changed"
        );
        metrics
            .keys_moved
            .get_or_create(&MovedLabels {
                direction: MoveDirection::Lost,
            })
            .inc_by(lost.len() as u64);
        for key in &lost {
            self.stop_actor(key);
        }
        let sharding = &self.sharding;
        self.jobs
            .retain_owners(|namespace, name| sharding.owns(namespace, name));
        self.load(previous, ctx);
    }

    /// Loads, in bulk, the CronJobs this replica owns under its target but
    /// did not own under `previous` (all it owns if `None`).
    fn load(&mut self, previous: Option<Arc<Ring>>, ctx: &mut Context<Self>) {
        let Some(target) = self.sharding.target.clone() else {
            return;
        };
        self.sharding.loads_in_flight += 1;
        let me = self.sharding.setup.me.clone();
        let client = self.sharding.setup.client.clone();
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

    fn check_ready(&mut self) {
        if self.synced
            && self.sharding.target.is_some()
            && self.sharding.loads_in_flight == 0
            && self.not_yet_armed.is_empty()
            && !self.readiness.is_ready()
        {
            tracing::info!(actors = self.actors.len(), "every owned actor armed; ready");
            self.readiness.set_ready();
        }
    }

    fn maybe_exit(&mut self) {
        if !self.shutting_down || !self.actors.is_empty() || !self.stopping.is_empty() {
            return;
        }
        if std::mem::replace(&mut self.exiting, true) {
            return;
        }
        tracing::info!("every actor stopped; releasing the Lease");
        let keeper = self.sharding.setup.keeper.clone();
        let system = System::current();
        tokio::spawn(async move {
            keeper.release().await;
            system.stop();
        });
    }

    /// For `/debug/shards`.
    fn debug(&mut self, keys: bool) -> super::debug::ShardReport {
        let now = Instant::now();
        let sharding = &self.sharding;
        let fence = sharding.fence().clone();
        let view = sharding.target.as_ref().map(|r| handoff::encode_view(r));
        let mut waiting_for: HashMap<String, usize> = HashMap::new();
        if let Some(target) = sharding.target.clone() {
            let (peers, own) = self.peers(now);
            let me = self.sharding.setup.me.clone();
            for key in self.waiting_since.keys() {
                let (namespace, name) = Self::split_key(key);
                let blocker =
                    match handoff::decide(&me, namespace, name, &target, own.as_deref(), &peers) {
                        KeyDecision::WaitFor(peer) => peer,
                        KeyDecision::WaitForOwnView => "own view not published yet".to_owned(),
                        KeyDecision::Run => "starting".to_owned(),
                        KeyDecision::NotOurs => "stopping".to_owned(),
                    };
                *waiting_for.entry(blocker).or_default() += 1;
            }
        }
        let sharding = &self.sharding;
        super::debug::ShardReport {
            replica: sharding.setup.me.clone(),
            ring: sharding.setup.ring_name.clone(),
            lease_valid: fence.may_act(BootInstant::now()),
            recovering: sharding.recovering,
            view_digest: view.as_deref().map(handoff::view_digest),
            view: view
                .map(|v| v.split(',').map(str::to_owned).collect())
                .unwrap_or_default(),
            published: sharding.published.is_some(),
            members: sharding
                .membership
                .leases(now)
                .map(
                    |(name, lease, since, live, deleted)| super::debug::MemberReport {
                        lease: name.to_owned(),
                        holder: lease.holder.clone(),
                        live,
                        deleted,
                        last_renewal_seen_ms: since.as_millis() as u64,
                        view_digest: lease.view.as_deref().map(handoff::view_digest),
                    },
                )
                .collect(),
            owned: self.actors.len(),
            running: self.actors.len() - self.waiting_since.len(),
            waiting: self.waiting_since.len(),
            waiting_for,
            stopping: self.stopping.len(),
            loads_in_flight: sharding.loads_in_flight,
            jobs_remembered: self.jobs.len(),
            keys: keys.then(|| {
                let mut keys: Vec<String> = self
                    .actors
                    .iter()
                    .filter(|(_, r)| r.started)
                    .map(|(k, _)| k.clone())
                    .collect();
                keys.sort();
                keys
            }),
        }
    }
}

impl Actor for Supervisor {
    // Watchers `send` and wait for each event to be handled: a list of
    // 100,000 objects streams through instead of piling up decoded.
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(TICK, |supervisor, ctx| supervisor.rebalance(ctx));
    }
}

impl Handler<CronJobWatch> for Supervisor {
    type Result = ();

    fn handle(&mut self, message: CronJobWatch, _: &mut Self::Context) {
        let scope = message.scope;
        match message.event {
            Event::Apply(cronjob) => self.on_cronjob(cronjob),
            Event::Delete(cronjob) => self.on_cronjob_deleted(&cronjob),
            Event::Init => self.scopes[scope].relisting_cronjobs = Some(HashSet::new()),
            Event::InitApply(cronjob) => {
                if let Some(seen) = self.scopes[scope].relisting_cronjobs.as_mut() {
                    seen.insert(Self::key_of(&cronjob).0);
                }
                self.on_cronjob(cronjob);
            }
            Event::InitDone => {
                let seen = self.scopes[scope]
                    .relisting_cronjobs
                    .take()
                    .unwrap_or_default();
                let gone: Vec<String> = self
                    .actors
                    .keys()
                    .filter(|key| {
                        let (namespace, _) = Self::split_key(key);
                        self.scopes[scope].covers(namespace) && !seen.contains(*key)
                    })
                    .cloned()
                    .collect();
                for key in gone {
                    self.stop_actor(&key);
                }
                self.scopes[scope].cronjobs_listed = true;
                self.maybe_sync();
                crate::memory::release_free_pages();
            }
        }
    }
}

impl Handler<JobWatch> for Supervisor {
    type Result = ();

    fn handle(&mut self, message: JobWatch, _: &mut Self::Context) {
        let scope = message.scope;
        match message.event {
            Event::Apply(job) => self.on_job(job, false),
            Event::Delete(job) => self.on_job_deleted(&job.uid),
            Event::Init => self.scopes[scope].relisting_jobs = Some(HashSet::new()),
            Event::InitApply(job) => {
                if let Some(seen) = self.scopes[scope].relisting_jobs.as_mut() {
                    seen.insert(job.uid.clone());
                }
                self.on_job(job, true);
            }
            Event::InitDone => {
                let seen = self.scopes[scope].relisting_jobs.take().unwrap_or_default();
                let in_scope = &self.scopes[scope];
                let gone = self
                    .jobs
                    .gone_after_relist(|namespace| in_scope.covers(namespace), &seen);
                for uid in gone {
                    self.on_job_deleted(&uid);
                }
                self.scopes[scope].jobs_listed = true;
                self.maybe_sync();
                crate::memory::release_free_pages();
            }
        }
    }
}

impl Handler<LeaseWatch> for Supervisor {
    type Result = ();

    fn handle(&mut self, LeaseWatch(event): LeaseWatch, ctx: &mut Self::Context) {
        let now = Instant::now();
        let sharding = &mut self.sharding;
        match event {
            Event::Apply((name, lease)) => sharding.membership.observe(&name, lease, now),
            Event::Delete((name, _)) => sharding.membership.deleted(&name),
            Event::Init => sharding.relisting_leases = Some(HashSet::new()),
            Event::InitApply((name, lease)) => {
                if let Some(seen) = sharding.relisting_leases.as_mut() {
                    seen.insert(name.clone());
                }
                sharding.membership.observe(&name, lease, now);
            }
            Event::InitDone => {
                let seen = sharding.relisting_leases.take().unwrap_or_default();
                let gone: Vec<String> = sharding
                    .membership
                    .leases(now)
                    .map(|(name, ..)| name.to_owned())
                    .filter(|name| !seen.contains(name))
                    .collect();
                for name in gone {
                    sharding.membership.deleted(&name);
                }
                sharding.leases_listed = true;
            }
        }
        self.rebalance(ctx);
    }
}

impl Handler<LoadPage> for Supervisor {
    type Result = ();

    /// The CronJobs' pages come first, the Jobs' after. No actor starts
    /// before the whole load is done (`start_waiting` waits for
    /// `loads_in_flight` to drop to 0), so a Job routed to an actor that
    /// already exists counts as much as one claimed when it is spawned. What
    /// the watch delivered meanwhile is newer or as new: it wins.
    fn handle(&mut self, LoadPage(page): LoadPage, _: &mut Self::Context) {
        for cronjob in page.cronjobs {
            let uid = cronjob.metadata.uid.as_deref().unwrap_or_default();
            if !self.sharding.tombstones.contains(uid)
                && !self.actors.contains_key(&Self::key_of(&cronjob).0)
            {
                self.on_cronjob(cronjob);
            }
        }
        for job in page.jobs {
            if !self.sharding.tombstones.contains(&job.uid) && !self.jobs.knows(&job.uid) {
                self.on_job(job, false);
            }
        }
    }
}

impl Handler<LoadDone> for Supervisor {
    type Result = ();

    fn handle(&mut self, LoadDone(result): LoadDone, ctx: &mut Self::Context) {
        self.sharding.loads_in_flight -= 1;
        match result {
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
            }
            Err(error) => {
                tracing::warn!(%error, "bulk load of gained CronJobs failed; retrying");
                // Loads everything owned; what is already here is kept.
                self.sharding.loads_in_flight += 1;
                ctx.run_later(LOAD_RETRY, |supervisor, ctx| {
                    supervisor.sharding.loads_in_flight -= 1;
                    supervisor.load(None, ctx);
                });
            }
        }
        if self.sharding.loads_in_flight == 0 {
            self.sharding.tombstones.clear();
            self.start_waiting(None);
            self.check_ready();
            crate::memory::release_free_pages();
        }
    }
}

impl Handler<Report> for Supervisor {
    type Result = ();

    fn handle(&mut self, report: Report, ctx: &mut Self::Context) {
        match report {
            Report::Armed { key } => {
                self.not_yet_armed.remove(&key);
                self.check_ready();
            }
            Report::Stopped { key, uid } => {
                if self
                    .stopping
                    .get(&key)
                    .is_some_and(|(stopping, _)| *stopping == uid)
                {
                    self.stopping.remove(&key);
                    if self.stopping.is_empty() {
                        // Lost keys have stopped: the view can be published.
                        self.rebalance(ctx);
                    }
                }
                self.update_gauges();
                self.maybe_exit();
            }
        }
    }
}

impl Handler<KeeperReport> for Supervisor {
    type Result = ();

    fn handle(&mut self, report: KeeperReport, _: &mut Self::Context) {
        let KeeperReport::Usurped { incarnation } = report;
        tracing::error!(
            replica = %self.sharding.setup.me,
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
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        tracing::info!(actors = self.actors.len(), "stopping every actor");
        for key in self.actors.keys().cloned().collect::<Vec<_>>() {
            self.stop_actor(&key);
        }
        // Stopping actors report back; the Lease is released once all have.
        ctx.run_later(STOP_GRACE, |_, _| {
            tracing::warn!("decisions still in flight after the grace period; exiting");
            System::current().stop();
        });
        self.maybe_exit();
    }
}

impl Handler<super::debug::DebugShards> for Supervisor {
    type Result = MessageResult<super::debug::DebugShards>;

    fn handle(
        &mut self,
        message: super::debug::DebugShards,
        _: &mut Self::Context,
    ) -> Self::Result {
        MessageResult(self.debug(message.keys))
    }
}
