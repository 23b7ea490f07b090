//! The supervisor: turns the watch streams into CronJob actors and routes
//! every event to the actor it concerns.
//!
//! It runs on the System's thread; actors run on one Arbiter per core,
//! assigned in turn. A CronJob gets an actor when it first appears and
//! loses it when it is deleted. A Job is routed by its controller
//! reference (kind CronJob, by UID, as upstream's `resolveControllerRef`);
//! a Job whose CronJob has no actor yet is parked (see [`super::jobs`]) and handed
//! over when the actor starts. No actor decides anything before the first
//! lists of both CronJobs and Jobs are complete, as upstream waits for its
//! informers' caches.
//!
//! With one replica every CronJob is owned here; the ring and the hand-off
//! rules decide ownership once sharding is enabled.

use super::jobs::{JobIndex, JobRoute};
use crate::actor::apply::Shared;
use crate::actor::cronjob::{CronJobActor, Report, Update};
use crate::kube::watch::JobFacts;
use crate::telemetry::http::Readiness;
use ::kube::runtime::watcher::Event;
use actix::prelude::*;
use k8s_openapi::api::batch::v1::CronJob;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

/// How long a graceful stop waits for decisions in flight.
const STOP_GRACE: Duration = Duration::from_secs(10);

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

/// SIGTERM: stop every actor (letting decisions in flight finish), then the process.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Shutdown;

struct Running {
    uid: String,
    addr: Addr<CronJobActor>,
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

pub struct Supervisor {
    shared: Arc<Shared>,
    arbiters: Vec<ArbiterHandle>,
    next_arbiter: usize,
    scopes: Vec<ScopeState>,
    actors: HashMap<String, Running>,
    keys_by_uid: HashMap<String, String>,
    jobs: JobIndex,
    started: bool,
    /// Actors whose first decision is still to come (readiness).
    not_yet_armed: HashSet<String>,
    readiness: Arc<Readiness>,
    shutting_down: bool,
}

impl Supervisor {
    /// `scopes`: the namespaces watched (`None`: all), in the order of the
    /// scope numbers the watch messages carry.
    pub fn new(
        shared: Arc<Shared>,
        arbiters: Vec<ArbiterHandle>,
        scopes: Vec<Option<String>>,
        readiness: Arc<Readiness>,
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
            jobs: JobIndex::default(),
            started: false,
            not_yet_armed: HashSet::new(),
            readiness,
            shutting_down: false,
        }
    }

    fn key_of(cronjob: &CronJob) -> String {
        format!(
            "{}/{}",
            cronjob.metadata.namespace.as_deref().unwrap_or_default(),
            cronjob.metadata.name.as_deref().unwrap_or_default()
        )
    }

    fn on_cronjob(&mut self, cronjob: CronJob) {
        let key = Self::key_of(&cronjob);
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
        if self.shutting_down {
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
        if self.started {
            addr.do_send(Update::Start);
            self.not_yet_armed.insert(key.clone());
        }
        self.keys_by_uid.insert(uid.clone(), key.clone());
        self.actors.insert(key, Running { uid, addr });
        self.shared.metrics.actors.set(self.actors.len() as i64);
    }

    fn stop_actor(&mut self, key: &str) {
        if let Some(running) = self.actors.remove(key) {
            running.addr.do_send(Update::Stop);
            self.keys_by_uid.remove(&running.uid);
            self.not_yet_armed.remove(key);
        }
        self.shared.metrics.actors.set(self.actors.len() as i64);
        self.check_ready();
    }

    fn on_job(&mut self, job: JobFacts, relisted: bool) {
        let keys = &self.keys_by_uid;
        for route in self.jobs.apply(job, |owner| keys.contains_key(owner)) {
            self.send(route, relisted);
        }
    }

    fn on_job_deleted(&mut self, uid: &str) {
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

    /// Once every scope has listed both kinds: start every actor.
    fn maybe_start(&mut self) {
        if self.started
            || !self
                .scopes
                .iter()
                .all(|s| s.cronjobs_listed && s.jobs_listed)
        {
            return;
        }
        self.started = true;
        tracing::info!(
            cronjobs = self.actors.len(),
            "initial lists synced; starting actors"
        );
        for (key, running) in &self.actors {
            running.addr.do_send(Update::Start);
            self.not_yet_armed.insert(key.clone());
        }
        self.check_ready();
    }

    fn check_ready(&mut self) {
        if self.started && self.not_yet_armed.is_empty() && !self.readiness.is_ready() {
            tracing::info!(actors = self.actors.len(), "every actor armed; ready");
            self.readiness.set_ready();
        }
    }

    fn maybe_exit(&self) {
        if self.shutting_down && self.actors.is_empty() {
            tracing::info!("every actor stopped; exiting");
            System::current().stop();
        }
    }
}

impl Actor for Supervisor {
    // Watchers use `do_send`, which ignores the mailbox capacity: a burst
    // of watch events queues rather than being refused.
    type Context = Context<Self>;
}

impl Handler<CronJobWatch> for Supervisor {
    type Result = ();

    fn handle(&mut self, message: CronJobWatch, _: &mut Self::Context) {
        let scope = message.scope;
        match message.event {
            Event::Apply(cronjob) => self.on_cronjob(cronjob),
            Event::Delete(cronjob) => self.stop_actor(&Self::key_of(&cronjob)),
            Event::Init => self.scopes[scope].relisting_cronjobs = Some(HashSet::new()),
            Event::InitApply(cronjob) => {
                if let Some(seen) = self.scopes[scope].relisting_cronjobs.as_mut() {
                    seen.insert(Self::key_of(&cronjob));
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
                        let namespace = key.split('/').next().unwrap_or_default();
                        self.scopes[scope].covers(namespace) && !seen.contains(*key)
                    })
                    .cloned()
                    .collect();
                for key in gone {
                    self.stop_actor(&key);
                }
                self.scopes[scope].cronjobs_listed = true;
                self.maybe_start();
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
                self.maybe_start();
            }
        }
    }
}

impl Handler<Report> for Supervisor {
    type Result = ();

    fn handle(&mut self, report: Report, _: &mut Self::Context) {
        match report {
            Report::Armed { key } => {
                self.not_yet_armed.remove(&key);
                self.check_ready();
            }
            Report::Stopped { key, uid } => {
                // A replaced actor stops after its successor started.
                if self.actors.get(&key).is_some_and(|r| r.uid == uid) {
                    self.actors.remove(&key);
                    self.keys_by_uid.remove(&uid);
                    self.shared.metrics.actors.set(self.actors.len() as i64);
                }
                self.maybe_exit();
            }
        }
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
        for running in self.actors.values() {
            running.addr.do_send(Update::Stop);
        }
        // Stopping actors report back; the map empties as they do.
        ctx.run_later(STOP_GRACE, |_, _| {
            tracing::warn!("decisions still in flight after the grace period; exiting");
            System::current().stop();
        });
        self.maybe_exit();
    }
}
