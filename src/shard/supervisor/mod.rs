//! The supervisor: the shell around the ownership protocol
//! ([`super::ownership`]). It turns the watch streams into inputs of the
//! protocol, carries out its commands (start, stop and spawn CronJob
//! actors, publish the view, load gained keys in bulk), and routes every
//! event to the actor it concerns. It reads the clock once per message.
//!
//! It runs on the System's Arbiter; actors run there too with
//! `--threads 1`, or on one Arbiter per thread, assigned in turn. A Job is
//! routed by its controller reference (kind CronJob, by UID, as upstream's
//! `resolveControllerRef`); a Job whose CronJob has no actor yet is parked
//! (see [`super::jobs`]) and handed over when the actor starts. No actor
//! decides anything before the first lists of both CronJobs and Jobs are
//! complete, as upstream waits for its informers' caches. Events of
//! CronJobs the ring gives to others are dropped, so memory follows the
//! owned share.
//!
//! [`intake`] turns the watches into inputs and routes; [`bulk_load`] runs
//! the bulk loads of gained keys; [`standby_reads`] keeps the standby
//! CronJobs and reads the gained ones due first at a take-over; [`watches`]
//! runs the watches, their selectors following the buckets this replica
//! owns; [`orphans`] releases the held Jobs of deleted CronJobs;
//! [`answers`] answers what the admin API and the debug endpoint ask.

mod answers;
mod bulk_load;
mod commands;
mod deletions;
mod due_reads;
mod for_actors;
mod intake;
mod listed;
mod marks;
mod orphans;
mod standby_reads;
#[cfg(test)]
mod tests;
mod threads;
mod watches;

pub use answers::{ListOwned, Locate, Located, OwnedList};
pub use intake::{CronJobWatch, JobStream, JobWatch, LeaseWatch};
pub use watches::{ServedKind, WatchSetup};

use super::fence::{FenceState, SharedFence};
use super::jobs::JobIndex;
use super::lease::{self, Keeper, KeeperReport, LeaseSettings};
use super::ownership::{self, Input, Ownership};
use crate::actor::cronjob::{CronJobActor, Update};
use crate::actor::runtime::CellRef;
use crate::actor::services::{ActorReport, ActorServices};
use crate::apiserver::gateway::Gateway;
use crate::clock::{BootInstant, Clock};
use crate::telemetry::Metrics;
use crate::telemetry::http::Readiness;
use crate::telemetry::metrics::{OwnedLabels, OwnedState};
use actix::prelude::*;
use kube::Client;
use listed::{Listed, ScopeState};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use threads::ActorThreads;

/// How long a graceful stop waits for decisions in flight, after the drain.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How often membership is re-judged (Leases expire without an event).
const TICK: Duration = Duration::from_secs(1);

/// The supervisor's clock, read once per message: tokio's, so that a test
/// on a paused runtime moves it.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// SIGTERM: stop every actor (letting decisions in flight finish), release
/// the Lease, then end the process.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// What a replica's supervisor is started with.
pub struct SupervisorParts {
    /// For the Lease keeper and the bulk loads.
    pub client: Client,
    pub lease: LeaseSettings,
    pub fence: SharedFence,
    /// What every CronJob actor is handed.
    pub actors: ActorParts,
    /// Where actors run, assigned in turn.
    pub arbiters: Vec<ArbiterHandle>,
    /// The namespaces watched (`None`: all), in the order of the scope
    /// numbers the watch messages carry.
    pub scopes: Vec<Option<String>>,
    pub readiness: Arc<Readiness>,
    /// The watches to run (`None`: the caller feeds the watch messages).
    pub watches: Option<WatchSetup>,
    /// Keep the CronJobs this replica would gain if a peer died on
    /// standby, and read those due first at a take-over
    /// (`--shard-standby`; [`crate::shard::standby`]).
    pub standby: bool,
}

/// What every CronJob actor is handed ([`ActorServices`], with the
/// supervisor's address and the replica's id).
pub struct ActorParts {
    pub gateway: Gateway,
    pub metrics: Arc<Metrics>,
    /// For CronJobs without `spec.timeZone`.
    pub default_zone: jiff::tz::TimeZone,
    /// Whether decisions write the slot history (`--slot-history`).
    pub slot_history: bool,
    /// Where the actors publish their decisions (the admin API watches it).
    pub feed: crate::actor::feed::DecisionFeed,
    /// The wall clock the supervisor hands to the wheel and every actor.
    pub clock: Clock,
}

/// What the supervisor needs to take part in the ring.
struct ShardSetup {
    me: String,
    /// `--shard-drain-timeout`.
    drain: Duration,
    ring_name: String,
    /// Where the ring's Leases are.
    namespace: String,
    fence: SharedFence,
    keeper: Keeper,
    /// For bulk loads.
    client: Client,
    /// `--shard-standby`.
    standby: bool,
    /// `/readyz`: the protocol's readiness, the fence's and the standby
    /// load's.
    readiness: Arc<Readiness>,
}

/// An actor here, in [`Supervisor::actors`] under its CronJob's UID. Its
/// key and UID are the protocol's (at 10^6 CronJobs each copy of the two
/// strings cost about 50 bytes a CronJob).
struct Running {
    key: Arc<str>,
    cell: CellRef<CronJobActor>,
}

pub struct Supervisor {
    actor_services: Arc<ActorServices>,
    /// Where the actors run, and the wheel they arm their wake-ups on.
    threads: ActorThreads,
    /// Where the watches stand.
    listed: Listed,
    watches: watches::Watches,
    ownership: Ownership,
    setup: ShardSetup,
    /// The actors here by their CronJob's UID: Jobs name their CronJob by
    /// UID, and the protocol maps a key to its UID (one table, not one by
    /// key and one by UID: at 10^6 CronJobs a hash table costs 60-120 bytes
    /// a CronJob).
    actors: HashMap<Arc<str>, Running>,
    /// Jobs and unrecorded slots kept for CronJobs' next actors.
    for_actors: for_actors::ForActors,
    /// The CronJobs this replica would gain if a peer died
    /// ([`crate::shard::standby`], kept by [`standby_reads`]).
    standby: standby_reads::StandbyState,
    /// What the watches saw deleted.
    deletions: deletions::Deletions,
    /// Held Jobs whose CronJob is being looked up (see [`orphans`]).
    orphan_checks: HashSet<String>,
    /// The one-off tick armed for a peer's Lease expiry; when the ring
    /// changed with the view not yet published.
    marks: marks::Marks,
}

impl Supervisor {
    /// Starts the supervisor on the current Arbiter, with its Lease keeper;
    /// its actors report to it.
    pub fn start_with(parts: SupervisorParts) -> Addr<Self> {
        Supervisor::create(move |ctx| {
            let ActorParts {
                gateway,
                metrics,
                default_zone,
                slot_history,
                feed,
                clock,
            } = parts.actors;
            let actor_services = Arc::new(ActorServices {
                gateway,
                reports: ctx.address().recipient(),
                metrics,
                default_zone,
                slot_history,
                replica: parts.lease.replica_id.clone(),
                feed,
                clock,
            });
            let keeper = lease::start(
                parts.client.clone(),
                parts.lease.clone(),
                parts.fence.clone(),
                ctx.address().recipient(),
            );
            let shard = ShardSetup {
                drain: parts.lease.drain,
                me: parts.lease.replica_id,
                ring_name: parts.lease.ring,
                namespace: parts.lease.namespace,
                fence: parts.fence,
                keeper,
                client: parts.client,
                standby: parts.standby,
                readiness: parts.readiness,
            };
            let watches = watches::Watches::new(parts.watches, parts.scopes.len());
            Supervisor::new(actor_services, parts.arbiters, parts.scopes, watches, shard)
        })
    }

    fn new(
        actor_services: Arc<ActorServices>,
        arbiters: Vec<ArbiterHandle>,
        scopes: Vec<Option<String>>,
        watches: watches::Watches,
        setup: ShardSetup,
    ) -> Self {
        // Unlabelled Jobs of slots from here on are another controller's.
        let started = actor_services.clock.now();
        let threads = ActorThreads::start(
            &arbiters,
            &actor_services.metrics.actor_panics,
            actor_services.clock,
        );
        Self {
            standby: standby_reads::StandbyState::new(setup.standby),
            ownership: Ownership::new(setup.me.clone(), setup.keeper.incarnation())
                .with_drain(setup.drain),
            threads,
            actor_services,
            listed: Listed::new(
                scopes
                    .into_iter()
                    .map(|namespace| {
                        ScopeState::new(
                            namespace,
                            watches.kinds(),
                            watches.watches_unlabelled_jobs(),
                        )
                    })
                    .collect(),
            ),
            watches,
            setup,
            actors: HashMap::new(),
            for_actors: for_actors::ForActors::new(JobIndex::made_elsewhere_since(started)),
            deletions: deletions::Deletions::default(),
            orphan_checks: HashSet::new(),
            marks: marks::Marks::default(),
        }
    }

    /// The watched namespaces (`None`: all), by scope number.
    fn namespaces(&self) -> Vec<Option<String>> {
        self.listed
            .scopes
            .iter()
            .map(|s| s.namespace.clone())
            .collect()
    }

    fn update_gauges(&self) {
        let metrics = &self.actor_services.metrics;
        let (owned, waiting) = self.ownership.counts();
        metrics.actors.set(self.actors.len() as i64);
        metrics
            .standby_cronjobs
            .set(self.standby.index.len() as i64);
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
        let now = now();
        let (fence, lapses) = {
            let mut fence = self.setup.fence.lock();
            (fence.check(BootInstant::now()), fence.lapses())
        };
        self.setup.readiness.tick(
            now,
            fence == FenceState::Valid,
            self.ownership.oldest_stop(),
        );
        self.actor_services
            .metrics
            .lease_valid
            .set(i64::from(fence == FenceState::Valid));
        let counted = self.actor_services.metrics.lease_lapses.get();
        if lapses > counted {
            self.actor_services
                .metrics
                .lease_lapses
                .inc_by(lapses - counted);
        }
        let wall = Some(self.actor_services.clock.now());
        self.step(Input::Tick { fence, wall }, now, ctx, None);
        // Once a second: fresh enough for a gauge, and no work per event.
        self.update_gauges();
        self.arm_expiry(now, ctx);
    }

    /// A peer's Lease that runs out before the next periodic tick is judged
    /// at that very instant, not up to a tick later: a failover is that
    /// much shorter.
    fn arm_expiry(&mut self, now: Instant, ctx: &mut Context<Self>) {
        let Some(expiry) = self.ownership.next_expiry(now) else {
            return;
        };
        let Some(wait) = self.marks.arm_expiry(expiry, now, TICK) else {
            return;
        };
        ctx.run_later(wait, |supervisor, ctx| {
            supervisor.marks.expiry_judged();
            supervisor.tick(ctx);
        });
    }
}

impl Actor for Supervisor {
    // Watchers `send` and wait for each event to be handled: a list of
    // 100,000 objects streams through instead of piling up decoded.
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let namespaces = self.namespaces();
        self.watches.start(&namespaces, &ctx.address());
        // Nothing else is handled until they are read (a request each,
        // each within a list page's deadline): the first ring must find them.
        if let Some(read) = self.watches.read_first_versions(&namespaces) {
            ctx.wait(
                read.into_actor(self)
                    .map(|versions, supervisor, _| supervisor.watches.set_first_versions(versions)),
            );
        }
        ctx.run_interval(TICK, |supervisor, ctx| supervisor.tick(ctx));
    }
}

impl Handler<ActorReport> for Supervisor {
    type Result = ();

    fn handle(&mut self, report: ActorReport, ctx: &mut Self::Context) {
        let input = match report {
            ActorReport::Armed { key } => Input::ActorArmed { key },
            ActorReport::Stopped {
                key,
                uid,
                unrecorded,
                next_look,
            } => {
                if let Some(slot) = unrecorded {
                    tracing::warn!(cronjob = %key, %slot, "a started slot is not recorded in the CronJob's status yet; remembered for its next actor here");
                    self.for_actors.remember_unrecorded(&uid, slot);
                }
                self.keep_stopped_on_standby(&key, &uid, next_look);
                Input::ActorStopped { key, uid }
            }
        };
        self.step(input, now(), ctx, None);
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
            running.cell.post(Update::Stop);
        }
        System::current().stop_with_code(1);
    }
}

impl Handler<Shutdown> for Supervisor {
    type Result = ();

    fn handle(&mut self, _: Shutdown, ctx: &mut Self::Context) {
        if matches!(
            self.ownership.phase(),
            ownership::Phase::ShuttingDown
                | ownership::Phase::Exited
                | ownership::Phase::Leaving { .. }
        ) {
            return;
        }
        tracing::info!(
            actors = self.actors.len(),
            drain = ?self.setup.drain,
            "stopping: running every actor until the peers have taken them over or the drain is over, then stopping them"
        );
        // Stopping actors report back; the Lease is released once all have.
        ctx.run_later(self.setup.drain + STOP_GRACE, |_, _| {
            tracing::warn!("decisions still in flight after the grace period; exiting");
            System::current().stop();
        });
        self.step(Input::Shutdown, now(), ctx, None);
    }
}
